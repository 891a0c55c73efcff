"""Power cuts of a 3-server Rillet cluster with the default (lazy) ``sync_interval``, each server's store on
tests/faults/lazyfs.py (what was not fsynced is gone at a cut). One server cut: it comes back recovering, is
caught up from the others and nothing acknowledged is lost. All three cut: messages acknowledged since the last
sync are gone (nothing can keep them), and the cluster says so: stream info's ``cluster.lost``, the
``$JS.EVENT.ADVISORY.STREAM.DATA_LOST`` advisory's log line, /healthz unhealthy for the stream."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import urllib.error
import urllib.request

import nats
import pytest

from helpers import ClusterMember, ServerProcess, free_port, request_until
from tests.faults.lazyfs import Mounted, fuse_available

pytestmark = pytest.mark.skipif(fuse_available() is not None, reason=f"lazyfs: {fuse_available()}")


def _new_boot() -> dict:
    """The environment of a server start after an emulated power cut: a boot id of its own (RILLET_BOOT_ID), as
    a machine that lost power boots again (without it, a start in the same boot needs no recovery)."""
    return dict(os.environ, RILLET_BOOT_ID=os.urandom(8).hex())


class Member(ClusterMember):
    def __init__(self, tmp: str, name: str, routes: list[int], cport: int) -> None:
        self.http = free_port()
        self.fs = Mounted(os.path.join(tmp, name, "work"), os.path.join(tmp, name, "store"))
        super().__init__(os.path.join(tmp, name), name, self.fs.mount, "pc", routes, cport,
                         extra=f"http: 127.0.0.1:{self.http}\n")

    def start(self) -> None:
        self.proc = ServerProcess("-c", self.conf, env=_new_boot())
        assert self.proc is not None
        self.proc.wait_log("Server is ready", timeout=30)

    def power_cut(self) -> None:
        assert self.proc is not None
        self.proc.proc.send_signal(signal.SIGKILL)
        self.proc.proc.wait()
        self.fs.cut()

    def healthz(self, query: str = "") -> dict:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/healthz{query}", timeout=5) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            return json.loads(e.read())

    def close(self) -> None:
        super().close()
        self.fs.close()


@pytest.fixture
def cluster(tmp_path):
    cports = [free_port() for _ in range(3)]
    members = [Member(str(tmp_path), f"p{k + 1}", cports, cports[k]) for k in range(3)]
    try:
        for m in members:
            m.proc = ServerProcess("-c", m.conf, env=_new_boot())
        for m in members:
            m.proc.wait_log("Server is ready", timeout=30)
        yield members
    finally:
        for m in members:
            m.close()


async def _info(urls: list[str], timeout: float = 30.0) -> dict:
    """Stream info of P once it answers with a leader (the cluster may still be electing)."""
    deadline = asyncio.get_running_loop().time() + timeout
    last = None
    while asyncio.get_running_loop().time() < deadline:
        try:
            nc = await nats.connect(servers=urls, connect_timeout=2, max_reconnect_attempts=1)
            try:
                r = await nc.request("$JS.API.STREAM.INFO.P", b"", timeout=2)
                d = json.loads(r.data)
                if "error" not in d and d.get("cluster", {}).get("leader"):
                    return d
                last = d
            finally:
                await nc.close()
        except Exception as e:  # (no leader yet, a server still starting: ask again)
            last = repr(e)
        await asyncio.sleep(0.3)
    raise AssertionError(f"no stream info with a leader within {timeout}s: {last}")


async def _publish_one(js, data: bytes, timeout: float = 60.0):
    """Publish ``data`` until it is acknowledged (the PubAck). A moment without a stream leader (an election under
    load: no responders, or no answer in time) is asked again, with ``data`` as its Nats-Msg-Id so that a retry of
    a message that was stored after all is a duplicate (acknowledged with the sequence it was given), never a
    second message."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            return await js.publish("p.x", data, timeout=10, headers={"Nats-Msg-Id": data.decode()})
        except (nats.js.errors.NoStreamResponseError, nats.errors.TimeoutError):
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.3)


async def _publish(url: str, start: int, n: int) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    for i in range(start, start + n):
        await _publish_one(js, b"m%d" % i)
    await nc.close()


def _saved_mark(m: "Member") -> int | None:
    """The mark (highest sequence used or reserved) in the hard state stream P's group last saved on ``m``, read
    through its mount (the file is replaced atomically); None while there is none yet."""
    import glob

    import msgspec

    from rillet.raft.msgs import HardState
    from rillet.raft.wal import _HS_MAGIC, _read_checked
    dirs = glob.glob(os.path.join(m.fs.mount, "jetstream", "_raft", "S-*"))
    if len(dirs) != 1:
        return None
    raw = _read_checked(os.path.join(dirs[0], "hardstate"), _HS_MAGIC)
    return msgspec.msgpack.decode(raw, type=HardState).mark if raw is not None else None


def _saved_commits(m: "Member") -> dict[str, int]:
    """Group name -> the commit index in the hard state last saved on ``m``, for stream P's and its consumers'
    groups (``_raft/S-*``, ``_raft/C-*`` on its mount)."""
    import glob

    import msgspec

    from rillet.raft.msgs import HardState
    from rillet.raft.wal import _HS_MAGIC, _read_checked
    out = {}
    for d in glob.glob(os.path.join(m.fs.mount, "jetstream", "_raft", "[SC]-*")):
        raw = _read_checked(os.path.join(d, "hardstate"), _HS_MAGIC)
        out[os.path.basename(d)] = msgspec.msgpack.decode(raw, type=HardState).commit if raw is not None else 0
    return out


def _wait_commits_saved(members, timeout: float = 30.0) -> None:
    """Each of ``members`` saved in its hard state, for every stream and consumer group it runs, the commit index
    it has now (/raftz's ``committed``): what a recovery after a power cut finds missing committed entries by. It
    is saved about once a second (group.HARD_STATE_EVERY, on a tick: later under load), which a fixed sleep
    assumed."""
    want = {}
    for m in members:
        with urllib.request.urlopen(f"http://127.0.0.1:{m.http}/raftz?acc=%24G", timeout=5) as r:
            groups = json.loads(r.read()).get("$G", {})
        want[m.name] = {g: v["committed"] for g, v in groups.items() if g[:2] in ("S-", "C-")}
        assert want[m.name], (m.name, groups)
    deadline = time.monotonic() + timeout
    while True:
        saved = {m.name: _saved_commits(m) for m in members}
        short = {(name, g): (saved[name].get(g, 0), c) for name, gs in want.items() for g, c in gs.items()
                 if saved[name].get(g, 0) < c}
        if not short:
            return
        assert time.monotonic() < deadline, f"commit indexes not saved within {timeout}s (saved, committed): {short}"
        time.sleep(0.1)


def _wait_released(cluster, last_seq: int, timeout: float = 30.0) -> None:
    """Every member saved a mark of ``last_seq``: the stream is idle and each replica released what it reserved
    (stream_loss._reserve_idle: RESERVE_IDLE after the last entry it applied, on a timer that waits up to twice
    that, later under load; a fixed sleep of 2 s was not enough). Fails when a reservation is never released."""
    deadline = time.monotonic() + timeout
    while True:
        marks = {m.name: _saved_mark(m) for m in cluster}
        if all(v == last_seq for v in marks.values()):
            return
        assert time.monotonic() < deadline, f"the reservations were not released within {timeout}s: {marks}"
        time.sleep(0.1)


def _setup(cluster) -> list[str]:
    urls = [m.url for m in cluster]

    async def go():
        nc = await nats.connect(servers=urls)
        js = nc.jetstream()
        for _ in range(50):
            try:
                await js.add_stream(name="P", subjects=["p.>"], num_replicas=3)
                break
            except Exception:  # (the meta group may not have a leader yet)
                await asyncio.sleep(0.3)
        await nc.close()
        await _publish(urls[0], 0, 50)
    asyncio.run(go())
    for m in cluster:
        m.fs.sync()  # (as if the periodic sync had run: the stream and the first 50 messages are durable)
    return urls


def test_power_cut_of_one_server_loses_nothing(cluster) -> None:
    urls = _setup(cluster)
    asyncio.run(_publish(urls[0], 50, 100))
    _wait_commits_saved(cluster)  # (the hard state's commit index is saved every second)
    victim = cluster[1]
    victim.power_cut()
    mark = 0
    victim.start()
    victim.proc.wait_log(r"RAFT group .*the last stop was not clean", timeout=30, after=mark)
    victim.proc.wait_log(r"RAFT group .*recovered after the unclean stop", timeout=30, after=mark)
    info = asyncio.run(_info(urls))
    assert info["state"]["messages"] == 150, info["state"]
    assert "lost" not in info["cluster"]
    assert "lost committed" not in victim.proc.output


def test_power_cut_of_every_server_is_reported(cluster) -> None:
    urls = _setup(cluster)
    asyncio.run(_publish(urls[0], 50, 100))  # acknowledged, not fsynced anywhere
    _wait_commits_saved(cluster)
    for m in cluster:
        m.power_cut()
    for m in cluster:
        m.proc = ServerProcess("-c", m.conf, env=_new_boot())
    for m in cluster:
        m.proc.wait_log("Server is ready", timeout=30)
    info = asyncio.run(_info(urls))
    assert info["state"]["messages"] < 150, info["state"]  # (lazyfs did cut: acknowledged messages are gone)
    lost = info["cluster"].get("lost")
    assert lost and lost["entries"] >= 1, info["cluster"]
    logs = "\n".join(m.proc.output for m in cluster)
    assert "committed entries" in logs and "are lost" in logs
    assert "lost" in logs and "committed RAFT entries" in logs
    leader = next(m for m in cluster if m.name == info["cluster"]["leader"])
    h = leader.healthz()
    assert h.get("status") != "ok" and "lost committed entries" in json.dumps(h), h


async def _acked(url: str, start: int, n: int) -> dict[int, bytes]:
    """Publish ``n`` messages; the acknowledged sequence -> data."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    out = {}
    for i in range(start, start + n):
        data = b"m%d" % i
        ack = await _publish_one(js, data)
        out[ack.seq] = data
    await nc.close()
    return out


async def _ask(nc, subject: str, body: bytes, tries: int = 5) -> dict:
    """A request asked again when it goes unanswered (5 s), up to ``tries`` times: a request that reaches the
    stream's servers while its leadership moves (an election timeout under load after the restart, a step-down)
    is answered by nobody, in nats-server as here, and a client asks again; so is one whose answer is late, the
    server's event loop held by its store's writes on a loaded LazyFS (a Python FUSE process per server). Only
    the reads of ``_read_all`` had no second try (every other read of these tests polls), which fits the
    timeouts seen in ``test_majority_loss_never_reuses…``'s final read (1 in 3 runs, on older code too). Neither
    cause was seen: not reproduced in 22 runs since at load 4-11. A leader that never answers still fails."""
    for k in range(tries):
        try:
            return json.loads((await nc.request(subject, body, timeout=5)).data)
        except nats.errors.TimeoutError:
            print(f"{subject}: no answer within 5 s (try {k + 1} of {tries})")
    raise AssertionError(f"{subject}: no answer in {tries} tries")


async def _read_all(url: str) -> dict[int, bytes]:
    nc = await nats.connect(url)
    out = {}
    info = await _ask(nc, "$JS.API.STREAM.INFO.P", b"")
    seq = info["state"]["first_seq"]
    last = info["state"]["last_seq"]
    while seq <= last:
        r = await _ask(nc, "$JS.API.STREAM.MSG.GET.P", json.dumps({"seq": seq, "next_by_subj": ">"}).encode())
        if "error" in r:
            break
        import base64
        m = r["message"]
        out[m["seq"]] = base64.b64decode(m["data"])
        seq = m["seq"] + 1
    await nc.close()
    return out


async def _consume(urls: list[str], n: int) -> int:
    """A durable R3 pull consumer C on P (made now if need be) fetches and acknowledges ``n`` messages."""
    nc = await nats.connect(servers=urls)
    js = nc.jetstream()
    sub = await js.pull_subscribe("p.>", durable="C", stream="P")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120
    got = 0
    while got < n:
        try:  # (no message within the timeout, or an acknowledgement unanswered: a consumer leader election under
            # load; a message whose acknowledgement is not confirmed is acknowledged again, or redelivered)
            for m in await sub.fetch(min(50, n - got), timeout=10):
                await m.ack_sync(timeout=10)
                got += 1
        except nats.errors.TimeoutError:
            assert loop.time() < deadline, f"consumed {got} of {n}"
    await nc.close()
    return got


def test_majority_loss_never_reuses_a_sequence_and_the_report_survives_a_restart(cluster) -> None:
    urls = _setup(cluster)
    asyncio.run(_consume(urls, 10))
    for m in cluster:
        m.fs.sync()  # (the consumer exists durably)
    acked = {seq: b"m%d" % (seq - 1) for seq in range(1, 51)}
    acked.update(asyncio.run(_acked(urls[0], 50, 100)))  # acknowledged, not fsynced anywhere
    asyncio.run(_consume(urls, 100))  # the consumer's acknowledgements too
    assert max(acked) == 150
    _wait_commits_saved(cluster)  # (the commit index and the stream's highest sequence are saved every second)
    for m in cluster:
        m.power_cut()
    for m in cluster:
        m.proc = ServerProcess("-c", m.conf, env=_new_boot())
    for m in cluster:
        m.proc.wait_log("Server is ready", timeout=30)
    info = asyncio.run(_info(urls))
    lost = info["cluster"].get("lost")
    assert lost and lost["entries"] >= 1, info["cluster"]
    # the lost range's sequences are skipped: a new message never takes one that was acknowledged before the cut
    for _ in range(100):
        info = asyncio.run(_info(urls))
        if info["state"]["last_seq"] >= 150:
            break
        asyncio.run(asyncio.sleep(0.2))
    assert info["state"]["last_seq"] >= 150, info["state"]
    lost = info["cluster"]["lost"]
    assert lost["seq_mark"] >= 150 and lost["seq_last"] >= 150, lost
    assert lost["seq_first"] <= 150 and lost["msgs"] >= 1, lost
    new = asyncio.run(_acked(urls[0], 1000, 20))
    assert min(new) > 150, sorted(new)
    acked.update(new)
    # a clean restart of every server: the report is still there (stream info, /healthz), the advisory again
    for m in cluster:
        m.proc.send_signal(signal.SIGTERM)
        m.proc.wait(timeout=30)
    for m in cluster:
        m.proc = ServerProcess("-c", m.conf, env=_new_boot())
    for m in cluster:
        m.proc.wait_log("Server is ready", timeout=30)
    info = asyncio.run(_info(urls))
    assert info["cluster"].get("lost", {}).get("seq_last") == lost["seq_last"], (info["cluster"], lost)
    assert info["cluster"]["lost"]["raft_first"] == lost["raft_first"]
    got = asyncio.run(_read_all(urls[0]))
    for seq, data in got.items():
        if seq in acked:
            assert acked[seq] == data, (seq, acked[seq], data)
    for seq, data in new.items():
        assert got.get(seq) == data, (seq, data, got.get(seq))
    leader = next(m for m in cluster if m.name == info["cluster"]["leader"])
    leader.proc.wait_log(r"reported before the restart", timeout=10)
    h = leader.healthz()
    assert h.get("status") != "ok" and "stream lost committed entries" in json.dumps(h), h
    # the consumer's group lost its unsynced acknowledgements too: reported the same way (its info; /healthz
    # names the stream's loss first)
    ci = asyncio.run(_request_ok(urls, "$JS.API.CONSUMER.INFO.P.C"))
    assert ci["cluster"].get("lost", {}).get("entries", 0) >= 1, ci["cluster"]


async def _request_ok(urls: list[str], subject: str, timeout: float = 30.0) -> dict:
    """The API request asked until it answers with a leader (helpers.request_until)."""
    return await request_until(urls, subject, timeout=timeout,
                               want=lambda d: "error" not in d and d.get("cluster", {}).get("leader"))


def test_power_cut_of_every_server_in_the_unsynced_tail_is_reported(cluster) -> None:
    # acknowledged messages past the last commit index any server saved (the commit index is saved every second,
    # and with the reservation of sequences when the stream becomes busy again): no committed entry is known to be
    # missing after the cut, yet acknowledged messages are gone. The cluster says so: stream info's cluster.lost
    # covers them, /healthz is unhealthy, an error in the log; no sequence is given again
    urls = _setup(cluster)
    _wait_released(cluster, 50)  # (idle: the reservation of sequences is released)
    acked = asyncio.run(_acked(urls[0], 50, 1))  # (busy again: reserves sequences, saves the commit index)
    for m in cluster:
        m.fs.sync()  # (everything up to here is durable: the log reaches the saved commit index)
    # acknowledged within the second: not synced, not saved (fewer than the RESERVE_MIN reserved at 51: another
    # reservation would save the commit index past the synced log, and the loss be one of committed entries)
    from rillet.jetstream.cluster.stream_loss import RESERVE_MIN
    acked.update(asyncio.run(_acked(urls[0], 51, RESERVE_MIN - 1)))
    for m in cluster:
        m.power_cut()
    for m in cluster:
        m.proc = ServerProcess("-c", m.conf, env=_new_boot())
    for m in cluster:
        m.proc.wait_log("Server is ready", timeout=30)
    top = max(acked)
    deadline = time.monotonic() + 60
    while True:
        info = asyncio.run(_info(urls))
        if info["state"]["last_seq"] >= top and info["cluster"].get("lost") or time.monotonic() > deadline:
            break
        asyncio.run(asyncio.sleep(0.2))
    lost = info["cluster"].get("lost")
    assert lost and info["state"]["last_seq"] >= top, info
    got = asyncio.run(_read_all(urls[0]))
    gone = [seq for seq in acked if got.get(seq) != acked[seq]]
    assert gone, "lazyfs did not cut: nothing acknowledged is gone"
    assert lost["seq_first"] <= min(gone) and max(gone) <= lost["seq_last"], (lost, gone)
    assert all(got.get(seq) == data for seq, data in acked.items() if seq < lost["seq_first"])
    leader = next(m for m in cluster if m.name == info["cluster"]["leader"])
    h = leader.healthz()
    assert h.get("status") != "ok" and "lost" in json.dumps(h), h
    logs = "\n".join(m.proc.output for m in cluster)
    assert "lost the unsynced tail" in logs or "committed RAFT entries" in logs
    new = asyncio.run(_acked(urls[0], 1000, 5))
    assert min(new) > top, sorted(new)

    # a new leader (one that has not sent it yet) sends the STREAM.DATA_LOST advisory. Lost in the unsynced tail,
    # only the leader that applied the report sent it. (Were the publishes above slower than the second between two
    # saves of the commit index, on a loaded machine, the loss is one of committed entries instead, which every
    # member that found it advised at once: then a follower is restarted cleanly first, a process that has not
    # sent it, with the report kept on its disk)
    restarted = None
    if not lost.get("unsynced_tail"):
        restarted = next(m for m in cluster if m.name != asyncio.run(_info(urls))["cluster"]["leader"])
        restarted.proc.send_signal(signal.SIGTERM)
        restarted.proc.wait(timeout=30)
        restarted.proc = ServerProcess("-c", restarted.conf, env=_new_boot())
        restarted.proc.wait_log("Server is ready", timeout=30)

    async def advisory() -> dict:
        nc = await nats.connect(servers=urls)
        try:
            sub = await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.DATA_LOST.P")
            await nc.flush()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            turn = 0
            while loop.time() < deadline:
                leader = (await _info(urls))["cluster"]["leader"]
                others = [m.name for m in cluster if m.name != leader]
                to = restarted.name if restarted is not None else others[turn % len(others)]
                turn += 1
                if to != leader:
                    try:
                        await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.P", json.dumps(
                            {"placement": {"preferred": to}}).encode(), timeout=5)
                    except Exception:  # (no leader for a moment, or not caught up yet: again)
                        pass
                try:
                    return json.loads((await sub.next_msg(timeout=3)).data)
                except nats.errors.TimeoutError:
                    continue
            raise AssertionError("no STREAM.DATA_LOST advisory")
        finally:
            await nc.close()
    adv = asyncio.run(advisory())
    assert adv["type"] == "io.nats.jetstream.advisory.v1.stream_data_lost" and adv["stream"] == "P", adv
    assert adv["lost"]["seq_first"] == lost["seq_first"], (adv, lost)


def test_power_cut_of_every_server_while_idle_reports_no_loss(cluster) -> None:
    # nothing was acknowledged since everything was synced: a cut of every server loses nothing, skips no
    # sequence and reports nothing (the sequences a busy leader reserves are released when it goes idle)
    urls = _setup(cluster)
    _wait_released(cluster, 50)  # (idle: the reservation released, the saved mark is the last sequence)
    for m in cluster:
        m.fs.sync()
    for m in cluster:
        m.power_cut()
    for m in cluster:
        m.proc = ServerProcess("-c", m.conf, env=_new_boot())
    for m in cluster:
        m.proc.wait_log("Server is ready", timeout=30)
    info = asyncio.run(_info(urls))
    assert info["state"]["last_seq"] == 50 and info["state"]["messages"] == 50, info["state"]
    new = asyncio.run(_acked(urls[0], 50, 3))
    assert sorted(new) == [51, 52, 53], sorted(new)
    info = asyncio.run(_info(urls))
    assert "lost" not in info["cluster"] and "skipped" not in info["cluster"], info["cluster"]


def test_power_cut_of_every_server_right_after_a_few_publishes_reports_a_narrow_range(cluster) -> None:
    # the first publishes after an idle second reserve a few sequences (stream_loss.RESERVE_MIN), not
    # RESERVE_SEQS: a cut of every server right after them reports (and skips) a range that ends a few
    # sequences past the last one acknowledged, and still covers every acknowledged message that is gone
    from rillet.jetstream.cluster.stream_loss import RESERVE_MIN, RESERVE_SEQS
    urls = _setup(cluster)
    _wait_released(cluster, 50)  # (idle: the reservation released, the saved mark is the last sequence)
    for m in cluster:
        m.fs.sync()
    acked = asyncio.run(_acked(urls[0], 50, 3))  # (within the second: in nobody's synced state but the mark)
    top = max(acked)
    for m in cluster:
        m.power_cut()
    for m in cluster:
        m.proc = ServerProcess("-c", m.conf, env=_new_boot())
    for m in cluster:
        m.proc.wait_log("Server is ready", timeout=30)
    deadline = time.monotonic() + 60
    while True:
        info = asyncio.run(_info(urls))
        c = info["cluster"]
        rng = c.get("lost") or c.get("skipped")
        if rng and "seq_last" in rng or time.monotonic() > deadline:
            break
        asyncio.run(asyncio.sleep(0.2))
    assert rng and "seq_last" in rng, info
    assert top <= rng["seq_last"] <= top + RESERVE_MIN < RESERVE_SEQS, (rng, top)
    got = asyncio.run(_read_all(urls[0]))
    gone = [seq for seq in acked if got.get(seq) != acked[seq]]
    assert all(rng["seq_first"] <= seq <= rng["seq_last"] for seq in gone), (rng, gone)
    new = asyncio.run(_acked(urls[0], 1000, 2))
    assert min(new) == rng["seq_last"] + 1, (sorted(new), rng)


def test_a_member_stopped_before_the_loss_learns_it_from_the_leader(cluster) -> None:
    # p3 stops cleanly (nothing to recover); p1 and p2 go on, the stream and its R3 consumer C commit more entries
    # (publishes, acknowledgements) and both lose them at a power cut. p1 and p2 find the loss when they come back
    # (their recovery survey needs p3's answer); p3 found nothing in a survey of its own: it knows the loss as the
    # leader (the commit indexes the others asked it to recover with) or from the leader's LOST entry, for the
    # stream and, now, for the consumer: its log says so, its copy of the consumer's report is on its disk, and
    # consumer info (from whichever member leads) shows cluster.lost
    import glob
    import re
    urls = _setup(cluster)
    asyncio.run(_consume(urls, 10))
    for m in cluster:
        m.fs.sync()
    p1, p2, p3 = cluster
    p3.proc.send_signal(signal.SIGTERM)
    p3.proc.wait(timeout=30)
    two = [p1.url, p2.url]
    asyncio.run(_info(two))
    asyncio.run(_request_ok(two, "$JS.API.CONSUMER.INFO.P.C"))
    asyncio.run(_acked(p1.url, 50, 60))  # acknowledged by p1 and p2, not fsynced
    asyncio.run(_consume(two, 60))
    _wait_commits_saved([p1, p2])  # (the commit indexes are saved every second)
    p1.power_cut()
    p2.power_cut()
    for m in cluster:
        m.proc = ServerProcess("-c", m.conf, env=_new_boot())
    for m in cluster:
        m.proc.wait_log("Server is ready", timeout=30)
    deadline = time.monotonic() + 60
    while True:
        ci = asyncio.run(_request_ok(urls, "$JS.API.CONSUMER.INFO.P.C"))
        if ci["cluster"].get("lost") or time.monotonic() > deadline:
            break
        asyncio.run(asyncio.sleep(0.3))
    lost = ci["cluster"].get("lost")
    assert lost and lost["entries"] >= 1, ci["cluster"]
    said = re.compile(r"consumer '\$G > P > C' lost \d+ committed RAFT entries")
    deadline = time.monotonic() + 30
    while not said.search(p3.proc.output):
        assert time.monotonic() < deadline, "p3 never logged the consumer's loss:\n" + p3.proc.output[-3000:]
        time.sleep(0.2)
    reports = glob.glob(os.path.join(p3.fs.mount, "**", "_raft", "C-*", "lost.json"), recursive=True)
    assert reports, "p3 kept no report of the consumer's loss"
    with open(reports[0]) as f:
        mine = json.load(f)
    assert mine["entries"] >= 1 and mine["raft_first"] <= lost["raft_last"], (mine, lost)
    said = re.compile(r"stream '\$G > P' lost \d+ committed RAFT entries")  # (its own group: in its own time)
    deadline = time.monotonic() + 30
    while not said.search(p3.proc.output):
        assert time.monotonic() < deadline, "p3 never logged the stream's loss:\n" + p3.proc.output[-3000:]
        time.sleep(0.2)
