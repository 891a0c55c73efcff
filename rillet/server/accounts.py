"""Accounts: each has its own subject space (a sublist) and the message delivery hot path."""
from __future__ import annotations

from random import random
from typing import TYPE_CHECKING, Any

import rillet.server.msgtrace as _mt
from rillet.subjects.sublist import Sublist

if TYPE_CHECKING:
    from rillet.server.client import Subscription
    from rillet.server.server import Server

GLOBAL_ACCOUNT = "$G"


class Account:
    __slots__ = ("name", "server", "sublist", "clients", "_pending", "_match", "interest_watchers", "mappings",
                 "mconns", "msubs", "mpay", "imports", "sub_removed", "stream_imports", "no_match", "trace_dest",
                 "trace_sampling", "__weakref__")

    def __init__(self, server: "Server", name: str) -> None:
        self.name = name
        self.server = server
        self.sublist = Sublist(cache=not server.opts.disable_sublist_cache)
        self._match = self.sublist.match
        self.mappings: list[Any] = []  # rillet.subjects.mapping.Mapping, first matching source wins
        # account limits (config ``limits {}``); -1 = no limit
        self.mconns = -1
        self.msubs = -1
        self.mpay = -1
        self.imports: Any = None  # rillet.server.account_config.AccountImports, when configured
        self.clients: set[Any] = set()
        self._pending = server.pending_flush
        # literal subject -> callbacks run when a subscription on exactly that subject comes or goes
        # (JetStream push consumers watch their deliver subject)
        self.interest_watchers: dict[str, list[Any]] = {}
        # callbacks cb(account, sub) run after any subscription goes (latency tracking watches requestors)
        self.sub_removed: list[Any] | None = None
        # the stream imports into this account: (exporter, exported subject, remap or None, import sub)
        self.stream_imports: list[tuple[Any, str, Any, Any]] | None = None
        # called by a client's publish that matched no subscription here, when set (gateways send it on)
        self.no_match: Any = None
        # msg_trace { dest, sampling }: where traces started by a sampled traceparent header go (msgtrace)
        self.trace_dest: str | None = None
        self.trace_sampling = 100

    def add_sub(self, sub: "Subscription") -> None:
        self.sublist.insert(sub)
        if self.interest_watchers:
            self._notify_interest(sub.subject)
        if self.stream_imports:
            self._notify_exporters(sub.subject)

    def remove_sub(self, sub: "Subscription") -> None:
        self.sublist.remove(sub)
        if self.interest_watchers:
            self._notify_interest(sub.subject)
        if self.stream_imports:
            self._notify_exporters(sub.subject)
        if self.sub_removed:
            for cb in list(self.sub_removed):
                cb(self, sub)

    def _notify_interest(self, subject: str) -> None:
        cbs = self.interest_watchers.get(subject)
        if cbs:
            for cb in list(cbs):
                cb()

    def _notify_exporters(self, subject: str) -> None:
        """A subscription came or went here: watchers in accounts we import streams from, whose subject
        reaches this one through the import, see the change (as nats-server's shadow subscriptions make
        interest in an importing account interest in the exporting one)."""
        from rillet.subjects.validate import subject_matches_filter
        live = []
        for entry in self.stream_imports or ():
            exporter, src, remap, isub = entry
            if isub.client.subs.get(isub.sid) is not isub:
                continue  # the import is gone (reload, JWT update)
            live.append(entry)
            if not exporter.interest_watchers:
                continue
            for key in list(exporter.interest_watchers):
                if subject_matches_filter(key, src) and \
                        subject_matches_filter(remap(key) if remap is not None else key, subject):
                    exporter._notify_interest(key)
        self.stream_imports = live

    def has_interest(self, subject: str, depth: int = 0) -> bool:
        """Would a publish on ``subject`` reach anyone? A stream import's subscription counts only when the
        importing account has interest in the subject it gets there (nats-server's shadow subscriptions)."""
        r = self._match(subject)
        if r.qsubs:
            return True
        for sub in r.psubs:
            icb = sub.icb
            if icb is None:
                return True
            imp = getattr(icb, "import_to", None)
            if imp is None:
                return True
            importer, remap = imp
            if depth < 8 and importer.has_interest(remap(subject) if remap is not None else subject, depth + 1):
                return True
        return False

    def num_subs(self) -> int:
        return self.sublist.count()

    def deliver(self, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes,
                deliver: bytes | None = None) -> bool:
        """Deliver one published message to every matching subscription. Returns True if anyone got it.

        ``hdr`` is the header length (-1 for a plain PUB); ``msg`` holds headers followed by the payload.
        ``deliver``: the subject subscribers see when it is not the one matched (a JetStream delivery that
        came through an import keeps its stream subject, see ``deliver_result``).
        """
        if self.mappings:
            subject = self.map_subject(subject)  # type: ignore[assignment]
            if subject is None:
                return False
        r = self._match(subject.decode("utf-8", "surrogateescape"))
        if r.psubs or r.qsubs:
            if deliver is not None:
                return self.deliver_result(c, r, deliver, reply, hdr, msg, subject)
            return self.deliver_result(c, r, subject, reply, hdr, msg)
        if reply and c.no_responders:
            self._no_responders(c, subject, reply)
        return False

    def map_subject(self, subject: bytes) -> bytes | None:
        """The subject after the account's mappings (the first whose source matches); None = drop."""
        s = subject.decode("utf-8", "surrogateescape")
        for m in self.mappings:
            if m.match(s):
                d = m.select(s)
                return None if d is None else d.encode("utf-8", "surrogateescape")
        return subject

    def match(self, subject: str) -> Any:
        return self._match(subject)

    def deliver_result(self, c: Any, r: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes,
                       route: bytes | None = None) -> bool:
        """Deliver to the subscriptions of a sublist result ``r`` (see ``deliver``).

        The frame is built once as a head (``MSG <subject> ``) and a tail (`` [reply] <size>\r\n<msg>\r\n``);
        each subscriber's buffer gets head, its SID and tail.

        ``route``: the subject ``r`` was matched on when subscribers are shown another one (a JetStream
        delivery shows its stream subject). Internal callbacks marked ``routed`` (imports, which must route
        the message on) get the matched subject, and the shown one as an extra argument.
        """
        if hdr > 0 and _mt.CURRENT is not None and _mt.owns(_mt.CURRENT, hdr, msg):
            return _mt.deliver_result(self, c, r, subject, reply, hdr, msg, route)  # a traced message
        size = len(msg)
        if hdr < 0:
            head = b"MSG %b " % subject
            if reply:
                tail = b" %b %d\r\n%b\r\n" % (reply, size, msg)
            else:
                tail = b" %d\r\n%b\r\n" % (size, msg)
        else:
            head = b"HMSG %b " % subject
            if reply:
                tail = b" %b %d %d\r\n%b\r\n" % (reply, hdr, size, msg)
            else:
                tail = b" %d %d\r\n%b\r\n" % (hdr, size, msg)
        pending = self._pending
        no_echo = not c.echo
        n = 0
        done: list | None = None
        if self.server.trace_on:
            self._trace_deliveries(r, c, no_echo, subject, reply, hdr, size)
        for sub in r.psubs:
            sc = sub.client
            if no_echo and sc is c:
                continue
            if sub.icb is not None:
                sub.nm += 1
                if route is not None and getattr(sub.icb, "routed", False):
                    ok = sub.icb(sub, c, route, reply, hdr, msg, subject)
                else:
                    ok = sub.icb(sub, c, subject, reply, hdr, msg)
                if ok is not False:  # (a service import that reached nobody in its exporter returns False)
                    n += 1
                continue
            if sc.perms is not None and not self._perm_ok(sc, subject, reply):
                continue
            sub.nm += 1
            if sub.max:
                if sub.nm > sub.max:
                    continue
                if sub.nm == sub.max:
                    if done is None:
                        done = []
                    done.append(sub)
            out = sc.out
            if hdr >= 0 and not sc.headers:
                out += b"MSG %b %b%b" % (subject, sub.sid_b, _strip_headers(reply, hdr, msg))
            else:
                out += head
                out += sub.sid_b
                out += tail
            sc.out_msgs += 1
            sc.out_bytes += size
            n += 1
            if not sc.flush_pending:
                sc.flush_pending = True
                pending.append(sc)
        if r.qsubs:
            for group in r.qsubs:
                sub = self._pick(group, c, not no_echo, subject, reply)
                if sub is None:
                    continue
                sc = sub.client
                sub.nm += 1
                if sub.icb is not None:
                    if route is not None and getattr(sub.icb, "routed", False):
                        ok = sub.icb(sub, c, route, reply, hdr, msg, subject)
                    else:
                        ok = sub.icb(sub, c, subject, reply, hdr, msg)
                    if ok is not False:
                        n += 1
                    continue
                if sub.max and sub.nm >= sub.max:
                    if done is None:
                        done = []
                    done.append(sub)
                out = sc.out
                if hdr >= 0 and not sc.headers:
                    out += b"MSG %b %b%b" % (subject, sub.sid_b, _strip_headers(reply, hdr, msg))
                else:
                    out += head
                    out += sub.sid_b
                    out += tail
                sc.out_msgs += 1
                sc.out_bytes += size
                n += 1
                if not sc.flush_pending:
                    sc.flush_pending = True
                    pending.append(sc)
        if done is not None:
            for sub in done:
                sub.client.remove_sub(sub)
        if n:
            return True
        if reply and c.no_responders:
            self._no_responders(c, subject, reply)
        return False

    @staticmethod
    def _trace_deliveries(r: Any, c: Any, no_echo: bool, subject: bytes, reply: bytes | None, hdr: int,
                          size: int) -> None:
        """``->> [MSG ...]`` trace lines for the plain subscribers a message goes to (tracing is on)."""
        rp = f" {reply.decode(errors='replace')}" if reply else ""
        sz = f"{hdr} {size}" if hdr >= 0 else f"{size}"
        op = "HMSG" if hdr >= 0 else "MSG"
        for sub in r.psubs:
            sc = sub.client
            if sub.icb is None and not (no_echo and sc is c):
                sc.trace(f"->> [{op} {subject.decode(errors='replace')} {sub.sid.decode(errors='replace')}{rp} {sz}]")

    def _pick(self, group: list, c: Any, echo: bool, subject: bytes, reply: bytes | None) -> Any:
        """One random member of a queue group that may receive this message."""
        n = len(group)
        i = int(random() * n)
        for k in range(n):
            sub = group[(i + k) % n]
            sc = sub.client
            if sc is c and not echo:
                continue
            if sub.max and sub.nm >= sub.max:
                continue
            if sc.perms is not None and sub.icb is None and not self._perm_ok(sc, subject, reply):
                continue
            return sub
        return None

    @staticmethod
    def _perm_ok(sc: Any, subject: bytes, reply: bytes | None) -> bool:
        perms = sc.perms
        if perms.sub_deny is not None and perms.deliver_denied(subject.decode("utf-8", "surrogateescape")):
            return False
        if reply and perms.resp is not None:
            perms.track_reply(reply)
        return True

    def _no_responders(self, c: Any, subject: bytes, reply: bytes) -> None:
        """Tell a requester that nobody is listening: a 503 status on its own reply subscription."""
        r = self._match(reply.decode("utf-8", "surrogateescape"))
        for sub in r.psubs:
            if sub.client is c:
                hdr = b"NATS/1.0 503\r\nNats-Subject: " + subject + b"\r\n\r\n"
                hl = str(len(hdr)).encode()
                if sub.icb is not None:
                    sub.icb(sub, c, reply, None, len(hdr), hdr)
                    return
                c.out += b"HMSG " + reply + b" " + sub.sid_b + b" " + hl + b" " + hl + b"\r\n" + hdr + b"\r\n"
                c.flush()
                return


def _strip_headers(reply: bytes | None, hdr: int, msg: bytes) -> bytes:
    """The MSG tail for a subscriber that does not support headers: the payload only."""
    payload = msg[hdr:]
    sz = str(len(payload)).encode()
    if reply:
        return b" " + reply + b" " + sz + b"\r\n" + payload + b"\r\n"
    return b" " + sz + b"\r\n" + payload + b"\r\n"
