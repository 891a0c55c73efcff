"""The ``mqtt {}`` listener: MQTT connections of a server, their sessions per account, delayed wills.

Started by the composition root (``rillet.app.compose.Root.start_mqtt``) once JetStream is up. The account
session managers (``store.AccountSessions``) are made on the first CONNECT of each account: that is when
the account's MQTT streams are looked up or created, as nats-server does.
"""
from __future__ import annotations

import asyncio
import copy
from typing import Any

from rillet.config.mqtt_section import validate_mqtt
from rillet.config.options import RANDOM_PORT
from rillet.server.listen import ServedListener, serve_listener
from rillet.server.ocsp import gate as ocsp_gate

from .conn import MqttConn
from .store import AccountSessions, Session

__all__ = ["MqttServer", "start_mqtt"]


# MQTT 5's Receive Maximum announced to clients by default: how many QoS 1 and 2 PUBLISH a client may have
# unacknowledged at once. Not the protocol's 65535: a bounded window keeps what one client can leave pending
# bounded (QoS 2 receipts are kept per session) and is what broker test suites expect (Eclipse Paho's
# interoperability suite sends one past it and waits for DISCONNECT 0x93); nats-server's MQTT (3.1.1 only)
# has the same default window, 1024, for what it sends (max_ack_pending).
RECEIVE_MAXIMUM = 1024

class MqttServer(ServedListener):
    is_websocket = False

    def __init__(self, server: Any) -> None:
        self.server = server
        self._max_payload = server.opts.max_payload or -1  # (a reload that changes it: MqttServer.reloaded)
        m = server.opts.mqtt
        self.host = str(m.get("host") or "0.0.0.0")
        self.port = int(m.get("port") or 0)
        self.reject_qos2 = bool(m.get("reject_qos2_publish"))
        self.downgrade_qos2 = bool(m.get("downgrade_qos2_subscribe"))
        # (MQTT 5: announced in CONNACK, enforced; RECEIVE_MAXIMUM unless configured)
        self.receive_max = int(m.get("receive_maximum") or RECEIVE_MAXIMUM)
        # (MQTT 5: the longest keep-alive a client gets, told in CONNACK as Server Keep Alive; 0: the client's)
        self.max_keep_alive = int(m.get("max_keep_alive") or 0)
        self.conns: dict[int, MqttConn] = {}
        self.asms: dict[str, AccountSessions] = {}
        self._asm_tasks: dict[str, asyncio.Task] = {}
        self._wills: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._expiries: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._srv: asyncio.AbstractServer | None = None
        self.addr: tuple[str, int] | None = None
        self._auth: Any = None
        self._auth_key: Any = None

    # ---- listening -------------------------------------------------------------------------------------

    async def start(self) -> None:
        srv = self.server
        m = srv.opts.mqtt
        port = 0 if self.port == RANDOM_PORT else self.port
        ssl_ctx = None
        if m.get("tls") is not None:
            from rillet.server.tls import make_server_context
            ssl_ctx = make_server_context(m["tls"], srv.staples.get("mqtt"))
        # (MQTT connections follow the client port's ocsp_peer, as in nats-server; read per connection)
        tls_on = ssl_ctx is not None
        self._srv = await serve_listener(
            srv.loop, self.host, port, "MQTT", f"{self.host}:{port}",
            lambda: ocsp_gate(srv, srv.opts.tls.ocsp_peer if tls_on and srv.opts.tls is not None else None,
                              MqttConn(self)), ssl=ssl_ctx)
        self.addr = (self.host, self._srv.sockets[0].getsockname()[1])
        srv.mqtt_addr = self.addr
        scheme = "tls" if ssl_ctx is not None else "mqtt"
        srv.log.notice(f"Listening for MQTT clients on {scheme}://{self.host}:{self.addr[1]}")
        srv.extra_listeners.append(self)

    async def _close_connections(self) -> None:
        for c in list(self.conns.values()):
            if c.version >= 5 and c.connected:
                from .codec import Disconnect
                c.send_packet(Disconnect(0x8B))
            c.close("Server Shutdown")
        for h in list(self._wills.values()) + list(self._expiries.values()):
            h.cancel()
        await asyncio.sleep(0)
        for asm in self.asms.values():
            asm.close()

    def ws_conn(self) -> MqttConn:
        """A connection for an MQTT client on the websocket port's ``/mqtt`` (the websocket is its transport)."""
        return MqttConn(self, ws=True)

    # ---- connections -------------------------------------------------------------------------------------

    def register(self, c: MqttConn) -> bool:
        """Count the connection in (False: over max_connections, which MQTT connections count toward, and
        closed, as nats-server does)."""
        srv = self.server
        srv._cid += 1
        c.cid = srv._cid
        srv.total_connections += 1
        self.conns[c.cid] = c
        if len(srv.clients) + len(self.open_conns()) > srv.opts.max_connections:
            srv.log.error(f"{c.log_prefix()} - maximum connections exceeded")
            c.close("Maximum Connections Exceeded")
            return False
        return True

    def unregister(self, c: MqttConn) -> None:
        if self.conns.pop(c.cid, None) is None:
            return
        srv = self.server
        t = srv.closed_totals
        srv.closed_totals = (t[0] + c.in_msgs, t[1] + c.in_bytes, t[2] + c.out_msgs, t[3] + c.out_bytes)
        if srv.closed_clients.maxlen != 0:
            info = srv.subsystems.closed_conn_info(srv, c)  # (/connz?state=closed)
            if info is not None:
                from rillet.server.server import ClosedClient
                info["_mqtt"] = c.client_id
                srv.closed_clients.append(ClosedClient(info))

    def reloaded(self) -> None:
        """After a configuration reload: every MQTT client signs in again with what its CONNECT gave; a
        refused one is closed, the others get their new permissions (subscriptions no longer allowed go). A
        changed max_payload is every client's payload limit from now on (as nats-server's reload sets it)."""
        mp = self.server.opts.max_payload or -1
        changed = mp != self._max_payload
        self._max_payload = mp
        for c in list(self.open_conns().values()):
            if changed:
                c.mpay = mp
            if c.connected:
                c.recheck_auth()

    def authenticator(self) -> Any:
        """The server's authenticator, or one from the mqtt block's own authorization (an override, as
        nats-server: user, token or no_auth_user in ``mqtt {}``)."""
        srv = self.server
        m = srv.opts.mqtt
        if not (m.get("username") or m.get("token") or m.get("no_auth_user")):
            return srv.authenticator
        key = (srv.authenticator, id(m))
        if self._auth is not None and self._auth_key == key:
            return self._auth
        from rillet.server.auth import Authenticator
        o2 = copy.copy(srv.opts)
        o2.username = m.get("username", "")
        o2.password = m.get("password", "")
        o2.authorization = m.get("token", "")
        o2.no_auth_user = m.get("no_auth_user", "")
        self._auth = Authenticator(o2)
        self._auth_key = key
        return self._auth

    def auth_timeout(self) -> float:
        m = self.server.opts.mqtt
        t = m.get("auth_timeout") or self.server.opts.auth_timeout or 2.0
        return float(t)

    def max_packet(self) -> int:
        """The MQTT 5 maximum packet size this server announces: the largest PUBLISH max_payload allows, plus
        room for the topic and properties."""
        return min(int(self.server.opts.max_payload) + 65536 + 16, 268_435_455)

    # ---- sessions ------------------------------------------------------------------------------------------

    def replicas(self) -> int:
        srv = self.server
        m = srv.opts.mqtt
        r = int(m.get("stream_replicas") or 0)
        if r > 0:
            return r
        if srv.cluster is None:
            return 1
        n = len(srv.opts.cluster.routes or []) or 1
        return max(1, min(n, 3))

    async def sessions_for(self, account: Any) -> AccountSessions:
        name = account.name
        asm = self.asms.get(name)
        if asm is not None:
            return asm
        t = self._asm_tasks.get(name)
        if t is None:
            t = asyncio.get_running_loop().create_task(self._make_asm(account))
            self._asm_tasks[name] = t
        try:
            return await asyncio.shield(t)
        finally:
            if t.done():
                self._asm_tasks.pop(name, None)

    async def _make_asm(self, account: Any) -> AccountSessions:
        if self.server.jetstream is None:
            raise RuntimeError("mqtt requires JetStream to be enabled if running in standalone mode")
        asm = AccountSessions(self.server, account, self.replicas())
        try:
            await asm.start()
        except BaseException:
            asm.close()
            raise
        self.asms[account.name] = asm
        return asm

    # ---- MQTT 5: delayed wills, session expiry ---------------------------------------------------------------

    def delayed_will(self, c: MqttConn, will: Any, delay: int) -> None:
        key = (c.account.name, c.client_id)
        old = self._wills.pop(key, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_event_loop()

        def fire() -> None:
            self._wills.pop(key, None)
            loop.create_task(c.publish_will(will))

        self._wills[key] = loop.call_later(delay, fire)

    def cancel_will(self, account: Any, cid: str) -> None:
        h = self._wills.pop((account.name, cid), None)
        if h is not None:
            h.cancel()
        h = self._expiries.pop((account.name, cid), None)
        if h is not None:
            h.cancel()

    def expire_later(self, asm: AccountSessions, sess: Session, seconds: int) -> None:
        key = (asm.account.name, sess.id)
        loop = asyncio.get_event_loop()

        async def expire() -> None:
            self._expiries.pop(key, None)
            if sess.conn is not None or asm.sessions.get(sess.id) is not sess:
                return
            async with sess.lock:
                await sess.clear(True)  # (MQTT 5)
            asm.sessions.pop(sess.id, None)

        old = self._expiries.pop(key, None)
        if old is not None:
            old.cancel()
        self._expiries[key] = loop.call_later(seconds, lambda: loop.create_task(expire()))

    # ---- monitoring -------------------------------------------------------------------------------------------

    def open_conns(self) -> dict[int, MqttConn]:
        return {cid: c for cid, c in self.conns.items() if not c.closed}


RELOADABLE = ("ack_wait", "max_ack_pending", "stream_replicas", "consumer_memory_storage",
              "consumer_inactive_threshold", "tls", "tls_timeout")


def check_reload(old: Any, new: Any) -> None:
    """nats-server reloads only ack_wait, max_ack_pending, stream_replicas, consumer_replicas,
    consumer_memory_storage, consumer_inactive_threshold and TLS of the mqtt block (they apply to what is
    created after); any other change refuses the reload (ValueError)."""
    a = {k: v for k, v in (old.mqtt or {}).items() if k not in RELOADABLE}
    b = {k: v for k, v in (new.mqtt or {}).items() if k not in RELOADABLE}
    if a != b:
        raise ValueError(f"config reload not supported for MQTT: old={a}, new={b}")


async def start_mqtt(server: Any) -> MqttServer:
    validate_mqtt(server.opts)
    ms = MqttServer(server)
    await ms.start()
    server.mqtt = ms
    return ms
