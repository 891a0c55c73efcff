"""The system account: the ``$SYS`` request API and server/client events, as nats-server publishes them.

* The account named by ``system_account`` (default ``$SYS``; none with ``no_system_account``) is created
  when the server is built; users bound to it connect to it like to any other account.
* Requests answered in it (JSON bodies as nats-server's ``ServerAPIResponse``)::

    $SYS.REQ.SERVER.PING                      statsz of this server
    $SYS.REQ.SERVER.PING.<KIND>               KIND: VARZ CONNZ SUBSZ JSZ HEALTHZ ACCOUNTZ STATSZ IDZ
    $SYS.REQ.SERVER.<server_id>.<KIND>
    $SYS.REQ.ACCOUNT.<acc>.<CONNZ|SUBSZ|JSZ|INFO|CONNS|STATZ>

  The request body, when not empty, is the options JSON with nats-server's field names
  (``{"subscriptions": true}`` for CONNZ, ...). The data comes from the HTTP monitor's functions, which
  the composition root wires (``Subsystems.server_data``/``account_data``: rillet.monitor.sysreq).
* Events: ``$SYS.ACCOUNT.<acc>.CONNECT`` / ``.DISCONNECT`` and ``$SYS.SERVER.<id>.STATSZ`` (every
  ``STATSZ_INTERVAL`` seconds). An event is only built when someone in the system account listens for it.
"""
from __future__ import annotations

import os
import time
from typing import Any

import rillet
from rillet.digest import choice
from rillet.gocompat.gotime import format_time, unix_ns
from rillet.gocompat.gojson import dumps, num
from rillet.server import procstats
from rillet.handles import cancelled

SYS_DEFAULT = "$SYS"
STATSZ_INTERVAL = 10.0

CONNECT_TYPE = "io.nats.server.advisory.v1.client_connect"
DISCONNECT_TYPE = "io.nats.server.advisory.v1.client_disconnect"
ACC_CONNS_TYPE = "io.nats.server.advisory.v1.account_connections"

_B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _event_id() -> str:
    return "".join(choice(_B62) for _ in range(22))


class SystemAccount:
    """Owns the system account's internal client, its request handlers and the event publishing."""

    def __init__(self, server: Any) -> None:
        self.server = server
        o = server.opts
        self.account: Any = None
        # like nats-server, the system account always exists (named by system_account, default $SYS),
        # unless no_system_account; the server's internal system client lives there
        # (no_system_account only drops the default one: a system_account, or an account named $SYS
        # in the configuration, is the system account all the same, as in nats-server)
        if not o.system_account and SYS_DEFAULT in o.accounts:
            o.system_account = SYS_DEFAULT
        if o.system_account or not o.no_system_account:
            name = o.system_account = o.system_account or SYS_DEFAULT
            self.account = server.lookup_account(name)
            server.system_account = self.account
        from rillet.server.sysservices import SystemServices
        self.services = SystemServices(self)
        if self.account is not None:
            for acc in list(server.accounts.values()):
                self.services.register_imports(acc)
        self.client: Any = None
        self.seq = 0
        self._timer: Any = None
        self._cpu: Any = None
        self._http_stats: dict[str, int] = {}

    # ---- lifecycle --------------------------------------------------------------------------------------

    def start(self) -> None:
        if self.account is None:
            return
        srv = self.server
        ic = self.client = srv.internal_client(self.account, "$SYS")
        self.services.subscribe_all(ic)
        self._timer = srv.loop.call_later(STATSZ_INTERVAL, self._tick)

    def account_added(self, acc: Any) -> None:
        """A new account (configured, or first used): it gets the system imports."""
        if self.account is not None:
            self.services.register_imports(acc)

    def shutdown_event(self) -> None:
        """The server is stopping: ``$SYS.SERVER.<id>.SHUTDOWN`` with the server info (what other servers'
        JetStream peer registries mark offline on), as nats-server sends first thing in its shutdown; no
        more statsz after it."""
        self.stop()
        if self.client is not None:
            self.send(f"$SYS.SERVER.{self.server.server_id}.SHUTDOWN", self.server_info())

    def stop(self) -> None:
        self._timer = cancelled(self._timer)

    def _tick(self) -> None:
        self._timer = None
        if self.server.shutting_down:
            return
        try:
            self.publish_statsz()
        finally:
            self._timer = self.server.loop.call_later(STATSZ_INTERVAL, self._tick)

    # ---- helpers ----------------------------------------------------------------------------------------

    def server_info(self) -> dict:
        srv = self.server
        self.seq += 1
        d: dict[str, Any] = {"name": srv.name, "host": srv.opts.host or "0.0.0.0", "id": srv.server_id}
        if srv.opts.cluster.name:
            d["cluster"] = srv.opts.cluster.name
        d["ver"] = rillet.SERVER_VERSION
        if srv.opts.tags:  # (nats-server's ServerInfo tags: what JetStream placement matches)
            d["tags"] = list(srv.opts.tags)
        md = srv.opts.extra.get("server_metadata")
        if md:  # server_metadata (nats-server 2.12)
            d["metadata"] = dict(md)
        from rillet.config.features import merged
        d["feature_flags"] = merged(srv.opts)
        d["jetstream"] = srv.jetstream is not None
        # nats-server's capability bits: only AccountNRG (4: a stream's group may talk in its own account,
        # cluster_traffic: owner) for Rillet's own groups; never JetStream (1), which would make a Go meta leader
        # count this server in (rillet/jetstream/cluster/README.md); a Go cluster's member sets its own below
        d["flags"] = 4 if srv.jetstream is not None else 0
        rep = srv.go_js_report  # (a member of a Go JetStream cluster)
        if rep is not None:
            rep.server_info(d)
        d["seq"] = self.seq
        d["time"] = format_time(time.time_ns())
        return d

    def interest(self, subject: str) -> bool:
        """Someone (other than the system client's own listeners, e.g. ``$SYS.SERVER.*.STATSZ``) listens:
        here, over a route, or in another cluster (gateway interest: the servers of a one-server cluster
        have no route that would carry the other clusters' interest here)."""
        if self.account is None or self.client is None:
            return False
        if self.account.sublist.has_interest(subject):
            own = self.client
            r = self.account.sublist.match(subject)
            if any(s.client is not own for s in r.psubs) or any(s.client is not own for g in r.qsubs for s in g):
                return True
        gw = self.server.gateway
        return gw is not None and bool(gw.outo) and gw.has_interest(self.account, subject)

    def send(self, subject: str, obj: Any) -> None:
        if self.client is None:
            return
        self.client.publish(subject.encode(), None, dumps(obj, 0))

    def _monitor(self) -> tuple[dict, Any]:
        m = self.server.monitor
        if m is not None:
            return m.http_req_stats, m.cpu
        if self._cpu is None:
            self._cpu = procstats.CPUMeter()
        return self._http_stats, self._cpu

    # ---- statsz -----------------------------------------------------------------------------------------

    def statsz(self) -> dict:
        srv = self.server
        in_m, in_b, out_m, out_b = srv.totals()
        _, cpu = self._monitor()
        try:
            cpu_pct = num(cpu.percent())
        except Exception:
            cpu_pct = 0
        active = sum(1 for a in srv.accounts.values() if a.clients)
        ms = getattr(srv, "mqtt", None)
        d: dict[str, Any] = {
            "start": format_time(unix_ns(srv.start_time)),
            "mem": procstats.rss_bytes(),
            "cores": procstats.cores(),
            "cpu": cpu_pct,
            # (MQTT connections are clients too, as in nats-server's count)
            "connections": len(srv.clients) + (len(ms.open_conns()) if ms is not None else 0),
            "total_connections": srv.total_connections,
            "active_accounts": active,
            "subscriptions": sum(a.num_subs() for a in srv.accounts.values()),
            "sent": {"msgs": out_m, "bytes": out_b},
            "sent_to_clients": {"msgs": out_m, "bytes": out_b},
            "received": {"msgs": in_m, "bytes": in_b},
            "received_from_clients": {"msgs": in_m, "bytes": in_b},
            "slow_consumers": srv.slow_consumers,
        }
        # the by-kind counts, the stale and stalled counts and the route and gateway lists only when not zero or
        # empty, as nats-server leaves them out
        if any(srv.sc_stats.values()):
            d["slow_consumer_stats"] = dict(srv.sc_stats)
        if srv.stale_connections:
            d["stale_connections"] = srv.stale_connections
        if any(srv.stale_stats.values()):
            d["stale_connection_stats"] = dict(srv.stale_stats)
        if srv.stalls:
            d["stalled_clients"] = srv.stalls
        routes = [_route_stat(r) for r in list(getattr(srv, "routes", {}).values())]
        if routes:
            d["routes"] = routes
        gws = _gateway_stats(srv)
        if gws:
            d["gateways"] = gws
        d["active_servers"] = 1
        d["gomaxprocs"] = procstats.cores()
        return d

    def statsz_msg(self) -> dict:
        d = {"server": self.server_info(), "statsz": self.statsz()}
        js = self.server.jetstream
        section = js.statsz_section() if js is not None else None
        if section is not None:
            d["statsz"]["jetstream"] = section  # (what other servers' placement reads)
        elif self.server.go_js_report is not None:
            d["statsz"]["jetstream"] = self.server.go_js_report.section()
        return d

    def publish_statsz(self, force: bool = False) -> None:
        subj = f"$SYS.SERVER.{self.server.server_id}.STATSZ"
        if force or self.interest(subj):
            self.send(subj, self.statsz_msg())

    # ---- requests ---------------------------------------------------------------------------------------

    def _reply(self, reply: bytes | None, obj: Any) -> None:
        if reply and self.client is not None:
            self.client.publish(reply, None, dumps(obj, 0))

    def _on_ping_statsz(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        self._reply(reply, self.statsz_msg())

    @staticmethod
    def _options(hdr: int, msg: bytes) -> dict:
        import json  # (here: an idle server loads no json module, issue 20)
        body = msg[hdr:] if hdr > 0 else msg
        if not body.strip():
            return {}
        o = json.loads(body)
        if not isinstance(o, dict):
            raise ValueError("options must be a JSON object")
        return o

    def _error(self, reply: bytes | None, code: int, desc: str) -> None:
        self._reply(reply, {"server": self.server_info(), "error": {"code": code, "description": desc}})

    def _on_server_req(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        kind = subject.rsplit(b".", 1)[-1].decode()
        srv = self.server
        if kind == "IDZ":
            self._reply(reply, {"name": srv.name, "host": srv.opts.host or "0.0.0.0", "id": srv.server_id})
            return
        if kind == "STATSZ":
            self._reply(reply, self.statsz_msg())
            return
        try:
            o = self._options(hdr, msg)
            data = self.server_data(kind, o)
        except ValueError as e:
            self._error(reply, 400, str(e))
            return
        except Exception as e:  # a bug must not take the server down
            srv.log.error(f"$SYS request {subject.decode()}: {e!r}")
            self._error(reply, 500, str(e))
            return
        if data is None:
            return  # not ours to answer (unknown kind)
        self._reply(reply, {"server": self.server_info(), "data": data})

    def server_data(self, kind: str, o: dict) -> dict | None:
        """The data of a ``$SYS.REQ.SERVER.*.<kind>`` request, from the monitoring the composition root wired
        (rillet.monitor.sysreq; None: not answered). ValueError: bad request options."""
        return self.server.subsystems.server_data(self, kind, o)

    def _on_account_req(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        parts = subject.decode().split(".")
        if len(parts) != 5:
            return
        acc_name, kind = parts[3], parts[4]
        srv = self.server
        if acc_name == "PING":
            return
        try:
            o = self._options(hdr, msg)
            data = self.account_data(acc_name, kind, o)
        except ValueError as e:
            self._error(reply, 400, str(e))
            return
        except Exception as e:
            srv.log.error(f"$SYS request {subject.decode()}: {e!r}")
            self._error(reply, 500, str(e))
            return
        if data is None:
            return
        if kind == "CONNS":
            self._reply(reply, data)
        else:
            self._reply(reply, {"server": self.server_info(), "data": data})

    def account_data(self, acc: str, kind: str, o: dict) -> dict | None:
        srv = self.server
        if acc not in srv.accounts and (acc in (srv.opts.accounts or {}) or
                                        any(getattr(u, "account", "") == acc for u in srv.opts.users or [])):
            srv.lookup_account(acc)  # a configured account not yet used by a connection
        if kind in ("CONNS", "STATZ"):
            a = srv.accounts.get(acc)
            if a is None:
                raise ValueError(f"account {acc!r} not found")
            m = self.account_conns_msg(a)
            if kind == "CONNS":
                return m
            m.pop("type", None)
            m.pop("id", None)
            m.pop("timestamp", None)
            m.pop("server", None)
            return {"server_id": srv.server_id, "now": format_time(time.time_ns()), "account_statz": [m]}
        # CONNZ SUBSZ JSZ LEAFZ INFO: from the monitoring the composition root wired (rillet.monitor.sysreq)
        return srv.subsystems.account_data(self, acc, kind, o)

    def account_conns_msg(self, acc: Any) -> dict:
        in_m = in_b = out_m = out_b = 0
        for c in list(acc.clients):
            in_m += getattr(c, "in_msgs", 0)
            in_b += getattr(c, "in_bytes", 0)
            out_m += getattr(c, "out_msgs", 0)
            out_b += getattr(c, "out_bytes", 0)
        n = len(acc.clients)
        return {
            "type": ACC_CONNS_TYPE, "id": _event_id(), "timestamp": format_time(time.time_ns()),
            "server": self.server_info(), "acc": acc.name, "name": acc.name, "conns": n, "leafnodes": 0,
            "total_conns": n, "num_subscriptions": acc.num_subs(),
            "sent": {"msgs": out_m, "bytes": out_b}, "received": {"msgs": in_m, "bytes": in_b},
            "slow_consumers": acc.slow_consumers,
        }

    # ---- client events ----------------------------------------------------------------------------------

    def client_info(self, c: Any, disconnect: bool = False, raw_user: bool = False) -> dict:
        co = c.opts
        d: dict[str, Any] = {"start": format_time(unix_ns(c.start_time))}
        if c.host:
            d["host"] = c.host
        d["id"] = c.cid
        d["acc"] = c.account.name
        user = getattr(c, "user", None)
        uname = user if isinstance(user, str) else getattr(user, "username", "") or getattr(user, "nkey", "")
        if raw_user:  # (the user as the client presented it, authenticated or not)
            uname = _raw_auth_user(c)
        if uname:
            d["user"] = uname
        for k, v in (("name", co.name), ("lang", co.lang), ("ver", co.version)):
            if v:
                d[k] = v
        if disconnect:
            rtt = getattr(c, "rtt", 0) or 0
            if rtt:
                d["rtt"] = int(rtt * 1e9)
            d["stop"] = format_time(time.time_ns())
            if co.jwt:
                d["jwt"] = co.jwt
        op = getattr(self.server, "operator", None)
        d["name_tag"] = op.name_tag(c.account.name) if op is not None else c.account.name
        d["kind"] = "Client"
        d["client_type"] = client_type(c)
        mqtt_id = getattr(c, "client_id", "") if d["client_type"] == "mqtt" else ""
        if mqtt_id:
            d["client_id"] = mqtt_id  # (nats-server's MQTTClient field)
        return d

    def client_connected(self, c: Any) -> None:
        """Called once a client's CONNECT is accepted."""
        if self.client is not None:
            self._client_event(c, "CONNECT", CONNECT_TYPE, gone=False)

    def client_disconnected(self, c: Any) -> None:
        """Called when a client that had sent CONNECT goes away."""
        if self.client is not None and getattr(c, "connect_received", False):
            self._client_event(c, "DISCONNECT", DISCONNECT_TYPE, gone=True)

    def _client_event(self, c: Any, what: str, typ: str, gone: bool) -> None:
        """``$SYS.ACCOUNT.<account>.<what>`` about client ``c``, when anyone listens; a client ``gone`` is
        reported with its message counts and the reason it was closed."""
        subj = f"$SYS.ACCOUNT.{c.account.name}.{what}"
        if not self.interest(subj):
            return
        ev = {"type": typ, "id": _event_id(), "timestamp": format_time(time.time_ns()),
              "server": self.server_info(), "client": self.client_info(c, disconnect=gone)}
        if gone:
            ev.update(self._stats(c))
            ev["reason"] = c.close_reason or "Client Closed"
        self.send(subj, ev)

    @staticmethod
    def _stats(c: Any) -> dict:
        # (as nats-server: "sent" is what the client sent, "received" what it was sent)
        return {"sent": {"msgs": c.in_msgs, "bytes": c.in_bytes},
                "received": {"msgs": c.out_msgs, "bytes": c.out_bytes}}

    def auth_error(self, c: Any, reason: str) -> None:
        """A client failed authentication (or lost it): ``$SYS.SERVER.<id>.CLIENT.AUTH.ERR``, when listened to."""
        if self.client is None:
            return
        subj = f"$SYS.SERVER.{self.server.server_id}.CLIENT.AUTH.ERR"
        if not self.interest(subj):
            return
        ci = self.client_info(c, disconnect=True, raw_user=True)
        self.send(subj, {"type": DISCONNECT_TYPE, "id": _event_id(), "timestamp": format_time(time.time_ns()),
                         "server": self.server_info(), "client": ci, **self._stats(c), "reason": reason})


def client_type(c: Any) -> str:
    """nats-server's client type string of a client connection: "mqtt" (also over websocket), "websocket",
    or "nats"."""
    ct = getattr(c, "conn_type", "")
    if ct in ("MQTT", "MQTT_WS"):
        return "mqtt"
    return "websocket" if ct == "WEBSOCKET" else "nats"


def _raw_auth_user(c: Any) -> str:
    """nats-server's raw auth user of a connection: its nkey, user name, JWT user key or a redacted token."""
    co = c.opts
    if co is None:
        return ""
    if co.nkey:
        return co.nkey
    if co.user:
        return co.user
    if co.jwt:
        u = getattr(c, "jwt_user", None)
        return getattr(u, "nkey", "") or ""
    if co.auth_token:
        return "[REDACTED]"
    return ""


def _msgs(m: int, b: int) -> dict:
    return {"msgs": m, "bytes": b}


def _route_stat(r: Any) -> dict:
    """A route in statsz (nats-server's RouteStat)."""
    d = {"rid": r.cid}
    if r.remote_name:
        d["name"] = r.remote_name
    return d | {"sent": _msgs(r.out_msgs, r.out_bytes), "received": _msgs(r.in_msgs, r.in_bytes),
                "pending": r.pending_bytes()}


def _gateway_stats(srv: Any) -> list[dict]:
    """Each outbound gateway in statsz, with what its inbound connections from the same cluster received
    (nats-server's GatewayStat)."""
    ins = getattr(srv, "gateways_in", {})
    out = []
    for name, g in list(getattr(srv, "gateways_out", {}).items()):
        conns = list(ins.get(name, ()))
        out.append({"gwid": g.cid, "name": name, "sent": _msgs(g.out_msgs, g.out_bytes),
                    "received": _msgs(sum(c.in_msgs for c in conns), sum(c.in_bytes for c in conns)),
                    "inbound_connections": len(conns)})
    return out
