"""``jetstream { meta_compact, meta_compact_size, meta_compact_sync }``: when the meta group's log is snapshotted
and compacted (rillet/jetstream/cluster/meta_compact.py). The rule on its own; a 3-server cluster whose meta
log is compacted after 3 entries (and, later, 400 bytes) where the default would keep them all; the settings
parsed as nats-server parses them (-t, side by side)."""
from __future__ import annotations

import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from rillet.jetstream.cluster.meta_compact import DEFAULT_ENTRIES, MetaCompaction
from jscluster_support import cl, until  # noqa: F401

GO = "nats-server"


def _opts(**x):
    return SimpleNamespace(jetstream=SimpleNamespace(extra=x))


def test_rule():
    m = MetaCompaction()
    o = _opts()
    assert not any(m.due(o, 0, i, 10) for i in range(1, DEFAULT_ENTRIES))
    assert m.due(o, 0, DEFAULT_ENTRIES, 10)
    o = _opts(meta_compact=3)
    m = MetaCompaction()
    assert [m.due(o, 0, i, 10) for i in (1, 2, 3, 4)] == [False, False, False, True]
    assert not m.due(o, 4, 5, 10)  # (compacted at 4: counted again from there)
    o = _opts(meta_compact_size=100)
    m = MetaCompaction()
    assert [m.due(o, 0, i, 40) for i in (1, 2, 3)] == [False, False, True]
    assert not m.due(o, 3, 4, 40)  # (a snapshot from the leader resets the bytes too)
    o = _opts(meta_compact=1000, meta_compact_size=50)  # (either threshold)
    m = MetaCompaction()
    assert [m.due(o, 0, i, 30) for i in (1, 2)] == [False, True]


def _metas(servers):
    return [s.jetstream.cluster.group for s in servers]


async def test_meta_log_compacted_past_threshold(cl):  # noqa: F811
    servers, nc, js = cl
    await js.add_stream(name="A0", subjects=["a0"])
    await until(lambda: all(g.node.applied >= 1 for g in _metas(servers)), what="applied")
    assert all(g.node.offset == 0 for g in _metas(servers))  # (default: 1024 entries)
    for s in servers:  # (read at each entry, as a reload would set it)
        s.opts.jetstream.extra["meta_compact"] = 3
    for i in range(1, 6):
        await js.add_stream(name=f"A{i}", subjects=[f"a{i}"], num_replicas=3 if i % 2 else 1)
    await until(lambda: all(g.node.offset > 0 and g.snapshots_taken >= 1 for g in _metas(servers)),
                timeout=15, what="meta snapshots")
    last = [g.node.offset for g in _metas(servers)]
    for s in servers:
        s.opts.jetstream.extra["meta_compact"] = 0
        s.opts.jetstream.extra["meta_compact_size"] = 400
    for i in range(6, 12):
        await js.add_stream(name=f"A{i}", subjects=[f"a{i}"])
    await until(lambda: all(g.node.offset > o for g, o in zip(_metas(servers), last)), timeout=15,
                what="meta snapshots by size")
    names = [st.config.name for st in await js.streams_info()]
    assert sorted(names) == sorted(f"A{i}" for i in range(12))


def _run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    return r.returncode, r.stdout + r.stderr


def _last(out):
    lines = [ln for ln in out.splitlines() if ln.strip()]
    # (the message without its file:line:col, which nats-server puts at the block for a failed type assertion)
    return re.sub(r"^nats-server: (\S+:\d+:\d+: )?", "", lines[-1]) if lines else ""


@pytest.mark.parametrize("extra", ["meta_compact: 5", "meta_compact: 0", "meta_compact: -1", 'meta_compact: "x"',
                                   'meta_compact_size: "1M"', "meta_compact_size: -3", 'meta_compact_size: "2Q"',
                                   "meta_compact_sync: true", 'meta_compact_sync: "x"'])
def test_parse_like_nats_server(tmp_path, extra):
    conf = tmp_path / "c.conf"
    conf.write_text(f'jetstream {{ store_dir: "{tmp_path / "js"}"\n {extra} }}\n')
    grc, gout = _run([GO, "-t", "-c", str(conf)])
    rrc, rout = _run([sys.executable, "-m", "rillet.server", "-t", "-c", str(conf)])
    assert (grc == 0) == (rrc == 0), (gout, rout)
    if grc == 0:
        assert "is valid" in rout
    else:
        assert _last(rout) == _last(gout), (gout, rout)


def test_async_snapshots_refused(tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text(f'jetstream {{ store_dir: "{tmp_path / "js"}"\n meta_compact_sync: false }}\n')
    assert _run([GO, "-t", "-c", str(conf)])[0] == 0
    rc, out = _run([sys.executable, "-m", "rillet.server", "-t", "-c", str(conf)])
    assert rc != 0 and "meta_compact_sync: false" in out and "Rillet takes its meta snapshots in line" in out
