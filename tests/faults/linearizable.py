"""A linearizability checker for compare-and-set registers (our own code).

The search is Wing & Gong's, with Lowe's just-in-time refinement and memoization (as in Lowe, "Testing
for linearizability", 2017, and the Porcupine checker): walk the history's call/return entries in real
time order; at a call, try to linearize that operation now (the model must accept it and the pair
(set of linearized operations, register state) must be new); at a return whose operation was not
linearized yet, undo the last choice and try the next call instead. The history is linearizable when
every operation that completed ``ok`` has been linearized.

Operations on a register (one key; keys are independent, so a multi-key history is checked key by key):

* ``read``  -> result (None: the key does not exist)
* ``write`` value
* ``cas``   (expected, new): sets ``new`` when the register holds ``expected`` (None: absent, i.e. create)

``fail`` operations certainly did not happen and are dropped. ``info`` (and pending) operations may or may
not have happened: they get no return entry (they may take effect at any time after their invocation, or
never); an indeterminate read tells nothing and is dropped, an indeterminate cas linearized where the
register does not hold ``expected`` is the cas that failed, and leaves it as it was.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from .history import Op

NOT_CHECKED = "unknown"


@dataclass
class Result:
    valid: bool | str          # True, False, or "unknown" (search budget exhausted)
    key: Any = None
    ops: int = 0
    steps: int = 0
    # when invalid: the ok operation whose return came with no way to linearize it, and the longest
    # linearized prefix found (operation ids, in linearization order)
    blocked: Op | None = None
    best_prefix: list[int] | None = None

    def describe(self) -> str:
        if self.valid is True:
            return f"key {self.key!r}: linearizable ({self.ops} ops, {self.steps} steps)"
        if self.valid == NOT_CHECKED:
            return f"key {self.key!r}: search budget exhausted after {self.steps} steps ({self.ops} ops)"
        b = self.blocked
        what = f"op {b.id} p{b.process} {b.f} {b.arg!r} -> {b.result!r}" if b else "?"
        return (f"key {self.key!r}: NOT linearizable ({self.ops} ops): no linearization reaches the return of "
                f"{what}; longest linearized prefix {len(self.best_prefix or [])} ops")


def step(state: Any, op: Op) -> tuple[bool, Any]:
    """The CAS register model: (accepted?, next state)."""
    if op.f == "read":
        return state == op.result, state
    if op.f == "write":
        return True, op.arg
    if op.f == "cas":
        expected, new = op.arg
        if op.type == "ok":
            return (True, new) if state == expected else (False, state)
        # indeterminate: succeeds if it can, else it is the cas that failed
        return True, (new if state == expected else state)
    raise ValueError(f"unknown register operation {op.f!r}")


def check_register(ops: Iterable[Op], init: Any = None, key: Any = None, max_steps: int = 2_000_000) -> Result:
    """Check one register's history (``ops`` from :func:`history.fold`, all on one key)."""
    kept = [op for op in ops
            if op.type == "ok" or (op.type in ("info", "pending") and op.f != "read")]
    # entries: (time, is_return, op index); a return sorts before a call at the same time (cannot happen
    # with event indexes, which are unique)
    ents: list[tuple[int, int, int]] = []
    for k, op in enumerate(kept):
        ents.append((op.call, 1, k))
        if op.type == "ok":
            assert op.ret is not None
            ents.append((op.ret, 0, k))
    ents.sort()
    n = len(ents)
    # doubly linked list over entry slots 1..n, 0 is the head sentinel
    nxt = list(range(1, n + 2))
    prv = list(range(-1, n))
    is_call = [False] + [e[1] == 1 for e in ents]
    opk = [-1] + [e[2] for e in ents]
    ret_slot = [-1] * len(kept)     # entry slot of each op's return (-1: none)
    call_slot = [-1] * len(kept)
    for s in range(1, n + 1):
        if is_call[s]:
            call_slot[opk[s]] = s
        else:
            ret_slot[opk[s]] = s
    END = n + 1

    def lift(s: int) -> None:
        nxt[prv[s]] = nxt[s]
        if nxt[s] != END:
            prv[nxt[s]] = prv[s]

    def unlift(s: int) -> None:
        nxt[prv[s]] = s
        if nxt[s] != END:
            prv[nxt[s]] = s

    remaining_ok = sum(1 for op in kept if op.type == "ok")
    state = init
    linearized = 0
    cache: set[tuple[int, Any]] = {(0, init)}
    stack: list[tuple[int, Any]] = []   # (call slot, state before)
    best: list[int] = []
    blocked: Op | None = None
    steps = 0
    s = nxt[0]
    while True:
        if remaining_ok == 0:
            return Result(True, key, len(kept), steps)
        steps += 1
        if steps > max_steps:
            return Result(NOT_CHECKED, key, len(kept), steps)
        if s != END and is_call[s]:
            k = opk[s]
            ok, new_state = step(state, kept[k])
            if ok:
                lin2 = linearized | (1 << k)
                if (lin2, new_state) not in cache:
                    cache.add((lin2, new_state))
                    stack.append((s, state))
                    state, linearized = new_state, lin2
                    lift(s)
                    r = ret_slot[k]
                    if r >= 0:
                        lift(r)
                        remaining_ok -= 1
                    if len(stack) > len(best):
                        best = [opk[c] for c, _ in stack]
                    s = nxt[0]
                    continue
            s = nxt[s]
            continue
        # a return entry (or the end): its operation could not be linearized before it; backtrack
        if s != END and (blocked is None or len(stack) >= len(best)):
            blocked = kept[opk[s]]
        if not stack:
            return Result(False, key, len(kept), steps, blocked, [kept[k].id for k in best])
        c, state = stack.pop()
        k = opk[c]
        linearized &= ~(1 << k)
        r = ret_slot[k]
        if r >= 0:
            unlift(r)
            remaining_ok += 1
        unlift(c)
        s = nxt[c]


def check_registers(ops: Iterable[Op], init: Any = None, max_steps: int = 2_000_000) -> list[Result]:
    """Check a multi-key history key by key (linearizability is local: the whole is linearizable iff
    every key's sub-history is)."""
    by_key: dict[Any, list[Op]] = {}
    for op in ops:
        by_key.setdefault(op.key, []).append(op)
    return [check_register(v, init, k, max_steps) for k, v in sorted(by_key.items(), key=lambda kv: str(kv[0]))]
