"""The term and vote directories (``<store_dir>/go_meta/<group>``) of the Go stream and consumer groups a Rillet
server followed go once it is no longer a member of the group (rillet.jetstream.cluster.gogroupfiles): at once
when its replica is removed, and, for groups removed while the server was down, once its meta state is current
after a start. The meta group's own stays. Unit tests of the two functions; the live test runs 2 Go servers and a
Rillet one (nats-server binary on PATH)."""
from __future__ import annotations

import os
import shutil

import pytest

from rillet.jetstream.cluster.gogroupfiles import forget_group, prune_groups
from rillet.jetstream.cluster.gometa import TermVote

live = pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")


class _Log:
    def __init__(self):
        self.lines = []

    def __getattr__(self, name):
        return lambda text, *a, **k: self.lines.append((name, text))


def _groups(store_dir) -> list[str]:
    root = os.path.join(str(store_dir), "go_meta")
    return sorted(os.listdir(root)) if os.path.isdir(root) else []


def test_replica_files_of_streams_not_placed_here_are_pruned(tmp_path):
    from rillet.jetstream.cluster.gostreamfiles import prune_streams
    for acc, name in (("A", "S"), ("A", "T"), ("B", "S")):
        os.makedirs(tmp_path / "go_streams" / acc / name / "msgs")
    log = _Log()
    assert prune_streams(str(tmp_path), {("A", "S")}, log) == 2
    assert os.listdir(tmp_path / "go_streams") == ["A"] and os.listdir(tmp_path / "go_streams" / "A") == ["S"]
    assert sum(1 for k, t in log.lines if k == "notice" and "replica files removed" in t) == 2
    assert prune_streams(str(tmp_path / "none"), set(), log) == 0


def test_forget_and_prune_remove_group_directories_never_the_meta_groups(tmp_path):
    for g in ("_meta_", "S-R3F-aaaa", "C-R3F-bbbb", "S-R3F-cccc"):
        TermVote(str(tmp_path / "go_meta" / g)).save(3, "")
    log = _Log()
    assert forget_group(str(tmp_path), "C-R3F-bbbb", log)
    assert _groups(tmp_path) == ["S-R3F-aaaa", "S-R3F-cccc", "_meta_"]
    assert not forget_group(str(tmp_path), "C-R3F-bbbb", log)  # (gone already)
    assert not forget_group(str(tmp_path), "_meta_", log) and "_meta_" in _groups(tmp_path)
    for bad in ("", ".", "..", "../go_meta", "a/b"):
        assert not forget_group(str(tmp_path), bad, log)
    (tmp_path / "go_meta" / "stray.tmp").write_bytes(b"")  # (not a group's directory: left alone)
    assert prune_groups(str(tmp_path), {"S-R3F-cccc"}, log) == 1
    assert _groups(tmp_path) == ["S-R3F-cccc", "_meta_", "stray.tmp"]
    assert any(k == "notice" and "1 group(s)" in t for k, t in log.lines)
    assert prune_groups(str(tmp_path), set(), log) == 1 and _groups(tmp_path) == ["_meta_", "stray.tmp"]
    assert prune_groups(str(tmp_path / "none"), set(), log) == 0


@live
async def test_group_directories_go_with_the_groups(tmp_path):
    """2 Go + 1 Rillet (a follower: ``rillet_go_meta`` only), R3 streams GA, GB and GC and a durable R3 consumer
    of GA: each group's term and vote directory is on r1 once it voted. The consumer deleted: its directory
    goes; GA deleted: its directory goes. r1 stopped, GB deleted while it is down: once r1 is current again
    GB's directory goes, and its replica files (go_streams), GC's and the meta group's stay."""
    import nats
    from helpers import free_port, serve_config
    from test_jscluster_golead_stream import _create
    from test_jscluster_gometa import CAP, _member, _rillet_conf, _until
    rport = free_port()
    gc = CAP.GoCluster(tmp_path, names=("g0", "g1"), extra_routes=[rport])
    gc.start_all()
    conf = _rillet_conf(gc, "r1", rport)
    store = gc.root / "store-r1"
    conns: dict = {}
    logs = []
    try:
        for n in gc.names:
            conns[n] = await nats.connect(gc.url(n))
        g0 = conns["g0"]
        js = conns["g1"].jetstream(timeout=30)
        async with serve_config(conf) as srv:
            m = await _member(srv)
            await CAP._until(lambda: CAP._js_ready(g0), 60, what="the Go meta leader")
            for name in ("GA", "GB", "GC"):
                await _create(g0, name=name, subjects=[f"{name.lower()}.>"], num_replicas=3)
            await js.add_consumer("GA", durable_name="D", ack_policy="explicit", num_replicas=3, timeout=30)
            keys = [("A", "GA"), ("A", "GB"), ("A", "GC"), ("A", "GA", "D")]
            await _until(lambda: all(k in m.replicas for k in keys), 60, what="the replicas on r1")
            group = {k: m.replicas[k].group for k in keys}
            for k in keys:
                await js.publish(f"{k[1].lower()}.x", b"x")  # (an elected leader: r1 voted or heard a term)
            await _until(lambda: all(os.path.exists(store / "go_meta" / g / "tav.idx") for g in group.values()),
                         60, what="each group's term and vote on r1")
            await js.delete_consumer("GA", "D")
            await _until(lambda: group[("A", "GA", "D")] not in _groups(store), 30, what="D's directory removed")
            await js.delete_stream("GA")
            await _until(lambda: group[("A", "GA")] not in _groups(store), 30, what="GA's directory removed")
            assert group[("A", "GB")] in _groups(store) and group[("A", "GC")] in _groups(store)
            logs.append(srv._test_log.getvalue())
        await js.delete_stream("GB")  # (r1 is down)
        assert group[("A", "GB")] in _groups(store) and (store / "go_streams" / "A" / "GB").is_dir()
        async with serve_config(conf) as srv:
            m = await _member(srv)
            await _until(lambda: group[("A", "GB")] not in _groups(store), 60,
                         what="GB's directory removed once r1 is current")
            assert ("A", "GC") in m.replicas and m.replicas[("A", "GC")].group == group[("A", "GC")]
            assert _groups(store) == sorted([group[("A", "GC")], "_meta_"])
            # GB's replica files too (gostreamfiles.prune_streams), GC's kept
            await _until(lambda: not (store / "go_streams" / "A" / "GB").exists(), 30, what="GB's files removed")
            assert sorted(os.listdir(store / "go_streams" / "A")) == ["GC"]
            logs.append(srv._test_log.getvalue())
    finally:
        for c in conns.values():
            if c.is_connected:
                await c.close()
        (tmp_path / "r1.log").write_text("\n".join(logs))
        gc.stop_all()
