"""The publish path's shortcuts (issue 20) give what the general code gives: MemStore.store_msg's inline common
case against StoreCommon.store_msg's path, and the held PubAcks (one cached format) of a burst, including a
stream name with a ``%`` in it (the format must not read it as a conversion)."""
from __future__ import annotations

import asyncio
import json

import nats

from rillet.app.embed import run_server
from rillet.config.options import JetStreamOptions
from rillet.jetstream.store._common import StoreCommon
from rillet.jetstream.store.base import StoreConfig
from rillet.jetstream.store.memstore import MemStore
from rillet.server import Options


def _fill(store: MemStore, shared: bool) -> list:
    out = []
    for i in range(300):
        subj = f"s.{i % 7}"
        hdr = b"NATS/1.0\r\nX: %d\r\n\r\n" % i if i % 5 == 0 else b""
        ttl = 0
        args = (subj, hdr, b"d%d" % i, 1_000_000 + i, ttl)
        out.append(StoreCommon.store_msg(store, *args) if shared else store.store_msg(*args))
        if i % 50 == 49:
            store.remove_msg(i - 10, False)
    return out


def _state(store: MemStore) -> tuple:
    st = store.state()
    msgs = [(m.seq, m.subject, m.hdr, m.data, m.ts) for m in
            (store.load_msg(s) for s in range(st.first_seq, st.last_seq + 1) if store.load_msg(s) is not None)]
    per_subject = {s: store.last_seq_for_subject(s) for s in (f"s.{k}" for k in range(7))}
    return (st.msgs, st.bytes, st.first_seq, st.last_seq, msgs, store.subjects_totals(">"), per_subject)


def test_memstore_inline_store_is_the_shared_path():
    fast, shared = MemStore(StoreConfig(storage="memory")), MemStore(StoreConfig(storage="memory"))
    assert _fill(fast, False) == _fill(shared, True)
    assert _state(fast) == _state(shared)


def test_memstore_inline_store_leaves_limits_to_the_shared_path():
    fast = MemStore(StoreConfig(storage="memory", max_msgs_per_subject=2))
    shared = MemStore(StoreConfig(storage="memory", max_msgs_per_subject=2))
    assert _fill(fast, False) == _fill(shared, True)
    assert _state(fast) == _state(shared)
    assert all(1 <= n <= 2 for n in fast.subjects_totals(">").values())  # (the removals may take one)


async def test_held_pubacks_of_a_burst_name_their_stream_and_sequence(tmp_path):
    opts = Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(enabled=True, store_dir=str(tmp_path)))
    async with run_server(opts) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        for name, storage in (("P%dQ%s", "memory"), ("F%%", "file")):
            subj = f"fp.{storage}"
            await js.add_stream(name=name, subjects=[subj], storage=storage)
            futs = [nc.request(subj, b"m%d" % i, timeout=10) for i in range(200)]
            answers = await asyncio.gather(*futs)
            acks = [json.loads(a.data) for a in answers]
            assert sorted(a["seq"] for a in acks) == list(range(1, 201))
            assert all(set(a) == {"stream", "seq"} and a["stream"] == name for a in acks), acks[:3]
            assert (await js.stream_info(name)).state.messages == 200
        await nc.close()
