"""The server-wide bound on client output waiting to be written (``max_pending_total``).

nats-server bounds each client connection's pending output (``max_pending``: past it the connection is cut as
a slow consumer) but not their sum, so N subscribers that stop reading can hold N x max_pending of the
server's memory (64 MiB each by default). Rillet adds the total bound: once the client connections' pending
output together passes ``max_pending_total`` (by default 16 x max_pending, 1 GiB with the defaults; -1: no
bound, as nats-server), the connection with the most output waiting is cut as nats-server cuts one past
max_pending (closed as "Slow Consumer (Pending Bytes)", no -ERR, counted in /varz slow_consumers), then the
next fullest, until the sum is back under the bound. The log line says which bound was passed.

Only connections whose transport has stopped taking writes (asyncio's ``pause_writing``: more than its high
water mark, 64 KiB, buffered) are followed; each of the others holds less than that mark, a bound of its own.
The figure kept is each followed connection's buffer as last written, a sum that can only run ahead of the
real one (the buffers drain unseen), so it is counted again exactly, over the followed connections only,
before anyone is cut; and counted again only once the figure has grown by SLACK of the bound since the last
count (a sum that stays just under the bound would otherwise be counted at every write): the bound is held
within that much.
"""
from __future__ import annotations

from typing import Any

DEFAULT_FACTOR = 16  # max_pending_total's default: this many times max_pending
SLACK = 1 / 64  # of the bound: growth of the kept figure between two exact counts


def total_limit(opts: Any) -> int:
    """The bound in effect (0: none)."""
    v = getattr(opts, "max_pending_total", 0)
    if v < 0:
        return 0
    return v or DEFAULT_FACTOR * opts.max_pending


def validate(opts: Any) -> None:
    """A bound set below max_pending is refused at load (one connection alone could pass it)."""
    v = getattr(opts, "max_pending_total", 0)
    if 0 < v < opts.max_pending:
        raise ValueError(f"max_pending_total ({v}) cannot be lower than max_pending ({opts.max_pending})")


class PendingTotal:
    """The sum of the followed client connections' pending output, and the cut when it passes the bound."""

    __slots__ = ("server", "sizes", "total", "cut", "counted")

    def __init__(self, server: Any) -> None:
        self.server = server
        self.sizes: dict[Any, int] = {}  # connection -> its write buffer when last written to
        self.total = 0
        self.cut = 0  # connections cut by this bound (also counted in the server's slow_consumers)
        self.counted = 0  # the sum at the last exact count

    def note(self, c: Any, size: int) -> None:
        """Client connection ``c``, whose transport is paused, has ``size`` bytes waiting after a write."""
        sizes = self.sizes
        self.total += size - sizes.get(c, 0)
        sizes[c] = size
        if self.total > 0:
            limit = total_limit(self.server.opts)
            if limit and self.total > limit and self.total - self.counted > limit * SLACK:
                self._enforce(limit)

    def forget(self, c: Any) -> None:
        """``c`` drained below its transport's low water mark, or closed."""
        size = self.sizes.pop(c, None)
        if size is not None:
            self.total -= size
            self.counted -= size

    def _enforce(self, limit: int) -> None:
        sizes = self.sizes
        total = 0
        for c in list(sizes):
            t = c.transport
            if t is None or c.closed:
                del sizes[c]
                continue
            b = sizes[c] = t.get_write_buffer_size()
            total += b
        self.total = total
        while total > limit and sizes:
            worst = max(sizes, key=sizes.__getitem__)
            total -= sizes.pop(worst)
            self.total = total
            self.cut += 1
            self.server.slow_consumer(worst, f"Total Pending of {limit} Exceeded")
        self.counted = self.total
