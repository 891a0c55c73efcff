"""A damaged RAFT hard state on a replica of an R3 stream (issue 24): the follower's stream group loses both its
``hardstate`` and ``hardstate.copy`` (bits flipped while the server is stopped). Before, the group stopped on that
server for good; now the member comes back recovering, without its term and vote: it grants no vote and does not
campaign until every other voter told it its term (rillet.raft.node ``votes_lost``), is caught up by the leader,
is reported healthy (/healthz) only once it holds what the others acknowledged, and can then lead: every message
read back through it. The helpers are those of the other damaged-files tests."""
from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request

import pytest

from helpers import cluster_members, free_port, start_members
from test_cluster_damaged_files import CFG, M, _after, _flip, _setup, _victim_files


@pytest.fixture
def cluster(tmp_path):
    members = cluster_members(str(tmp_path), "h", "dmghs")
    for m in members:
        m.http = free_port()
        with open(m.conf, "a") as f:
            f.write(f"http: 127.0.0.1:{m.http}\n")
    try:
        start_members(members)
        yield members
    finally:
        for m in members:
            m.close()


def _get(m, path: str):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{m.http}{path}", timeout=5) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        return json.loads(e.read())
    except OSError:
        return None  # (not up yet)


def _watch(m, samples: list, stop: threading.Event) -> None:
    """Until ``stop``: (whether /healthz says ok, then the last sequence of m's own replica of P) every 50 ms."""
    while not stop.wait(0.05):
        h = _get(m, "/healthz")
        if h is None:
            continue
        ok = h.get("status") == "ok"
        j = _get(m, "/jsz?accounts=true&streams=true") or {}
        last = None
        for ad in j.get("account_details") or ():
            for sd in ad.get("stream_detail") or ():
                if sd.get("name") == "P":
                    last = sd.get("state", {}).get("last_seq")
        samples.append((ok, last))


def test_a_damaged_hard_state_and_its_copy_recover_without_a_vote_until_terms_are_known(cluster) -> None:
    victim, others = _setup(cluster)
    files = [p for p in _victim_files(victim, "hardstate*") if os.sep + "S-" in p]
    names = sorted(os.path.basename(p) for p in files)
    assert names == ["hardstate", "hardstate.copy"], files
    for p in files:
        _flip(p, 0.5)
    samples: list = []
    stop = threading.Event()
    t = threading.Thread(target=_watch, args=(victim, samples, stop), daemon=True)
    t.start()
    try:
        # (restarted, led by the victim once caught up, every message read back through it)
        _after(cluster, victim, others, r"damaged hard state \(.*hardstate.*the term and vote are lost\): "
                                        r"recovering; no vote")
    finally:
        stop.set()
        t.join(10)
    top = CFG["n"] + M
    healthy = [s for s in samples if s[0]]
    assert healthy, samples[-5:]
    # (every ok read before the replica's own state: once ok, it held everything acknowledged while it was down)
    assert all(last == top for _, last in healthy), [s for s in samples if s[0] and s[1] != top][:5]
    # the member found its terms again (it led the stream): the marker of the loss is gone, both files whole
    d = os.path.dirname(files[0])
    assert not os.path.exists(os.path.join(d, "hardstate.lost")), os.listdir(d)
    from rillet.raft.wal import _HS_MAGIC, _read_checked  # (reads only: the server runs)
    for p in files:
        assert _read_checked(p, _HS_MAGIC), p  # (raises when a check fails)
