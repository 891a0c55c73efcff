"""What every connection of the server holds from its start, a client's and another server's (a route, gateway or
leaf connection): its output buffer, its counters and the timers it may arm."""
from __future__ import annotations

import time
from typing import Any


def init_conn_state(c: Any, server: Any) -> None:
    """Set the state a connection ``c`` of ``server`` starts with (its class's ``__init__`` calls this first):
    no transport yet, empty output, zero counters, started now, no timer armed."""
    c.server = server
    c.cid = 0
    c.transport = None
    c.out = bytearray()
    c.flush_pending = False
    c.closed = False
    c.close_reason = ""
    c.headers = False
    c.in_msgs = c.in_bytes = c.out_msgs = c.out_bytes = 0
    c.start_time = time.time()
    c.last_activity = c.start_time
    c.host = ""
    c.port = 0
    c.pings_out = 0
    c.rtt = 0.0
    c._rtt_start = 0.0
    c._ping_timer = None
    c._auth_timer = None
    c._deadline_timer = None
