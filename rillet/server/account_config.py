"""Configured accounts: per-account mappings, limits, and stream/service exports and imports.

Behaviour follows nats-server's ``accounts {}`` block (opts.go parseAccounts and friends).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

from rillet.digest import token_urlsafe
from rillet.server.client import go_quote
from rillet.config.latency import parse_latency
from rillet.server.latency import Tracking, bad_request, should_sample
from rillet.subjects.validate import (is_valid_literal_subject, is_valid_subject, subject_is_subset_match,
                                     subject_matches_filter)

if TYPE_CHECKING:
    from rillet.server.server import Server


def configure_accounts(server: "Server") -> None:
    """Create the accounts of ``opts.accounts`` and apply their settings. ValueError: refuse to start."""
    o = server.opts
    raw = o.accounts
    if not isinstance(raw, dict) or not raw:
        return
    from rillet.subjects.mapping import parse_mappings
    exports: dict[str, list[dict]] = {}
    for name, cfg in raw.items():
        acc = server.lookup_account(name)
        if not isinstance(cfg, dict):
            continue
        mp = cfg.get("mappings", cfg.get("maps"))
        if mp:
            acc.mappings = parse_mappings(mp, o.cluster.name)
            if o.default_js_domain:
                from rillet.server import jsdomain
                jsdomain.apply(server, acc)  # (after the account's own mappings)
        lim = cfg.get("limits")
        if lim is not None:
            _parse_limits(acc, lim)
        exports[name] = _parse_exports(cfg.get("exports") or [])
        for key in ("msg_trace", "trace_dest"):
            if key in cfg:
                _parse_msg_trace(acc, key, cfg[key])
        _check_latency(server, exports[name])
    for name, cfg in raw.items():
        if isinstance(cfg, dict) and cfg.get("imports"):
            for imp in cfg["imports"]:
                _add_import(server, server.lookup_account(name), imp, exports)


def _kind_of(item: Any, what: str, neither: str) -> str:
    """"stream" or "service": which of the two an export's or import's map (``what``) names; a ValueError when
    it is no map, or (``neither``) when it names neither."""
    if not isinstance(item, dict):
        raise ValueError(f"{what} Items should be a map, got {item!r}")
    if "stream" in item:
        return "stream"
    if "service" in item:
        return "service"
    raise ValueError(neither)


def _parse_exports(raw: Any) -> list[dict]:
    out = []
    for e in raw:
        kind = _kind_of(e, "Export", "Export needs a stream or a service subject")
        subj = e[kind]
        if not isinstance(subj, str) or not is_valid_subject(subj):
            raise ValueError(f"Invalid {kind} export subject {subj!r}")
        accs = e.get("accounts")
        rt = str(e.get("response_type", e.get("response", "singleton"))).lower()
        if rt not in ("singleton", "single", "stream", "chunked"):
            raise ValueError(f"Unknown response type: {rt!r}")
        thr = e.get("response_threshold", e.get("threshold"))
        lat = None
        if "latency" in e:
            if kind != "service":
                raise ValueError("Detected latency directive on non-service")
            lat = parse_latency(e["latency"])
        if "allow_trace" in e and kind != "service":
            raise ValueError("Detected allow_trace directive on non-service")
        out.append({"kind": kind, "subject": subj, "accounts": None if accs is None else set(accs),
                    "allow_trace": bool(e.get("allow_trace", False)),
                    "response_type": "singleton" if rt == "single" else rt,
                    "threshold": _duration(thr) if thr is not None else DEFAULT_RESPONSE_THRESHOLD,
                    "latency": lat})
    return out


def _check_latency(server: "Server", exports: list[dict]) -> None:
    """Latency tracking settings nats-server refuses (TrackServiceExportWithSampling)."""
    for e in exports:
        lat = e.get("latency")
        if lat is None:
            continue
        q = go_quote(e["subject"].encode())
        if server.opts.no_system_account:
            raise ValueError(f"Error adding service latency sampling for {q}: system account not setup")
        err = None
        if not is_valid_literal_subject(lat.subject) or any(
                x["kind"] == "service" and subject_is_subset_match(lat.subject, x["subject"]) for x in exports):
            err = "invalid publish subject"  # (a results subject inside an exported service would loop)
        elif e["response_type"] != "singleton":
            err = "bad service response type"
        if err:
            raise ValueError(f"Error adding service latency sampling for {q} on subject "
                             f"{go_quote(lat.subject.encode())}: {err}")


def _duration(v: Any) -> float:
    if isinstance(v, (int, float)):
        return float(v)
    from datetime import timedelta
    if isinstance(v, timedelta):
        return v.total_seconds()
    import re
    total = 0.0
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    for num, unit in re.findall(r"([0-9.]+)(ns|us|µs|ms|s|m|h)", str(v)):
        total += float(num) * units[unit]
    return total


DEFAULT_RESPONSE_THRESHOLD = 120.0  # nats-server's default service response threshold (2 minutes)

# accounts that a message is being re-delivered into through an import, right now (loop guard)
_in_flight: set = set()


def _add_import(server: "Server", acc: Any, imp: Any, exports: dict[str, list[dict]]) -> None:
    kind = _kind_of(imp, "Import", "Import needs a stream or a service")
    src = imp[kind]
    if not isinstance(src, dict) or "account" not in src or "subject" not in src:
        raise ValueError(f"Expect an account name and a subject for {kind} import")
    subj = src["subject"]
    src_name = src["account"]
    exp = None
    # the export of exactly this subject, else one whose wildcard covers it (as nats-server looks them
    # up): its response type is the import's
    candidates = [e for e in exports.get(src_name, []) if e["kind"] == kind and
                  subject_is_subset_match(subj, e["subject"]) and (e["accounts"] is None or acc.name in e["accounts"])]
    for e in candidates:
        if e["subject"] == subj:
            exp = e
            break
    else:
        if candidates:
            exp = candidates[0]
    if exp is None or src_name not in server.opts.accounts:
        raise ValueError(f"Error adding {kind} import {go_quote(subj.encode())}: {kind} import not authorized")
    src_acc = server.lookup_account(src_name)
    if "allow_trace" in imp and kind != "stream":
        raise ValueError("Detected allow_trace directive on a non-stream")
    if kind == "stream":
        _stream_import(server, src_acc, acc, subj, imp.get("prefix"), imp.get("to"), bool(imp.get("allow_trace")))
    else:
        _service_import(server, src_acc, acc, subj, imp.get("to") or subj, exp, bool(imp.get("share")))


def _transform(src: str, dest: str) -> Callable[[str], str]:
    from rillet.subjects.mapping import SubjectTransform
    try:
        return SubjectTransform(src, dest).transform
    except ValueError:
        return lambda s: dest


def _stream_import(server: "Server", exporter: Any, importer: Any, subj: str, prefix: Any, to: Any,
                   allow_trace: bool = False) -> None:
    """Messages published in ``exporter`` on ``subj`` are delivered in ``importer`` (prefixed / remapped)."""
    if prefix:
        p = str(prefix).rstrip(".") + "."
        remap: Callable[[str], str] | None = lambda s: p + s  # noqa: E731
    elif to and to != subj:
        remap = _transform(subj, str(to))
    else:
        remap = None
    ic = server.internal_client(importer, f"stream import {exporter.name} -> {importer.name}")
    ic.echo = True

    def on_msg(sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes,
               deliver: bytes | None = None) -> None:
        if importer in _in_flight:
            return  # a cycle of imports: deliver once
        if remap is not None:
            subject = remap(subject.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
        _in_flight.add(importer)
        try:
            # a JetStream delivery (push consumer to an exported deliver subject) keeps its stream subject
            importer.deliver(ic, subject, reply, hdr, msg, deliver)
        finally:
            _in_flight.discard(importer)
        server.schedule_flush()

    on_msg.routed = True  # type: ignore[attr-defined]  (see Account.deliver_result)
    on_msg.import_to = (importer, remap)  # type: ignore[attr-defined]  (see Account.has_interest)
    on_msg.allow_trace = allow_trace  # type: ignore[attr-defined]  (rillet.server.msgtrace)
    isub = server.internal_client(exporter, f"stream export {exporter.name} -> {importer.name}").subscribe(
        subj, on_msg)
    if importer.stream_imports is None:
        importer.stream_imports = []
    importer.stream_imports.append((exporter, subj, remap, isub))


def _service_import(server: "Server", exporter: Any, importer: Any, subj: str, local: str, exp: dict,
                    share: bool = False) -> None:
    """Requests published in ``importer`` on ``local`` reach ``exporter`` on ``subj``, with a ``_R_.`` reply
    subject in the exporter that routes the response back to the requester's reply subject."""
    remap = _transform(local, subj) if local != subj else None
    ic_exp = server.internal_client(exporter, f"service import {importer.name} -> {exporter.name}")
    ic_exp.echo = True
    ic_exp.import_share = share  # a request it delivers going on through another import: a chained one
    ic_imp = server.internal_client(importer, f"service reply {exporter.name} -> {importer.name}")
    ic_imp.echo = True
    rmap = _response_map(server, exporter)
    single = exp["response_type"] == "singleton"
    threshold = exp["threshold"]
    lat = exp.get("latency")

    def on_request(sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> bool | None:
        if exporter in _in_flight:
            return
        if remap is not None:
            subject = remap(subject.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
        tracking, theaders = should_sample(lat, hdr, msg) if lat is not None else (False, None)
        rr = None
        trk = None
        # the requester's client info (nats-server's Nats-Request-Info header), which the responder may read
        hdr, msg = _with_request_info(server, c, importer, exporter, share, reply, hdr, msg)
        if reply:
            if tracking:
                trk = Tracking(lat, rmap.send, c, share, theaders)
            rr = rmap.add(importer, ic_imp, reply, single, threshold, trk)
        elif tracking:
            bad_request(server, lat, rmap.send, c, share, theaders)
        _in_flight.add(exporter)
        try:
            delivered = exporter.deliver(ic_exp, subject, rr, hdr, msg)
        finally:
            _in_flight.discard(exporter)
        if not delivered and rr is not None:
            rmap.pop(rr)
            if trk is not None:
                trk.failed(server, 503)
        server.schedule_flush()
        # not delivered: the requester's delivery counts no responder here, and gets a 503 only when nothing
        # else got the message (another import, a subscriber), as nats-server (Account.deliver_result)
        return delivered

    on_request.service_import = (exporter, remap)  # type: ignore[attr-defined]  (rillet.server.msgtrace)
    on_request.allow_trace = exp.get("allow_trace", False)  # type: ignore[attr-defined]
    # a traced request going on into the exporter: its trace destination becomes a _R_ reply subject there,
    # through which events of servers further on reach the requester's destination (as nats-server)
    on_request.trace_reply = lambda dest: rmap.add(  # type: ignore[attr-defined]
        importer, ic_imp, dest, False, threshold)
    on_request.trace_reply_drop = rmap.pop  # type: ignore[attr-defined]  (not sent to another server)
    ic_in = server.internal_client(importer, f"service import {importer.name} -> {exporter.name}")
    ic_in.subscribe(local, on_request)


# nats-server's ClientInfo fields in its JSON order (the Nats-Request-Info header is marshalled from it)
_CI_ORDER = ("start", "host", "id", "acc", "svc", "user", "name", "lang", "ver", "rtt", "server", "cluster",
             "alts", "stop", "jwt", "issuer_key", "name_tag", "tags", "kind", "client_type", "client_id",
             "nonce", "reply")
_REQUEST_INFO_B = b"Nats-Request-Info"


def _header_value(h: bytes, key: bytes) -> bytes | None:
    """The value of header ``key`` in a header block (the first), or None."""
    for line in h.split(b"\r\n")[1:]:
        k, sep, v = line.partition(b":")
        if sep and k == key:
            return v.strip()
    return None


def _without_header(h: bytes, key: bytes) -> bytes:
    """A header block (ending with its blank line) without header ``key``."""
    lines = h.split(b"\r\n")
    kept = [lines[0]] + [ln for ln in lines[1:] if ln and ln.partition(b":")[0] != key]
    return b"\r\n".join(kept) + b"\r\n\r\n"


def _conn_info(server: "Server", c: Any, detailed: bool) -> dict | None:
    """nats-server's getClientInfo for the connection a request came from: a client's, a leaf connection's
    (its account and RTT), an internal client's (its account); None for routes, gateways and the system
    account's own clients, which nats-server gives none."""
    from rillet.server.latency import client_info
    kind = getattr(c, "kind", None)
    if kind == 0:
        return client_info(server, c, detailed)
    acc = getattr(c, "account", None)
    if acc is None or kind not in (1, 4):
        return None
    if kind == 1 and acc is getattr(server, "system_account", None):
        return None
    d: dict[str, Any] = {"acc": acc.name}
    rtt = int((getattr(c, "rtt", 0) or 0) * 1e9)
    if rtt:
        d["rtt"] = rtt
    if detailed and kind == 4:
        d["kind"] = "Leafnode"
    return d


def _server_info(server: "Server", c: Any, ci: dict) -> None:
    """nats-server's addServerAndClusterInfo: the server (a leaf's remote server), the cluster, and the
    other clusters reachable through gateways."""
    name = getattr(c, "remote_name", "") if getattr(c, "kind", None) == 4 else server.name
    if name:
        ci["server"] = name
    if server.opts.cluster.name:
        ci["cluster"] = server.opts.cluster.name
    gw = getattr(server, "gateway", None)
    names = [gc.name for gc in getattr(gw, "outo", ()) if gc.name] if gw is not None else []
    if names:
        ci["alts"] = names


def _with_request_info(server: "Server", c: Any, importer: Any, exporter: Any, share: bool,
                       reply: bytes | None, hdr: int, msg: bytes) -> tuple[int, bytes]:
    """A request crossing a service import carries the requester's client info in ``Nats-Request-Info``
    (nats-server's processServiceImport): the account and RTT, all details when the import ``share``s;
    through a chain of imports the first one's info is kept, with ``svc`` naming the account it came
    through; the server and cluster are added when the request enters the system account (or a sharing
    import) from one that does not share; a leaf's forwarded header is replaced by the leaf's own identity;
    ``reply`` keeps a fast batch publisher's ``.$FI`` reply subject."""
    import json  # (here: an idle server loads no json module, issue 20)
    prev = None
    if hdr > 0:
        v = _header_value(msg[:hdr], _REQUEST_INFO_B)
        if v is not None:
            try:
                prev = json.loads(v)
            except ValueError:
                prev = None
            if not isinstance(prev, dict):
                prev = None
    prev_share = getattr(c, "import_share", None)  # c delivered it through an import: a chained import
    chained = prev_share is not None
    eff_share = prev_share if chained else share
    into_sys = exporter is getattr(server, "system_account", None)
    is_leaf = getattr(c, "kind", None) == 4
    fast = reply is not None and reply.endswith(b".$FI")
    if is_leaf and prev is not None:
        ci = _conn_info(server, c, eff_share)
        if ci is not None:
            if chained and prev.get("reply"):
                ci["reply"] = prev["reply"]
            elif fast:
                ci["reply"] = reply.decode("utf-8", "surrogateescape")  # type: ignore[union-attr]
            if chained:
                ci["svc"] = importer.name
            if not eff_share and (into_sys or (chained and share)):
                _server_info(server, c, ci)
    elif chained and prev is not None:
        ci = prev
        ci["svc"] = importer.name
        if not eff_share and (share or into_sys):
            _server_info(server, c, ci)
    else:
        ci = _conn_info(server, c, eff_share)
        if ci is not None:
            if fast:
                ci["reply"] = reply.decode("utf-8", "surrogateescape")  # type: ignore[union-attr]
            if not eff_share and into_sys:
                _server_info(server, c, ci)
    if ci is None:
        return hdr, msg
    rank = {k: i for i, k in enumerate(_CI_ORDER)}
    ordered = dict(sorted(ci.items(), key=lambda kv: rank.get(kv[0], len(rank))))
    value = json.dumps(ordered, separators=(",", ":"), ensure_ascii=False).encode()
    # replaced where it was: removed, then added last (as nats-server's setHeader)
    h = _without_header(msg[:hdr], _REQUEST_INFO_B) if hdr > 0 else b"NATS/1.0\r\n\r\n"
    h = h[:-2] + b"Nats-Request-Info: " + value + b"\r\n\r\n"
    return len(h), h + msg[hdr:] if hdr > 0 else h + msg


class _Resp:
    """Where the answers to one ``_R_.`` reply subject go."""

    __slots__ = ("importer", "ic", "reply", "single", "expires", "track")

    def __init__(self, importer: Any, ic: Any, reply: bytes, single: bool, expires: float, track: Any) -> None:
        self.importer = importer
        self.ic = ic
        self.reply = reply
        self.single = single
        self.expires = expires
        self.track = track  # a latency.Tracking when this request is measured


class ResponseMap:
    """The exporter's ``_R_.`` reply subjects: each routes responses back to one requester's reply subject."""

    def __init__(self, server: "Server", exporter: Any) -> None:
        self.server = server
        self.entries: dict[bytes, _Resp] = {}
        self._adds = 0
        self.tracked: dict[Any, dict[bytes, _Resp]] = {}  # importer -> its measured requests still waiting
        self.ic = server.internal_client(exporter, f"service responses {exporter.name}")
        self.ic.subscribe("_R_.>", self.on_response)

    def send(self, subject: bytes, payload: bytes) -> None:
        """Publish in the exporting account (latency metrics)."""
        self.ic.publish(subject, None, payload)

    def add(self, importer: Any, ic: Any, reply: bytes, single: bool, threshold: float,
            track: Any = None) -> bytes:
        self._adds += 1
        if self._adds % 256 == 0:
            self.purge()
        rr = b"_R_." + token_urlsafe(9).replace("-", "x").replace("_", "y").encode()
        self.entries[rr] = _Resp(importer, ic, reply, single, time.monotonic() + threshold, track)
        if track is not None:
            track.timer = self.server.loop.call_later(threshold, self._timed_out, rr)
            waiting = self.tracked.get(importer)
            if waiting is None:
                waiting = self.tracked[importer] = {}
                if importer.sub_removed is None:
                    importer.sub_removed = []
                importer.sub_removed.append(self._requestor_sub_removed)
            waiting[rr] = self.entries[rr]
        return rr

    def _untrack(self, rr: bytes, e: _Resp) -> None:
        waiting = self.tracked.get(e.importer)
        if waiting is None:
            return
        waiting.pop(rr, None)
        if not waiting:
            del self.tracked[e.importer]
            cbs = e.importer.sub_removed
            if cbs and self._requestor_sub_removed in cbs:
                cbs.remove(self._requestor_sub_removed)

    def pop(self, rr: bytes) -> None:
        e = self.entries.pop(rr, None)
        if e is not None and e.track is not None:
            self._untrack(rr, e)

    def _requestor_sub_removed(self, acc: Any, sub: Any) -> None:
        """A subscription went in an importing account: a measured request whose requestor no longer
        listens on its reply subject gets a 408 metric."""
        waiting = self.tracked.get(acc)
        if not waiting:
            return
        for rr, e in list(waiting.items()):
            r = e.reply.decode("utf-8", "surrogateescape")
            if subject_matches_filter(r, sub.subject) and not acc.sublist.has_interest(r):
                self.pop(rr)
                e.track.failed(self.server, 408)
                self.server.schedule_flush()

    def _timed_out(self, rr: bytes) -> None:
        """A measured request got no answer within the response threshold: 504."""
        e = self.entries.get(rr)
        if e is None or e.track is None:
            return
        e.track.timer = None
        self.pop(rr)
        if not e.track.done:
            e.track.failed(self.server, 504)
            self.server.schedule_flush()

    def purge(self) -> None:
        now = time.monotonic()
        for k in [k for k, v in self.entries.items() if v.expires < now and v.track is None]:
            del self.entries[k]

    def on_response(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes,
                    deliver: bytes | None = None) -> None:
        """An answer on a ``_R_.`` subject: to the requester's reply subject in the importing account. A
        JetStream delivery (a pull consumer's message) arrives with its stream subject in ``deliver``, and
        keeps it."""
        e = self.entries.get(subject)
        if e is None:
            return
        if e.track is not None and not e.track.done:
            e.track.responded(self.server, c)
        if e.single or e.expires < time.monotonic():
            self.pop(subject)
            if not e.single:
                return
        importer = e.importer
        if importer in _in_flight:
            return
        _in_flight.add(importer)
        try:
            importer.deliver(e.ic, e.reply, reply, hdr, msg, deliver)
        finally:
            _in_flight.discard(importer)
        self.server.schedule_flush()

    on_response.routed = True  # type: ignore[attr-defined]  (see Account.deliver_result)


def _response_map(server: "Server", exporter: Any) -> ResponseMap:
    rm = getattr(exporter, "imports", None)
    if rm is None:
        rm = exporter.imports = ResponseMap(server, exporter)
    return rm


def _parse_msg_trace(acc: Any, key: str, v: Any) -> None:
    """``msg_trace``/``trace_dest``: a destination subject, or ``{dest, sampling}`` (1..100, or "N%"), as
    nats-server parses it; sampling without a destination is dropped, a destination alone samples 100%."""
    from rillet.subjects.validate import is_valid_publish_subject

    def dest_of(k: str, d: Any) -> str:
        if not isinstance(d, str):
            raise ValueError(f"Field {k!r} should be a string, got {type(d).__name__}")
        if not is_valid_publish_subject(d):
            raise ValueError(f"Trace destination {go_quote(d.encode())} is not valid")
        return d
    if isinstance(v, str):
        acc.trace_dest = dest_of(key, v)
    elif isinstance(v, dict):
        for k, x in v.items():
            lk = k.lower()
            if lk == "dest":
                acc.trace_dest = dest_of(k, x)
            elif lk == "sampling":
                if isinstance(x, bool) or not isinstance(x, (int, str)):
                    raise ValueError(f"Trace destination sampling field {k!r} should be an integer or a "
                                     f"percentage, got {type(x).__name__}")
                if isinstance(x, str):
                    try:
                        n = int(x.strip().removesuffix("%"))
                    except ValueError:
                        raise ValueError(f"Invalid trace destination sampling value {go_quote(x.encode())}")
                else:
                    n = x
                if n <= 0 or n > 100:
                    raise ValueError(f"Ttrace destination sampling value {n} is invalid, needs to be [1..100]")
                acc.trace_sampling = n
            else:
                raise ValueError(f"Unknown field {k!r} parsing account message trace map/struct {key!r}")
    else:
        raise ValueError(f"Expected account message trace {key!r} to be a string or a map/struct, got "
                         f"{type(v).__name__}")
    if acc.trace_dest is None:
        acc.trace_sampling = 100  # (nats-server warns: a sampling without a destination traces nothing)


def _parse_limits(acc: Any, lim: Any) -> None:
    if not isinstance(lim, dict):
        raise ValueError(f"Expected account limits to be a map/struct, got {lim!r}")
    for k, v in lim.items():
        k = k.lower()
        if k in ("max_connections", "max_conn"):
            acc.mconns = int(v)
        elif k in ("max_subscriptions", "max_subs"):
            acc.msubs = int(v)
        elif k in ("max_payload", "max_pay"):
            acc.mpay = int(v)
        elif k in ("max_leafnodes", "max_leafs"):
            pass
        else:
            raise ValueError(f"Unknown field {k!r} parsing account limits")
