"""Message tracing's events and the traced delivery (rillet.server.msgtrace describes it): loaded with the
first message that may be traced, not by every server (issue 20, idle memory). The trace being
delivered is ``rillet.server.msgtrace.CURRENT``, the one attribute the delivery path reads per message."""
from __future__ import annotations

import random
import time
from typing import Any

from rillet.gocompat.goquote import go_quote
from rillet.gocompat.gotime import format_time
from rillet.server.delivery import CLIENT, LEAF, ConnKind
from rillet.subjects.validate import is_valid_publish_subject

import rillet.server.msgtrace as _state

TRACE_DEST = "Nats-Trace-Dest"
TRACE_HOP = "Nats-Trace-Hop"
TRACE_ORIGIN_ACCOUNT = "Nats-Trace-Origin-Account"
TRACE_ONLY = "Nats-Trace-Only"
TRACE_DISABLED = "trace disabled"  # (not a valid subject: a receiving server does not trace again)
TRACE_PARENT = "traceparent"
ACCEPT_ENCODING = "Accept-Encoding"
CONTENT_ENCODING = "Content-Encoding"

ERR_NO_ECHO = "Not delivered because of no echo"
ERR_PUB_VIOLATION = "Not delivered because publish denied for this subject"
ERR_SUB_DENY = "Not delivered because subscription denies this subject"
ERR_CLIENT_CLOSED = "Not delivered because client is closed"
ERR_AUTO_UNSUB = "Not delivered because auto-unsubscribe exceeded"
ERR_MAX_PAYLOAD = "maximum payload exceeded"  # (nats-server's ErrMaxPayload text, in an ingress event)

# connection kinds as the trace events number them (nats-server's CLIENT, ROUTER, GATEWAY, LEAF), by ours
_KIND = {ConnKind.CLIENT: 0, ConnKind.ROUTER: 1, ConnKind.GATEWAY: 2, ConnKind.LEAF: 4}

# the trace of the message being delivered now, if any (delivery is synchronous and nested)


def _now() -> str:
    return format_time(time.time_ns())


def parse_headers(hdr: bytes) -> tuple[dict[str, list[str]], bool, bool]:
    """The header block as nats-server lifts it for a trace: names as written (case kept), values trimmed,
    empty ones skipped. Returns (headers, has Nats-Trace-Dest, has a sampled traceparent); a
    ``Nats-Trace-Dest: trace disabled`` header means no trace at all."""
    out: dict[str, list[str]] = {}
    dest = parent = False
    if not hdr.startswith(b"NATS/1.0"):
        return out, False, False
    i = hdr.find(b"\r\n")
    if i < 0:
        return out, False, False
    i += 2
    n = len(hdr)
    while i < n:
        c = hdr.find(b":", i)
        if c < 0:
            break
        e = hdr.find(b"\r\n", c + 1)
        if e < 0:
            break
        key = hdr[i:c].decode("utf-8", "replace")
        val = hdr[c + 1:e].strip(b" \t").decode("utf-8", "replace")
        i = e + 2
        if not key or not val:
            continue
        if not parent and key.lower() == TRACE_PARENT:
            parts = val.split("-")
            if len(parts) == 4 and len(parts[3]) == 2:
                try:
                    parent = bool(int(parts[3], 16) & 1)
                except ValueError:
                    pass  # not hex: not a sampled trace context, the header is kept as is
        elif not dest and key == TRACE_DEST:
            if val == TRACE_DISABLED:
                return {}, False, False
            dest = True
        out.setdefault(key, []).append(val)
    return out, dest, parent


def set_header(hdr: int, msg: bytes, key: str, value: str) -> tuple[int, bytes]:
    """``msg`` (headers then payload) with header ``key`` set to ``value`` (replaced where it is, else added
    last). Returns the new header length and message."""
    h = msg[:hdr]
    kb = key.encode()
    line = kb + b": " + value.encode() + b"\r\n"
    pos = h.find(b"\r\n" + kb + b":")
    if pos >= 0:
        start = pos + 2
        end = h.find(b"\r\n", start) + 2
        nh = h[:start] + line + h[end:]
    else:
        nh = h[:-2] + line + b"\r\n"  # before the blank line that ends the block
    return len(nh), nh + msg[hdr:]


def disable(hdr: int, msg: bytes) -> tuple[int, bytes]:
    """The message with its trace destination disabled (a stored or untraced copy must not trace again)."""
    return set_header(hdr, msg, TRACE_DEST, TRACE_DISABLED)


def _sample(pct: int) -> bool:
    return pct <= 0 or pct >= 100 or random.randrange(100) <= pct


class MsgTrace:
    """One traced message on this server."""

    __slots__ = ("server", "acc", "dest", "tonly", "hop", "nhop", "hops", "events", "header", "size", "js",
                 "ingress", "shadow", "ct")

    def __init__(self, server: Any, acc: Any, dest: str, tonly: bool, hop: str, header: dict, size: int,
                 ingress: dict) -> None:
        self.server = server
        self.acc = acc
        self.dest = dest
        self.tonly = tonly
        self.hop = hop
        self.nhop = ""
        self.hops = 0
        self.header = header
        self.size = size
        self.ingress = ingress
        self.events: list[dict] = [ingress]
        self.js: dict | None = None
        # (importer, source subject, remap) while a stream import delivers: the egress names the
        # subscription as the exporting account sees it (nats-server's shadow subscription)
        self.shadow: tuple | None = None
        self.ct = ""  # the event's Content-Encoding, from the traced message's Accept-Encoding ("": none)

    # ---- events -----------------------------------------------------------------------------------------

    def mapped(self, to: bytes) -> None:
        self.events.append({"type": "sm", "ts": _now(), "to": to.decode("utf-8", "replace")})

    def stream_export(self, importer: str, to: bytes) -> None:
        self.events.append({"type": "se", "ts": _now(), "acc": importer, "to": to.decode("utf-8", "replace")})

    def service_import(self, exporter: str, frm: bytes, to: bytes) -> None:
        self.events.append({"type": "si", "ts": _now(), "acc": exporter, "from": frm.decode("utf-8", "replace"),
                            "to": to.decode("utf-8", "replace")})

    def egress(self, dc: Any, sub: Any, err: str = "") -> None:
        kind = _KIND.get(getattr(dc, "kind", CLIENT), 0)
        e: dict[str, Any] = {"type": "eg", "ts": _now(), "kind": kind, "cid": getattr(dc, "cid", 0)}
        name = conn_name(dc)
        if name:
            e["name"] = name
        if self.nhop:
            e["hop"] = self.nhop
            self.nhop = ""
        if kind in (0, 4):
            acc = getattr(getattr(dc, "account", None), "name", None) or getattr(dc, "acc_name", "")
            if acc and acc != self.ingress.get("acc"):
                e["acc"] = acc
        if kind == 0 and sub is not None:
            e["sub"] = sub.subject
            sh = self.shadow
            if sh is not None and getattr(dc, "account", None) is sh[0]:
                from rillet.server.delivery import shadow_subject
                ss = shadow_subject(sub.subject, sh[1], sh[2])
                if ss is not None:
                    e["sub"] = ss[0]
            if sub.queue:
                e["queue"] = sub.queue
        if err:
            e["error"] = err
        self.events.append(e)

    def jetstream(self, stream: Any, subject: str, hdr: bytes) -> bytes | None:
        """A stream takes the message: the ``js`` event. Returns the header block to store (its trace
        destination disabled), or None for a trace-only message (nothing is stored, no ack)."""
        if not owns(self, len(hdr), hdr):
            return hdr  # another message, published while the traced one is handled
        js: dict[str, Any] = {"type": "js", "ts": _now(), "stream": stream.name, "subject": subject}
        cfg = getattr(stream, "cfg", None)
        if cfg is not None and str(getattr(cfg, "retention", "")).lower() == "interest":
            # as nats-server: no consumer, or none whose filters take the subject
            cons = getattr(stream, "consumers", None) or {}
            if not any(c._matches(subject) for c in cons.values()):
                js["nointerest"] = True
        self.js = js
        self.events.append(js)
        if self.tonly:
            # the stream's checks still run (their error in the event and the reply), nothing is stored;
            # not for an atomic batch message (it would be staged)
            return None if b"Nats-Batch-Id" in hdr else hdr
        _, m = disable(len(hdr), hdr)
        return m

    def js_checked(self, stream: Any) -> bool:
        """The stream's checks passed: False when the message is trace-only (nothing is proposed)."""
        js = self.js
        return not (self.tonly and js is not None and js.get("stream") == stream.name)

    def js_error(self, stream: Any, err: Any, hdr: bytes = b"") -> None:
        """The stream refused the traced message: the ``js`` event gets nats-server's error text (the
        internal one, which is not always the API error's description) and, as there, no subject."""
        js = self.js
        if js is None or js.get("stream") != stream.name or "error" in js:
            return
        js.pop("subject", None)
        js.pop("nointerest", None)
        js["error"] = js_error_text(err, self.header)

    def to_remote(self, rc: Any, hdr: int, msg: bytes) -> tuple[int, bytes]:
        """The message is sent on to route/gateway/leaf ``rc``: the next hop number in its header, and the
        egress event."""
        self.hops += 1
        self.nhop = f"{self.hop}.{self.hops}" if self.hop else str(self.hops)
        hdr, msg = set_header(hdr, msg, TRACE_HOP, self.nhop)
        self.egress(rc, None)
        return hdr, msg

    # ---- observing a delivery (rillet.server.delivery.deliver_local) --------------------------------------------

    def skipped(self, sc: Any, sub: Any, why: int) -> None:
        """A subscriber here did not get the message: 0 no echo, 1 its subscribe permission denies it."""
        self.egress(sc, sub, ERR_NO_ECHO if why == 0 else ERR_SUB_DENY)

    def check(self, sc: Any, sub: Any) -> int:
        """Before a subscriber here is given the message: 0 deliver it (its egress event is recorded now); 1
        not delivered (a closed client, an auto-unsubscribe reached); 2 trace-only (the event says delivered,
        nothing is sent)."""
        if sc.closed:
            self.egress(sc, sub, ERR_CLIENT_CLOSED)
            return 1
        if sub.max and sub.nm >= sub.max:
            self.egress(sc, sub, ERR_AUTO_UNSUB)
            return 1
        self.egress(sc, sub, "")
        return 2 if self.tonly else 0

    def internal(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes,
                 route: bytes | None) -> bool:
        """An internal subscription (an import, JetStream, a service) takes the traced message: the stream
        export or service import event, and the call, traced on or not as the export allows. Returns True
        when it counts as delivered."""
        icb = sub.icb
        imp = getattr(icb, "import_to", None)
        src = sub.subject
        if imp is None and type(sub).__name__ == "ShadowSub":
            imp = (sub.importer, sub.remap)
            allow = getattr(getattr(sub.isub, "icb", None), "allow_trace", False)
            src = sub.isub.subject
        else:
            allow = getattr(icb, "allow_trace", False)
        si = getattr(icb, "service_import", None)
        if imp is not None:
            importer, remap = imp
            to = subject if remap is None else remap(subject.decode("utf-8", "surrogateescape")).encode(
                "utf-8", "surrogateescape")
            self.stream_export(importer.name, to)
        elif si is not None:
            exporter, remap = si
            to = subject if remap is None else remap(subject.decode("utf-8", "surrogateescape")).encode(
                "utf-8", "surrogateescape")
            self.service_import(exporter.name, subject, to)
        if (imp is not None or si is not None) and not allow:
            if self.tonly:
                return True
            # delivered, but not traced from here on (a service import's copy says so in its header)
            h2, m2 = (hdr, msg) if imp is not None else disable(hdr, msg)
            _state.CURRENT = None
            try:
                sub.nm += 1
                ok = _call(icb, sub, c, route, subject, reply, h2, m2)
            finally:
                _state.CURRENT = self
            return ok is not False  # (a service import that reached nobody returns False)
        h2, m2 = hdr, msg
        prev_shadow = self.shadow
        rr = None
        hops = self.hops
        if imp is not None:
            self.shadow = (imp[0], src, imp[1])
        elif si is not None and getattr(icb, "trace_reply", None) is not None:
            rr = icb.trace_reply(self.dest.encode("utf-8", "surrogateescape"))
            h2, m2 = set_header(hdr, msg, TRACE_DEST, rr.decode())
        sub.nm += 1
        try:
            ok = _call(icb, sub, c, route, subject, reply, h2, m2)
        finally:
            self.shadow = prev_shadow
            if rr is not None and self.hops == hops:
                icb.trace_reply_drop(rr)  # no other server got it: no event will come back that way
        return ok is not False

    # ---- the event ----------------------------------------------------------------------------------------

    def event(self) -> dict:
        req: dict[str, Any] = {}
        if self.header:
            req["header"] = self.header
        if self.size:
            req["msgsize"] = self.size
        ev: dict[str, Any] = {"server": self.server.sysacc.server_info(), "request": req}
        if self.hops:
            ev["hops"] = self.hops
        ev["events"] = self.events
        return ev

    def send(self) -> None:
        import json  # (here: an idle server loads no json module, issue 20)
        srv = self.server
        acc = self.acc
        if acc is None:
            return
        ic = _event_client(srv, acc)
        prev, _state.CURRENT = _state.CURRENT, None
        body = json.dumps(self.event(), separators=(",", ":")).encode()
        try:
            if self.ct:
                h = b"NATS/1.0\r\n" + CONTENT_ENCODING.encode() + b": " + self.ct.encode() + b"\r\n\r\n"
                ic.publish(self.dest.encode("utf-8", "surrogateescape"), None, h + _compress(self.ct, body),
                           len(h))
            else:
                ic.publish(self.dest.encode("utf-8", "surrogateescape"), None, body)
        finally:
            _state.CURRENT = prev


def js_error_text(err: Any, header: dict) -> str:
    """nats-server's text for a stream's refusal of a message (what its processJetStreamMsg returns):
    ``err`` an ApiError, or None for a duplicate message id."""
    if err is None:
        return "msgid is duplicate"
    code = getattr(err, "err_code", 0)
    desc = getattr(err, "description", "") or str(err)
    actual = desc.rsplit(": ", 1)[-1] if ": " in desc else ""

    def h(name: str) -> str | None:
        v = header.get(name)
        return v[0] if v else None
    if code == 10054:  # message size exceeds maximum allowed
        return "maximum payload exceeded"
    if code == 10060:
        return "expected stream does not match"
    if code == 10071:  # wrong last sequence
        els = h("Nats-Expected-Last-Sequence")
        if els is not None and els != actual:
            return f"last sequence mismatch: {els} vs {actual}"
        return f"last sequence by subject mismatch: {h('Nats-Expected-Last-Subject-Sequence') or ''} vs {actual}"
    if code == 10070:  # wrong last msg ID
        return f"last msgid mismatch: {go_quote(h('Nats-Expected-Last-Msg-Id') or '')} vs {go_quote(actual)}"
    if code == 10166:
        return "message TTL disabled"
    return f"{desc} ({code})"


def _compression(accept: str) -> str:
    """The Content-Encoding of the event for the traced message's ``Accept-Encoding``, as nats-server
    chooses it: snappy (also for ``s2``), else gzip, else ``identity`` (asked for something else)."""
    if not accept:
        return ""
    a = accept.lower()
    if "snappy" in a or "s2" in a:
        return "snappy"
    if "gzip" in a:
        return "gzip"
    return "identity"


def _compress(ct: str, body: bytes) -> bytes:
    if ct == "gzip":
        import gzip
        return gzip.compress(body)
    if ct == "snappy":  # the snappy framing format (what nats-server's s2 writer makes in snappy mode)
        import cramjam
        return bytes(cramjam.snappy.compress(body))
    return body


def _event_client(srv: Any, acc: Any) -> Any:
    clients = getattr(srv, "_trace_clients", None)
    if clients is None:
        clients = srv._trace_clients = {}
    ic = clients.get(acc.name)
    if ic is None or ic.account is not acc:
        ic = clients[acc.name] = srv.internal_client(acc, f"message trace {acc.name}")
    return ic


def conn_name(c: Any) -> str:
    if getattr(c, "kind", CLIENT) == CLIENT:
        o = getattr(c, "opts", None)
        return getattr(o, "name", "") or ""
    # a route, gateway or leaf: the remote server's name (as nats-server's INFO ``name``), not its cluster's
    return getattr(c, "remote_name", "") or ""


def wants_trace(acc: Any, hdr: int, msg: bytes) -> bool:
    """The cheap test, for a message with headers: might it be traced?"""
    if msg.find(b"Nats-Trace-", 0, hdr) >= 0:
        return True
    return getattr(acc, "trace_dest", None) is not None and msg[:hdr].lower().find(b"traceparent") >= 0


# what ``start`` gives when the message goes on untraced with its trace destination disabled
_DISABLE = "disable"


def start(c: Any, acc: Any, subject: bytes, hdr: int, msg: bytes, hop_ok: bool,
          ingress_error: str = "") -> tuple[bool, Any]:
    """A trace for this message (or None), and whether to skip processing it (a trace-only message that
    cannot be traced is not delivered either). ``hop_ok``: it came from another server (hop header read).
    Instead of a trace, ``_DISABLE``: deliver the message with ``Nats-Trace-Dest: trace disabled`` (an old
    ``Nats-Trace-Origin-Account`` header, or a traceparent not sampled), so no other server traces it."""
    headers, has_dest, has_parent = parse_headers(msg[:hdr])
    if not headers or not (has_dest or has_parent):
        return False, None
    external = not has_dest
    srv = c.server
    tonly = False
    dest = ""
    if not external:
        to = headers.get(TRACE_ONLY, [""])[0].lower()
        tonly = to in ("1", "true", "on")
        dest = headers.get(TRACE_DEST, [""])[0]
    if TRACE_ORIGIN_ACCOUNT in headers:
        srv.log.error(f"{_prefix(c)} - Message tracing disabled because of header "
                      f"\"{TRACE_ORIGIN_ACCOUNT}\" with value=\"{headers[TRACE_ORIGIN_ACCOUNT][0]}\"")
        return tonly, (_DISABLE if not tonly and not ingress_error else None)
    kind = getattr(c, "kind", CLIENT)
    hop = headers.get(TRACE_HOP, [""])[0] if hop_ok else ""
    if external:
        dest = getattr(acc, "trace_dest", None) or ""
        if not dest:
            return False, None
        if kind == CLIENT and not _sample(getattr(acc, "trace_sampling", 100)):
            return False, (_DISABLE if not ingress_error else None)
    if not is_valid_publish_subject(dest):
        srv.log.error(f"{_prefix(c)} - Destination \"{dest}\" is not valid, won't be able to trace events")
        return tonly, None
    dest_b = dest.encode("utf-8", "surrogateescape")
    perms = getattr(c, "perms", None)
    # never to a gateway reply subject, nor to $NRG. (RAFT traffic) outside the system account
    denied = dest_b[:5] == b"_GR_." or dest_b[:4] == b"$GR." or \
        (dest_b[:5] == b"$NRG." and acc is not getattr(srv, "system_account", None))
    if denied or (perms is not None and perms.has_pub and not perms.can_publish(dest_b)):
        if kind == CLIENT or kind == LEAF:
            q = go_quote(dest_b)
            srv.log.error(f"{_prefix(c)} - Publish Violation - Subject {q}")
            send_err = getattr(c, "send_err", None)
            if callable(send_err):
                send_err(f"Permissions Violation for Publish to {q}")
        else:
            srv.log.error(f"{_prefix(c)} - Publish Violation - Subject \"{dest}\"")
        return True, None
    ingress: dict[str, Any] = {"type": "in", "ts": _now(), "kind": _KIND.get(getattr(c, "kind", CLIENT), 0),
                               "cid": getattr(c, "cid", 0)}
    name = conn_name(c)
    if name:
        ingress["name"] = name
    ingress["acc"] = acc.name
    ingress["subj"] = subject.decode("utf-8", "replace")
    if ingress_error:
        ingress["error"] = ingress_error
    mt = MsgTrace(srv, acc, dest, tonly, hop, headers, len(msg), ingress)
    mt.ct = _compression(headers.get(ACCEPT_ENCODING, [""])[0])
    return False, mt


def _prefix(c: Any) -> str:
    fn = getattr(c, "log_prefix", None)
    return fn() if callable(fn) else str(c)


# ---- delivery ----------------------------------------------------------------------------------------------

def client_publish(c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
    """HPUB from a client whose headers may ask for a trace (Client.proto_hpub sends it here)."""
    acc = c.account
    skip, mt = start(c, acc, subject, hdr, msg, False) if wants_trace(acc, hdr, msg) else (False, None)
    if skip:
        return
    if mt is _DISABLE:
        hdr, msg = disable(hdr, msg)
        mt = None
    if mt is None:
        if c.slow_path:
            if not c._pub_checks(b"HPUB", subject, reply, hdr, msg):
                return
            if c.verbose:
                c.send_ok()
        acc.deliver(c, subject, reply, hdr, msg)
        return
    if c.slow_path:
        perms = c.perms
        if perms is not None and perms.has_pub and not perms.can_publish(subject):
            from rillet.gocompat.goquote import go_quote
            mt.ingress["error"] = f"Permissions Violation for Publish to {go_quote(subject)}"
            c._pub_checks(b"HPUB", subject, reply, hdr, msg)
            mt.send()
            return
        if not c._pub_checks(b"HPUB", subject, reply, hdr, msg):
            mt.send()
            return
        if c.verbose:
            c.send_ok()
    run(mt, acc, c, subject, reply, hdr, msg)


def max_payload_event(c: Any, subject: bytes, hdr: bytes, size: int) -> None:
    """A client's message refused for max payload: when its headers (what arrived of them) ask for a trace,
    the event with the ingress error goes out before the connection is closed, as nats-server does."""
    acc = getattr(c, "account", None)
    if acc is None or not wants_trace(acc, len(hdr), hdr):
        return
    _, mt = start(c, acc, subject, len(hdr), hdr, False, ingress_error=ERR_MAX_PAYLOAD)
    if isinstance(mt, MsgTrace):
        mt.size = size
        mt.send()


def run(mt: MsgTrace, acc: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
    """Deliver a traced message in ``acc`` (mappings, then the match) and send its event."""
    if acc.mappings:
        mapped = acc.map_subject(subject)
        if mapped is None:
            mt.send()
            return
        if mapped != subject:
            mt.mapped(mapped)
            subject = mapped
    prev, _state.CURRENT = _state.CURRENT, mt
    try:
        r = acc._match(subject.decode("utf-8", "surrogateescape"))
        if r.psubs or r.qsubs:
            acc.deliver_result(c, r, subject, reply, hdr, msg)
        elif acc.no_match is not None:
            acc.no_match(c, subject, reply, hdr, msg)
        elif reply and c.no_responders and not mt.tonly:
            acc._no_responders(c, subject, reply)
    finally:
        _state.CURRENT = prev
    mt.send()


def routed_inbound(acc: Any, rc: Any, subject: bytes, reply: bytes | None, queues: tuple, hdr: int,
                   msg: bytes, deliver: Any) -> bool:
    """A message from a route/gateway/leaf that may be traced: when it is, ``deliver(...)`` runs with the
    trace current and this server's event is sent. Returns False when it is not traced (the caller
    delivers it as usual)."""
    skip, mt = start(rc, acc, subject, hdr, msg, True)
    if skip:
        return True
    if mt is None:
        return False
    if mt is _DISABLE:  # delivered untraced, its trace destination disabled
        hdr, msg = disable(hdr, msg)
        deliver(rc, subject, reply, queues, hdr, msg)
        return True
    prev, _state.CURRENT = _state.CURRENT, mt
    try:
        deliver(rc, subject, reply, queues, hdr, msg)
    finally:
        _state.CURRENT = prev
    mt.send()
    return True


def gateway_inbound(gw: Any, gc: Any, account: bytes, subject: bytes, reply: bytes | None, queues: tuple,
                    hdr: int, msg: bytes, process: Any) -> bool:
    """A message from gateway connection ``gc`` that may be traced (a ``_GR_.`` reply too, traced under the
    subject it arrived with): when it is, ``process(gc, account, ...)`` (the gateway's inbound handling) runs
    with the trace current and this server's event is sent. The account is looked up without resolving it,
    as nats-server; an unknown one is not traced (a trace-only message is then dropped)."""
    acc = gw.server.accounts.get(account.decode("utf-8", "surrogateescape"))
    if acc is None:
        headers, has_dest, has_parent = parse_headers(msg[:hdr])
        if not (has_dest or has_parent):
            return False
        gw.server.log.error(f"{_prefix(gc)} - Account \"{account.decode('utf-8', 'replace')}\" was not found, "
                            "won't be able to trace events")
        to = headers.get(TRACE_ONLY, [""])[0].lower() if has_dest else ""
        return to in ("1", "true", "on")

    def deliver(rc: Any, s: bytes, r: bytes | None, q: tuple, h: int, m: bytes) -> None:
        process(rc, account, s, r, q, h, m)
    return routed_inbound(acc, gc, subject, reply, queues, hdr, msg, deliver)


def owns(mt: MsgTrace, hdr: int, msg: bytes) -> bool:
    """Is this message (with headers) the traced one, or one carrying it on (not a reply made meanwhile)?"""
    return msg.find(b"Nats-Trace-Dest", 0, hdr) >= 0 or msg[:hdr].lower().find(b"traceparent") >= 0


def _call(icb: Any, sub: Any, c: Any, route: Any, subject: bytes, reply: bytes | None, hdr: int,
          msg: bytes) -> Any:
    """A subscription callback ``icb`` called as delivery calls it: with the route a routed message came
    over when the callback takes one (``routed``)."""
    if route is not None and getattr(icb, "routed", False):
        return icb(sub, c, route, reply, hdr, msg, subject)
    return icb(sub, c, subject, reply, hdr, msg)
