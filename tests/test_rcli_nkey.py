"""``rillet nkey`` (the nk tool): keys, public keys, signatures; checked with the ``nkeys`` library."""
from __future__ import annotations

import base64
import os
import subprocess
import sys

import nacl.public
import nacl.signing
import nkeys
import pytest

from rillet.cli.main import main

KINDS = {"user": ("SU", "U", nkeys.PREFIX_BYTE_USER), "account": ("SA", "A", nkeys.PREFIX_BYTE_ACCOUNT),
         "operator": ("SO", "O", nkeys.PREFIX_BYTE_OPERATOR), "server": ("SN", "N", nkeys.PREFIX_BYTE_SERVER),
         "cluster": ("SC", "C", nkeys.PREFIX_BYTE_CLUSTER)}


def run(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(["nkey", *args])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def b32(text: str) -> bytes:
    return base64.b32decode(text + "=" * (-len(text) % 8))


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_gen_pubout_each_ed25519_kind(capsys, kind):
    seed_pre, pub_pre, _ = KINDS[kind]
    rc, out, err = run(capsys, "-gen", kind, "-pubout")
    assert rc == 0 and err == ""
    seed, pub = out.splitlines()
    assert seed.startswith(seed_pre) and pub.startswith(pub_pre)
    kp = nkeys.from_seed(seed.encode())
    assert kp.public_key.decode() == pub
    # without -pubout: the seed alone
    rc, out, _ = run(capsys, "-gen", kind)
    assert rc == 0 and len(out.splitlines()) == 1 and out.startswith(seed_pre)
    assert nkeys.from_seed(out.strip().encode()).public_key.decode().startswith(pub_pre)


def test_gen_curve_and_x25519(capsys):
    for name in ("curve", "x25519"):
        rc, out, _ = run(capsys, "-gen", name, "-pubout")
        assert rc == 0
        seed, pub = out.splitlines()
        assert seed.startswith("SX") and pub.startswith("X")
        raw_seed = b32(seed)[2:34]
        raw_pub = b32(pub)[1:33]
        assert bytes(nacl.public.PrivateKey(raw_seed).public_key) == raw_pub
        assert nkeys.crc16_checksum(b32(pub)[:-2]) == b32(pub)[-2:]


def test_entropy_file_makes_the_seed_nkeys_encodes(capsys, tmp_path):
    ent = tmp_path / "entropy"
    raw = bytes(range(1, 33))
    ent.write_bytes(raw + b"more")
    rc, out, _ = run(capsys, "-gen", "user", "-e", str(ent), "-pubout")
    assert rc == 0
    seed, pub = out.splitlines()
    assert seed == nkeys.encode_seed(raw, nkeys.PREFIX_BYTE_USER).decode()
    assert pub == nkeys.from_seed(seed.encode()).public_key.decode()
    ent.write_bytes(b"short")
    rc, out, err = run(capsys, "-gen", "user", "-e", str(ent))
    assert rc == 1 and out == "" and len(err.splitlines()) == 1 and "entropy" in err
    rc, _, err = run(capsys, "-inkey", str(ent), "-pubout", "-e", str(ent))
    assert rc == 1 and "only used when creating keys" in err


def test_go_flag_forms(capsys):
    for args in (["-gen=account", "-pubout"], ["--gen", "account", "--pubout"], ["-gen", "ACCOUNT", "-pubout=true"]):
        rc, out, _ = run(capsys, *args)
        assert rc == 0 and len(out.splitlines()) == 2 and out.splitlines()[1].startswith("A"), args
    rc, out, _ = run(capsys, "-gen", "account", "-pubout=false")
    assert rc == 0 and len(out.splitlines()) == 1
    rc, out, err = run(capsys, "-nosuch")
    assert rc == 2 and "flag provided but not defined: -nosuch" in err
    rc, out, err = run(capsys)  # nothing to do: usage, failure (as nk)
    assert rc == 1 and "Usage:" in err
    rc, out, err = run(capsys, "-h")
    assert rc == 0 and "Usage:" in out


def test_public_key_of_seed_and_creds_files(capsys, tmp_path):
    kp = nkeys.from_seed(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_ACCOUNT))
    f = tmp_path / "a.nk"
    f.write_bytes(kp.seed + b"\n")
    rc, out, _ = run(capsys, "-inkey", str(f), "-pubout")
    assert rc == 0 and out == kp.public_key.decode() + "\n"
    # a .creds file: the first line that is an nkey is the user seed
    user = nkeys.from_seed(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER))
    creds = tmp_path / "u.creds"
    creds.write_text("-----BEGIN NATS USER JWT-----\neyJhbGciOi.e30.sig\n------END NATS USER JWT------\n\n"
                     "************************* IMPORTANT *************************\n\n"
                     f"-----BEGIN USER NKEY SEED-----\n{user.seed.decode()}\n------END USER NKEY SEED------\n")
    rc, out, _ = run(capsys, "-inkey", str(creds), "-pubout")
    assert rc == 0 and out.strip() == user.public_key.decode()


def test_sign_is_verified_by_nkeys_and_verify_accepts_nkeys_signatures(capsys, tmp_path):
    kp = nkeys.from_seed(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER))
    key = tmp_path / "u.nk"
    key.write_bytes(kp.seed)
    pubf = tmp_path / "u.pub"
    pubf.write_bytes(kp.public_key + b"\n")
    doc = tmp_path / "doc.bin"
    doc.write_bytes(os.urandom(500) + b"\x00tail")
    rc, out, _ = run(capsys, "-sign", str(doc), "-inkey", str(key))
    assert rc == 0 and out.endswith("\n") and "=" not in out
    sig = base64.urlsafe_b64decode(out.strip() + "=" * (-len(out.strip()) % 4))
    assert kp.verify(doc.read_bytes(), sig)
    nacl.signing.VerifyKey(b32(kp.public_key.decode())[1:33]).verify(doc.read_bytes(), sig)
    sigf = tmp_path / "doc.sig"
    sigf.write_text(out)  # with its newline, as a redirect writes it
    for k in (["-inkey", str(key)], ["-pubin", str(pubf)]):
        rc, out, err = run(capsys, "-verify", str(doc), "-sigfile", str(sigf), *k)
        assert (rc, out, err) == (0, "Verified OK\n", "")
    # a signature made by the nkeys library
    other = tmp_path / "other.bin"
    other.write_bytes(b"hello nats")
    sig2 = tmp_path / "other.sig"
    sig2.write_text(base64.urlsafe_b64encode(kp.sign(b"hello nats")).decode().rstrip("="))
    rc, out, _ = run(capsys, "-verify", str(other), "-sigfile", str(sig2), "-pubin", str(pubf))
    assert rc == 0 and out == "Verified OK\n"
    # the wrong content, or the wrong key: failure
    rc, out, err = run(capsys, "-verify", str(doc), "-sigfile", str(sig2), "-pubin", str(pubf))
    assert rc == 1 and out == "" and err.strip() == "rillet: error: nkeys: signature verification failed"
    stranger = tmp_path / "s.pub"
    stranger.write_bytes(nkeys.from_seed(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)).public_key)
    rc, _, err = run(capsys, "-verify", str(other), "-sigfile", str(sig2), "-pubin", str(stranger))
    assert rc == 1 and "signature verification failed" in err


def test_bad_input_one_line_status_1_nothing_written(capsys, tmp_path):
    kp = nkeys.from_seed(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER))
    seed = kp.seed.decode()
    files = {
        "garbage": b"this is not a key\n",
        "truncated": seed[:-3].encode() + b"\n",
        "badcrc": (seed[:20] + ("A" if seed[20] != "A" else "B") + seed[21:]).encode(),
        "public": kp.public_key,
        "empty": b"",
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    doc = tmp_path / "doc"
    doc.write_bytes(b"content")
    (tmp_path / "badsig").write_bytes(b"not*base64!")
    (tmp_path / "seed").write_bytes(kp.seed)
    (tmp_path / "pub").write_bytes(kp.public_key)
    rc, out, _ = run(capsys, "-gen", "curve")
    (tmp_path / "curve").write_text(out)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    cases = [
        (["-inkey", str(tmp_path / "garbage"), "-pubout"], "could not find a valid key"),
        (["-inkey", str(tmp_path / "truncated"), "-pubout"], "could not find a valid key"),
        (["-inkey", str(tmp_path / "badcrc"), "-pubout"], "could not find a valid key"),
        (["-inkey", str(tmp_path / "empty"), "-pubout"], "could not find a valid key"),
        (["-inkey", str(tmp_path / "public"), "-pubout"], "nkeys: invalid seed"),
        (["-inkey", str(tmp_path / "missing"), "-pubout"], "No such file"),
        (["-sign", str(doc)], "requires a seed"),
        (["-sign", str(doc), "-inkey", str(tmp_path / "curve")], "curve key is not valid for sign/verify"),
        (["-verify", str(doc), "-pubin", str(tmp_path / "seed"), "-sigfile", str(tmp_path / "badsig")],
         "nkeys: invalid public key"),
        (["-verify", str(doc), "-pubin", str(tmp_path / "pub"), "-sigfile", str(tmp_path / "badsig")],
         "not a signature"),
        (["-verify", str(doc), "-pubin", str(tmp_path / "pub")], "requires a signature"),
        (["-verify", str(doc), "-sigfile", str(tmp_path / "badsig")], "requires a seed key via -inkey"),
        (["-gen", "robot"], "unknown key type"),
        (["-gen", "user", "-pre", "0OPS"], "base32"),
        (["-gen", "user", "-pre", "ZZZZZZ", "-maxpre", "2"], "failed to generate prefix after 2 attempts"),
    ]
    for args, text in cases:
        rc, out, err = run(capsys, *args)
        assert rc == 1, (args, out, err)
        assert out == "", args
        assert len(err.strip().splitlines()) == 1 and err.startswith("rillet: error: ") and text in err, (args, err)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_vanity_prefix(capsys):
    rc, out, _ = run(capsys, "-gen", "user", "-pre", "a")
    assert rc == 0
    seed, pub = out.splitlines()
    assert pub.startswith("UA") and nkeys.from_seed(seed.encode()).public_key.decode() == pub


def test_command_line_subprocess(tmp_path):
    r = subprocess.run([sys.executable, "-m", "rillet.cli", "nkey", "-gen", "operator", "-pubout"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    seed, pub = r.stdout.splitlines()
    assert nkeys.from_seed(seed.encode()).public_key.decode() == pub and pub.startswith("O")
    bad = tmp_path / "bad.nk"
    bad.write_text("SUNOTAKEY\n")
    r = subprocess.run([sys.executable, "-m", "rillet.cli", "nkey", "-inkey", str(bad), "-pubout"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1
