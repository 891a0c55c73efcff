"""rillet.server.connstate.ConnBase: the lifecycle a client connection and a route/gateway/leaf connection share
-- what is buffered written on close (a write error logged, the close going on), the teardown cancelling every
timer (a role's own too), the PING tick's stale check."""
from __future__ import annotations

from typing import Any

from rillet.server.connstate import ConnBase, init_conn_state
from rillet.server.delivery import ConnKind


class _Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def debug(self, text: str) -> None:
        self.lines.append(("debug", text))

    def trace(self, text: str) -> None:
        self.lines.append(("trace", text))


class _Opts:
    ping_max = 2
    ping_interval = 60.0


class _Loop:
    def __init__(self) -> None:
        self.later: list[tuple[float, Any]] = []

    def call_later(self, delay: float, fn: Any) -> "_Timer":
        t = _Timer()
        self.later.append((delay, fn))
        return t


class _Server:
    def __init__(self) -> None:
        self.log = _Log()
        self.opts = _Opts()
        self.loop = _Loop()
        self.pending_flush: list[Any] = []
        self.flushed = 0
        self.stale_connections = 0
        self.stale_stats = {"clients": 0, "routes": 0, "gateways": 0, "leafs": 0}

    def flush_clients(self) -> None:
        self.flushed += 1


class _Timer:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class _Transport:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        if self.fail:
            raise OSError("broken pipe")
        self.written.append(data)

    def close(self) -> None:
        self.closed = True


class _Conn(ConnBase):
    def __init__(self) -> None:
        init_conn_state(self, _Server())
        self.kind = ConnKind.CLIENT
        self._resume_handle = None
        self._backlog = None
        self.own_timer: Any = None
        self.torn_down = 0
        self.closes: list[tuple[str, Any]] = []
        self.pings = 0

    def _timers(self) -> tuple[Any, ...]:
        return (*super()._timers(), self.own_timer)

    def _torn_down(self) -> None:
        self.torn_down += 1

    def _send_ping(self) -> None:
        self.pings += 1

    def log_prefix(self) -> str:
        return "1.2.3.4:5 - cid:1"

    def close(self, reason: str, err: Any = None) -> None:
        self.closes.append((reason, err))
        self.close_reason = reason
        self._close_transport()
        self._teardown()


def test_close_writes_what_is_buffered_then_closes():
    c = _Conn()
    c.transport = _Transport()
    c.out += b"-ERR 'x'\r\n"
    c.close("Protocol Violation")
    assert c.transport.written == [b"-ERR 'x'\r\n"] and c.transport.closed and not c.out
    assert c.closed and c.torn_down == 1


def test_a_write_error_on_close_is_logged_and_the_close_goes_on():
    c = _Conn()
    c.transport = _Transport(fail=True)
    c.out += b"PONG\r\n"
    c.close("Client Closed")
    assert c.transport.closed and not c.out and c.closed
    assert ("debug", "1.2.3.4:5 - cid:1 - error writing on close: broken pipe") in c.server.log.lines


def test_teardown_cancels_every_timer_once_and_runs_once():
    c = _Conn()
    c._ping_timer, c._auth_timer, c.own_timer = _Timer(), _Timer(), _Timer()
    timers = (c._ping_timer, c._auth_timer, c.own_timer)
    c.connection_lost(None)
    c.connection_lost(None)
    assert all(t.cancelled for t in timers)
    assert c.torn_down == 1 and c.close_reason == "Client Closed"


def test_ping_tick_pings_until_ping_max_then_closes_stale():
    c = _Conn()
    c._ping_tick()
    c._ping_tick()
    assert c.pings == 2 and c.pings_out == 2 and not c.closes
    assert c.server.flushed == 2 and [d for d, _ in c.server.loop.later] == [60.0, 60.0]
    c._ping_tick()
    assert c.pings == 2 and c.closes == [("Stale Connection", "Stale Connection")]
    # counted as nats-server counts it, by the connection's kind (/varz stale_connection_stats)
    assert c.server.stale_connections == 1 and c.server.stale_stats["clients"] == 1


def test_flush_marks_the_connection_once():
    c = _Conn()
    c.flush()
    c.flush()
    assert c.server.pending_flush == [c] and c.flush_pending
