"""Service latency tracking for exported services (nats-server's ``latency`` on a service export).

A service export may carry ``latency: {sampling: 50%, subject: "lat.svc"}`` (or ``latency: "lat.svc"``
for 100%, or ``sampling: headers`` to measure only requests that carry a tracing header). When a request
from an importing account crosses into the exporter and the answer comes back, the server publishes in
the EXPORTING account, on the latency subject, a JSON metric shaped like nats-server's ``ServiceLatency``:
status 200 with the measured times, 400 for a request without a reply subject, 503 when nobody in the
exporter could take the request, 504 when no answer came within the export's response threshold and 408
when the requestor stopped listening before the answer came.
"""
from __future__ import annotations

import random
import re
import time
from typing import Any

from rillet.config.latency import Latency
from rillet.gocompat.gotime import format_time, unix_ns

LATENCY_TYPE = "io.nats.server.metric.v1.service_latency"
# ---- sampling ---------------------------------------------------------------------------------------------

def _canonical_key(k: str) -> str:
    """Go's textproto.CanonicalMIMEHeaderKey for the usual header names."""
    if not k or any(ch in k for ch in " \t:"):
        return k
    return "-".join(p[:1].upper() + p[1:].lower() for p in k.split("-"))


def parse_headers(hdr: int, msg: bytes) -> dict[str, list[str]]:
    """A NATS header block as canonical key -> values."""
    out: dict[str, list[str]] = {}
    if hdr <= 0:
        return out
    lines = msg[:hdr].decode("utf-8", "replace").split("\r\n")
    for line in lines[1:]:
        if not line:
            continue
        k, sep, val = line.partition(":")
        if not sep:
            continue
        out.setdefault(_canonical_key(k.strip()), []).append(val.strip())
    return out


_UBER = "Uber-Trace-Id"
_CTX = "Traceparent"
_CTX_STATE = "Tracestate"
_B3 = "B3"
_B3_SAMPLED = "X-B3-Sampled"
_B3_TRACE = "X-B3-Traceid"
_B3_PARENT = "X-B3-Parentspanid"
_B3_SPAN = "X-B3-Spanid"
_UBER_CTX = "Uberctx-"


def should_sample(lat: Latency | None, hdr: int, msg: bytes) -> tuple[bool, dict[str, list[str]] | None]:
    """Whether to measure this request, and the tracing headers that decided it (reported in the metric).

    As nats-server: a percentage draws at random; a request that the draw skips (or any request, with
    ``sampling: headers``) is still measured when it carries a tracing header that says it is sampled
    (Uber ``uber-trace-id`` flags, B3 ``X-B3-Sampled``/``X-B3-TraceId``/``b3``, W3C ``traceparent`` flags).
    """
    if lat is None or lat.sampling < 0:
        return False, None
    if lat.sampling >= 100:
        return True, None
    if lat.sampling > 0 and random.randrange(100) <= lat.sampling:
        return True, None
    h = parse_headers(hdr, msg)
    if not h:
        return False, None
    if _UBER in h:
        tid = h[_UBER]
        tk = tid[0].split(":")
        if len(tk) == 4 and 0 < len(tk[3]) <= 2:
            try:
                flags = int(tk[3], 16)
            except ValueError:
                return False, None
            if flags & 1:
                out = {_UBER: tid}
                out.update({k: v for k, v in h.items() if k.startswith(_UBER_CTX)})
                return True, out
        return False, None
    sampled = h.get(_B3_SAMPLED)
    if sampled and sampled[0] == "1":
        return True, _b3_headers(h)
    if sampled and sampled[0] == "0":
        return False, None
    if _B3_TRACE in h:
        return True, _b3_headers(h)
    if h.get(_B3):
        b3 = h[_B3]
        tk = b3[0].split("-")
        if (len(tk) > 2 and tk[2] == "0") or (len(tk) == 1 and tk[0] == "0"):
            return False, None
        return True, {_B3: b3}
    if h.get(_CTX):
        tid = h[_CTX]
        tk = tid[0].split("-")
        if len(tk) == 4 and len(tk[3].encode()) == 2:
            try:
                if int(tk[3], 16) & 1:
                    out = {_CTX: tid}
                    if _CTX_STATE in h:
                        out[_CTX_STATE] = h[_CTX_STATE]
                    return True, out
            except ValueError:
                pass
        return False, None
    return False, None


def _b3_headers(h: dict[str, list[str]]) -> dict[str, list[str]]:
    # (Go's http.Header marshals as a map: keys sorted)
    return {k: h[k] for k in (_B3_PARENT, _B3_SAMPLED, _B3_SPAN, _B3_TRACE) if k in h}


# ---- the metric --------------------------------------------------------------------------------------------

def client_info(server: Any, c: Any, detailed: bool) -> dict | None:
    """nats-server's ClientInfo of a client connection (None for the server's internal clients).

    Without ``detailed`` only the account and the RTT are shared (a requestor whose import does not
    ``share``)."""
    from rillet.server.client import CLIENT
    if c is None or getattr(c, "kind", None) != CLIENT:
        return None
    d: dict[str, Any] = {}
    co = c.opts
    if detailed:
        d["start"] = format_time(unix_ns(c.start_time))
        if c.host:
            d["host"] = c.host
        if c.cid:
            d["id"] = c.cid
    d["acc"] = c.account.name
    rtt = int((c.rtt or 0) * 1e9)
    if detailed:
        if c.user:
            d["user"] = c.user
        for k, v in (("name", co.name), ("lang", co.lang), ("ver", co.version)):
            if v:
                d[k] = v
    if rtt:
        d["rtt"] = rtt
    if detailed:
        d["server"] = server.name
        if server.opts.cluster.name:
            d["cluster"] = server.opts.cluster.name
        if co.jwt:
            d["jwt"] = co.jwt
        d["kind"] = "Client"
        d["client_type"] = "websocket" if getattr(c, "conn_type", "") == "WEBSOCKET" else "nats"
    return d


class Tracking:
    """One measured request, from the moment it entered the exporter until its answer (or failure)."""

    __slots__ = ("lat", "send", "requestor", "share", "ts", "header", "done", "timer")

    def __init__(self, lat: Latency, send: Any, requestor: Any, share: bool, header: dict | None) -> None:
        self.lat = lat
        self.send = send  # send(subject: bytes, payload: bytes): publishes in the exporting account
        self.requestor = requestor
        self.share = share
        self.ts = time.time_ns()
        self.header = header
        self.done = False
        self.timer: Any = None

    def _requestor_info(self, server: Any) -> dict | None:
        return client_info(server, self.requestor, self.share)

    def _emit(self, m: dict) -> None:
        import json  # (here: an idle server loads no json module, issue 20)
        self.done = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.requestor = None
        self.send(self.lat.subject.encode(), json.dumps(m, separators=(",", ":")).encode())

    def responded(self, server: Any, responder: Any) -> None:
        """The first answer came back from ``responder``: a 200 metric with the times."""
        if self.done:
            return
        now = time.time_ns()
        service_rtt = now - self.ts
        req = self._requestor_info(server)
        resp = client_info(server, responder, True)
        resp_rtt = resp.get("rtt", 0) if resp else 0
        req_rtt = req.get("rtt", 0) if req else 0
        service = service_rtt - resp_rtt
        total = req_rtt + service_rtt
        system = 0
        if resp_rtt > 0:
            system = time.time_ns() - now
            total += system
        m = _head(200, "")
        if req is not None:
            m["requestor"] = req
        if resp is not None:
            m["responder"] = resp
        if self.header:
            m["header"] = self.header
        m["start"] = format_time(self.ts - req_rtt)
        m["service"] = max(service, 0)
        m["system"] = max(system, 0)
        m["total"] = total
        self._emit(m)

    def failed(self, server: Any, status: int) -> None:
        """No answer: 503 (nobody took the request), 504 (response threshold passed), 408 (requestor gone)."""
        if self.done:
            return
        m = _head(status, _STATUS_TEXT[status])
        req = self._requestor_info(server)
        if req is not None:
            m["requestor"] = req
        if self.header:
            m["header"] = self.header
        m["start"] = format_time(self.ts - (req.get("rtt", 0) if req else 0))
        m["service"] = m["system"] = m["total"] = 0
        self._emit(m)


_STATUS_TEXT = {400: "Bad Request", 408: "Request Timeout", 503: "Service Unavailable", 504: "Service Timeout"}


def _head(status: int, desc: str) -> dict:
    from rillet.server.sysacc import _event_id
    m: dict[str, Any] = {"type": LATENCY_TYPE, "id": _event_id(), "timestamp": format_time(time.time_ns()),
                         "status": status}
    if desc:
        m["description"] = desc
    return m


def bad_request(server: Any, lat: Latency, send: Any, requestor: Any, share: bool, header: dict | None) -> None:
    """A measured request without a reply subject: a 400 metric right away."""
    t = Tracking(lat, send, requestor, share, header)
    m = _head(400, _STATUS_TEXT[400])
    req = t._requestor_info(server)
    if req is not None:
        m["requestor"] = req
    if header:
        m["header"] = header
    m["start"] = format_time(time.time_ns() - (req.get("rtt", 0) if req else 0))
    m["service"] = m["system"] = m["total"] = 0
    t._emit(m)
