"""The system account's full set of internal subscriptions, and the system imports of every other account.

nats-server subscribes its internal system client to a fixed set of subjects when the system account
comes up (events.go, ``initEventTracking``), and gives every other account four service imports from the
system account (``registerSystemImports``). Rillet does the same, so that subscription counts in /varz,
/subsz and /accountz are the ones nats-server reports, and so that these requests work:

* in the system account: ``$SYS.REQ.SERVER.{PING,<id>}.<KIND>`` for every monitoring kind,
  ``$SYS.REQ.ACCOUNT.*.<KIND>``, ``$SYS.REQ.ACCOUNT.PING.STATZ``, ``$SYS.REQ.USER.*.INFO``,
  ``$SYS.DEBUG.SUBSCRIBERS``, ``$SYS.REQ.ACCOUNT.NSUBS``, ``$SYS.REQ.SERVER.<id>.{RELOAD,KICK,LDM}``;
* in any other account: ``$SYS.REQ.ACCOUNT.PING.CONNZ`` and ``$SYS.REQ.SERVER.PING.CONNZ`` (the
  requester's own account's connections), ``$SYS.REQ.ACCOUNT.PING.STATZ`` and ``$SYS.REQ.USER.INFO``.

Some of nats-server's subscriptions listen for what other servers of a cluster send (their statsz,
shutdown and lame-duck events, remote connection counts, claim updates over the wire, latency samples
from remote servers). Those subscriptions exist here too; other servers' STATSZ and SHUTDOWN events go
to ``remote_listeners`` (the clustered JetStream peer registry), the rest is ignored.
"""
from __future__ import annotations

from typing import Any

from rillet.digest import sha256
from rillet.gocompat.gotime import format_time
from rillet.gocompat.gojson import dumps
from rillet.gocompat.monitorfmt import set_lists

SERVER_KINDS = ("IDZ", "STATSZ", "VARZ", "SUBSZ", "CONNZ", "ROUTEZ", "GATEWAYZ", "LEAFZ", "ACCOUNTZ", "JSZ",
                "HEALTHZ", "PROFILEZ", "EXPVARZ", "IPQUEUESZ", "RAFTZ")
ACCOUNT_KINDS = ("SUBSZ", "CONNZ", "LEAFZ", "JSZ", "INFO", "STATZ", "CONNS")


def _shash(name: str) -> str:
    """A short stable hash of the server name (nats-server's getHash: the first 8 bytes of its sha256, each
    modulo 62 into 0-9A-Za-z; the same hash is the server's JetStream RAFT peer id)."""
    digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    return "".join(digits[b % 62] for b in sha256(name.encode()).digest()[:8])


def _ignore(sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
    """Events from other servers of a cluster: there are none; our own are not for us."""


class SystemServices:
    """Subscribes the system client, and gives accounts their system imports."""

    def __init__(self, sa: Any) -> None:
        self.sa = sa
        self.server = sa.server
        self.imported: set[str] = set()
        self._responders: dict[str, Any] = {}
        # fn(kind, body) for other servers' "STATSZ" and "SHUTDOWN" events (the JetStream peer registry)
        self.remote_listeners: list[Any] = []

    # ---- the system account ---------------------------------------------------------------------------

    def subscribe_all(self, ic: Any) -> None:
        sa = self.sa
        srv = self.server
        sid = srv.server_id
        shash = _shash(srv.name)
        ic.subscribe(f"$SYS._INBOX.{shash}.*", _ignore)  # replies to requests this server sends (none)
        ic.subscribe("$SYS.SERVER.ACCOUNT.*.CONNS", _ignore)
        ic.subscribe(f"$SYS._INBOX_.{sid}", _ignore)
        ic.subscribe("$SYS.REQ.ACCOUNT.NSUBS", self._on_nsubs)
        ic.subscribe("$SYS.SERVER.*.STATSZ", self._on_remote_server)
        ic.subscribe("$SYS.SERVER.*.SHUTDOWN", self._on_remote_server)
        ic.subscribe("$SYS.SERVER.*.LAMEDUCK", _ignore)
        ic.subscribe("$SYS.ACCOUNT.*.CLAIMS.UPDATE", self._on_claims_update)
        ic.subscribe("$SYS.REQ.ACCOUNT.*.CLAIMS.UPDATE", self._on_claims_update)
        ic.subscribe("$SYS.REQ.SERVER.PING", sa._on_ping_statsz)
        for kind in SERVER_KINDS:
            ic.subscribe(f"$SYS.REQ.SERVER.{sid}.{kind}", sa._on_server_req)
            ic.subscribe(f"$SYS.REQ.SERVER.PING.{kind}", sa._on_server_req)
        for kind in ACCOUNT_KINDS:
            ic.subscribe(f"$SYS.REQ.ACCOUNT.*.{kind}", sa._on_account_req)
        ic.subscribe("$SYS.REQ.USER.*.INFO", self._on_user_info)
        ic.subscribe("$SYS.REQ.USER.INFO", self._on_user_info)  # a system account user asking about itself
        ic.subscribe("$SYS.REQ.ACCOUNT.PING.STATZ", self._on_acc_ping_statz)
        ic.subscribe("$SYS.ACCOUNT.*.LEAFNODE.CONNECT", _ignore)
        ic.subscribe(f"$SYS.LATENCY.M2.{shash}", _ignore)
        ic.subscribe("$SYS.DEBUG.SUBSCRIBERS", self._on_debug_subscribers)
        ic.subscribe(f"$SYS.REQ.SERVER.{sid}.RELOAD", self._on_reload)
        ic.subscribe(f"$SYS.REQ.SERVER.{sid}.KICK", self._on_kick)
        ic.subscribe(f"$SYS.REQ.SERVER.{sid}.LDM", self._on_ldm)

    def _on_remote_server(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int,
                          msg: bytes) -> None:
        """A server's statsz or shutdown event (our own too: listeners skip it) to ``remote_listeners``."""
        if not self.remote_listeners:
            return
        kind = subject.rsplit(b".", 1)[-1].decode()
        body = bytes(msg[hdr:]) if hdr > 0 else bytes(msg)
        for fn in list(self.remote_listeners):
            fn(kind, body)

    def _reply(self, reply: bytes | None, obj: Any) -> None:
        self.sa._reply(reply, obj)

    def _respond(self, reply: bytes | None, err: str | None, code: int = 500) -> None:
        resp: dict[str, Any] = {"server": self.sa.server_info()}
        if err is not None:
            resp["error"] = {"code": code, "description": err}
        self._reply(reply, resp)

    @staticmethod
    def _body(hdr: int, msg: bytes) -> bytes:
        return msg[hdr:] if hdr > 0 else msg

    def _on_claims_update(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int,
                          msg: bytes) -> None:
        op = getattr(self.server, "operator", None)
        if op is not None:  # operator mode: the account resolver updates the account from its JWT
            op.resolver.on_account_update(sub, c, subject, reply, hdr, msg)
            return
        # configured accounts have no JWT: nats-server checks the token, then skips the update
        parts = subject.decode().split(".")
        key = parts[2] if parts[1] == "ACCOUNT" else parts[3]
        body = self._body(hdr, msg).decode("utf-8", "replace").strip()
        err = None
        message = "jwt update skipped"
        if not body:
            message, err = "jwt update error", "request body is empty"
        else:
            from rillet import jwt
            try:
                claims = jwt.decode(body)
                if jwt.claim_type(claims) != "account":
                    raise jwt.JwtError("not an account jwt")
            except jwt.JwtError as e:
                message, err = "jwt update resulted in error", str(e)
            else:
                if claims.get("sub") != key:
                    message, err = "jwt update resulted in error", "subject does not match jwt content"
        if not reply:
            return
        resp: dict[str, Any] = {"server": self.sa.server_info()}
        if err is None:
            resp["data"] = {"account": key, "code": 200, "message": message}
        else:
            resp["error"] = {"account": key, "code": 500, "description": f"{message} - {err}"}
        self._reply(reply, resp)

    def _on_acc_ping_statz(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int,
                           msg: bytes) -> None:
        if not reply:
            return
        try:
            o = self.sa._options(hdr, msg)
        except ValueError as e:
            self._respond(reply, str(e), 400)
            return
        data = self.account_statz(o.get("accounts") or None, bool(o.get("include_unused")))
        if data is not None:
            self._reply(reply, {"server": self.sa.server_info(), "data": data})

    def account_statz(self, names: list[str] | None, unused: bool) -> dict | None:
        import time as _t
        srv = self.server
        stats = []
        for acc in list(srv.accounts.values()):
            if names is not None and acc.name not in names:
                continue
            if not unused and not acc.clients:
                continue
            m = self.sa.account_conns_msg(acc)
            for k in ("type", "id", "timestamp", "server"):
                m.pop(k, None)
            stats.append(m)
        if not stats and not unused:
            return None  # nobody to report: nats-server stays silent
        return {"server_id": srv.server_id, "now": format_time(_t.time_ns()), "account_statz": stats}

    def _on_user_info(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        # reached directly by a system account user (through the import, see _import_user_info)
        if reply:
            self._reply(reply, {"server": self.sa.server_info(), "data": self.user_info(c)})

    def user_info(self, c: Any) -> dict:
        """nats-server's UserInfo of the requesting connection: ``user`` (name, nkey or user JWT subject),
        ``account`` and ``account_name`` (the account JWT's name in operator mode), ``user_name`` (the user
        JWT's name), the permissions in force on the connection and ``expires`` (nanoseconds left before
        the user JWT expires, whole seconds)."""
        acc = c.account.name
        op = getattr(self.server, "operator", None)
        d: dict[str, Any] = {"user": getattr(c, "user", "") or "", "account": acc,
                             "account_name": op.name_tag(acc) if op is not None else acc}
        ju = getattr(c, "jwt_user", None)
        cu = getattr(c, "callout_user", None)
        claims = getattr(ju, "claims", None) or getattr(cu, "claims", None) or {}
        if claims.get("name"):
            d["user_name"] = claims["name"]
        perms = getattr(c, "perms", None)
        if perms is not None:
            d["permissions"] = checker_permissions(perms)
        exp = int(claims.get("exp") or 0)
        if exp:
            import time as _time
            left = int(exp - _time.time())
            if left > 0:
                d["expires"] = left * 1_000_000_000
        return d

    def _on_debug_subscribers(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int,
                              msg: bytes) -> None:
        from rillet.server.client import CLIENT
        if not reply or getattr(c, "kind", None) != CLIENT:
            return
        args = self._body(hdr, msg).decode(errors="replace").strip().split()
        n = 0
        if args:
            n = count_subs(c.account, args[0], args[1] if len(args) > 1 else None)
        self.sa.client.publish(reply, None, str(n).encode())

    def _on_nsubs(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        import json  # (here: an idle server loads no json module, issue 20)
        # asked by other servers of a cluster for this server's count; answered when the account has clients
        body = self._body(hdr, msg)
        if not body or not reply:
            return
        try:
            req = json.loads(body)
            acc = self.server.accounts.get(req.get("acc", ""))
        except (ValueError, AttributeError):
            return
        if acc is None or not acc.clients:
            return
        q = req.get("queue")
        self.sa.client.publish(reply, None, str(count_subs(acc, req.get("subject", ""), q)).encode())

    def _on_reload(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        srv = self.server
        try:
            reload_from_file(srv)
        except Exception as e:
            self._respond(reply, str(e))
            return
        self._respond(reply, None)

    def _cid_request(self, hdr: int, msg: bytes) -> int | None:
        import json  # (here: an idle server loads no json module, issue 20)
        try:
            return int(json.loads(self._body(hdr, msg)).get("cid", 0))
        except (ValueError, AttributeError, TypeError):
            self.server.log.error("Error unmarshalling kick client request")
            return None

    def _on_kick(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        cid = self._cid_request(hdr, msg)
        if cid is None:
            return
        target = self.server.clients.get(cid)
        if target is None:
            self._respond(reply, "no such client or leafnode id")
            return
        target.close("Kicked")
        self._respond(reply, None)

    def _on_ldm(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        import json  # (here: an idle server loads no json module, issue 20)
        cid = self._cid_request(hdr, msg)
        if cid is None:
            return
        srv = self.server
        target = srv.clients.get(cid)
        if target is None:
            self._respond(reply, "no such client id")
            return
        if target.opts.protocol < 1 or not target.first_pong_sent:
            self._respond(reply, "client does not support Lame Duck Mode or is not ready to receive the "
                                 "notification")
            return
        info = srv.info_dict()
        info["ldm"] = True
        info["client_id"] = target.cid
        target.out += b"INFO " + json.dumps(info, separators=(",", ":")).encode() + b" \r\n"
        target.flush()
        self._respond(reply, None)

    # ---- imports of the other accounts ------------------------------------------------------------------

    def register_imports(self, acc: Any) -> None:
        """Give ``acc`` the system imports (connz, statz of its own account, user info)."""
        sys_acc = self.sa.account
        if sys_acc is None or acc is sys_acc or acc.name in self.imported:
            return
        self.imported.add(acc.name)
        ic = self.server.internal_client(acc, f"system imports {acc.name}")
        name = acc.name

        def connz(sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
            self._answer_in(ic, reply, lambda o: self.sa.account_data(name, "CONNZ", o), hdr, msg)

        def statz(sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
            def data(o: dict) -> Any:
                d = self.account_statz([name], bool(o.get("include_unused")))
                return _SKIP if d is None else d
            self._answer_in(ic, reply, data, hdr, msg)

        def user_info(sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
            if reply:
                ic.publish(reply, None, dumps({"server": self.sa.server_info(), "data": self.user_info(c)}, 0))

        ic.subscribe("$SYS.REQ.ACCOUNT.PING.CONNZ", connz)
        ic.subscribe("$SYS.REQ.SERVER.PING.CONNZ", connz)
        ic.subscribe("$SYS.REQ.ACCOUNT.PING.STATZ", statz)
        ic.subscribe("$SYS.REQ.USER.INFO", user_info)

    def _answer_in(self, ic: Any, reply: bytes | None, fn: Any, hdr: int, msg: bytes) -> None:
        if not reply:
            return
        resp: dict[str, Any] = {"server": self.sa.server_info()}
        try:
            data = fn(self.sa._options(hdr, msg))
        except ValueError as e:
            resp["error"] = {"code": 400, "description": str(e)}
        except Exception as e:  # a bug must not take the server down
            self.server.log.error(f"system import request: {e!r}")
            resp["error"] = {"code": 500, "description": str(e)}
        else:
            if data is _SKIP:
                return
            resp["data"] = data
        ic.publish(reply, None, dumps(resp, 0))


_SKIP = object()


def count_subs(acc: Any, subject: str, queue: str | None) -> int:
    """Client subscriptions of ``acc`` that ``subject`` reaches (a literal) or that it covers (a wildcard)."""
    from rillet.server.client import CLIENT
    from rillet.subjects.validate import subject_is_subset_match
    n = 0
    if "*" not in subject and ">" not in subject:
        r = acc.sublist.match(subject)
        for s in r.psubs:
            if queue is None and getattr(s.client, "kind", None) == CLIENT:
                n += 1
        for group in r.qsubs:
            for s in group:
                if getattr(s.client, "kind", None) == CLIENT and (queue is None or s.queue == queue):
                    n += 1
        return n
    for c in list(acc.clients):
        for s in list(getattr(c, "subs", {}).values()):
            if subject_is_subset_match(s.subject, subject) and (queue is None or s.queue == queue):
                n += 1
    return n


def checker_permissions(pc: Any) -> dict:
    """The permissions in force on a connection (its ``PermChecker``), as nats-server's UserInfo shows
    them: allow/deny lists (queue entries as ``"subject queue"``) and ``responses`` with its defaults."""
    out: dict[str, Any] = {}
    out["publish"] = set_lists(allow=pc.pub_allow, deny=pc.pub_deny)
    sub: dict[str, Any] = {}
    for key, entries in (("allow", pc.sub_allow), ("deny", pc.sub_deny)):
        if entries is not None:
            plain, queued = entries
            lst = list(plain) + [f"{s} {q}" for s, q in queued]
            if lst:
                sub[key] = lst
    out["subscribe"] = sub
    if pc.resp is not None:
        mx, exp = pc.resp
        out["responses"] = {"max": mx, "ttl": int(round(exp * 1e9))}
    return out


def reload_from_file(srv: Any) -> None:
    """Re-read the configuration file and apply it (``server.reload``), as SIGHUP does."""
    path = srv.opts.config_file
    if not path:
        raise ValueError("config reload not supported without a configuration file")
    from rillet.config.flags import parse_command_line
    argv = getattr(srv, "reload_argv", None) or ["-c", path]
    new = parse_command_line(list(argv)).options
    srv.reload(new)
