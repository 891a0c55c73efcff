"""The file store's compiled twin (rillet._speedups._cstore.FileStore, chosen through rillet.lane) against the
pure-Python FileStore, which stays the reference: the same operations on both, in two directories, must give
the same answers, the same errors, the same state and the same bytes on disk, and each lane must read what the
other wrote."""
from __future__ import annotations

import errno
import os
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lanes import COMPILED_ERROR
import rillet.jetstream  # noqa: F401  (registers its lane twins)
from rillet import lane
from rillet.jetstream.store.base import ErrStoreClosed, ErrStoreFull, StoreConfig
from rillet.jetstream.store import filestore as fsmod

pytestmark = pytest.mark.skipif(bool(COMPILED_ERROR), reason=f"compiled lane not built: {COMPILED_ERROR}")

PURE = lane.pure("FileStore")


def _compiled():
    return lane.compiled("FileStore")


def test_twin_takes_its_fast_paths():
    """The twin's shortcuts are on here (else it is correct but no faster: everything goes to the pure code)."""
    from rillet._speedups import _cstore
    assert _cstore.fast_paths() == {"direct_columns": True, "instance_dict": True}
    assert issubclass(_compiled(), PURE)
    assert lane.FileStore is (PURE if lane.LANE == "pure" else _compiled())


SUBJECTS = ["a", "a.b", "kv.key.1", "kv.key.2", "ünï.cødé", "sur\udcffrogate", "x" * 300]

op = st.one_of(
    st.tuples(st.just("store"), st.sampled_from(SUBJECTS), st.binary(max_size=40), st.binary(max_size=300),
              st.sampled_from([0, 0, 0, 0.5, -1])),
    st.tuples(st.just("raw_gap"), st.sampled_from(SUBJECTS), st.integers(1, 6000)),
    st.tuples(st.just("remove"), st.integers(1, 60)),
    st.tuples(st.just("purge_subject"), st.sampled_from(SUBJECTS)),
    st.tuples(st.just("compact"), st.integers(1, 60)),
    st.tuples(st.just("skip")),
)


def _apply(fs, o, clock):
    """One operation; its answer or its error's type and text."""
    try:
        kind = o[0]
        if kind == "store":
            _, subject, hdr, data, ttl = o
            clock[0] += 1000
            return fs.store_msg(subject, hdr, data, clock[0], ttl)
        if kind == "raw_gap":
            clock[0] += 1000
            return fs.store_raw(fs.state().last_seq + o[2], o[1], b"", b"raw", clock[0])
        if kind == "remove":
            return fs.remove_msg(o[1])
        if kind == "purge_subject":
            return fs.purge(o[1])
        if kind == "compact":
            return fs.compact(o[1])
        if kind == "skip":
            return fs.skip_msg()
    except Exception as e:  # the answer compared is the error itself: both lanes must raise the same
        return ("error", type(e).__name__, str(e))
    raise AssertionError(o)


def _image(fs):
    s = fs.state()
    msgs = []
    for seq in range(s.first_seq, s.last_seq + 1):
        m = fs.load_msg(seq)
        msgs.append(None if m is None else (m.seq, m.subject, m.hdr, m.data, m.ts))
    return ((s.msgs, s.bytes, s.first_seq, s.last_seq, s.first_ts, s.last_ts, s.num_deleted, s.num_subjects,
             list(s.deleted), list(s.lost)), msgs, fs.subjects_state(">"))


def _files(d):
    out = {}
    for root, _, names in os.walk(d):
        for n in names:
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, d)] = f.read()
    return out


CONFIGS = [
    dict(block_size=512),
    dict(block_size=4096, max_msgs_per_subject=2),
    dict(max_msgs=10, allow_msg_ttl=True),
    dict(compression="s2", block_size=2048),
    dict(max_bytes=3000, discard="new"),
    dict(max_msg_size=100, max_msgs_per_subject=3, discard="new", discard_new_per_subject=True),
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cfg=st.sampled_from(CONFIGS), ops=st.lists(op, max_size=40))
def test_same_operations_same_store(tmp_path_factory, cfg, ops):
    base = tmp_path_factory.mktemp("lanes")
    dp, dc = str(base / "pure"), str(base / "compiled")
    p, c = PURE(dp, StoreConfig(**cfg)), _compiled()(dc, StoreConfig(**cfg))
    cp, cc = [10**18], [10**18]
    # the store's own clock (skipped sequences, the state log's last timestamp) is the same on both sides
    with mock.patch("time.time_ns", lambda: cp[0]):
        for o in ops:
            assert _apply(p, o, cp) == _apply(c, o, cc), o
            cp[0] = cc[0]
        assert _image(p) == _image(c)
        p.stop()
        c.stop()
    assert _files(dp) == _files(dc)
    # each lane reads the other's files
    a, b = _compiled()(dp, StoreConfig(**cfg)), PURE(dc, StoreConfig(**cfg))
    assert _image(a) == _image(b)
    a.stop()
    b.stop()


@pytest.mark.parametrize("cls", ["pure", "compiled"])
def test_full_disk_same_error_and_cut_back(tmp_path, cls):
    """A real failing write (the block's descriptor pointed at /dev/full): ErrStoreFull with the OS's text, the
    block cut back (here the cut itself fails and is logged), the store unchanged, and working again once the
    disk is back: the twin's C write takes the pure code's failure path."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    logged = []
    fs = (PURE if cls == "pure" else _compiled())(str(tmp_path / "s"), StoreConfig(),
                                                  log=lambda lvl, text: logged.append((lvl, text)))
    fs.store_msg("foo", b"", b"one", 1)
    fs.store_msg("foo", b"", b"two", 2)
    before = _image(fs)
    fd = fs._afd
    saved = os.dup(fd)
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, fd)
    os.close(full)
    try:
        with pytest.raises(ErrStoreFull, match=os.strerror(errno.ENOSPC)):
            fs.store_msg("foo", b"", b"three", 3)
    finally:
        os.dup2(saved, fd)
        os.close(saved)
    assert _image(fs) == before
    assert any(lvl == "error" and "cannot cut off a failed write" in text for lvl, text in logged)
    assert fs.store_msg("foo", b"", b"four", 4) == (3, 4)
    assert fs.load_msg(3).data == b"four"
    fs.stop()


def test_replaced_write_all_is_honoured(tmp_path, monkeypatch):
    """Tests fake a failing disk by replacing filestore._write_all; the twin then takes the pure path."""
    fs = _compiled()(str(tmp_path / "s"), StoreConfig())
    fs.store_msg("foo", b"", b"one", 1)

    def failing(fd, bufs, off, total):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fsmod, "_write_all", failing)
    with pytest.raises(ErrStoreFull, match="No space left"):
        fs.store_msg("foo", b"", b"two", 2)
    monkeypatch.undo()
    assert fs.store_msg("foo", b"", b"two", 2) == (2, 2)
    fs.stop()


def test_column_with_exported_buffer_refuses_in_both_lanes(tmp_path):
    """A column someone holds a memoryview of cannot grow: both lanes raise the array's BufferError (the twin
    does not grow it under the view)."""
    results = []
    for cls in (PURE, _compiled()):
        fs = cls(str(tmp_path / cls.__module__), StoreConfig())
        fs.store_msg("foo", b"", b"one", 1)
        view = memoryview(fs._aidx.offs)
        try:
            fs.store_msg("foo", b"", b"two", 2)
            results.append("stored")
        except BufferError as e:
            results.append(("BufferError", str(e)))
        finally:
            view.release()
        results.append(len(fs._aidx.offs))
        fs.stop()
    assert results[0][0] == "BufferError" and results[:2] == results[2:]


def test_store_twin_is_not_stale():
    """Built in place, the extension is newer than its .pyx (else the tests would run an old twin: rebuild with
    `python setup.py build_ext --inplace`)."""
    from pathlib import Path
    from rillet._speedups import _cstore
    so = Path(_cstore.__file__)
    pyx = so.with_name("_cstore.pyx")
    if pyx.exists():
        assert so.stat().st_mtime >= pyx.stat().st_mtime, f"{so.name} is older than {pyx.name}: rebuild"


def test_closed_store_refuses_in_both_lanes(tmp_path):
    for cls in (PURE, _compiled()):
        fs = cls(str(tmp_path / cls.__module__), StoreConfig())
        fs.store_msg("foo", b"", b"one", 1)
        fs.stop()
        with pytest.raises(ErrStoreClosed):
            fs.store_msg("foo", b"", b"two", 2)


def _totals_outcome(fn, x):
    try:
        return ("ok", fn(x))
    except Exception as e:
        return ("error", type(e).__name__)


@settings(max_examples=400, deadline=None)
@given(n=st.integers(0, 40), nsubj=st.integers(0, 6), data=st.data())
def test_index_totals_same_in_both_lanes(n, nsubj, data):
    """The pass over a block's columns for its index file (the compiled one a C loop): the same totals, or the
    same error for columns the store never makes (a subject id past the subjects, short columns)."""
    from array import array
    from rillet._speedups import _cstore
    from rillet.jetstream.store._fsindex import BlockIndex, index_totals
    x = BlockIndex(1)
    x.subjs = [f"s{i}" for i in range(nsubj)]
    sids = st.integers(0, nsubj + 1 if data.draw(st.booleans()) else max(nsubj - 1, 0))
    x.offs = array("Q", data.draw(st.lists(st.sampled_from([0, 8, 100, 2**40]), min_size=n, max_size=n)))
    short = data.draw(st.integers(0, 3)) == 0
    m = max(n - 1, 0) if short else n
    x.sid = array("I", data.draw(st.lists(sids, min_size=m, max_size=m)))
    x.sz = array("I", data.draw(st.lists(st.integers(0, 2**32 - 1), min_size=n, max_size=n)))
    x.rlen = array("I", data.draw(st.lists(st.integers(0, 2**32 - 1), min_size=n, max_size=n)))
    x.ts = array("q", data.draw(st.lists(st.integers(-2**63, 2**63 - 1), min_size=n, max_size=n)))
    if data.draw(st.booleans()):
        k = data.draw(st.integers(0, n + 1))
        x.ttl = array("q", data.draw(st.lists(st.sampled_from([0, -1, 5, 2**62, 2**63 - 1]), min_size=k, max_size=k)))
    assert _totals_outcome(index_totals, x) == _totals_outcome(_cstore.index_totals, x)


# ---- write-behind (FileStore.write_behind): gathered plain appends, one write, taken back when it fails ----

WB_CONFIGS = [dict(block_size=512), dict(block_size=1 << 20), dict(compression="s2", block_size=2048),
              dict(max_msgs=10, allow_msg_ttl=True), dict(block_size=4096, max_msgs_per_subject=2)]

plain = st.tuples(st.just("store"), st.sampled_from(SUBJECTS[:3]),
                  st.sampled_from([b"", b"", b"NATS/1.0\r\nNmqtt-Pub:1\r\n\r\n"]),  # (no Nats-* header: gathered)
                  st.binary(max_size=120), st.just(0))
wb_op = st.one_of(op, plain, plain, plain, st.tuples(st.just("flush")), st.tuples(st.just("load"), st.integers(1, 60)),
                  st.tuples(st.just("gather"), st.booleans()), st.tuples(st.just("soon"), st.integers(1, 60)))


def _apply_wb(fs, o, clock):
    if o[0] == "flush":
        fs.flush_writes()
        return None
    if o[0] == "gather":
        if hasattr(fs, "gather") and fs._wb_buf is not None:
            fs.gather(o[1])
        return None
    if o[0] == "soon":  # (a retention removal: its tombstone waits for flush_writes; the reference writes it)
        try:
            return fs.remove_msg_soon(o[1])
        except Exception as e:
            return ("error", type(e).__name__, str(e))
    if o[0] == "load":
        try:
            m = fs.load_msg(o[1])
        except Exception as e:
            return ("error", type(e).__name__, str(e))
        return None if m is None else (m.seq, m.subject, m.hdr, m.data, m.ts)
    return _apply(fs, o, clock)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cfg=st.sampled_from(WB_CONFIGS), ops=st.lists(wb_op, max_size=50))
def test_write_behind_same_as_writing_at_once(tmp_path_factory, cfg, ops):
    """Both lanes with write-behind on against the pure store writing at once: the same answers and state
    after every operation, the same bytes on disk once written (the owner flushes before its pass ends)."""
    base = tmp_path_factory.mktemp("wb")
    ref = PURE(str(base / "ref"), StoreConfig(**cfg))
    stores = [PURE(str(base / "pure"), StoreConfig(**cfg)), _compiled()(str(base / "compiled"), StoreConfig(**cfg))]
    armed = []
    for s in stores:
        s.write_behind(armed=lambda s=s: armed.append(s))
    clocks = [[10**18] for _ in range(3)]
    with mock.patch("time.time_ns", lambda: clocks[0][0]):
        for o in ops:
            want = _apply_wb(ref, o, clocks[0])
            for s, c in zip(stores, clocks[1:]):
                assert _apply_wb(s, o, c) == want, o
                assert (s.state().msgs, s.state().last_seq, s.state().bytes) == (
                    ref.state().msgs, ref.state().last_seq, ref.state().bytes)
        # gathered bytes sit only in the active block, past what the file holds
        for s in stores:
            s.flush_writes()
            assert s._wb_off == -1 and not s._wb
        assert all(_image(s) == _image(ref) for s in stores)
        ref.stop()
        for s in stores:
            s.stop()
    files = _files(str(base / "ref"))
    assert _files(str(base / "pure")) == files and _files(str(base / "compiled")) == files


@pytest.mark.parametrize("cls", ["pure", "compiled"])
def test_write_behind_gathers_then_one_write(tmp_path, cls):
    fs = (PURE if cls == "pure" else _compiled())(str(tmp_path / "s"), StoreConfig())
    armed = []
    fs.write_behind(armed=lambda: armed.append(1))
    fs.store_msg("foo", b"", b"one", 1)  # a first record (a new block, a new subject): written at once
    assert fs._wb_off == -1
    size = os.path.getsize(fs._active.path)
    for i in range(5):
        fs.store_msg("foo", b"", b"m%d" % i, 2 + i)
    assert armed == [1] and os.path.getsize(fs._active.path) == size
    assert fs.state().msgs == 6 and fs.state().last_seq == 6
    hdr = b"NATS/1.0\r\nNmqtt-Pub:1\r\n\r\n"
    fs.store_msg("foo", hdr, b"hdr", 10)  # a header the stream does not act on: gathered too
    assert fs._wb_off >= 0 and os.path.getsize(fs._active.path) == size
    fs.store_msg("foo", b"NATS/1.0\r\nNats-Msg-Id: a\r\n\r\n", b"id", 11)  # a Nats-* header: what is
    assert fs._wb_off == -1 and os.path.getsize(fs._active.path) == fs._active.size  # gathered is written, then it
    fs.store_msg("foo", b"", b"x", 12)
    assert fs.load_msg(9).data == b"x"  # a read of the active block writes first
    assert fs._wb_off == -1
    fs.store_msg("foo", hdr, b"y", 13)
    fs.stop()  # writes it
    fs = (PURE if cls == "pure" else _compiled())(str(tmp_path / "s"), StoreConfig())
    assert fs.state().last_seq == 10 and fs.load_msg(10).data == b"y" and fs.load_msg(10).hdr == hdr
    m = fs.load_msg(7)
    assert (m.hdr, m.data) == (hdr, b"hdr")
    ref = PURE(str(tmp_path / "ref"), StoreConfig())  # the same messages written at once: the same state
    for i in range(1, 11):
        m = fs.load_msg(i)
        ref.store_msg(m.subject, m.hdr, m.data, m.ts)
    assert ref.state() == fs.state()
    ref.stop()
    fs.stop()
    blocks = [_files(str(tmp_path / d / "msgs")) for d in ("ref", "s")]
    assert blocks[0] and blocks[0] == blocks[1]


def _image_plain(fs):
    s = fs.state()
    return ((s.msgs, s.bytes, s.first_seq, s.last_seq, s.first_ts, s.last_ts, s.num_deleted, s.num_subjects),
            [(m.seq, m.subject, m.data, m.ts) for m in map(fs.load_msg, range(s.first_seq, s.last_seq + 1))])


@pytest.mark.parametrize("cls", ["pure", "compiled"])
def test_write_behind_failed_write_takes_them_back(tmp_path, cls):
    """The gathered write fails (the block's descriptor pointed at /dev/full): the records are cut off and taken
    out of the index and counts, ``failed`` names their sequences, ErrStoreFull is raised, and the next
    message takes the first of them; a reopened store agrees."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    cls_ = PURE if cls == "pure" else _compiled()
    fs = cls_(str(tmp_path / "s"), StoreConfig(), log=lambda lvl, text: None)
    failed = []
    fs.write_behind(failed=lambda a, b, e: failed.append((a, b, str(e))))
    fs.store_msg("foo", b"", b"one", 1)
    fs.store_msg("bar", b"", b"two", 2)
    fs.store_msg("foo", b"", b"three", 3)  # gathered
    fs.flush_writes()
    before = _image_plain(fs)  # (not the per-subject query: it turns on position lists, which write at once)
    fs.store_msg("foo", b"", b"four", 4)
    fs.store_msg("bar", b"", b"five", 5)
    fs.store_msg("foo", b"", b"six", 6)
    assert fs._wb_off > 0 and fs.state().msgs == 6
    fd = fs._afd
    saved = os.dup(fd)
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, fd)
    os.close(full)
    try:
        with pytest.raises(ErrStoreFull, match=os.strerror(errno.ENOSPC)):
            fs.flush_writes()
    finally:
        os.dup2(saved, fd)
        os.close(saved)
    assert failed and failed[0][:2] == (4, 6)
    assert _image_plain(fs) == before
    assert fs.subjects_state(">") == {"foo": (2, 1, 3), "bar": (1, 2, 2)}
    assert fs.store_msg("bar", b"", b"again", 7) == (4, 7)
    fs.flush_writes()
    after = _image(fs)
    fs.stop()
    fs = cls_(str(tmp_path / "s"), StoreConfig())
    assert _image(fs) == after
    fs.stop()



def test_read_pass_same_messages_and_errors(tmp_path):
    """A sequential read pass (read_begin .. read_done: records come from the bytes read ahead, decoded by the
    twin) gives the same messages in both lanes, and the same error for a record whose bytes were damaged."""
    outs = []
    for cls in (PURE, _compiled()):
        d = str(tmp_path / cls.__module__)
        fs = cls(d, StoreConfig(block_size=8192), log=lambda lvl, text: None)
        for i in range(300):
            fs.store_msg(SUBJECTS[i % 4], b"NATS/1.0\r\nK: %d\r\n\r\n" % i if i % 3 == 0 else b"", b"v" * (i % 50), 10 + i)
        loc = fs._record_location(120)
        fs.stop()
        with open(loc[1], "r+b") as f:  # one payload byte of seq 120 changed: its CRC fails
            f.seek(loc[2] + loc[3] - 6)
            b = f.read(1)
            f.seek(loc[2] + loc[3] - 6)
            f.write(bytes([b[0] ^ 0xFF]))
        fs = cls(d, StoreConfig(block_size=8192), log=lambda lvl, text: None)
        got = []
        fs.read_begin()
        for seq in range(1, 302):
            try:
                m = fs.load_msg(seq)
                got.append(None if m is None else (m.seq, m.subject, m.hdr, m.data, m.ts))
            except Exception as e:
                got.append(("error", type(e).__name__, str(e)))
        fs.read_done()
        fs.stop()
        outs.append(got)
    assert outs[0] == outs[1]
    assert outs[0][119][0] == "error" and outs[0][118][0] == 119 and outs[0][299][0] == 300


def test_single_reads_same_messages_errors_and_state(tmp_path):
    """Reads outside a read pass (a direct get, a MSG.GET: one pread of the record, decoded by the twin) give the
    same messages, errors and read state (``_rc_next``) in both lanes, in any order, records larger than the
    twin's stack buffer included; a damaged record is the pure code's (the same error, then lost); a replaced
    ``os.pread`` (how tests count reads) is honoured."""
    import random
    outs = []
    for cls in (PURE, _compiled()):
        d = str(tmp_path / cls.__module__)
        fs = cls(d, StoreConfig(block_size=16384), log=lambda lvl, text: None)
        for i in range(300):
            hdr = b"NATS/1.0\r\nK: %d\r\n\r\n" % i if i % 3 == 0 else b""
            fs.store_msg(SUBJECTS[i % len(SUBJECTS)], hdr, b"v" * (i % 50 if i % 7 else 700 + i), 10 + i)
        fs.remove_msg(40)
        loc = fs._record_location(120)
        fs.stop()
        with open(loc[1], "r+b") as f:  # one payload byte of seq 120 changed: its CRC fails
            f.seek(loc[2] + loc[3] - 6)
            b = f.read(1)
            f.seek(loc[2] + loc[3] - 6)
            f.write(bytes([b[0] ^ 0xFF]))
        fs = cls(d, StoreConfig(block_size=16384), log=lambda lvl, text: None)
        order = list(range(0, 303)) + random.Random(7).sample(range(1, 301), 300) + [120, 121, 122]
        got = []
        for seq in order:
            try:
                m = fs.load_msg(seq)
                got.append(None if m is None else (m.seq, m.subject, m.hdr, m.data, m.ts))
            except Exception as e:
                got.append(("error", type(e).__name__, str(e)))
            got.append(("next", fs._rc_next, fs._rc is None))
        reads = []
        real = os.pread
        os.pread = lambda *a: reads.append(a) or real(*a)
        try:
            got.append((fs.load_msg(5).data, fs.load_msg(6).data))
        finally:
            os.pread = real
        got.append(len(reads))
        fs.stop()
        outs.append(got)
    assert outs[0] == outs[1]
    out = outs[0]
    assert out[2 * 120][0] == "error" and out[2 * 119][0] == 119 and out[2 * 300][0] == 300
    assert out[2 * 40] is None and out[-1] == 2
