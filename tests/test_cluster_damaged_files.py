"""Damaged files other than message blocks on a replica of an R3 stream and consumer (issue 24): the RAFT log,
the store's state log and block index files (an R3 consumer keeps no state file: its group's log holds it). Each test stops a follower, damages one kind
of file (bit flips in the middle, a torn tail), publishes and deletes more meanwhile, restarts it and checks
that it recovers what it lost from the others or from what it holds: every message read back through it as
the stream leader with its data, the deleted ones still deleted, the consumer's state as the others have it.
"""
from __future__ import annotations

import asyncio
import base64
import functools
import glob
import json
import os
import signal

import nats
import pytest

from helpers import cluster_members, request_until, start_members

CFG = {"n": 400}  # messages published before the stop (the state log tests': past the group's first snapshot)
M = 100  # and while the follower is down
DELETED = (7, 150, 333)  # deleted before the stop
DELETED_LATER = (20, 300)  # and while it is down


def _stop(m) -> None:
    m.proc.proc.send_signal(signal.SIGTERM)
    m.proc.proc.wait(timeout=30)


@pytest.fixture
def cluster(tmp_path):
    members = cluster_members(str(tmp_path), "d", "dmg")
    try:
        start_members(members)
        yield members
    finally:
        for m in members:
            m.close()


_request = functools.partial(request_until, timeout=60.0)


PAD = {"n": 40}  # each message's padding (the index test's are larger: blocks are 8 MB)


def _data(i: int) -> bytes:
    return b"v%05d.%s" % (i, b"x" * PAD["n"])


async def _publish(urls: list[str], lo: int, hi: int) -> None:
    nc = await nats.connect(servers=urls)
    try:
        js = nc.jetstream()
        for k in range(lo, hi, 500):
            await asyncio.gather(*(js.publish("p.x", _data(i), timeout=30) for i in range(k, min(hi, k + 500))))
    finally:
        await nc.close()


async def _delete(urls: list[str], seqs) -> None:
    for s in seqs:
        await _request(urls, "$JS.API.STREAM.MSG.DELETE.P", {"seq": s})


async def _ack(urls: list[str], n: int, batch: int = 50) -> None:
    """The durable consumer C fetches ``n`` messages and acknowledges them (the last of each batch AckSync)."""
    nc = await nats.connect(servers=urls)
    try:
        js = nc.jetstream()
        sub = await js.pull_subscribe_bind("C", "P")
        got = 0
        while got < n:
            msgs = await sub.fetch(min(batch, n - got), timeout=10)
            for m in msgs[:-1]:
                await m.ack()
            await msgs[-1].ack_sync(timeout=10)
            got += len(msgs)
    finally:
        await nc.close()


def _all_current(d: dict) -> bool:
    return all(r.get("current") and not r.get("lag") for r in d.get("cluster", {}).get("replicas", []))


def _setup(cluster) -> tuple[object, list[str]]:
    N = CFG["n"]
    """The stream P (R3, file) with N messages, some deleted; the R3 durable C with 100 acknowledged; every
    replica current. Returns a follower of both, stopped, and the other two servers' URLs."""
    urls = [m.url for m in cluster]

    async def go() -> object:
        await _request(urls, "$JS.API.STREAM.CREATE.P", {"name": "P", "subjects": ["p.>"], "num_replicas": 3,
                                                          "storage": "file"})
        await _publish(urls, 0, 400)
        await _delete(urls, DELETED)
        await _publish(urls, 400, N)
        await _request(urls, "$JS.API.CONSUMER.DURABLE.CREATE.P.C",
                       {"stream_name": "P", "config": {"durable_name": "C", "ack_policy": "explicit",
                                                        "num_replicas": 3}})
        await _ack(urls, CFG.get("acks", 100), 500)
        info = await _request(urls, "$JS.API.STREAM.INFO.P", want=lambda d: "error" not in d and _all_current(d))
        cinfo = await _request(urls, "$JS.API.CONSUMER.INFO.P.C",
                               want=lambda d: "error" not in d and _all_current(d))
        leaders = {info["cluster"]["leader"], cinfo["cluster"]["leader"]}
        return next(m for m in cluster if m.name not in leaders)
    victim = asyncio.run(go())
    _stop(victim)
    return victim, [m.url for m in cluster if m is not victim]


async def _lead(cluster, victim, others: list[str], kind: str, subj: str) -> dict:
    """Info of the stream or consumer ``subj`` once ``victim`` leads it (asked to, every replica current)."""
    urls = [m.url for m in cluster]
    for _ in range(90):
        d = await _request(urls, f"$JS.API.{kind}.INFO.{subj}", want=lambda d: "error" not in d and
                           _all_current(d))
        if d["cluster"].get("leader") == victim.name:
            return d
        await _request(others, f"$JS.API.{kind}.LEADER.STEPDOWN.{subj}",
                       {"placement": {"preferred": victim.name}}, want=lambda d: True)
        await asyncio.sleep(1)
    raise AssertionError(f"{victim.name} never became the leader of {subj}")


def _after(cluster, victim, others: list[str], log_line: str) -> None:
    """More published and deleted while the victim is down; the victim restarted (its log says ``log_line``),
    made the leader of P and C once caught up; everything read back through it."""
    N = CFG["n"]
    asyncio.run(_publish(others, N, N + M))
    asyncio.run(_delete(others, DELETED_LATER))
    asyncio.run(_ack(others, 50))
    victim.start()
    victim.proc.wait_log("Server is ready", timeout=30)
    victim.proc.wait_log(log_line, timeout=30)
    def lead(kind: str, subj: str) -> dict:
        return asyncio.run(_lead(cluster, victim, others, kind, subj))
    info = lead("STREAM", "P")
    deleted = set(DELETED) | set(DELETED_LATER)
    assert info["state"]["messages"] == N + M - len(deleted), info["state"]
    assert info["state"]["last_seq"] == N + M and not info["state"].get("lost"), info["state"]
    cinfo = lead("CONSUMER", "P.C")
    assert cinfo["ack_floor"]["stream_seq"] >= CFG.get("acks", 100) + 50 and cinfo["num_ack_pending"] == 0, cinfo
    assert cinfo["num_pending"] == N + M - cinfo["delivered"]["stream_seq"] - len(
        [s for s in deleted if s > cinfo["delivered"]["stream_seq"]]), cinfo

    async def read_all() -> list:
        nc = await nats.connect(victim.url)
        bad = []
        try:
            for seq in range(1, N + M + 1):
                r = json.loads((await nc.request("$JS.API.STREAM.MSG.GET.P", json.dumps({"seq": seq}).encode(),
                                                 timeout=5)).data)
                if seq in deleted:
                    if r.get("error", {}).get("err_code") != 10037:
                        bad.append((seq, r))
                elif "error" in r or base64.b64decode(r["message"]["data"]) != _data(seq - 1):
                    bad.append((seq, r))
        finally:
            await nc.close()
        return bad
    assert asyncio.run(read_all()) == []


def _flip(path: str, at: float) -> None:
    b = bytearray(open(path, "rb").read())
    i = int(len(b) * at)
    b[i] ^= 0x21
    with open(path, "wb") as f:
        f.write(b)


def _victim_files(victim, pattern: str) -> list[str]:
    store = os.path.join(os.path.dirname(victim.conf), "store")
    return sorted(glob.glob(os.path.join(store, "**", pattern), recursive=True))


def test_a_damaged_raft_log_is_cut_and_taken_again_from_the_others(cluster) -> None:
    """Every RAFT log segment of the follower (the meta group's, the stream's, the consumer's) has a bit
    flipped in its middle: before, each group stopped on this server for good; now each log is cut before the
    damage and the member recovers (no vote until caught up) from the others."""
    victim, others = _setup(cluster)
    segs = [p for p in _victim_files(victim, "seg-*.log") if os.path.getsize(p) > 200]
    assert len(segs) >= 3, segs
    for p in segs:
        _flip(p, 0.5)
    _after(cluster, victim, others, r"damaged log \(.*\): entries from \d+ on dropped; recovering")


def test_damaged_block_index_files_are_rebuilt_from_their_blocks(cluster) -> None:
    """A block's index file is derived from the block: one that fails its check (bits flipped, or torn) is
    rebuilt by scanning the block, on any replica (nothing to fetch from the others)."""
    PAD["n"] = 30000  # (400 messages: 12 MB, past one 8 MB block, whose index file is written when sealed)
    try:
        victim, others = _setup(cluster)
        idx = _victim_files(victim, "*.idx")
        assert idx, _victim_files(victim, "*")
        for k, p in enumerate(idx):
            if k % 2:
                with open(p, "r+b") as f:
                    f.truncate(os.path.getsize(p) // 2)  # a torn write
            else:
                _flip(p, 0.6)
        _after(cluster, victim, others, r"index .*corrupt|torn or corrupt")
    finally:
        PAD["n"] = 40


def test_a_replicated_consumer_keeps_no_state_file_on_its_replicas(cluster) -> None:
    """An R3 consumer's state lives in its RAFT group (log and snapshot: damage there is the RAFT log test's),
    not in a consumer state file a replica could read stale or damaged: none is written on any server."""
    _setup(cluster)
    for m in cluster:
        files = [p for p in _victim_files(m, "*") if os.sep + "consumers" + os.sep in p]
        assert files == [], files


@pytest.mark.parametrize("how", ["flip", "magic"])
def test_a_damaged_state_log_is_taken_again_from_the_leader(cluster, how) -> None:
    """The follower's state log (its store's deletions and first/last markers) is damaged: a record in it
    fails its check (``flip``: skipped), or its header does (``magic``: rebuilt from the blocks). Deletions
    recorded there are lost from the store, but not from the replica: its group's snapshot holds the deleted
    sequences up to it and its log every deletion after, both applied again at the start, so no deleted
    message comes back (the deletions lie below the snapshot: its log alone could not give them again)."""
    CFG["n"] = 8500  # (past streams.COMPACT_EVERY applied entries: the group's log is compacted)
    try:
        victim, others = _setup(cluster)
        _damage_state_log(victim, how)
        _after(cluster, victim, others, r"state.log: (torn record|corrupt data|bad magic)")
    finally:
        CFG["n"] = 400


def _damage_state_log(victim, how: str) -> None:
    snaps = [p for p in _victim_files(victim, "snapshot") if os.sep + "S-" in p]
    assert snaps, _victim_files(victim, "*")  # (the stream's group was compacted: the deletions are below it)
    (path,) = [p for p in _victim_files(victim, "state.log") if os.sep + "P" + os.sep in p]
    b = bytearray(open(path, "rb").read())
    assert len(b) > 40, len(b)
    if how == "flip":
        b[len(b) - 5] ^= 0x21  # (the last record: the tombstones of the deletions, after the markers)
    else:
        b[2] ^= 0x21
    with open(path, "wb") as f:
        f.write(b)


def test_damaged_raft_snapshots_are_taken_again_from_the_leaders(cluster) -> None:
    """The snapshot files of the follower's stream group and of its consumer group (the R3 consumer's state
    below its log) fail their check: before, each group stopped on this server for good; now the snapshot and
    the entries after it are dropped (the hard state's term and vote kept), the member recovers without voting
    and installs its leader's snapshot again: the consumer's state on that server is the consumer leader's."""
    CFG["n"], CFG["acks"] = 8500, 8300  # (past COMPACT_EVERY applied entries of both groups)
    try:
        victim, others = _setup(cluster)
        snaps = [p for p in _victim_files(victim, "snapshot") if os.sep + "_raft" + os.sep in p]
        kinds = {os.path.basename(os.path.dirname(p))[:2] for p in snaps}
        assert {"S-", "C-"} <= kinds, snaps
        for p in snaps:
            _flip(p, 0.7)
        _after(cluster, victim, others, r"damaged log \(.*snapshot.*\): entries from 1 on dropped; recovering")
    finally:
        CFG["n"] = 400
        CFG.pop("acks", None)


def _snapshot_of(m) -> bool:
    return any(os.sep + "S-" in p for p in _victim_files(m, "snapshot"))


def _drop_tombstone(path: str, seq: int) -> None:
    """Rewrite a store's state log without the tombstone of ``seq`` (its record lost)."""
    import struct

    from rillet.jetstream.store._fsformat import L_DEL, LOG_MAGIC, _encode_log, _parse_log_record
    buf = open(path, "rb").read()
    assert buf[:8] == LOG_MAGIC
    mv = memoryview(buf)
    out = [LOG_MAGIC]
    pos, found = 8, False
    while pos < len(buf):
        r = _parse_log_record(mv, pos, len(buf))
        assert r is not None, pos
        kind, p, plen, total = r
        if kind == L_DEL:
            seqs = list(struct.unpack_from(f"<{plen // 8}Q", mv, p))
            if seq in seqs:
                found = True
                seqs.remove(seq)
                if seqs:
                    out.append(_encode_log(L_DEL, struct.pack(f"<{len(seqs)}Q", *seqs)))
                pos += total
                continue
        out.append(bytes(mv[pos:pos + total]))
        pos += total
    assert found, "no tombstone of %d" % seq
    with open(path, "wb") as f:
        f.write(b"".join(out))


def test_a_damaged_record_whose_deletion_lost_its_record_here_is_removed(cluster) -> None:
    """Message 5 is deleted (not erased) after the group's snapshot and more is published; on the stopped
    follower its record is damaged and its tombstone lost. Restarted, the follower finds 5 damaged, and its log
    cannot give the deletion again (the store is past it: the entry counts as applied); the others answer that
    they deleted it. Before, the follower waited for its own deletion forever (asked again every 2 s; stream
    info through it kept showing 5 lost); now, having applied as far as they had when they answered, it removes
    the record itself."""
    try:
        urls = [m.url for m in cluster]

        async def go() -> object:
            await _request(urls, "$JS.API.STREAM.CREATE.P", {"name": "P", "subjects": ["p.>"],
                                                              "num_replicas": 3, "storage": "file"})
            n = 0
            while not all(_snapshot_of(m) for m in cluster):  # (the deletion must come after the snapshot)
                assert n < 40000, n
                await _publish(urls, n, n + 500)
                n += 500
            # (messages between the snapshot and the deletion: replaying its log, the replica's store is past the
            # deletion's entry, which counts as applied before the restart)
            await _publish(urls, n, n + 20)
            await _request(urls, "$JS.API.STREAM.MSG.DELETE.P", {"seq": 5, "no_erase": True})
            await _publish(urls, n + 20, n + 40)
            CFG["total"] = n + 40
            info = await _request(urls, "$JS.API.STREAM.INFO.P", want=lambda d: "error" not in d and
                                  _all_current(d))
            return next(m for m in cluster if m.name != info["cluster"]["leader"])
        victim = asyncio.run(go())
        _stop(victim)
        assert [p for p in _victim_files(victim, "snapshot") if os.sep + "S-" in p]
        (blk,) = [p for p in _victim_files(victim, "*.blk") if os.sep + "P" + os.sep in p]
        b = bytearray(open(blk, "rb").read())
        i = b.find(b"v00004.")
        assert i > 0
        b[i + 3] ^= 0x10
        with open(blk, "wb") as f:
            f.write(b)
        (log,) = [p for p in _victim_files(victim, "state.log") if os.sep + "P" + os.sep in p]
        _drop_tombstone(log, 5)
        victim.start()
        victim.proc.wait_log("Server is ready", timeout=30)
        # (the state below is what counts: in a run where the snapshot ends right before the deletion's entry,
        # the replay applies that entry again and nothing is left to wait for)
        others = [m.url for m in cluster if m is not victim]

        async def check() -> dict:  # (through the victim as the stream leader: its own store's state)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while True:
                d = await _lead(cluster, victim, others, "STREAM", "P")
                if (d["state"]["messages"] == CFG["total"] - 1 and not d["state"].get("lost")) or \
                        loop.time() > deadline:
                    return d
                await asyncio.sleep(0.5)
        info = asyncio.run(check())
        assert info["state"]["messages"] == CFG["total"] - 1 and not info["state"].get("lost"), info["state"]
        r = asyncio.run(_request([victim.url], "$JS.API.STREAM.MSG.GET.P", {"seq": 5}, want=lambda d: True))
        assert r.get("error", {}).get("err_code") == 10037, r
    finally:
        CFG.pop("total", None)
