"""The pure parts of the JetStream fault harness (tests/faults/, scripts/js_faults.py): the CAS-register
linearizability checker fed known linearizable and known non-linearizable histories (hand-written and
generated), the queue checker, and the seeded nemesis plan. The harness itself runs from .ci/run /
by hand (it needs root for network namespaces and ~2 minutes)."""
from __future__ import annotations

import random

import pytest

from faults.history import History, fold
from faults.linearizable import NOT_CHECKED, check_register, check_registers
from faults.nemesis import KINDS, make_plan
from faults.workloads import PubRecord, check_queue


class H:
    """A tiny history builder: ``h.call(p, f, arg)`` / ``h.ok(p, result)`` / ``h.fail(p)`` / ``h.info(p)``."""

    def __init__(self, key: str = "k") -> None:
        self.h = History()
        self.key = key

    def call(self, p: int, f: str, arg=None) -> "H":
        self.h.invoke(p, f, self.key, arg)
        return self

    def ok(self, p: int, result=None) -> "H":
        self.h.complete(p, "ok", result)
        return self

    def fail(self, p: int) -> "H":
        self.h.complete(p, "fail")
        return self

    def info(self, p: int) -> "H":
        self.h.complete(p, "info")
        return self

    def check(self, **kw):
        return check_register(self.h.ops(), **kw)


# ---- hand-written histories ---------------------------------------------------------------------------------

def test_sequential_register_is_linearizable():
    h = H().call(0, "read").ok(0, None).call(0, "write", 1).ok(0).call(1, "read").ok(1, 1)
    h.call(1, "cas", (1, 2)).ok(1).call(0, "read").ok(0, 2)
    assert h.check().valid is True


def test_concurrent_read_may_see_old_or_new():
    for seen in (0, 1):
        h = H().call(0, "write", 0).ok(0)
        h.call(0, "write", 1).call(1, "read").ok(1, seen).ok(0)
        assert h.check().valid is True, seen


def test_stale_read_after_acknowledged_write_is_not_linearizable():
    h = H().call(0, "write", 1).ok(0).call(0, "write", 2).ok(0).call(1, "read").ok(1, 1)
    r = h.check()
    assert r.valid is False
    assert r.blocked is not None and r.blocked.f == "read" and r.blocked.result == 1
    assert "NOT linearizable" in r.describe()


def test_read_of_a_value_never_written_is_not_linearizable():
    h = H().call(0, "write", 1).ok(0).call(1, "read").ok(1, 7)
    assert h.check().valid is False


def test_two_cas_from_one_value_cannot_both_succeed():
    h = H().call(0, "write", 1).ok(0)
    h.call(1, "cas", (1, 2)).call(2, "cas", (1, 3)).ok(1).ok(2)
    assert h.check().valid is False
    # one of them failing is fine
    h = H().call(0, "write", 1).ok(0)
    h.call(1, "cas", (1, 2)).call(2, "cas", (1, 3)).ok(1).fail(2).call(0, "read").ok(0, 2)
    assert h.check().valid is True


def test_create_is_cas_from_absent():
    h = H().call(0, "cas", (None, 5)).ok(0).call(1, "cas", (None, 6)).ok(1)
    assert h.check().valid is False
    assert H().call(0, "cas", (None, 5)).ok(0).call(1, "read").ok(1, 5).check().valid is True


def test_failed_write_must_not_take_effect():
    h = H().call(0, "write", 1).ok(0).call(0, "write", 2).fail(0).call(1, "read").ok(1, 2)
    assert h.check().valid is False


def test_indeterminate_write_may_take_effect_later_or_never():
    # the info write shows up after a later acknowledged write and a read
    h = H().call(0, "write", 1).info(0).call(1, "write", 2).ok(1).call(1, "read").ok(1, 2)
    h.call(1, "read").ok(1, 1)
    assert h.check().valid is True
    # ... or never
    h = H().call(0, "write", 1).info(0).call(1, "read").ok(1, None)
    assert h.check().valid is True
    # but not before it was invoked
    h = H().call(1, "read").ok(1, 1).call(0, "write", 1).info(0)
    assert h.check().valid is False


def test_indeterminate_cas_only_where_expected_holds():
    # cas(1->2) unknown; the register never held 1, so a read of 2 is impossible
    h = H().call(0, "write", 3).ok(0).call(1, "cas", (1, 2)).info(1).call(0, "read").ok(0, 2)
    assert h.check().valid is False
    h = H().call(0, "write", 1).ok(0).call(1, "cas", (1, 2)).info(1).call(0, "read").ok(0, 2)
    assert h.check().valid is True


def test_lost_acknowledged_write_seen_by_final_read():
    h = H().call(0, "write", 1).ok(0).call(0, "cas", (1, 2)).ok(0).call(1, "read").ok(1, 1)
    assert h.check().valid is False


def test_keys_checked_independently():
    h = History()
    a, b = h.new_process(), h.new_process()
    h.invoke(a, "write", "x", 1); h.complete(a, "ok")
    h.invoke(b, "write", "y", 1); h.complete(b, "ok")
    h.invoke(a, "read", "x", None); h.complete(a, "ok", 1)
    h.invoke(b, "read", "y", None); h.complete(b, "ok", None)   # y lost its write
    res = {r.key: r.valid for r in check_registers(h.ops())}
    assert res == {"x": True, "y": False}


def test_history_rejects_two_open_operations_of_one_process():
    h = History()
    h.invoke(0, "read", "k", None)
    with pytest.raises(ValueError):
        h.invoke(0, "read", "k", None)


def test_pending_operations_fold_as_pending():
    h = History()
    h.invoke(0, "write", "k", 1)
    (op,) = fold(h.events)
    assert op.type == "pending" and op.ret is None
    assert check_register([op]).valid is True


# ---- generated histories ------------------------------------------------------------------------------------

def _simulate(seed: int, procs: int = 4, n_ops: int = 120, p_info: float = 0.1):
    """Concurrent clients of a real atomic register: each operation takes effect at one instant between its
    invocation and its completion (or, for an info op, maybe never). Returns the History."""
    rng = random.Random(seed)
    hist = History()
    state = None
    value = 0
    pids = [hist.new_process() for _ in range(procs)]
    phase: dict[int, tuple] = {}     # process -> (f, arg, applied?, result)
    done = 0
    while done < n_ops or phase:
        p = rng.randrange(procs)
        pid = pids[p]
        if pid not in phase:
            if done >= n_ops:
                continue
            r = rng.random()
            if r < 0.4:
                f, arg = "read", None
            elif r < 0.7:
                value += 1
                f, arg = "write", value
            else:
                value += 1
                f, arg = "cas", (rng.choice([state, state, value - 3]), value)
            hist.invoke(pid, f, "k", arg)
            phase[pid] = (f, arg, False, None)
            done += 1
            continue
        f, arg, applied, result = phase[pid]
        if not applied:
            # the instant it takes effect
            if f == "read":
                result = state
            elif f == "write":
                state = arg
            else:
                result = state == arg[0]
                if result:
                    state = arg[1]
            phase[pid] = (f, arg, True, result)
            continue
        del phase[pid]
        if rng.random() < p_info:
            hist.complete(pid, "info")
            pids[p] = hist.new_process()
        elif f == "read":
            hist.complete(pid, "ok", result)
        elif f == "cas" and not result:
            hist.complete(pid, "fail")
        else:
            hist.complete(pid, "ok")
    return hist


@pytest.mark.parametrize("seed", range(20))
def test_generated_linearizable_histories_pass(seed):
    r = check_register(_simulate(seed).ops())
    assert r.valid is True, r.describe()


@pytest.mark.parametrize("seed", range(20))
def test_generated_histories_with_a_corrupted_read_fail(seed):
    hist = _simulate(seed, p_info=0.0)
    # a read returning a value no one ever wrote
    reads = [e for e in hist.events if e.type == "ok" and e.f == "read"]
    reads[len(reads) // 2].value = 10_000 + seed
    assert check_register(hist.ops()).valid is False


@pytest.mark.parametrize("seed", range(10))
def test_generated_histories_with_a_lost_write_fail(seed):
    """A final read, after everything, that sees an early acknowledged write although a later one (invoked
    after the early one returned) was acknowledged too: the later write was lost."""
    hist = _simulate(seed, p_info=0.0, procs=3)
    ops = [o for o in hist.ops() if o.type == "ok" and o.f == "write"]
    early = ops[0]
    assert any(o.call > early.ret for o in ops[1:])
    p = hist.new_process()
    hist.invoke(p, "read", "k", None)
    hist.complete(p, "ok", early.arg)
    assert check_register(hist.ops()).valid is False


def test_search_budget_gives_unknown_not_a_verdict():
    hist = _simulate(3, procs=6, n_ops=200, p_info=0.3)
    r = check_register(hist.ops(), max_steps=5)
    assert r.valid == NOT_CHECKED


# ---- the queue checker --------------------------------------------------------------------------------------

def _rec(v: str, t: str, seq: int = 0) -> PubRecord:
    return PubRecord(v, 0, 0.0, t, 0.0, seq)


def test_queue_check_clean():
    recs = {"a": _rec("a", "ok", 1), "b": _rec("b", "info"), "c": _rec("c", "fail"), "d": _rec("d", "ok", 3)}
    r = check_queue(recs, [(1, "a"), (2, "b"), (3, "d")], {"a", "b", "d"})
    assert r.ok, r.lines()
    assert (r.attempted, r.acked, r.failed, r.indeterminate, r.indeterminate_present) == (4, 2, 1, 1, 1)


def test_queue_check_finds_each_kind_of_error():
    recs = {"a": _rec("a", "ok", 1), "b": _rec("b", "ok", 2), "c": _rec("c", "fail"), "d": _rec("d", "ok", 9),
            "e": _rec("e", "ok", 5)}
    stream = [(1, "a"), (2, "c"), (3, "a"), (4, "zz"), (5, "e"), (9, "x")]
    r = check_queue(recs, stream, {"a"})
    assert not r.ok
    assert r.lost == ["b", "d"]
    assert r.duplicated == {"a": [1, 3]}
    assert sorted(r.unexpected) == ["x", "zz"]
    assert r.failed_present == ["c"]
    assert sorted(r.not_consumed) == ["b", "d", "e"]
    assert r.seq_mismatch == []
    assert r.seq_reused == {}
    recs["a"].seq = 4
    assert check_queue(recs, stream, {"a"}).seq_mismatch == ["a@4=zz"]
    recs["e"].seq = 4  # (two acknowledgements of one sequence: a lost range given again)
    assert check_queue(recs, stream, {"a"}).seq_reused == {4: ["a", "e"]}


# ---- the nemesis plan ---------------------------------------------------------------------------------------

def test_plan_is_seeded_and_quick_covers_every_kind():
    modes = list(KINDS)
    assert [str(f) for f in make_plan(5, modes, 30)] == [str(f) for f in make_plan(5, modes, 30)]
    assert [str(f) for f in make_plan(5, modes, 30)] != [str(f) for f in make_plan(6, modes, 30)]
    quick = make_plan(5, modes, 0, quick=True)
    assert sorted(f.kind for f in quick) == sorted(k for m in modes for k in KINDS[m])
    assert [f.mode for f in quick] == [m for m in modes for _ in KINDS[m]]
    for f in make_plan(9, ["kill"], 60):
        assert f.kind in KINDS["kill"] and len(set(f.targets)) == 2 and 1.0 <= f.down <= 6.0
    assert sum(f.down + f.gap for f in make_plan(9, ["pause"], 60)) >= 60


def test_plan_refuses_unknown_mode():
    with pytest.raises(ValueError, match="unknown nemesis mode 'flood'"):
        make_plan(1, ["kill", "flood"], 10)


def test_queue_consumer_counts_redeliveries_by_arrival_order():
    # deliveries and ack confirmations are numbered as the connection reads them; a delivery read before its
    # value's ack confirmation was sent before it (a late one nats.py keeps for the next fetch), not a
    # broken promise; one read after it is
    import asyncio

    from faults.workloads import QueueWorkload

    class Q:
        def __init__(self):
            self.items = []

        def put_nowait(self, m):
            self.items.append(m)

    class M:
        def __init__(self, subject=""):
            self.subject = subject

    async def run():
        q = QueueWorkload(lambda i: [])
        dq, aq = Q(), Q()
        q._stamp(dq)
        q._stamp(aq, q._ack_reply)
        fut = asyncio.get_running_loop().create_future()
        q._ack_waiters["_INBOX.a.1"] = fut
        d1, d2, d3 = M(), M(), M()
        dq.put_nowait(d1)                   # 1: first delivery of v
        dq.put_nowait(d2)                   # 2: a redelivery sent before the ack was confirmed
        aq.put_nowait(M("_INBOX.a.1"))      # 3: the confirmation (routed to the waiting ack, not queued)
        dq.put_nowait(d3)                   # 4: delivered again after the confirmation
        assert [m.rx for m in dq.items] == [1, 2, 4] and aq.items == []
        r = await fut
        q.acked.add("v")
        q._ack_rx["v"] = r.rx
        assert q.note_delivery("v", d2.rx) == "early"
        assert q.note_delivery("v", d3.rx) == "broken"
        assert q.note_delivery("w", 5) == "new"
        assert (q.deliveries, q.seen_after_ack, q.redelivered_after_ack) == (3, 2, 1)
    asyncio.run(run())


def _limit_workload():
    from faults.kvlimit import PAD, KVLimitWorkload
    w = KVLimitWorkload(lambda i: [], 32768)
    vals = {n: f"{n}:" + "x" * PAD for n in range(1, 11)}
    w.sent = {v: f"k{n:06d}" for n, v in vals.items()}
    w.acked = {n: vals[n] for n in range(1, 10)}  # (put 10 unknown: may or may not be stored)
    return w, vals


def test_kv_limit_check_passes_a_replica_that_evicted_only_its_oldest():
    w, vals = _limit_workload()
    assert w.check("n0", [(n, vals[n]) for n in range(4, 11)]) == []   # 1-3 evicted; 10 stored though unknown
    assert w.check("n1", [(n, vals[n]) for n in range(5, 10)]) == []
    assert w.summary().replicas["n0"][:2] == (7, 4)


def test_kv_limit_check_fails_a_short_replica_and_wrong_values():
    w, vals = _limit_workload()
    short = w.check("n2", [(n, vals[n]) for n in range(2, 7)])          # lacks 7-9, acknowledged
    assert short and "lacks 3 acknowledged puts" in short[0]
    assert w.check("n0", [])                                              # lost everything
    wrong = w.check("n1", [(5, vals[5]), (6, vals[7]), (7, vals[7]), (8, vals[8]), (9, vals[9])])
    assert any("wrong or unsent" in f for f in wrong)                    # seq 6 holds put 7's value
    w.refused_values.add(vals[10])
    assert any("refused" in f for f in w.check("n1", [(n, vals[n]) for n in range(5, 11)]))
    w.sent.pop(vals[10])
    assert any("never sent" in f for f in w.check("n1", [(n, vals[n]) for n in range(5, 11)]))


def test_quorum_outage_counts_acks_while_two_are_down_and_time_back():
    from types import SimpleNamespace

    from faults.runner import Run
    run = Run.__new__(Run)
    run.nemesis = SimpleNamespace(timeline=[(10.0, 13.0, "kill-two n1 n0 for 2.8s"),
                                            (20.0, 22.0, "kill-leader n2 for 2.0s")])
    recs = {"a": PubRecord("a", 0, 9.9, "ok", 10.1), "b": PubRecord("b", 0, 11.0, "fail", 11.0),
            "c": PubRecord("c", 0, 12.0, "ok", 13.6), "d": PubRecord("d", 0, 13.7, "ok", 13.8),
            "e": PubRecord("e", 0, 20.5, "ok", 21.0)}
    q = SimpleNamespace(records=recs)
    (line, failure), = run.quorum_outages(q)   # (kill-leader keeps a quorum: not counted)
    assert "0 publishes acknowledged" in line and "0.60s after the restart" in line and failure == ""
    recs["x"] = PubRecord("x", 0, 11.5, "ok", 12.5)   # acknowledged with two of three servers down
    (line, failure), = run.quorum_outages(q)
    assert failure == "1 publishes acknowledged during kill-two n1 n0 for 2.8s"
