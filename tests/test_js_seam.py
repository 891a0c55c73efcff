"""The replication seam: a stream's entries replayed on fresh replicas give the same state, byte for byte.

A real server runs a mixed workload (publishes with msg ids and duplicates, expectations, rollups, TTLs,
max_age expiry with subject delete markers, atomic batches, message delete, purge, config update, mirror,
source, work-queue and interest retention, KV puts/deletes/purges) while every entry applied to every
stream is recorded. Each stream's entries are then applied, in order, to two replicas with fresh file
stores (``Stream.replica``: the state machine alone); the replicas and the live stream must hold the same
messages (subject, headers, data, timestamp), the same state and dedup table, and the replicas' files the
same bytes.
"""
from __future__ import annotations

import asyncio
import json
import os

import nats
import pytest

from rillet.config.options import JetStreamOptions
from rillet.jetstream.consumer.state import ConsumerStateMachine
from rillet.jetstream.log import Entry
from rillet.jetstream.store.filestore import FileStore
from rillet.jetstream.storeopen import store_config
from rillet.jetstream.stream import Stream
from rillet.server import Options
from rillet.app.embed import run_server

SEC = 1_000_000_000
REAL_APPLY = Stream.apply
REAL_C_APPLY = ConsumerStateMachine.apply_entry


@pytest.fixture
def recorded(monkeypatch):
    """{stream name: {"cfg": config at creation, "entries": [(Entry, error type name or None)], "stream"}}"""
    rec: dict[str, dict] = {}
    orig_init = Stream.__init__
    orig_apply = Stream.apply

    def init(self, jsa, cfg, created, store):
        orig_init(self, jsa, cfg, created, store)
        rec[cfg.name] = {"cfg": cfg, "entries": [], "stream": self}

    def apply(self, entry):
        r = rec[self.name]["entries"]
        try:
            res = orig_apply(self, entry)
        except Exception as e:
            r.append((Entry(entry.op, entry.args), type(e).__name__))
            raise
        r.append((Entry(entry.op, entry.args), None))
        return res

    monkeypatch.setattr(Stream, "__init__", init)
    monkeypatch.setattr(Stream, "apply", apply)
    return rec


async def api(nc, subject: str, body: dict | None = None) -> dict:
    r = await nc.request(subject, json.dumps(body).encode() if body is not None else b"", timeout=2)
    return json.loads(r.data)


async def wait_for(cond, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await cond():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


def messages(store) -> list[tuple]:
    out = []
    st = store.state()
    for seq in range(st.first_seq, st.last_seq + 1):
        m = store.load_msg(seq)
        if m is not None:
            out.append((m.seq, m.subject, bytes(m.hdr), bytes(m.data), m.ts))
    return out


def state_tuple(store) -> tuple:
    st = store.state()
    return (st.msgs, st.bytes, st.first_seq, st.first_ts, st.last_seq, st.last_ts, st.num_deleted,
            sorted(st.deleted), st.num_subjects)


def files(path: str) -> dict[str, bytes]:
    out = {}
    for root, _, names in os.walk(path):
        for n in names:
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, path)] = f.read()
    return out


async def test_recorded_entries_replay_identically(tmp_path, recorded):
    opts = Options(host="127.0.0.1", port=-1,
                   jetstream=JetStreamOptions(enabled=True, store_dir=str(tmp_path / "live")))
    async with run_server(opts) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream(timeout=2)

        async def create(cfg: dict) -> None:
            r = await api(nc, f"$JS.API.STREAM.CREATE.{cfg['name']}", cfg)
            assert "error" not in r, r

        async def msgs(name: str) -> int:
            return (await api(nc, f"$JS.API.STREAM.INFO.{name}"))["state"]["messages"]

        await create({"name": "A", "subjects": ["a.>"], "allow_atomic": True, "allow_msg_ttl": True,
                      "allow_rollup_hdrs": True, "max_msgs_per_subject": 3})
        await create({"name": "M", "mirror": {"name": "A"}})
        await create({"name": "S", "sources": [{"name": "A"}], "storage": "memory"})
        await create({"name": "E", "subjects": ["e.>"], "max_age": 1 * SEC, "subject_delete_marker_ttl": 1 * SEC,
                      "allow_msg_ttl": True})
        await create({"name": "WQ", "subjects": ["wq.>"], "retention": "workqueue"})
        await create({"name": "IN", "subjects": ["in.>"], "retention": "interest"})

        await js.publish("e.x", b"old")  # expires with max_age (1 s), leaving a delete marker
        await js.publish("e.t", b"ttl", headers={"Nats-TTL": "1s"})
        for i in range(8):
            await js.publish(f"a.{i % 3}", b"%d" % i, headers={"Nats-Msg-Id": f"id{i}"})
        ack = await js.publish("a.0", b"dup", headers={"Nats-Msg-Id": "id7"})
        assert ack.duplicate
        await js.publish("a.x", b"exp", headers={"Nats-Expected-Last-Sequence": "8"})
        with pytest.raises(nats.js.errors.BadRequestError):
            await js.publish("a.x", b"wrong", headers={"Nats-Expected-Last-Sequence": "1"})
        await js.publish("a.ttl", b"t", headers={"Nats-TTL": "1s"})
        await js.publish("a.1", b"roll", headers={"Nats-Rollup": "sub"})
        for i in range(1, 4):
            h = {"Nats-Batch-Id": "b1", "Nats-Batch-Sequence": str(i)}
            if i == 3:
                h["Nats-Batch-Commit"] = "1"
            await nc.publish("a.b", b"batch%d" % i, headers=h)
        await nc.flush()
        await wait_for(lambda: _eq(last_seq(nc, "A"), 14))

        kv = await js.create_key_value(bucket="cfg", history=3)
        for i in range(5):
            await kv.put("k1", b"v%d" % i)
        await kv.put("k2", b"x")
        rev = await kv.update("k2", b"y", last=(await kv.get("k2")).revision)
        assert rev
        await kv.delete("k1")
        await kv.purge("k2")

        for i in range(3):
            await js.publish("wq.x", b"%d" % i)
        await js.publish("in.x", b"nobody is interested")
        sub = await js.pull_subscribe("wq.x", durable="w")
        for m in await sub.fetch(3, timeout=2):
            await m.ack_sync()

        await wait_for(lambda: _eq(last_seq(nc, "M"), 14), 8)
        src = srv_stream(srv, "S").sources.origins[0]

        async def sourced() -> bool:
            return src.sseq >= 14
        await wait_for(sourced, 8)

        r = await api(nc, "$JS.API.STREAM.MSG.DELETE.A", {"seq": 3})
        assert r.get("success") is True, r
        r = await api(nc, "$JS.API.STREAM.MSG.DELETE.A", {"seq": 4, "no_erase": True})
        assert r.get("success") is True, r
        r = await api(nc, "$JS.API.STREAM.PURGE.A", {"filter": "a.2", "keep": 1})
        assert "error" not in r, r
        info = await api(nc, "$JS.API.STREAM.INFO.A")
        r = await api(nc, "$JS.API.STREAM.UPDATE.A", dict(info["config"], max_msgs=5))
        assert "error" not in r and r["state"]["messages"] == 5, r
        await js.publish("a.0", b"rollall", headers={"Nats-Rollup": "all"})

        await wait_for(lambda: _eq(msgs("WQ"), 0))
        await wait_for(lambda: _eq(msgs("IN"), 0))
        e_store = srv_stream(srv, "E").store

        async def expired() -> bool:  # both gone; a delete marker stored in their place
            return e_store.state().first_seq > 2 and e_store.state().last_seq > 2
        await wait_for(expired, 5)
        await nc.close()

        live = {name: [messages(r["stream"].store), state_tuple(r["stream"].store),
                       dict(r["stream"]._ddmap), r["stream"]._last_msg_id] for name, r in recorded.items()}

    ops = {e.op for r in recorded.values() for e, _ in r["entries"]}
    assert {Entry.MSG, Entry.BATCH, Entry.MIRROR, Entry.DELETE, Entry.PURGE, Entry.UPDATE,
            Entry.EXPIRE} <= ops, ops
    assert any(err for r in recorded.values() for _, err in r["entries"]) is False  # nothing refused

    # the replicas run the real apply (the recording one is for the live server)
    for name, r in recorded.items():
        reps = []
        for side in ("a", "b"):
            st = FileStore(str(tmp_path / side / name), store_config(r["cfg"]))
            rep = Stream.replica(r["cfg"], st)
            for e, err in r["entries"]:
                try:
                    REAL_APPLY(rep, Entry(e.op, e.args))
                except Exception as x:
                    assert type(x).__name__ == err, (name, e, x)
                else:
                    assert err is None, (name, e)
            reps.append(rep)
        got = [[messages(x.store), state_tuple(x.store), dict(x._ddmap), x._last_msg_id] for x in reps]
        assert got[0] == got[1], name
        if r["cfg"].storage == "memory":  # a memory store counts its bytes with other overheads
            got[0][1], live[name][1] = got[0][1][:1] + got[0][1][2:], live[name][1][:1] + live[name][1][2:]
        assert got[0] == live[name], name
        for x in reps:
            x.store.stop()
        assert files(str(tmp_path / "a" / name)) == files(str(tmp_path / "b" / name)), name


def srv_stream(srv, name: str) -> Stream:
    for jsa in srv.jetstream.accounts.values():
        if name in jsa.streams:
            return jsa.streams[name]
    raise KeyError(name)


async def last_seq(nc, name: str) -> int:
    return (await api(nc, f"$JS.API.STREAM.INFO.{name}"))["state"]["last_seq"]


async def _eq(coro, value) -> bool:
    return (await coro) == value


@pytest.fixture
def consumer_entries(monkeypatch):
    """{consumer name: (consumer, [Entry])} for every consumer entry applied."""
    rec: dict[str, tuple] = {}

    def apply(self, entry):
        rec.setdefault(self.name, (self, []))[1].append(Entry(entry.op, entry.args))
        return REAL_C_APPLY(self, entry)

    monkeypatch.setattr(ConsumerStateMachine, "apply_entry", apply)
    return rec


async def test_consumer_entries_replay_identically(tmp_path, consumer_entries):
    """Deliveries, acks (explicit and all), NAKs with and without delay, progress, TERM, redelivery after
    ack wait, max_deliver, a removed pending message and a purge, recorded as consumer entries: a bare
    ConsumerStateMachine applying them ends in the live consumer's replicated state."""
    opts = Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(enabled=True, store_dir=str(tmp_path)))
    async with run_server(opts) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream(timeout=2)
        r = await api(nc, "$JS.API.STREAM.CREATE.C", {"name": "C", "subjects": ["c.>"]})
        assert "error" not in r, r
        for name, extra in (("E", {"ack_policy": "explicit", "ack_wait": SEC // 4, "max_deliver": 5}),
                            ("ALL", {"ack_policy": "all"}),
                            ("X", {"ack_policy": "explicit", "ack_wait": SEC // 5, "max_deliver": 2,
                                   "filter_subject": "c.x"})):
            r = await api(nc, f"$JS.API.CONSUMER.CREATE.C.{name}", {"stream_name": "C", "config": {
                "durable_name": name, **extra}})
            assert "error" not in r, r
        for i in range(8):
            await js.publish("c.x" if i == 0 else f"c.{i % 3}", b"%d" % i)
        e = await js.pull_subscribe_bind("E", "C")
        ms = await e.fetch(6, timeout=2)
        await ms[0].ack()
        await ms[1].nak()
        await ms[2].nak(delay=0.1)
        await ms[3].in_progress()
        await ms[4].term()
        a = await js.pull_subscribe_bind("ALL", "C")
        al = await a.fetch(5, timeout=2)
        await al[2].ack()
        x = await js.pull_subscribe_bind("X", "C")
        await x.fetch(1, timeout=2)
        await asyncio.sleep(0.3)
        await x.fetch(1, timeout=2)  # redelivered (2nd delivery = max_deliver)
        await asyncio.sleep(0.35)
        again = await e.fetch(4, timeout=2)  # 2 (NAK), 3 (delayed NAK), 4 and 6 (ack wait ran out)
        for m in again[:2]:
            await m.ack()
        with pytest.raises(nats.errors.TimeoutError):
            await x.fetch(1, timeout=0.2)  # a 3rd delivery is over max_deliver: dropped, nothing comes
        r = await api(nc, "$JS.API.STREAM.MSG.DELETE.C", {"seq": 7})  # pending on E and ALL
        assert r.get("success") is True, r
        r = await api(nc, "$JS.API.STREAM.PURGE.C", {"seq": 4})
        assert "error" not in r, r
        await nc.flush()
        await nc.close()
        live = {n: c.replicated_state() for n, (c, _) in consumer_entries.items()}

    ops = {e.op for _, es in consumer_entries.values() for e in es}
    assert {Entry.C_START, Entry.C_DELIVERED, Entry.C_ACK, Entry.C_NAK, Entry.C_DUE, Entry.C_GONE,
            Entry.C_PURGED, Entry.C_MAXDELIV} <= ops, ops
    for name, (c, entries) in consumer_entries.items():
        rep = ConsumerStateMachine(c.ack_policy)
        for e in entries:
            REAL_C_APPLY(rep, Entry(e.op, e.args))
        assert rep.replicated_state() == live[name], name
    assert live["E"][4] and live["ALL"][2] > 0  # something still pending / acked: not a trivial state
