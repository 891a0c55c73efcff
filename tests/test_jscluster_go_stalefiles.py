"""A Go stream group's replica made again on a restarted Rillet server (rillet.jetstream.cluster.gostream) opens
the files kept for its stream only when they are that stream's: their group, or its creation time (a group
renamed keeps it). Files another stream of the same name left (removed while the server was down, then created
again) are removed first: the new replica starts empty and is caught up by its leader."""
from __future__ import annotations

import time
from types import SimpleNamespace

from rillet.jetstream.cluster.gostream import GoStreamReplica, stale_files
from rillet.raft import gowire as gw


class _Log:
    def __init__(self):
        self.warned = []

    def warn(self, text):
        self.warned.append(text)

    def __getattr__(self, name):
        return lambda *a, **k: None


def _sa(group: str, created: str) -> dict:
    return {"created": created, "stream": {"name": "S", "subjects": ["s"], "storage": "file", "num_replicas": 2},
            "group": {"name": group, "peers": [gw.peer_id(n) for n in ("g0", "r1")]}}


def _replica(tmp_path, sa: dict, log: _Log) -> GoStreamReplica:
    server = SimpleNamespace(system_account=object(), log=log, name="r1", loop=None)
    return GoStreamReplica(server, "A", sa, str(tmp_path))


def test_files_of_an_earlier_stream_of_the_same_name_are_not_opened(tmp_path):
    log = _Log()
    first = _sa("S-R2F-aaaaaaaa", "2026-11-30T10:00:00.1Z")
    rep = _replica(tmp_path, first, log)
    for i in range(5):
        rep.store.store_raw(i + 1, "s", b"", b"old", time.time_ns())
    rep.store.stop()
    assert stale_files(str(tmp_path), "A", first) is None
    # the same stream again (a restart), or its group renamed (its creation time kept): its files
    for sa in (first, _sa("S-R1F-bbbbbbbb", first["created"])):
        rep = _replica(tmp_path, sa, log)
        try:
            assert rep.store.state().msgs == 5 and not log.warned
        finally:
            rep.store.stop()
    # another stream of that name (another group, another creation time): the files are not its own
    other = _sa("S-R2F-cccccccc", "2026-11-30T11:00:00.2Z")
    assert stale_files(str(tmp_path), "A", other) == "group S-R1F-bbbbbbbb, created 2026-11-30T10:00:00.1Z"
    rep = _replica(tmp_path, other, log)
    try:
        assert rep.store.state().msgs == 0 and rep.applied_index == 0
        assert len(log.warned) == 1 and "an earlier stream of that name" in log.warned[0]
    finally:
        rep.store.stop()
    assert stale_files(str(tmp_path), "A", other) is None  # (they are its files now)
