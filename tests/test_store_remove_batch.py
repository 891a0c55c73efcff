"""The file store's batched retention removal (``remove_msgs_soon``, issue 23: an MQTT session's acked messages
go as one list) against one ``remove_msg_soon`` per sequence, in both lanes: the same counts, subjects,
messages, removal callbacks, arming, state log and failures, in order, over several blocks and subjects, with
records gathered by write-behind, sequences gone or never stored, lost ones and an index that cannot be read."""
from __future__ import annotations

import os
import random

import pytest

from lanes import COMPILED_ERROR
import rillet.jetstream  # noqa: F401  (registers its lane twins)
from rillet import lane
from rillet.jetstream.store.base import StoreConfig, StoreError

LANES = ["pure", pytest.param("compiled", marks=pytest.mark.skipif(bool(COMPILED_ERROR),
                                                                  reason=f"compiled lane not built: {COMPILED_ERROR}"))]


def _cls(which: str):
    return lane.pure("FileStore") if which == "pure" else lane.compiled("FileStore")


def _log(fs) -> bytes:
    with open(os.path.join(fs.dir, "state.log"), "rb") as f:
        return f.read()


def _view(fs) -> tuple:
    st = fs.state()
    msgs = []
    for s in range(1, st.last_seq + 1):
        m = fs.load_msg(s)
        msgs.append(None if m is None else (m.subject, m.data))
    return (st.msgs, st.bytes, st.first_seq, st.last_seq, fs.subjects_totals(">"), msgs,
            [fs.subject_for_seq(s) for s in range(1, st.last_seq + 1)],
            {k: (v[0], v[2]) for k, v in fs._subjects.items()}, [fs.last_seq_for_subject(s) for s in ("a", "b", "c.d")])


def _make(cls, path: str, n: int, seed: int, gathered: int, subjects: str = "mixed", block_size: int = 600,
          refuse: int = 0, skips: tuple = ()):
    """A store of ``n`` messages (``subjects``: "mixed" at random, "one", "runs" of 40 on each in turn, or a
    function of the sequence; ``skips``: sequences used without a message), its removal callback recording (and
    refusing ``refuse``, as a store error), write-behind on."""
    fs = cls(path, StoreConfig(block_size=block_size))
    rnd = random.Random(seed)
    for i in range(n):
        if i + 1 in skips:
            fs.skip_msg(i + 1, i + 1)
            continue
        subj = subjects(i + 1) if callable(subjects) else {
            "mixed": lambda: rnd.choice(["a", "b", "c.d"]), "one": lambda: "a",
            "runs": lambda: ["a", "b", "c.d"][(i // 40) % 3]}[subjects]()
        fs.store_msg(subj, b"", b"m%d" % i, i + 1)
    events: list = []

    def removed(seq, subj, size):
        events.append(("rm", seq, subj, size))
        if seq == refuse:
            raise StoreError("callback refused")
    fs.register_remove_callback(removed)
    fs.write_behind(armed=lambda: events.append(("armed",)))
    if gathered:
        fs.gather(True)
        for i in range(gathered):
            fs.store_msg("a", b"", b"g%d" % i, n + i + 1)
    return fs, events


def _scenario(seed: int, n: int, gathered: int) -> list[int]:
    rnd = random.Random(seed)
    seqs = list(range(1, n // 2))  # (acks in order, as an MQTT subscriber's)
    seqs += rnd.sample(range(1, n + gathered + 5), 40)  # (and out of order, again, gathered, never stored)
    seqs += list(range(n // 2, n // 2 + 30))
    return seqs


def _compare(tmp_path, cls, n: int, seqs: list[int], lost: list[int], gathered: int = 0, **kw) -> list:
    one, ev1 = _make(cls, str(tmp_path / "one"), n, 5, gathered, **kw)
    many, ev2 = _make(cls, str(tmp_path / "many"), n, 5, gathered, **kw)
    assert (one._wb_off >= 0) == (many._wb_off >= 0) == (gathered > 0)  # (the gathered ones still unwritten)
    for fs in (one, many):
        fs._lost.update(lost)  # (as a record found damaged leaves it: forgotten with a tombstone)
    # the first removal of the pass arms the owner: done alike before (the runs wait for it), and not
    one.remove_msg_soon(seqs[0])
    many.remove_msgs_soon(seqs[:1])
    got1 = []
    for s in seqs[1:]:
        try:
            one.remove_msg_soon(s)
        except StoreError as e:
            got1.append((s, str(e)))
    got2 = [(s, str(e)) for s, e in many.remove_msgs_soon(seqs[1:])]
    assert got1 == got2
    assert ev1 == ev2 and any(e[0] == "rm" for e in ev1)
    assert one._deferred == many._deferred and one._dels_due == many._dels_due
    assert one._wb_off == many._wb_off
    assert _view(one) == _view(many)
    assert [(b.live, bytes(b.scnt), b.first, b.last) for b in one._bl] == \
        [(b.live, bytes(b.scnt), b.first, b.last) for b in many._bl]
    one.flush_writes()
    many.flush_writes()
    assert _log(one) == _log(many)
    assert [os.path.basename(b.path) for b in one._bl] == [os.path.basename(b.path) for b in many._bl]
    one.stop()
    many.stop()
    a, b = cls(str(tmp_path / "one"), StoreConfig()), cls(str(tmp_path / "many"), StoreConfig())
    assert _view(a) == _view(b)
    a.stop()
    b.stop()
    return got1


@pytest.mark.parametrize("which", LANES)
@pytest.mark.parametrize("seed,gathered,lost", [(1, 0, True), (2, 0, False), (3, 6, True), (4, 12, False)])
def test_batched_removal_is_one_removal_at_a_time(tmp_path, which, seed, gathered, lost):
    n = 300
    _compare(tmp_path, _cls(which), n, _scenario(seed, n, gathered), [n // 2 + 3] if lost else [], gathered)


@pytest.mark.parametrize("which", LANES)
@pytest.mark.parametrize("subjects", ["one", "runs", "mixed"])
@pytest.mark.parametrize("block_size", [600, 1 << 20])
def test_batched_removal_of_long_runs(tmp_path, which, subjects, block_size):
    """Acks in order over many blocks or one, past several tombstone writes (every 256), with gaps (a message
    removed before, one never acked), a refusing callback, the subject's last message inside a run."""
    n = 1500
    rnd = random.Random(9)
    seqs = list(range(1, 700)) + list(range(710, 1200)) + rnd.sample(range(1200, n + 1), 100)
    seqs += list(range(1200, 1300)) + [n] + list(range(1300, n))
    seqs.remove(333)
    seqs.insert(100, 900)  # (out of order: removed before its turn)
    _compare(tmp_path, _cls(which), n, seqs, [], subjects=subjects, block_size=block_size, refuse=555)


@pytest.mark.parametrize("which", LANES)
def test_batched_removal_a_failure_fails_that_removal_alone(tmp_path, which, monkeypatch):
    """A block whose index cannot be read: the removals in it fail (each returned), the others go on."""
    cls = _cls(which)
    n = 200
    one, ev1 = _make(cls, str(tmp_path / "one"), n, 7, 0)
    many, ev2 = _make(cls, str(tmp_path / "many"), n, 7, 0)
    bad = one._bl[1].index
    assert bad == many._bl[1].index and len(one._bl) > 3
    first_bad, last_bad = one._bl[1].first, one._bl[1].last
    for fs in (one, many):
        fs._cache.pop(bad, None)
        fs._pinned.pop(bad, None)
        real = fs._load_idx

        def load(blk, real=real):
            if blk.index == bad:
                raise StoreError("index unreadable")
            return real(blk)
        monkeypatch.setattr(fs, "_load_idx", load)
    seqs = list(range(1, n + 1))
    got1 = []
    for s in seqs:
        try:
            one.remove_msg_soon(s)
        except StoreError as e:
            got1.append((s, str(e)))
    got2 = [(s, str(e)) for s, e in many.remove_msgs_soon(seqs)]
    assert got1 == got2
    assert [s for s, _ in got1 if first_bad <= s <= last_bad] == list(range(first_bad, last_bad + 1))
    assert ev1 == ev2
    assert (one.state().msgs, one.state().first_seq) == (many.state().msgs, many.state().first_seq)
    one.flush_writes()
    many.flush_writes()
    assert _log(one) == _log(many)
    one.stop()
    many.stop()


@pytest.mark.parametrize("which", LANES)
def test_batched_removal_run_edges(tmp_path, which):
    """A run that would take the subject's last message while an older one stays (its last is looked for again),
    and one that would end before a sequence without a message (the first sequence's advance looks past it)."""
    cls = _cls(which)
    # 1 "a" never acked, 2 "x" (arms), 3..100 "a", 101.. "b": the run from 3 holds "a"'s last
    _compare(tmp_path / "last", cls, 200, [2] + list(range(3, 101)) + [150], [],
             subjects=lambda q: "a" if q == 1 or 3 <= q <= 100 else ("x" if q == 2 else "b"), block_size=1 << 20)
    # 60 used without a message: the acks 1..59 (a run up to it), then 100
    _compare(tmp_path / "gap", cls, 200, list(range(1, 60)) + [100], [], subjects="one",
             block_size=1 << 20, skips=(60,))
