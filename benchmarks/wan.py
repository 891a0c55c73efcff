"""A delaying TCP proxy: WAN latency in user space, for benchmarks on one machine (no ``tc netem`` on this
kernel: "Specified qdisc kind is unknown").

    python -m benchmarks.wan --forward gw,10.0.0.2:17222,10.0.0.2:7222 --delay 20 --near 10.0.0.3 \\
        --stats 10.0.0.2:18999

Each ``--forward NAME,LISTEN,TARGET`` listens on LISTEN and, for every connection accepted, opens one to
TARGET and copies both directions. Every chunk read on one side is written to the other ``--delay`` ms after
it arrived (a one-way delay: a round trip through the proxy costs 2 x delay), in order, with no cost per byte
beyond the copy: one timer per direction, armed for the oldest chunk still held. A connection from an
address given with ``--near`` (a peer in the same region) is copied without delay. Half-closes pass through
(an EOF is forwarded once everything before it was written); a connection lost on one side closes the other
once what it sent has been delivered. Back-pressure: a side whose peer's write buffer is full, or with more
than 8 MiB held, stops being read until that drains.

The proxy prints ``ready`` on stdout once every listener is bound. ``--stats HOST:PORT`` answers every
connection with a JSON line of counters per forward (accepted, open, failed connects, bytes each way) and
closes it (``stats()`` reads it). ``start()`` runs one proxy process, optionally inside a network namespace
(``ip netns exec``), and waits for ``ready``. uvloop is used when it is installed.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import socket
import subprocess
import sys
from typing import Any

HOLD_LIMIT = 8 << 20  # bytes held in one direction before its source stops being read


class _Side(asyncio.Protocol):
    """One TCP connection of a proxied pair."""

    def __init__(self, link: "_Link") -> None:
        self.link = link
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.out: _Direction | None = None  # (what this side reads goes out through here)
        self.closed = False
        self.early: list[bytes] = []  # (read before the target was connected)
        self.early_eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # (uvloop's is no asyncio.Transport subclass)

    def data_received(self, data: bytes) -> None:
        if self.out is not None:
            self.out.push(data)
        else:
            self.early.append(data)

    def eof_received(self) -> bool:
        if self.out is not None:
            self.out.end()
        else:
            self.early_eof = True
        return True  # (keep our write half open: the other direction may still be sending)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closed = True
        self.link.lost(self)

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.out is not None:
            self.peer.out.set_pause("writer", True)

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.out is not None:
            self.peer.out.set_pause("writer", False)


class _Direction:
    """Bytes read on ``src`` written to ``dst`` ``delay`` seconds after they arrived, in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, src: _Side, dst: _Side, delay: float,
                 counters: collections.Counter, key: str) -> None:
        self.loop, self.src, self.dst, self.delay = loop, src, dst, delay
        self.held: collections.deque[tuple[float, bytes]] = collections.deque()
        self.held_bytes = 0
        self.timer: asyncio.TimerHandle | None = None
        self.eof = False  # (the source sent EOF or was lost)
        self.done = False  # (the EOF was passed on)
        self.pauses: set[str] = set()
        self.counters, self.key = counters, key

    def push(self, data: bytes) -> None:
        self.counters[self.key] += len(data)
        if self.done or self.dst.closed:
            return
        if not self.delay:
            self.dst.transport.write(data)  # type: ignore[union-attr]
            return
        self.held.append((self.loop.time() + self.delay, data))
        self.held_bytes += len(data)
        if self.timer is None:
            self.timer = self.loop.call_at(self.held[0][0], self._release)
        if self.held_bytes > HOLD_LIMIT:
            self.set_pause("held", True)

    def _release(self) -> None:
        self.timer = None
        if self.dst.closed:
            self.held.clear()
            return
        now = self.loop.time()
        out = []
        while self.held and self.held[0][0] <= now:
            data = self.held.popleft()[1]
            self.held_bytes -= len(data)
            out.append(data)
        if out:
            self.dst.transport.write(out[0] if len(out) == 1 else b"".join(out))  # type: ignore[union-attr]
        if self.held:
            self.timer = self.loop.call_at(self.held[0][0], self._release)
        elif self.eof:
            self._finish()
        if self.held_bytes <= HOLD_LIMIT // 2:
            self.set_pause("held", False)

    def set_pause(self, why: str, on: bool) -> None:
        before = bool(self.pauses)
        (self.pauses.add if on else self.pauses.discard)(why)
        if self.src.closed or before == bool(self.pauses):
            return
        if self.pauses:
            self.src.transport.pause_reading()  # type: ignore[union-attr]
        else:
            self.src.transport.resume_reading()  # type: ignore[union-attr]

    def end(self) -> None:
        """The source sent EOF (or is gone): pass it on once everything held was written."""
        self.eof = True
        if not self.held:
            self._finish()

    def _finish(self) -> None:
        if self.done:
            return
        self.done = True
        dst = self.dst
        if dst.closed:
            return
        if self.src.closed:
            dst.transport.close()  # type: ignore[union-attr]  # (flushes what is buffered, then closes)
        elif dst.transport.can_write_eof():  # type: ignore[union-attr]
            dst.transport.write_eof()  # type: ignore[union-attr]
        self.dst.link.maybe_close()

    def drop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.held.clear()
        self.held_bytes = 0
        self.done = True


class _Link:
    """An accepted connection and the one opened to the target for it."""

    def __init__(self, fwd: "Forward", delay: float) -> None:
        self.fwd, self.delay = fwd, delay
        self.client = _Side(self)
        self.server: _Side | None = None
        self.connecting: asyncio.Task | None = None
        self.counted = False

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, server = await loop.create_connection(lambda: _Side(self), self.fwd.target[0], self.fwd.target[1])
        except OSError as e:
            self.fwd.counters["connect_failed"] += 1
            self.fwd.last_error = f"{type(e).__name__}: {e}"
            if not self.client.closed:
                self.client.transport.close()  # type: ignore[union-attr]
            return
        assert isinstance(server, _Side)
        if self.client.closed:
            server.transport.close()  # type: ignore[union-attr]
            return
        self.server = server
        c = self.fwd.counters
        self.client.peer, server.peer = server, self.client
        self.client.out = _Direction(loop, self.client, server, self.delay, c, "bytes_to_target")
        server.out = _Direction(loop, server, self.client, self.delay, c, "bytes_to_client")
        c["open"] += 1
        self.counted = True
        for data in self.client.early:
            self.client.out.push(data)
        self.client.early.clear()
        if self.client.early_eof:
            self.client.out.end()

    def lost(self, side: _Side) -> None:
        if side is self.client and self.server is None:
            if self.connecting is not None:
                self.connecting.cancel()
            return
        if side.out is not None:
            side.out.end()  # (what it sent still goes out; then the other side is closed)
        if side.peer is not None and side.peer.out is not None:
            side.peer.out.drop()  # (nothing can be written to it any more)
        self.maybe_close()

    def maybe_close(self) -> None:
        c, s = self.client, self.server
        if s is None or c.out is None or s.out is None:
            return
        if c.out.done and s.out.done:
            for side in (c, s):
                if not side.closed:
                    side.transport.close()  # type: ignore[union-attr]
            if self.counted and c.closed and s.closed:
                self.counted = False
                self.fwd.counters["open"] -= 1


class Forward:
    """One listener of the proxy and its counters."""

    def __init__(self, name: str, listen: tuple[str, int], target: tuple[str, int], delay_ms: float,
                 near: frozenset[str] = frozenset()) -> None:
        self.name, self.listen, self.target = name, listen, target
        self.delay = delay_ms / 1e3
        self.near = near
        self.counters: collections.Counter = collections.Counter()
        self.last_error = ""
        self.server: asyncio.AbstractServer | None = None

    def _accept(self) -> _Side:
        fwd = self

        class _Accepted(_Side):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                super().connection_made(transport)
                # (what arrives before the target is connected is kept in ``early``: pausing the reading
                # here and resuming it once connected lost the first bytes' wake-up under uvloop now and then)
                peer = transport.get_extra_info("peername") or ("",)
                link = self.link
                link.delay = 0.0 if peer[0] in fwd.near else fwd.delay
                fwd.counters["accepted"] += 1
                fwd.counters["accepted_delayed" if link.delay else "accepted_near"] += 1
                link.connecting = asyncio.get_running_loop().create_task(link.connect())

        link = _Link(self, self.delay)
        link.client = _Accepted(link)
        return link.client

    async def start(self) -> None:
        self.server = await asyncio.get_running_loop().create_server(self._accept, self.listen[0], self.listen[1],
                                                                     reuse_address=True)

    def stats(self) -> dict[str, Any]:
        d: dict[str, Any] = {"listen": "%s:%d" % self.listen, "target": "%s:%d" % self.target,
                             "delay_ms": self.delay * 1e3}
        for k in ("accepted", "accepted_delayed", "accepted_near", "open", "connect_failed", "bytes_to_target",
                  "bytes_to_client"):
            d[k] = self.counters[k]
        if self.last_error:
            d["last_error"] = self.last_error
        return d

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


def hostport(s: str) -> tuple[str, int]:
    host, _, port = s.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {s!r}")
    return host.strip("[]"), int(port)


async def serve(forwards: list[Forward], stats_at: tuple[str, int] | None = None,
                ready: asyncio.Event | None = None, stop: asyncio.Event | None = None) -> None:
    """Run ``forwards`` (and the stats listener) until ``stop`` is set (for ever without one)."""
    for f in forwards:
        await f.start()
    stats_server = None
    if stats_at is not None:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(json.dumps({f.name: f.stats() for f in forwards}).encode() + b"\n")
            await writer.drain()
            writer.close()
        stats_server = await asyncio.start_server(answer, stats_at[0], stats_at[1], reuse_address=True)
    if ready is not None:
        ready.set()
    try:
        await (stop.wait() if stop is not None else asyncio.Event().wait())
    finally:
        for f in forwards:
            f.close()
        if stats_server is not None:
            stats_server.close()


def stats(host: str, port: int, timeout: float = 2.0) -> dict[str, Any]:
    """The counters of a proxy process started with ``--stats HOST:PORT``."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf)


def start(forwards: list[tuple[str, str, str]], delay_ms: float, near: list[str] = (),  # type: ignore[assignment]
          stats_at: str = "", netns: str = "", timeout: float = 10.0) -> subprocess.Popen:
    """A proxy process (in network namespace ``netns`` when given), once it is ready.
    ``forwards``: (name, listen HOST:PORT, target HOST:PORT)."""
    cmd = [sys.executable, "-m", "benchmarks.wan", "--delay", str(delay_ms)]
    for name, listen, target in forwards:
        cmd += ["--forward", f"{name},{listen},{target}"]
    if near:
        cmd += ["--near", ",".join(near)]
    if stats_at:
        cmd += ["--stats", stats_at]
    if netns:
        cmd = ["ip", "netns", "exec", netns] + cmd
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen(cmd, cwd=repo, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    import selectors
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    line = proc.stdout.readline() if sel.select(timeout) else ""
    sel.close()
    if line.strip() != "ready":
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the proxy did not start ({' '.join(cmd)}): {line!r}, exit {proc.returncode}")
    return proc


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--forward", action="append", required=True, help="NAME,LISTEN_HOST:PORT,TARGET_HOST:PORT")
    ap.add_argument("--delay", type=float, default=0.0, help="one-way delay in ms (each direction)")
    ap.add_argument("--near", default="", help="comma-separated source addresses copied without delay")
    ap.add_argument("--stats", default="", help="HOST:PORT answering with the counters as JSON")
    a = ap.parse_args(argv)
    near = frozenset(x for x in a.near.split(",") if x)
    forwards = []
    for spec in a.forward:
        name, listen, target = spec.split(",")
        forwards.append(Forward(name, hostport(listen), hostport(target), a.delay, near))
    ready = asyncio.Event()

    async def run() -> None:
        task = asyncio.create_task(serve(forwards, hostport(a.stats) if a.stats else None, ready))
        await ready.wait()
        print("ready", flush=True)
        await task

    try:
        import uvloop
    except ImportError:  # (not on every platform: asyncio's own loop copies more slowly, same behaviour)
        print("uvloop not installed: asyncio's event loop", file=sys.stderr)
        asyncio.run(run())
    else:
        uvloop.run(run())


if __name__ == "__main__":
    main()
