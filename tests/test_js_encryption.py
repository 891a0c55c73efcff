"""Encryption at rest (jetstream { key | ek | encryption_key, prev_key, cipher }): what is published is not on
disk in plaintext, the right key reads everything back, a wrong key is refused as nats-server refuses it
(the stream is skipped with 'unable to recover keys', nothing served, no file changed), prev_key rotates."""
import hashlib
import os
import subprocess

import nats
import pytest
from nats.js.errors import NotFoundError

from rillet.config import ConfigError, load_string
from tests.helpers import ServerProcess, free_port, log_text, serve_config

N = 60
SECRET = b"TOPSECRET-PAYLOAD-"


def conf(store, key=None, prev=None, cipher=None, port=None) -> str:
    js = [f'store_dir: "{store}"']
    if key is not None:
        js.append(f'key: "{key}"')
    if prev is not None:
        js.append(f'prev_key: "{prev}"')
    if cipher is not None:
        js.append(f"cipher: {cipher}")
    listen = f"127.0.0.1:{port}" if port else "127.0.0.1:-1"
    return f"listen: {listen}\njetstream {{ {', '.join(js)} }}\n"


def url(srv) -> str:
    return srv.client_url if hasattr(srv, "client_url") else f"nats://127.0.0.1:{srv.port}"


def files_under(path) -> dict[str, bytes]:
    out = {}
    for root, _, names in os.walk(path):
        for n in names:
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                out[p] = f.read()
    return out


def digest(path) -> dict[str, str]:
    return {p: hashlib.sha256(b).hexdigest() for p, b in files_under(path).items()}


async def publish(srv, name="SEC", n=N, start=0):
    nc = await nats.connect(url(srv))
    js = nc.jetstream()
    try:
        await js.add_stream(name=name, subjects=[f"{name.lower()}.>"])
    except Exception:
        pass
    for i in range(start, start + n):
        await js.publish(f"{name.lower()}.hidden{i}", SECRET + str(i).encode())
    # a durable consumer with some acked: its state goes to disk too
    sub = await js.pull_subscribe(f"{name.lower()}.>", durable="D")
    for m in await sub.fetch(5, timeout=2):
        await m.ack()
    await nc.close()


async def read_all(srv, name="SEC") -> dict[int, bytes]:
    nc = await nats.connect(url(srv))
    js = nc.jetstream()
    try:
        info = await js.stream_info(name)
        got = {}
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            m = await js.get_msg(name, seq)
            got[seq] = m.data
        return got
    finally:
        await nc.close()


def assert_no_plaintext(store):
    for p, b in files_under(store).items():
        assert SECRET not in b, f"{p} holds published plaintext"
        assert b"hidden1" not in b, f"{p} holds a published subject"


@pytest.mark.parametrize("cipher", ["chachapoly", "aes"])
async def test_encrypted_store_round_trip_and_wrong_key(tmp_path, cipher):
    store = tmp_path / "store"
    async with serve_config(conf(store, key="s3cr3t-key", cipher=cipher)) as srv:
        await publish(srv)
        before = await read_all(srv)
    assert len(before) == N and before[1] == SECRET + b"0"
    assert_no_plaintext(store)
    # grep over every file, as a person would
    r = subprocess.run(["grep", "-rl", SECRET.decode(), str(store)], capture_output=True, text=True)
    assert r.returncode == 1 and r.stdout == "", r.stdout
    # the right key: everything back, consumer state included
    async with serve_config(conf(store, key="s3cr3t-key", cipher=cipher)) as srv:
        assert await read_all(srv) == before
        nc = await nats.connect(url(srv))
        ci = await nc.jetstream().consumer_info("SEC", "D")
        assert ci.ack_floor.stream_seq == 5
        await nc.close()
    # a wrong key: the stream is skipped with nats-server's warning, nothing served, no file changed
    snap = digest(store)
    async with serve_config(conf(store, key="not-the-key", cipher=cipher)) as srv:
        assert "Error decrypting our stream metafile: unable to recover keys" in log_text(srv)
        nc = await nats.connect(url(srv))
        with pytest.raises(NotFoundError):
            await nc.jetstream().stream_info("SEC")
        await nc.close()
    assert digest(store) == snap
    # no key at all: refused likewise (nats-server: 'encryption not enabled'), nothing changed
    async with serve_config(conf(store)) as srv:
        assert "Error decrypting our stream metafile: encryption not enabled" in log_text(srv)
    assert digest(store) == snap
    # and the right key reads everything again
    async with serve_config(conf(store, key="s3cr3t-key", cipher=cipher)) as srv:
        assert await read_all(srv) == before


async def test_key_rotation_with_prev_key(tmp_path):
    store = tmp_path / "store"
    async with serve_config(conf(store, key="old-key")) as srv:
        await publish(srv)
        before = await read_all(srv)
    # new key, old one as prev_key (and the cipher changed: existing data keep theirs)
    async with serve_config(conf(store, key="new-key", prev="old-key", cipher="aes")) as srv:
        assert await read_all(srv) == before
        await publish(srv, start=N, n=10)
        before = await read_all(srv)
    assert len(before) == N + 10
    assert_no_plaintext(store)
    # the key records were re-sealed with the new key: it alone opens the store now
    async with serve_config(conf(store, key="new-key", cipher="aes")) as srv:
        assert await read_all(srv) == before
    snap = digest(store)
    async with serve_config(conf(store, key="old-key")) as srv:
        assert "unable to recover keys" in log_text(srv)
    assert digest(store) == snap


async def test_key_from_environment_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("RILLET_TEST_JS_KEY", "from-the-env")
    store = tmp_path / "store"
    text = f'listen: 127.0.0.1:-1\njetstream {{ store_dir: "{store}", key: $RILLET_TEST_JS_KEY }}\n'
    opts = load_string(text, "e.conf")
    assert opts.jetstream.key == "from-the-env"
    async with serve_config(text) as srv:
        await publish(srv, n=5)
    assert_no_plaintext(store)
    async with serve_config(conf(store, key="from-the-env")) as srv:
        assert len(await read_all(srv)) == 5


def test_config_keys_and_cipher_errors():
    o = load_string('jetstream { ek: "a", prev_ek: "b", cipher: AES }', "c.conf").jetstream
    assert (o.key, o.prev_key, o.cipher) == ("a", "b", "aes")
    o = load_string('jetstream { encryption_key: "a", prev_encryption_key: "b", cipher: chacha }', "c.conf")
    assert (o.jetstream.key, o.jetstream.prev_key, o.jetstream.cipher) == ("a", "b", "chachapoly")
    assert load_string('jetstream { key: "a" }', "c.conf").jetstream.cipher == "chachapoly"
    with pytest.raises(ConfigError, match='Unknown cipher type: "des"'):
        load_string('jetstream { key: "a", cipher: des }', "c.conf")


def go_log(store, key, port) -> str:
    """Run nats-server 2.15 on ``store`` with ``key``; its log once it is ready."""
    p = tmp_conf = os.path.join(os.path.dirname(store), f"go-{port}.conf")
    with open(tmp_conf, "w") as f:
        f.write(conf(store, key=key, port=port))
    proc = ServerProcess("-c", p, command=["nats-server"])
    try:
        proc.wait_log(r"Server is ready", 15)
        return proc.output
    finally:
        proc.stop()


@pytest.mark.skipif(subprocess.run(["which", "nats-server"], capture_output=True).returncode != 0,
                    reason="nats-server not installed")
async def test_nats_server_same_wrong_key_text_and_rillet_store_not_readable_by_it(tmp_path):
    # nats-server's own store, then a wrong key: its warning text is the one Rillet logs
    gstore = tmp_path / "gstore"
    port = free_port()
    p = tmp_path / "g.conf"
    p.write_text(conf(gstore, key="right", port=port))
    proc = ServerProcess("-c", str(p), command=["nats-server"])
    try:
        proc.wait_log(r"Server is ready", 15)
        nc = await nats.connect(f"nats://127.0.0.1:{port}")
        await nc.jetstream().add_stream(name="SEC", subjects=["sec.>"])
        await nc.jetstream().publish("sec.x", SECRET)
        await nc.close()
    finally:
        proc.stop()
    out = go_log(gstore, "wrong", free_port())
    assert "Error decrypting our stream metafile: unable to recover keys" in out
    # Rillet's encrypted store is not in nats-server's layout: nats-server finds no stream in it
    rstore = tmp_path / "rstore"
    async with serve_config(conf(rstore, key="right")) as srv:
        await publish(srv, n=3)
    snap = digest(rstore)
    port = free_port()
    p.write_text(conf(rstore, key="right", port=port))
    proc = ServerProcess("-c", str(p), command=["nats-server"])
    try:
        proc.wait_log(r"Server is ready", 15)
        nc = await nats.connect(f"nats://127.0.0.1:{port}")
        with pytest.raises(NotFoundError):
            await nc.jetstream().stream_info("SEC")
        await nc.close()
    finally:
        proc.stop()
    after = digest(rstore)
    assert {k: v for k, v in after.items() if k in snap} == snap  # Rillet's files untouched by nats-server
    async with serve_config(conf(rstore, key="right")) as srv:
        assert len(await read_all(srv)) == 3


async def test_clustered_r3_stream_encrypted_wal_and_store(tmp_path):
    """An R3 stream on a 3-server cluster: its stores and every RAFT log (stream and meta groups) hold no
    plaintext of what was published, and the cluster restarted with the same key serves it all again."""
    from rillet.app.embed import run_cluster
    from rillet.config.options import JetStreamOptions
    fields = lambda i: {"jetstream": JetStreamOptions(key="cluster-key", cipher="aes")}  # noqa: E731
    async with run_cluster(3, jetstream=True, store_dir=str(tmp_path), server_fields=fields) as servers:
        nc = await nats.connect(servers[0].client_url)
        js = nc.jetstream()
        await js.add_stream(name="SEC", subjects=["sec.>"], num_replicas=3)
        for i in range(20):
            await js.publish(f"sec.hidden{i}", SECRET + str(i).encode())
        await nc.close()
    assert any(os.path.basename(r) == "key" and "_raft" in r
               for r in files_under(tmp_path)), "no RAFT log key record"
    assert_no_plaintext(tmp_path)
    async with run_cluster(3, jetstream=True, store_dir=str(tmp_path), server_fields=fields) as servers:
        nc = await nats.connect(servers[0].client_url)
        js = nc.jetstream()
        for _ in range(100):
            try:
                info = await js.stream_info("SEC")
                if info.state.messages == 20:
                    break
            except Exception:
                pass
            import asyncio
            await asyncio.sleep(0.1)
        m = await js.get_msg("SEC", 20)
        assert m.data == SECRET + b"19"
        await nc.close()


# ---- configuration and consumer files (meta.json, consumer state) -------------------------------------------

NAMES = (b"HIDDENSTREAM", b"hiddensubj", b"STREAMDESC-PRIVATE", b"HIDDENDURABLE", b"CONSUMERDESC-PRIVATE",
         b"hiddensubj.filter")


async def make_named(client_url: str) -> None:
    """A stream and a durable consumer whose names, subjects and descriptions are distinctive, some acked."""
    from nats.js.api import ConsumerConfig
    nc = await nats.connect(client_url)
    js = nc.jetstream()
    await js.add_stream(name="HIDDENSTREAM", subjects=["hiddensubj.>"], description="STREAMDESC-PRIVATE")
    for i in range(5):
        await js.publish("hiddensubj.filter", SECRET + str(i).encode())
    sub = await js.pull_subscribe("hiddensubj.filter", durable="HIDDENDURABLE",
                                  config=ConsumerConfig(description="CONSUMERDESC-PRIVATE"))
    for m in await sub.fetch(3, timeout=2):
        await m.ack()
    await nc.close()


def contents_naming(store) -> dict[str, list[bytes]]:
    """The files under ``store`` whose contents hold one of NAMES (file names are not looked at: both servers
    name stream and consumer directories after them)."""
    out = {}
    for p, b in files_under(store).items():
        hits = [n for n in NAMES + (SECRET,) if n in b]
        if hits:
            out[os.path.relpath(p, store)] = hits
    return out


async def consumer_floor(client_url: str) -> int:
    nc = await nats.connect(client_url)
    try:
        ci = await nc.jetstream().consumer_info("HIDDENSTREAM", "HIDDENDURABLE")
        assert ci.config.description == "CONSUMERDESC-PRIVATE" and ci.config.filter_subject == "hiddensubj.filter"
        si = await nc.jetstream().stream_info("HIDDENSTREAM")
        assert si.config.description == "STREAMDESC-PRIVATE" and si.state.messages == 5
        return ci.ack_floor.stream_seq
    finally:
        await nc.close()


@pytest.mark.skipif(subprocess.run(["which", "nats-server"], capture_output=True).returncode != 0,
                    reason="nats-server not installed")
async def test_config_and_consumer_files_hide_names_as_nats_server_does(tmp_path):
    """With a key, no file of the store holds the stream's or consumer's name, subjects, descriptions or
    state in plaintext, in nats-server's store (meta.inf, o.dat sealed) as in Rillet's (meta.json, the
    consumer's state slots and name file sealed); Rillet's reads back with the key."""
    gstore = tmp_path / "gstore"
    port = free_port()
    p = tmp_path / "g.conf"
    p.write_text(conf(gstore, key="k-1", port=port))
    proc = ServerProcess("-c", str(p), command=["nats-server"])
    try:
        proc.wait_log(r"Server is ready", 15)
        await make_named(f"nats://127.0.0.1:{port}")
    finally:
        proc.stop()
    assert contents_naming(gstore) == {}
    rstore = tmp_path / "rstore"
    async with serve_config(conf(rstore, key="k-1")) as srv:
        await make_named(url(srv))
    assert contents_naming(rstore) == {}
    files = files_under(rstore)
    assert any(f.endswith("meta.key") for f in files)
    slots = [b for f, b in files.items() if os.path.basename(f) in ("state", "state.1") and "consumers" in f]
    assert slots and all(b.startswith(b"RILCNS03") for b in slots)  # the consumer's state sealed, as o.dat
    async with serve_config(conf(rstore, key="k-1")) as srv:
        assert await consumer_floor(url(srv)) == 3
    # without encryption the same files do name them (the test sees plaintext where there is some)
    pstore = tmp_path / "pstore"
    async with serve_config(conf(pstore)) as srv:
        await make_named(url(srv))
    assert any(b"HIDDENDURABLE" in h or b"STREAMDESC-PRIVATE" in h
               for hits in contents_naming(pstore).values() for h in hits)


async def test_config_and_consumer_files_wrong_key_rotation_and_late_key(tmp_path):
    """A plaintext store given a key is sealed at the next start; a wrong key changes no file and serves
    nothing; prev_key opens it and re-seals every key record (stream, block, meta, consumer), after which
    the new key alone reads it all."""
    store = tmp_path / "store"
    async with serve_config(conf(store)) as srv:
        await make_named(url(srv))
    async with serve_config(conf(store, key="first")) as srv:
        assert await consumer_floor(url(srv)) == 3
    assert contents_naming(store) == {}  # blocks, meta.json, consumer files: all sealed now
    snap = digest(store)
    async with serve_config(conf(store, key="wrong")) as srv:
        assert "Error decrypting our stream metafile: unable to recover keys" in log_text(srv)
        nc = await nats.connect(url(srv))
        with pytest.raises(NotFoundError):
            await nc.jetstream().stream_info("HIDDENSTREAM")
        await nc.close()
    assert digest(store) == snap
    async with serve_config(conf(store, key="second", prev="first", cipher="aes")) as srv:
        assert await consumer_floor(url(srv)) == 3
    async with serve_config(conf(store, key="second", cipher="aes")) as srv:
        assert await consumer_floor(url(srv)) == 3
    snap = digest(store)
    async with serve_config(conf(store, key="first")) as srv:
        assert "unable to recover keys" in log_text(srv)
    assert digest(store) == snap
