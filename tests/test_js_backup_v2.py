"""Stream backup v2 (nats-server 2.15, ADR-63): STREAM.SNAPSHOT sends an S2 stream of ``NATSARC1`` entries
(state.json, one entry per consumer with its config and delivery state, one per message, an all-zero end
marker), and STREAM.RESTORE makes the stream and its consumers again from it.

Side by side with nats-server 2.15.1 (tests/jsdiff.py's ServerPair): the same stream on both, each one's
backup read back entry by entry and compared, then every backup restored on both servers (Rillet's on
nats-server and nats-server's on Rillet), the restored streams and consumers compared. Rillet's own older
archive form (a tar of its store, rillet.jetstream.snapshot) still restores; a backup without its end marker
or cut inside an entry is refused by both with the same error (nats-server 2.15.1 then keeps the stream with
what it had read; Rillet removes it).
"""
from __future__ import annotations

import asyncio
import json
import os

import nats
import pytest

from jsdiff import ServerPair
from rillet.cluster.s2 import S2Reader, S2Writer
from rillet.jetstream.backup import MAGIC, ArchiveReader

CONF = 'listen: 127.0.0.1:-1\njetstream { store_dir: "{store}" }\n'
N = 30


async def api(nc, subject: str, body: dict, timeout: float = 10) -> dict:
    return json.loads((await nc.request(subject, json.dumps(body).encode(), timeout=timeout)).data)


async def take_snapshot(nc, name: str, **opts) -> tuple[dict, list[bytes], str]:
    """(the snapshot answer, the chunks, the final status), acknowledging each chunk as the nats CLI does."""
    inbox = nc.new_inbox()
    chunks: list[bytes] = []
    done = asyncio.get_running_loop().create_future()

    async def on_chunk(msg):
        if msg.data:
            chunks.append(msg.data)
            if msg.reply:
                await nc.publish(msg.reply, b"")
        elif not done.done():
            done.set_result(msg.header.get("Status", "") if msg.header else "")
    sub = await nc.subscribe(inbox, cb=on_chunk)
    resp = await api(nc, f"$JS.API.STREAM.SNAPSHOT.{name}", {"deliver_subject": inbox, **opts})
    assert "error" not in resp, resp
    status = await asyncio.wait_for(done, 60)
    await sub.unsubscribe()
    return resp, chunks, status


async def restore(nc, name: str, snap: dict, chunks: list[bytes]) -> dict:
    resp = await api(nc, f"$JS.API.STREAM.RESTORE.{name}", {"config": snap["config"], "state": snap["state"]})
    assert "deliver_subject" in resp, resp
    for c in chunks:
        await nc.request(resp["deliver_subject"], c, timeout=10)
    return json.loads((await nc.request(resp["deliver_subject"], b"", timeout=30)).data)


def entries(chunks: list[bytes]) -> list:
    plain = S2Reader().feed(b"".join(chunks))
    assert plain.startswith(MAGIC)
    return ArchiveReader(1 << 24).feed(plain)


async def populate(url: str) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await api(nc, "$JS.API.STREAM.CREATE.BK", {"name": "BK", "subjects": ["bk.>"], "allow_msg_ttl": True})
    for i in range(N):
        hdr = {"Nats-TTL": "1h"} if i == 3 else ({"X-Note": f"n{i}"} if i % 7 == 0 else None)
        await js.publish(f"bk.s{i % 4}", f"m{i}".encode(), headers=hdr)
    for seq in (5, 6, N):  # deleted sequences in the middle and at the end
        assert (await api(nc, "$JS.API.STREAM.MSG.DELETE.BK", {"seq": seq}))["success"]
    await api(nc, "$JS.API.CONSUMER.CREATE.BK.D", {"stream_name": "BK", "config": {
        "durable_name": "D", "ack_policy": "explicit", "ack_wait": 30_000_000_000, "max_deliver": 5,
        "description": "backup-consumer"}})
    await api(nc, "$JS.API.CONSUMER.CREATE.BK.F", {"stream_name": "BK", "config": {
        "durable_name": "F", "ack_policy": "explicit", "filter_subject": "bk.s1"}})
    sub = await js.pull_subscribe_bind("D", "BK")
    for m in await sub.fetch(10, timeout=5):
        if m.metadata.sequence.stream <= 4 or m.metadata.sequence.stream == 9:
            await m.ack_sync()
    sub = await js.pull_subscribe_bind("F", "BK")
    for m in await sub.fetch(2, timeout=5):
        await m.ack_sync()
    await nc.close()


def archive_view(ents: list) -> dict:
    """What a backup says, without times: its state, its consumers, its messages, the end marker."""
    assert ents[0].name == b"state.json"
    state = json.loads(ents[0].body)
    n = state["consumer_count"]
    cons = {}
    for e in ents[1:1 + n]:
        assert e.name.startswith(b"consumers/") and e.seq == 0
        doc = json.loads(e.body)
        cfg = doc["config"]
        cons[e.name.decode()] = {"durable": cfg.get("durable_name"), "name": cfg.get("name"),
                                 "ack_policy": cfg.get("ack_policy"), "filter": cfg.get("filter_subject"),
                                 "state": {k: doc["state"].get(k) for k in ("delivered", "ack_floor")},
                                 "pending": sorted(int(s) for s in doc["state"].get("pending") or {})}
    msgs = [(e.seq, e.name.decode(), e.body[:e.hsize].decode(), e.body[e.hsize:].decode())
            for e in ents[1 + n:-1]]
    assert ents[-1].end, "no end marker"
    return {"state": {k: state.get(k) for k in ("messages", "first_seq", "last_seq", "consumer_count")},
            "consumers": cons, "msgs": msgs}


async def restored_view(url: str) -> dict:
    nc = await nats.connect(url)
    js = nc.jetstream()
    info = await api(nc, "$JS.API.STREAM.INFO.BK", {})
    st = info["state"]
    got = {"state": {k: st.get(k) for k in ("messages", "first_seq", "last_seq", "num_deleted", "consumer_count")}}
    msgs = []
    for seq in range(1, N + 1):
        r = await api(nc, "$JS.API.STREAM.MSG.GET.BK", {"seq": seq})
        msgs.append((seq, r["message"]["subject"]) if "message" in r else (seq, r["error"]["err_code"]))
    got["msgs"] = msgs
    cons = {}
    for name in ("D", "F"):
        ci = await api(nc, f"$JS.API.CONSUMER.INFO.BK.{name}", {})
        if "error" in ci:
            cons[name] = ci["error"]["err_code"]
            continue
        cons[name] = {"delivered": ci["delivered"]["stream_seq"], "ack_floor": ci["ack_floor"]["stream_seq"],
                      "ack_pending": ci["num_ack_pending"], "pending": ci["num_pending"],
                      "description": ci["config"].get("description"), "filter": ci["config"].get("filter_subject")}
    got["consumers"] = cons
    if isinstance(cons["D"], dict):  # the ack state is live: D goes on after what it delivered
        sub = await js.pull_subscribe_bind("D", "BK")
        got["next_D"] = [m.metadata.sequence.stream for m in await sub.fetch(1, timeout=5)]
    await nc.close()
    return got


@pytest.fixture
def pair():
    p = ServerPair(CONF)
    yield p
    p.stop()


async def test_backups_are_v2_and_restore_across_servers(pair):
    kinds = [k for k, _ in pair.targets()]
    backups = {}
    for kind in kinds:
        await populate(pair.url(kind))
        nc = await nats.connect(pair.url(kind))
        snap, chunks, status = await take_snapshot(nc, "BK", chunk_size=2048)
        await nc.close()
        assert status in ("204", ""), status
        backups[kind] = (snap, chunks)
    views = {k: archive_view(entries(c)) for k, (_, c) in backups.items()}
    v = views["rillet"]
    assert v["state"] == {"messages": N - 3, "first_seq": 1, "last_seq": N, "consumer_count": 2}
    assert sorted(v["consumers"]) == ["consumers/D", "consumers/F"]
    assert v["consumers"]["consumers/D"]["pending"] == [7, 8, 10, 11, 12]  # (5, 6 deleted: D got 1-4, 7-12)
    assert [s for s, *_ in v["msgs"]] == [s for s in range(1, N) if s not in (5, 6)]
    assert v["msgs"][3][2].startswith("NATS/1.0\r\nNats-TTL: 1h")
    if "go" in views:
        assert views["rillet"] == views["go"], (views["rillet"], views["go"])

    # every backup restored on every server, the stream deleted first
    results = {}
    for src in kinds:
        for dst in kinds:
            nc = await nats.connect(pair.url(dst))
            await api(nc, "$JS.API.STREAM.DELETE.BK", {})
            fin = await restore(nc, "BK", *backups[src])
            await nc.close()
            assert fin.get("type") == "io.nats.jetstream.api.v1.stream_create_response" and "error" not in fin, \
                (src, dst, fin)
            results[(src, dst)] = await restored_view(pair.url(dst))
    want = results[("rillet", "rillet")]
    assert want["state"] == {"messages": N - 3, "first_seq": 1, "last_seq": N, "num_deleted": 3,
                             "consumer_count": 2}
    assert want["consumers"]["D"]["description"] == "backup-consumer"
    # (the ack floor passes the deleted 5 and 6, on both servers)
    assert want["consumers"]["D"]["delivered"] == 12 and want["consumers"]["D"]["ack_floor"] == 6
    assert want["consumers"]["D"]["ack_pending"] == 5 and want["consumers"]["D"]["pending"] == 17
    assert want["consumers"]["F"]["filter"] == "bk.s1"
    assert want["next_D"] == [13]
    for key, got in results.items():
        assert got == want, (key, got, want)


async def test_no_consumers_and_a_truncated_backup(pair):
    out = {}
    for kind, url in pair.targets():
        await populate(url)
        nc = await nats.connect(url)
        snap, chunks, _ = await take_snapshot(nc, "BK", no_consumers=True)
        ents = entries(chunks)
        assert json.loads(ents[0].body)["consumer_count"] == 0 and not ents[1].name.startswith(b"consumers/")
        await api(nc, "$JS.API.STREAM.DELETE.BK", {})
        fin = await restore(nc, "BK", snap, chunks)
        assert "error" not in fin, fin
        names = await api(nc, "$JS.API.CONSUMER.NAMES.BK", {})
        # the same entries without the end marker: refused (nats-server's words: "restore failed: EOF"), and
        # cut inside an entry ("archive: invalid archive stream")
        plain = S2Reader().feed(b"".join(chunks))
        cut = S2Writer().encode(plain[:-5])
        other = {"config": {**snap["config"], "name": "TR", "subjects": ["tr.>"]}, "state": snap["state"]}
        bad = await restore(nc, "TR", other, [cut])
        other2 = {"config": {**snap["config"], "name": "TR2", "subjects": ["tr2.>"]}, "state": snap["state"]}
        bad2 = await restore(nc, "TR2", other2, [S2Writer().encode(plain[:-7])])
        await nc.close()
        out[kind] = (names["consumers"], bad.get("error"), bad2.get("error"))
    assert out["rillet"] == ([], {"code": 500, "err_code": 10062, "description": "restore failed: EOF"},
                             {"code": 500, "err_code": 10062, "description": "restore failed: failed to read "
                              "message sequence 29: archive: invalid archive stream"}), out
    if "go" in out:
        assert out["go"] == out["rillet"], out


async def test_rillet_v1_archive_still_restores(pair, tmp_path):
    """An archive of the older form (Rillet's tar of its store, what STREAM.SNAPSHOT sent before) restores."""
    from rillet.jetstream.store.base import StoreConfig
    from rillet.jetstream.store.filestore import FileStore, snapshot_from_store
    fs = FileStore(str(tmp_path / "s"), StoreConfig(name="OLD", storage="file"))
    for i in range(10):
        fs.store_msg(f"old.{i}", b"", f"v{i}".encode())
    fs.flush()
    archive = b"".join(snapshot_from_store(fs, True, prefix="store/"))
    fs.stop()
    nc = await nats.connect(pair.url("rillet"))
    cfg = {"name": "OLD", "subjects": ["old.>"], "storage": "file", "retention": "limits", "max_consumers": -1,
           "max_msgs": -1, "max_bytes": -1, "max_age": 0, "num_replicas": 1, "discard": "old"}
    resp = await api(nc, "$JS.API.STREAM.RESTORE.OLD", {"config": cfg, "state": {}})
    for i in range(0, len(archive), 4096):
        await nc.request(resp["deliver_subject"], archive[i:i + 4096], timeout=10)
    fin = json.loads((await nc.request(resp["deliver_subject"], b"", timeout=30)).data)
    assert "error" not in fin, fin
    assert fin["state"]["messages"] == 10 and fin["state"]["last_seq"] == 10
    m = await api(nc, "$JS.API.STREAM.MSG.GET.OLD", {"seq": 7})
    import base64
    assert base64.b64decode(m["message"]["data"]) == b"v6"
    await nc.close()


def test_archive_reader_in_pieces_and_bounds():
    from rillet.jetstream.backup import END, ArchiveError, entry
    data = MAGIC + entry(b"state.json", 5, 0, b"", b"{}") + entry(b"a.b", -3, 7, b"H", b"body") + END
    got = []
    r = ArchiveReader(100)
    for i in range(len(data)):
        got += r.feed(data[i:i + 1])
    assert [(e.name, e.ts, e.seq, e.hsize, e.body) for e in got] == [
        (b"state.json", 5, 0, 0, b"{}"), (b"a.b", -3, 7, 1, b"Hbody"), (b"", 0, 0, 0, b"")]
    assert got[-1].end and not got[0].end
    with pytest.raises(ArchiveError):
        ArchiveReader(100).feed(b"NATSARC2" + END)
    with pytest.raises(ArchiveError):
        ArchiveReader(10).feed(MAGIC + entry(b"x", 0, 1, b"", os.urandom(11)))


def test_damaged_backups_are_refused_cleanly():
    """A backup cut or with bytes changed anywhere (its S2 framing or its entries) is refused with an
    ArchiveError (the restore's error), never another exception; an intact one reads back whole."""
    import io
    import random
    from types import SimpleNamespace

    from rillet.jetstream.backup import END, ArchiveError, V2Source, entry
    state = json.dumps({"messages": 3, "first_seq": 2, "last_seq": 5, "consumer_count": 1}).encode()
    cons = json.dumps({"config": {"durable_name": "C", "ack_policy": "explicit"},
                       "state": {"delivered": {"consumer_seq": 1, "stream_seq": 2}, "ack_floor": {},
                                 "pending": {"2": {"Sequence": 1, "Timestamp": 5}}}}).encode()
    plain = (MAGIC + entry(b"state.json", 1, 0, b"", state) + entry(b"consumers/C", 1, 0, b"", cons)
             + entry(b"a.b", 10, 2, b"NATS/1.0\r\nX: y\r\n\r\n", b"one") + entry(b"a.c", 11, 4, b"", b"two")
             + END)
    cfg = SimpleNamespace(max_msg_size=0)

    def read(data: bytes) -> list:
        src = V2Source(io.BytesIO(data), cfg, 1 << 20)
        src.open()
        out = []
        while True:
            b = src.batch()
            if not b:
                return [(src.first, src.last, [n for n, _, _ in src.consumers])] + out
            out += b

    good = read(S2Writer().encode(plain))
    assert good[0] == (2, 5, ["C"]) and [m[0] for m in good[1:]] == [2, 4]
    rnd = random.Random(7)
    for _ in range(400):
        data = bytearray(S2Writer(level="uncompressed" if rnd.random() < 0.5 else "fast").encode(plain))
        if rnd.random() < 0.3:
            data = data[:rnd.randrange(len(data))]
        else:
            for _ in range(rnd.randrange(1, 4)):
                data[rnd.randrange(len(data))] = rnd.randrange(256)
        try:
            read(bytes(data))
        except ArchiveError:
            pass
    # the same damage inside the entries, past the S2 checksums
    for _ in range(400):
        p = bytearray(plain)
        for _ in range(rnd.randrange(1, 4)):
            p[rnd.randrange(len(MAGIC), len(p))] = rnd.randrange(256)
        try:
            read(S2Writer().encode(bytes(p)))
        except ArchiveError:
            pass
