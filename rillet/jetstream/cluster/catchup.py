"""The server-wide budget of stream catch-up bytes in flight: ``jetstream { max_outstanding_catchup }``.

A follower that missed messages its leader's snapshot covers fetches them from the leader in chunks
(streams.StreamReplica._catch_up asks, the leader's _on_sync answers). nats-server bounds the bytes of catch-up
messages its server has sent and not yet heard acknowledged, over all the streams it is catching up at once
(default 64M); Rillet does the same with its chunks: an answer is charged to this budget when sent and freed when
the same follower asks for its next chunk, says it is done, or after ``HOLD`` seconds (it asks again then). An
answer is cut to the room left (at least one message, as nats-server lets one message take it past its limit);
with no room left, a request waits in line until an answer in flight is freed.
"""
from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any, Callable, Optional

DEFAULT_MAX_CATCHUP = 64 << 20  # nats-server's default for max_outstanding_catchup (0 or unset)
HOLD = 2.0  # seconds an answer stays charged without news from its follower (its request timer: SYNC_TIMEOUT)


class CatchupBudget:
    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int = 0, log: Any = None) -> None:
        self.loop = loop
        self.limit = limit if limit > 0 else DEFAULT_MAX_CATCHUP
        self.log = log
        self.out = 0  # bytes of answers in flight
        self.peak = 0  # the most ever in flight (monitoring, tests)
        self.answers = 0
        self._held: dict[Any, tuple[int, asyncio.TimerHandle]] = {}
        self._waiting: OrderedDict[Any, Callable[[int], None]] = OrderedDict()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def room(self) -> int:
        return max(self.limit - self.out, 0)

    def request(self, key: Any, answer: Callable[[int], None]) -> None:
        """A follower (``key``: its catch-up inbox) asks for its next chunk: what its previous one held is freed,
        and ``answer(room)`` is called now when there is room and nobody waits before it, else once there is.
        A request from a follower already waiting replaces its older one."""
        self.release(key)
        if self.out < self.limit and not self._waiting:
            answer(self.limit - self.out)
            return
        self._waiting.pop(key, None)
        self._waiting[key] = answer

    def charge(self, key: Any, size: int) -> None:
        """An answer of ``size`` bytes went to ``key``: held until released (or HOLD seconds)."""
        if size <= 0:
            return
        self._free(key)
        self.out += size
        self.answers += 1
        if self.out > self.peak:
            self.peak = self.out
        self._held[key] = (size, self.loop.call_later(HOLD, self.release, key))

    def release(self, key: Any) -> None:
        """What ``key``'s last answer held is free again (it asked again, finished, or timed out)."""
        if self._free(key):
            self._drain()

    def forget(self, key: Any) -> None:
        """``key`` no longer waits (its stream's leader here stopped leading)."""
        self._waiting.pop(key, None)

    def _free(self, key: Any) -> bool:
        h = self._held.pop(key, None)
        if h is None:
            return False
        h[1].cancel()
        self.out -= h[0]
        return True

    def _drain(self) -> None:
        while self._waiting and self.out < self.limit:
            key, answer = self._waiting.popitem(last=False)
            try:
                answer(self.limit - self.out)
            except Exception as e:  # (one stream's answer failing must not hold the others in line: logged)
                if self.log is None:
                    raise
                self.log.error(f"JetStream cluster: a catch-up answer failed: {e!r}")

    def close(self) -> None:
        for _, t in self._held.values():
            t.cancel()
        self._held.clear()
        self._waiting.clear()
        self.out = 0


def budget_limit(opts: Any) -> int:
    """The configured limit (``jetstream { max_outstanding_catchup }``), 0 = the default."""
    v = opts.jetstream.extra.get("max_outstanding_catchup", 0)
    return v if isinstance(v, int) and v > 0 else 0


def make_budget(server: Any, loop: asyncio.AbstractEventLoop, log: Optional[Any] = None) -> CatchupBudget:
    return CatchupBudget(loop, budget_limit(server.opts), log)
