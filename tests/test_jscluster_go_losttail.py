"""A Rillet replica of a Go stream group whose store comes back from a power cut shorter than its applied file
says fetches the lost tail again from the Go leader (rillet.jetstream.cluster.gostreamapplied): its log starts
at the kept index, a ``$JSC.SYNC`` catch-up from the store's last sequence + 1 brings the messages back, and the
entries committed meanwhile are applied after them. The unit tests are in test_jscluster_go_streamapplied.py;
this is the live run with 2 Go servers and a Rillet one (nats-server binary on PATH)."""
from __future__ import annotations

import base64
import json
import os
import shutil
import struct

import pytest

live = pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")


def _cut_store_at(msgs_dir: str, seq: int) -> int:
    """The record of ``seq`` and everything after it cut from the block files, 7 bytes of it left (a torn
    write), the indexes removed: what a power cut leaves of writes the OS had not flushed. Returns the bytes
    cut."""
    cut = 0
    for name in sorted(os.listdir(msgs_dir)):
        path = os.path.join(msgs_dir, name)
        if name.endswith(".idx"):
            os.remove(path)
            continue
        if not name.endswith(".blk"):
            continue
        with open(path, "rb") as f:
            raw = f.read()
        off = 8  # (the block's magic; then records: type, flags, subject length, total length, seq, ...)
        while off < len(raw):
            total, rseq = struct.unpack_from("<IQ", raw, off + 4)
            if rseq >= seq:
                keep = off + (7 if cut == 0 else 0)
                cut += len(raw) - keep
                with open(path, "r+b") as f:
                    f.truncate(keep)
                break
            off += total
    return cut


@live
async def test_store_tail_lost_in_a_power_cut_is_fetched_again_from_the_go_leader(tmp_path):
    """2 Go + 1 Rillet (a follower: ``rillet_go_meta`` only), an R3 stream led by a Go server, 40 messages
    (with headers and message ids). The Rillet server stopped; its store's tail cut from message 31 on (torn),
    its applied file left saying 40; meanwhile 41-45 are published through the Go servers. Restarted, the
    replica reports the loss, its log starts at the kept index (no snapshot), it fetches 31..40 from the Go
    leader with a $JSC.SYNC catch-up, then applies 41-45 and what is published after: every message in its store
    is the Go leader's (subject, headers, data, timestamp)."""
    import nats
    from helpers import free_port, serve_config
    from rillet.gocompat.gotime import parse_time
    from rillet.jetstream.cluster.gostreamapplied import kept_last_seq, load_applied
    from test_jscluster_golead_stream import _create
    from test_jscluster_gometa import CAP, _member, _rillet_conf, _until
    rport = free_port()
    gc = CAP.GoCluster(tmp_path, names=("g0", "g1"), extra_routes=[rport])
    gc.start_all()
    conf = _rillet_conf(gc, "r1", rport)
    conns: dict = {}
    logs = []
    try:
        for n in gc.names:
            conns[n] = await nats.connect(gc.url(n))
        g0 = conns["g0"]
        js = conns["g1"].jetstream(timeout=30)

        async def publish(i: int) -> None:
            ack = await js.publish(f"lt.{i % 4}", f"m{i}".encode() * (i % 7 + 1),
                                   headers={"Nats-Msg-Id": f"id{i}", "X-N": str(i)})
            assert ack.seq == i
        async with serve_config(conf) as srv:
            m = await _member(srv)
            await CAP._until(lambda: CAP._js_ready(g0), 60, what="the Go meta leader")
            si = await _create(g0, name="LT", subjects=["lt.>"], num_replicas=3)
            assert si.config.num_replicas == 3
            await _until(lambda: ("A", "LT") in m.replicas, 60, what="the stream replica on r1")
            for i in range(1, 41):
                await publish(i)
            srep = m.replicas[("A", "LT")]
            await _until(lambda: srep.store.state().last_seq == 40 and kept_last_seq(srep._applied_path) == 40,
                         60, what="r1's replica at 40, its applied file written")
            store_dir, applied_path = srep.dir, srep._applied_path
            logs.append(srv._test_log.getvalue())
        index, _clfs, term = load_applied(applied_path)
        assert index > 0 and term > 0 and kept_last_seq(applied_path) == 40
        assert _cut_store_at(os.path.join(store_dir, "msgs", "msgs"), 31) > 0
        for i in range(41, 46):
            await publish(i)

        async with serve_config(conf) as srv:
            m = await _member(srv)
            await _until(lambda: ("A", "LT") in m.replicas, 60, what="the stream replica on r1 again")
            srep = m.replicas[("A", "LT")]
            # the loss reported, the log at the kept index all the same
            assert srep.raft.base_index == index and srep.raft.base_term == term
            await _until(lambda: "its store lost messages (last sequence 30, 40 when index" in srv._test_log.getvalue(),
                         30, what="the loss reported")
            await _until(lambda: srep.store.state().last_seq == 45 and srep._snap is None, 60,
                         what="r1's replica caught up to 45")
            assert srep.catchups == 1 and srep.catchup_msgs == 10 and srep.snapshots_installed == 0
            assert srep.apply_errors == 0 and srep.raft.base_index == index
            for i in range(46, 51):
                await publish(i)
            await _until(lambda: srep.store.state().last_seq == 50, 60, what="r1's replica at 50")
            st = srep.store.state()
            assert (st.msgs, st.first_seq, st.num_deleted) == (50, 1, 0)
            # every message the Go leader's, byte for byte
            for seq in range(1, 51):
                got = json.loads((await g0.request("$JS.API.STREAM.MSG.GET.LT", json.dumps({"seq": seq}).encode(),
                                                   timeout=10)).data)["message"]
                sm = srep.store.load_msg(seq)
                assert sm.subject == got["subject"] and bytes(sm.data) == base64.b64decode(got.get("data", ""))
                assert bytes(sm.hdr) == base64.b64decode(got["hdrs"]) and sm.ts == parse_time(got["time"])[0]
            # the caught-up message ids count as duplicates (rebuilt after the catch-up)
            assert "id35" in srep.ddmap and srep.ddmap["id35"][0] == 35
            logs.append(srv._test_log.getvalue())
    finally:
        for c in conns.values():
            if c.is_connected:
                await c.close()
        (tmp_path / "r1.log").write_text("\n".join(logs))
        gc.stop_all()
