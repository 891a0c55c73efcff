"""``rillet nkey``: what the ``nk`` tool does, with its flags and output.

* ``-gen user|account|operator|server|cluster|curve|x25519 [-pubout] [-e FILE] [-pre P [-maxpre N]]``
  prints a new seed (and with ``-pubout`` or ``-pre`` its public key on the next line);
* ``-inkey F -pubout`` prints the public key of the seed in F;
* ``-sign F -inkey K`` prints the Ed25519 signature of F's bytes, base64url without padding;
* ``-verify F -sigfile S (-inkey K | -pubin P)`` prints ``Verified OK`` or fails.

A key file may hold other lines (a ``.creds`` file, a PEM-style block): its first line that is a
well-formed nkey is used, as nk does. Failures print one line on stderr and exit with status 1; no
command writes any file. The codec is ``rillet.nkey``.
"""
from __future__ import annotations

import base64
import binascii
import re
import sys
from typing import Any, Callable

from rillet import nkey
from rillet.cli.goflags import FlagError, FlagSet, HelpRequested, tool_version, usage_error

HELP = "Create, show, sign and verify with nkeys (the nk tool: -gen, -inkey, -pubout, -sign, -verify)."
EXAMPLE = "rillet nkey -gen user -pubout"  # (the `rillet` help lists the command with it)

USAGE = """Usage: rillet nkey [options]
    -v                    Show version
    -gen <type>           Generate key for [user|account|server|cluster|operator|curve|x25519]
    -sign <file>          Sign <file> with -inkey <keyfile>
    -verify <file>        Verify <file> with -inkey <keyfile> or -pubin <public> and -sigfile <file>
    -inkey <file>         Input key file (seed/private key)
    -pubin <file>         Public key file
    -sigfile <file>       Signature file
    -pubout               Output public key
    -e <file>             Entropy file, e.g. /dev/urandom
    -pre <vanity>         Generate a public key starting with this text, e.g. -gen user -pre derek
    -maxpre <N>           Maximum attempts at generating the prefix (default 10,000,000)
"""

GEN_TYPES = {"user": "user", "account": "account", "server": "server", "cluster": "cluster",
             "operator": "operator", "curve": "curve", "x25519": "curve"}
DEFAULT_MAXPRE = 10_000_000
SPINNER = "|/-\\"


class NkeyCliError(Exception):
    pass


def _flags() -> FlagSet:
    fs = FlagSet()
    fs.add("v", bool, False, "Show version", dest="version")
    fs.add("gen", str, "", "Generate key for <type>")
    fs.add("sign", str, "", "Sign <file> with -inkey <keyfile>")
    fs.add("verify", str, "", "Verify <file> with -inkey <keyfile> or -pubin <public> and -sigfile <file>")
    fs.add("inkey", str, "", "Input key file (seed/private key)")
    fs.add("pubin", str, "", "Public key file")
    fs.add("sigfile", str, "", "Signature file")
    fs.add("pubout", bool, False, "Output public key")
    fs.add("e", str, "", "Entropy file, e.g. /dev/urandom", dest="entropy")
    fs.add("pre", str, "", "Vanity prefix of the public key")
    fs.add("maxpre", int, DEFAULT_MAXPRE, "Maximum attempts at generating the prefix")
    return fs


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise NkeyCliError(f"{path}: {e.strerror or e}") from None


def read_key_file(path: str) -> bytes:
    """The first line of the file that is a well-formed nkey (seed, public or private key)."""
    for line in _read(path).split(b"\n"):
        line = line.strip()
        if line and nkey.is_valid_encoding(line):
            return line
    raise NkeyCliError(f"{path}: could not find a valid key")


def _key_pair(path: str, parse: Callable[[str], nkey.KeyPair]) -> nkey.KeyPair:
    text = read_key_file(path)
    try:
        return parse(text)
    except nkey.NkeyError as e:
        raise NkeyCliError(f"{path}: {e}") from None


def _seed_pair(path: str) -> nkey.KeyPair:
    return _key_pair(path, nkey.from_seed)


def _public_pair(path: str) -> nkey.KeyPair:
    return _key_pair(path, nkey.from_public_key)


def _decode_signature(path: str) -> bytes:
    text = re.sub(rb"[\r\n]", b"", _read(path))
    if not re.fullmatch(rb"[A-Za-z0-9_-]*", text) or len(text) % 4 == 1:
        raise NkeyCliError(f"{path}: not a signature (base64url without padding, as -sign writes it)")
    try:
        return base64.urlsafe_b64decode(text + b"=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise NkeyCliError(f"{path}: not a signature (base64url without padding, as -sign writes it)") from None


def _generate(kind_arg: str, entropy_path: str, pre: str, maxpre: int) -> nkey.KeyPair:
    kind = GEN_TYPES.get(kind_arg.lower())
    if kind is None:
        raise NkeyCliError(f"unknown key type {kind_arg!r}: use -gen user|account|server|cluster|operator|curve|x25519")
    entropy: Any = None
    if entropy_path:
        try:
            entropy = open(entropy_path, "rb")
        except OSError as e:
            raise NkeyCliError(f"{entropy_path}: {e.strerror or e}") from None
    try:
        if not pre:
            return nkey.create(kind, entropy)
        vanity = pre.upper()
        if any(c not in "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567" for c in vanity):
            raise NkeyCliError(f"can not generate base32 encoded strings to match '{pre}'")
        if maxpre <= 0:
            raise NkeyCliError(f"-maxpre must be positive, not {maxpre}")
        spin = sys.stderr.isatty()
        for i in range(maxpre):
            kp = nkey.create(kind, entropy)
            if kp.public_key()[1:].startswith(vanity):
                if spin:
                    sys.stderr.write("\r")
                return kp
            if spin and i % 1000 == 0:
                sys.stderr.write("\rcomputing " + SPINNER[(i // 1000) % len(SPINNER)] + " ")
                sys.stderr.flush()
        if spin:
            sys.stderr.write("\r")
        raise NkeyCliError(f"failed to generate prefix after {maxpre} attempts")
    except nkey.NkeyError as e:
        raise NkeyCliError(f"error creating {kind} key: {e}") from None
    finally:
        if entropy is not None:
            entropy.close()


def run(argv: list[str]) -> str:
    """The text ``rillet nkey argv`` prints (NkeyCliError, FlagError or HelpRequested otherwise)."""
    opts, _rest = _flags().parse(argv)
    if opts["version"]:
        return f"rillet nkey version {tool_version()}\n"
    if opts["gen"]:
        kp = _generate(opts["gen"], opts["entropy"], opts["pre"], opts["maxpre"])
        out = kp.seed() + "\n"
        if opts["pubout"] or opts["pre"]:
            out += kp.public_key() + "\n"
        return out
    if opts["entropy"]:
        raise NkeyCliError("the entropy file (-e) is only used when creating keys with -gen")
    if opts["pre"]:
        raise NkeyCliError("a vanity prefix (-pre) is only used when creating keys with -gen")
    if opts["sign"]:
        if not opts["inkey"]:
            raise NkeyCliError("sign requires a seed/private key via -inkey <file>")
        kp = _seed_pair(opts["inkey"])
        content = _read(opts["sign"])
        try:
            sig = kp.sign(content)
        except nkey.NkeyError as e:
            raise NkeyCliError(f"{opts['inkey']}: {e}") from None
        return base64.urlsafe_b64encode(sig).decode().rstrip("=") + "\n"
    if opts["verify"]:
        if not opts["inkey"] and not opts["pubin"]:
            raise NkeyCliError("verify requires a seed key via -inkey or a public key via -pubin")
        if not opts["sigfile"]:
            raise NkeyCliError("verify requires a signature via -sigfile")
        kp = _seed_pair(opts["inkey"]) if opts["inkey"] else _public_pair(opts["pubin"])
        content = _read(opts["verify"])
        sig = _decode_signature(opts["sigfile"])
        try:
            kp.verify(content, sig)
        except nkey.NkeyError as e:
            raise NkeyCliError(str(e)) from None
        return "Verified OK\n"
    if opts["inkey"] and opts["pubout"]:
        return _seed_pair(opts["inkey"]).public_key() + "\n"
    raise HelpRequested()


def main(argv: list[str]) -> int:
    try:
        out = run(argv)
    except HelpRequested:
        # nk prints its usage and fails when asked for nothing it can do; -h is a request, not a failure
        asked = any(a.lstrip("-") in ("h", "help") for a in argv)
        (sys.stdout if asked else sys.stderr).write(USAGE)
        return 0 if asked else 1
    except FlagError as e:
        return usage_error("nkey", e, USAGE)
    except NkeyCliError as e:
        print(f"rillet: error: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(out)
    sys.stdout.flush()
    return 0
