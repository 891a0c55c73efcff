"""The JetStream API request queue: bounded, as nats-server's, and worked off a little per loop pass.

nats-server hands every ``$JS.API`` request to a pool of goroutines through two queues, one for info
requests (account info, stream/consumer names, lists and infos), which it serves only when the other is
empty, and one for everything else. When a push finds ``request_queue_limit`` (``info_queue_limit``)
requests or more waiting (10,000 by default), the whole queue is dropped without answers, a warning is
logged and an ``api_limit_reached`` advisory goes to the system account.

Rillet has one event loop, so the queue is also what keeps API work from holding it: a request is served
at once while both queues are empty and this loop pass has not yet spent ``BUDGET`` seconds on API work;
otherwise it waits in the queue, which a callback works off ``BUDGET`` seconds at a time, one loop pass
after another, with every other connection served in between.

nats-server's workers drain the queue on other cores while the client's read loop fills it, so one client's
burst of 30,000 requests is answered in full there. Here both share the loop, and a connection's reading
could fill the queue far faster than it is worked off; so a client connection whose request finds the queue
holding HOLD_AT of its limit or more has its reading held after the slice being parsed until the queues are
down to RELEASE_AT: it gets the share of the loop that nats-server's parallel workers give it. The limit and
the drop still apply to whatever arrives regardless (several clients at once, routes, a small limit).
"""
from __future__ import annotations

import os
import base64
import time
from collections import deque
from typing import Any, Callable

from rillet.gocompat.gotime import format_time

BUDGET = 0.0005  # seconds of API work per loop pass (as a burst of reads: rillet.server.client BACKLOG_BUDGET)
DEFAULT_LIMIT = 10_000  # nats-server JSDefaultRequestQueueLimit
HOLD_AT = 0.25  # of the limit: a client connection whose request finds this many waiting is held
RELEASE_AT = 0.125  # of the limit: held connections read again once both queues are down to this
LIMIT_ADVISORY = "$JS.EVENT.ADVISORY.API.LIMIT_REACHED"
LIMIT_TYPE = "io.nats.jetstream.advisory.v1.api_limit_reached"
# the endpoints nats-server serves from its (lower priority) info queue
INFO_KEYS = frozenset({"INFO", "STREAM.NAMES", "STREAM.LIST", "STREAM.INFO", "CONSUMER.NAMES", "CONSUMER.LIST",
                       "CONSUMER.INFO"})


def is_info(subject: bytes) -> bool:
    """Whether ``$JS[.<domain>].API.<endpoint>...`` is one of nats-server's info endpoints."""
    toks = subject.split(b".")
    rest = toks[2:] if toks[1:2] == [b"API"] else toks[3:]
    if not rest:
        return False
    key = rest[0].decode("ascii", "replace")
    if key == "INFO":
        return len(rest) == 1
    return len(rest) >= 2 and f"{key}.{rest[1].decode('ascii', 'replace')}" in INFO_KEYS


class ApiQueue:
    def __init__(self, js: Any, limit: int = DEFAULT_LIMIT, info_limit: int = 0) -> None:
        self.js = js
        self.limit = limit if limit > 0 else DEFAULT_LIMIT
        self.info_limit = info_limit if info_limit > 0 else self.limit
        self.queue: deque[tuple[Callable, tuple]] = deque()
        self.info: deque[tuple[Callable, tuple]] = deque()
        self._used = 0.0  # API seconds spent in this loop pass
        self._reset_scheduled = False
        self._work_scheduled = False
        self.dropped = 0
        self._held = 0  # >0: a request is being served in steps; everything else waits behind it
        self._last_warn = 0.0
        self._holding: list[Any] = []  # client connections whose reading is held (HOLD_AT)

    def __len__(self) -> int:
        return len(self.queue) + len(self.info)

    def submit(self, info: bool, fn: Callable, args: tuple, client: Any = None) -> None:
        """Serve ``fn(*args)`` now when nothing waits and this pass has budget left, else queue it.
        ``client``: the connection the request came from (held past HOLD_AT when it is a client's)."""
        if not self.queue and not self.info and self._used < BUDGET and not self._held:
            t0 = time.monotonic()
            try:
                fn(*args)
            finally:
                self._spent(time.monotonic() - t0)
            return
        q, limit = (self.info, self.info_limit) if info else (self.queue, self.limit)
        q.append((fn, args))
        if len(q) >= limit:
            self._drop(q, "JetStream API info queue" if info else "JetStream API queue")
        elif len(q) >= limit * HOLD_AT and client is not None and client not in self._holding \
                and getattr(client, "transport", None) is not None and hasattr(client, "hold_intake"):
            client.hold_intake()
            self._holding.append(client)
        self._schedule_work()

    def hold(self) -> None:
        """A request goes on in steps (an asyncio task): the others wait in the queue until ``release``."""
        self._held += 1

    def release(self) -> None:
        self._held -= 1
        if self.queue or self.info:
            self._schedule_work()

    def _spent(self, dt: float) -> None:
        self._used += dt
        if not self._reset_scheduled:
            self._reset_scheduled = True
            self.js.loop.call_soon(self._reset)

    def _reset(self) -> None:
        self._reset_scheduled = False
        self._used = 0.0

    def _schedule_work(self) -> None:
        if not self._work_scheduled:
            self._work_scheduled = True
            self.js.loop.call_soon(self._work)

    def _work(self) -> None:
        """Serve queued requests (the main queue first, info requests when it is empty) for BUDGET seconds."""
        self._work_scheduled = False
        if self._held:
            return  # (release() schedules the work again)
        start = time.monotonic()
        q, info = self.queue, self.info
        try:
            while (q or info) and not self._held:
                fn, args = q.popleft() if q else info.popleft()
                fn(*args)
                if time.monotonic() - start >= BUDGET:
                    break
        finally:
            if (q or info) and not self._held:
                self._schedule_work()
            if self._holding:
                self._release_held()
            self.js.server.schedule_flush()

    def _release_held(self) -> None:
        if len(self.queue) <= self.limit * RELEASE_AT and len(self.info) <= self.info_limit * RELEASE_AT:
            held, self._holding = self._holding, []
            for c in held:
                c.release_intake()

    def _drop(self, q: deque, name: str) -> None:
        n = len(q)
        q.clear()
        self.dropped += n
        if self._holding:
            self._release_held()
        js = self.js
        now = time.monotonic()
        if now - self._last_warn >= 1.0:  # (rate limited, as nats-server's rateLimitFormatWarnf)
            self._last_warn = now
            js.log.warn(f"{name} limit reached, dropping {n} requests")
        srv = js.server
        sysacc = srv.sysacc
        if not sysacc.interest(LIMIT_ADVISORY):
            return
        adv: dict[str, Any] = {"type": LIMIT_TYPE, "id": _id(), "timestamp": format_time(time.time_ns()),
                               "server": srv.name}
        if js.domain:
            adv["domain"] = js.domain
        adv["dropped"] = n
        sysacc.send(LIMIT_ADVISORY, adv)


def _id() -> str:
    return base64.b32encode(os.urandom(15)).decode().rstrip("=")[:22]
