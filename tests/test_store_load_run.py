"""``load_run``: a sequential reader's batch (a consumer's run of deliveries) from both stores and the compiled file
store twin: the same messages ``load_msg`` gives, stopping at gaps, block ends, the byte bound and unreadable
records."""
from __future__ import annotations

import pytest

from rillet import lane
from rillet.jetstream.store.base import ErrStoreCorrupt, StoreConfig
from rillet.jetstream.store.filestore import FileStore
from rillet.jetstream.store.memstore import MemStore

import rillet.jetstream  # noqa: F401  (registers the file store's twin)


def _compiled_file_store():
    try:
        return lane.compiled("FileStore")
    except ImportError as e:
        pytest.skip(f"compiled lane not built: {e}")


@pytest.fixture(params=["memory", "file", "file-compiled"])
def mk(request, tmp_path):
    made = []

    def make(**kw):
        if request.param == "memory":
            s = MemStore(StoreConfig(storage="memory", **kw))
        else:
            cls = FileStore if request.param == "file" else _compiled_file_store()
            s = cls(str(tmp_path / f"s{len(made)}"), StoreConfig(storage="file", **kw))
        made.append(s)
        return s

    make.kind = request.param
    yield make
    for s in made:
        s.stop()


def _fill(s, n: int) -> None:
    for i in range(n):
        s.store_msg(f"r.{i % 3}", b"NATS/1.0\r\nK: v\r\n\r\n" if i % 4 == 0 else b"", b"m%d" % i)


def test_run_is_what_load_msg_gives(mk):
    s = mk()
    _fill(s, 30)
    s.read_begin()
    try:
        run = s.load_run(4, 10, 1 << 20)
    finally:
        s.read_done()
    assert [m.seq for m in run] == list(range(4, 14))
    assert run == [s.load_msg(q) for q in range(4, 14)]
    assert [m.seq for m in s.load_run(28, 10, 1 << 20)] == [28, 29, 30]  # the stream's end
    assert s.load_run(31, 10, 1 << 20) == [] and s.load_run(0, 5, 1 << 20) == []


def test_run_stops_at_a_gap(mk):
    s = mk()
    _fill(s, 20)
    s.remove_msg(7)
    assert [m.seq for m in s.load_run(3, 10, 1 << 20)] == [3, 4, 5, 6]
    assert s.load_run(7, 10, 1 << 20) == []  # (load_msg says None; the reader moves on itself)
    assert [m.seq for m in s.load_run(8, 3, 1 << 20)] == [8, 9, 10]


def test_run_byte_bound_takes_the_first_always(mk):
    s = mk()
    _fill(s, 20)
    assert [m.seq for m in s.load_run(2, 10, 0)] == [2]
    some = s.load_run(2, 10, 5 if mk.kind == "memory" else 60)  # (memory: payload bytes; file: records)
    assert 1 < len(some) < 10 and [m.seq for m in some] == list(range(2, 2 + len(some)))


def test_runs_cover_blocks(mk):
    if mk.kind == "memory":
        pytest.skip("one index, no blocks")
    s = mk(block_size=300)  # a few messages a block
    _fill(s, 40)
    got, seq, sizes = [], 1, []
    while seq <= 40:
        run = s.load_run(seq, 100, 1 << 20)
        assert run, seq
        sizes.append(len(run))
        got += run
        seq = run[-1].seq + 1
    assert got == [s.load_msg(q) for q in range(1, 41)]
    assert len(sizes) > 3 and max(sizes) < 40  # (each run within one block)


def test_run_stops_before_an_unreadable_message(mk, monkeypatch):
    if mk.kind == "memory":
        pytest.skip("nothing to read from a file")
    s = mk()
    _fill(s, 12)
    real = type(s)._read_msg

    def read(self, blk, x, slot):
        if x.base + slot == 6:
            raise ErrStoreCorrupt("bad record", seq=6)
        return real(self, blk, x, slot)

    monkeypatch.setattr(type(s), "_read_msg", read)
    assert [m.seq for m in s.load_run(2, 10, 1 << 20)] == [2, 3, 4, 5]
    assert s.load_run(6, 10, 1 << 20) == []
    with pytest.raises(ErrStoreCorrupt):
        s.load_msg(6)


def test_run_on_one_subject_stops_at_another(mk):
    """With ``subject`` (a consumer with one literal filter): the leading messages on that subject, none read
    past the first on another one; [] when the message at ``seq`` is on another subject."""
    s = mk()
    for i in range(12):
        s.store_msg("a" if i % 6 < 4 else "b", b"", b"m%d" % i)  # a a a a b b a a a a b b
    assert [m.seq for m in s.load_run(1, 10, 1 << 20, "a")] == [1, 2, 3, 4]
    assert [m.seq for m in s.load_run(3, 10, 1 << 20, "a")] == [3, 4]
    assert s.load_run(5, 10, 1 << 20, "a") == []
    assert [m.seq for m in s.load_run(5, 10, 1 << 20, "b")] == [5, 6]
    assert [m.subject for m in s.load_run(7, 10, 1 << 20, "a")] == ["a"] * 4
    assert [m.seq for m in s.load_run(7, 3, 1 << 20, None)] == [7, 8, 9]
