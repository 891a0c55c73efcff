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


def _make(cls, path: str, n: int, seed: int, gathered: int):
    fs = cls(path, StoreConfig(block_size=600))  # (a few dozen records a block)
    rnd = random.Random(seed)
    for i in range(n):
        fs.store_msg(rnd.choice(["a", "b", "c.d"]), b"", b"m%d" % i, i + 1)
    events: list = []
    fs.register_remove_callback(lambda seq, subj, size: events.append(("rm", seq, subj, size)))
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


@pytest.mark.parametrize("which", LANES)
@pytest.mark.parametrize("seed,gathered", [(1, 0), (2, 0), (3, 6), (4, 12)])
def test_batched_removal_is_one_removal_at_a_time(tmp_path, which, seed, gathered):
    cls = _cls(which)
    n = 300
    one, ev1 = _make(cls, str(tmp_path / "one"), n, seed, gathered)
    many, ev2 = _make(cls, str(tmp_path / "many"), n, seed, gathered)
    seqs = _scenario(seed, n, gathered)
    assert (one._wb_off >= 0) == (many._wb_off >= 0) == (gathered > 0)  # (the gathered ones still unwritten)
    for fs in (one, many):
        fs._lost.add(n // 2 + 3)  # (as a record found damaged leaves it: forgotten with a tombstone)
    got1 = []
    for s in seqs:
        try:
            one.remove_msg_soon(s)
        except StoreError as e:
            got1.append((s, type(e)))
    got2 = [(s, type(e)) for s, e in many.remove_msgs_soon(seqs)]
    assert got1 == got2 == []
    assert ev1 == ev2 and any(e[0] == "rm" for e in ev1)
    assert one._deferred == many._deferred and one._dels_due == many._dels_due
    assert one._wb_off == many._wb_off
    assert _view(one) == _view(many)
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
