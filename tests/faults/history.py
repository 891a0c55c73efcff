"""Operation histories (Jepsen's shape): every operation is an ``invoke`` event, then one completion:
``ok`` (it happened, with its result), ``fail`` (it certainly did not happen) or ``info`` (unknown: a
timeout or a lost connection; it may or may not have taken effect, at any time after its invocation).

Events are appended in the order the single event loop sees them, so the index of an event is a total
order consistent with real time (a completion is recorded when the client resumes, which can only widen
an operation's interval, never narrow it).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Event:
    index: int
    process: int
    type: str          # "invoke" | "ok" | "fail" | "info"
    f: str             # "read" | "write" | "cas" | "publish" | ...
    key: Any
    value: Any         # invoke: the argument; ok: the result (read value, ...)
    time: float
    error: str = ""


@dataclass
class Op:
    """One operation folded from its two events (``ret`` is None while pending)."""
    id: int
    process: int
    f: str
    key: Any
    arg: Any
    call: int
    ret: int | None
    type: str          # "ok" | "fail" | "info" | "pending"
    result: Any = None
    error: str = ""


@dataclass
class History:
    events: list[Event] = field(default_factory=list)
    _open: dict[int, Event] = field(default_factory=dict)
    _next_process: int = 0

    def new_process(self) -> int:
        """A fresh process id (a client whose last operation ended ``info`` takes a new one, as in Jepsen:
        the old operation may still be in flight)."""
        self._next_process += 1
        return self._next_process - 1

    def invoke(self, process: int, f: str, key: Any, value: Any) -> Event:
        if process in self._open:
            raise ValueError(f"process {process} invoked {f} with an operation still open")
        e = Event(len(self.events), process, "invoke", f, key, value, time.monotonic())
        self.events.append(e)
        self._open[process] = e
        return e

    def complete(self, process: int, type_: str, value: Any = None, error: str = "") -> Event:
        if type_ not in ("ok", "fail", "info"):
            raise ValueError(f"bad completion type {type_!r}")
        inv = self._open.pop(process)
        e = Event(len(self.events), process, type_, inv.f, inv.key, value, time.monotonic(), error)
        self.events.append(e)
        return e

    def ops(self) -> list[Op]:
        return fold(self.events)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for e in self.events:
            if e.type != "invoke":
                out[f"{e.f}:{e.type}"] = out.get(f"{e.f}:{e.type}", 0) + 1
        return out


def fold(events: list[Event]) -> list[Op]:
    """Pair invocations with completions; an invocation with no completion is ``pending`` (as ``info``)."""
    open_: dict[int, Op] = {}
    out: list[Op] = []
    for e in events:
        if e.type == "invoke":
            if e.process in open_:
                raise ValueError(f"process {e.process} has two open operations (event {e.index})")
            op = Op(len(out), e.process, e.f, e.key, e.value, e.index, None, "pending")
            open_[e.process] = op
            out.append(op)
        else:
            op = open_.pop(e.process, None)
            if op is None:
                raise ValueError(f"completion without invocation at event {e.index}")
            op.ret, op.type, op.result, op.error = e.index, e.type, e.value, e.error
    return out
