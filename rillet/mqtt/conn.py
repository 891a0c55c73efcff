"""One MQTT connection: packets in (through ``codec.Decoder``), NATS and JetStream behind, packets out.

The connection is the owner of its NATS subscriptions (callbacks, as an internal client's are) and
publishes through its account like any client, so NATS subscribers, JetStream streams, imports, mappings
and routes see MQTT traffic as nats-server delivers it: a PUBLISH to ``a/b`` is a message on ``a.b`` with a
``Nmqtt-Pub:<qos>`` header; QoS 1/2 messages are also stored in ``$MQTT_msgs`` and reach QoS 1/2
subscriptions through their durable consumers (``rillet.mqtt.store``).

Packets are handled in order by one task per connection (CONNECT, SUBSCRIBE and QoS 1/2 PUBLISH wait for
JetStream); deliveries from NATS are written at once from the delivering callback.

``MqttConn`` is the connection's life (the socket, the packet task, close and the session's clean-up, output);
its protocol parts are mixins on the same state: ``connect.ConnectMixin`` (CONNECT, authentication, session,
keep-alive), ``publish.PublishMixin`` (PUBLISH in, QoS 1 stores and PUBACKs, wills, QoS 2 until PUBREL),
``subscribe.SubscribeMixin`` (SUBSCRIBE/UNSUBSCRIBE, deliveries out and their acknowledgements); what they
share is in ``common``.
"""
from __future__ import annotations

import asyncio
import time
import traceback
from collections import deque
from typing import TYPE_CHECKING, Any

from rillet.server.delivery import ConnKind

from . import codec as C
from .common import _HDRS, RC5, RC_MALFORMED, RC_PROTOCOL, RC_TAKEN_OVER, RC_UNSPECIFIED, _ConnOpts, _Sub, parse_ack
from .connect import ConnectMixin
from .publish import PublishMixin
from .store import AccountSessions, JSAPIError, Session
from .subscribe import SubscribeMixin

if TYPE_CHECKING:
    from .listener import MqttServer

__all__ = ["MqttConn", "parse_ack"]


class MqttConn(ConnectMixin, PublishMixin, SubscribeMixin, asyncio.Protocol):
    """An MQTT client connection (``/connz`` type MQTT, ``mqtt_client`` its client id)."""

    kind = ConnKind.INTERNAL  # (subscriptions with callbacks: the delivery executor calls them)
    echo = True
    headers = True
    no_responders = False
    nonce = None  # (no INFO, no nonce: in operator mode only bearer user JWTs can sign in, as nats-server)
    jwt_user: Any = None
    jwt_timer: Any = None
    callout_user: Any = None  # what an auth callout admitted this client as
    connect_received = False  # (authenticated: the account's CONNECT event was sent)
    _callout_wait: Any = None

    def __init__(self, ms: "MqttServer", ws: bool = False) -> None:
        self.ms = ms
        self.server = ms.server
        srv = self.server
        self.conn_type = "MQTT_WS" if ws else "MQTT"
        self.transport: Any = None
        self.cid = 0
        self.closed = False
        self.close_reason = ""
        self.decoder = C.Decoder(max_packet=srv.opts.max_payload)
        # the NATS message size a PUBLISH may reach and the NATS subscriptions the connection may hold (-1: no
        # limit): the server's until CONNECT, then ConnectMixin.apply_limits
        self.mpay = srv.opts.max_payload or -1
        self.sub_limit = srv.opts.max_subscriptions or -1
        self.version = 4
        self.account = srv.global_account
        self.perms: Any = None
        self.user = ""
        self.client_id = ""
        self.connected = False
        self.sess: Session | None = None
        self.asm: AccountSessions | None = None
        self.will: C.Will | None = None
        self.will_subject = ""
        self.keepalive = 0
        self.subs: dict[bytes, Any] = {}  # sid -> Subscription (as a client's, for /connz)
        self.msubs: dict[str, _Sub] = {}  # NATS filter subject (or "$share/<g>/" + subject) -> _Sub
        self._sidn = 0
        self.queue: asyncio.Queue = asyncio.Queue()
        self.busy = False  # the packet task is handling (awaiting) a packet
        # QoS 1 PUBACKs in order (store.QoS1Store: None until stored, then True or the error; packet id, reason code)
        self.ack_fifo: deque = deque()
        self._acks_waiter: asyncio.Future | None = None  # the packet task waits for the PUBACKs owed
        self.acks_unwritten = 0  # PUBACKs in ``out`` (MQTT 5: the client has not seen them yet)
        self._per_sub = int(srv.opts.mqtt.get("max_ack_pending") or 1024)  # QoS 1/2 in flight per subscription
        self.topics: dict[str, str] = {}  # topic -> subject (a cache)
        self.pubs: dict[str, tuple[str, bytes, bool]] = {}  # topic -> (subject, its bytes, publish allowed)
        self.fpubs: dict[bytes, bytes] = {}  # topic bytes -> subject bytes (_fast_in: checked, allowed)
        self.fast = False  # a connected client: _fast_in reads its PUBLISH/PUBACK/PINGREQ
        self.quiet: dict[bytes, tuple] = {}  # subject bytes -> (sublist, stamp, NATS interest) (_nats_interest)
        self.fast_hdrs = (_HDRS[0], _HDRS[1])
        self.task: asyncio.Task | None = None
        self.ka_handle: asyncio.TimerHandle | None = None
        self.last_read = time.monotonic()
        self.in_msgs = self.out_msgs = self.in_bytes = self.out_bytes = 0
        self.start_time = time.time()
        self.last_activity = self.start_time
        self.stop_time = 0.0
        self.host = ""
        self.port = 0
        self.rtt = 0.0
        self.tls_version = ""
        self.tls_cipher = ""
        self.opts = _ConnOpts()
        self.out = bytearray()  # (never written by the delivery executor: every subscription has a callback)
        self.flush_pending = False
        # MQTT 5
        self.client_recv_max = 65535
        self.client_max_packet = 0
        self.client_alias_max = 0
        self.aliases_in: dict[int, str] = {}
        self.aliases_out: dict[str, int] = {}  # topic -> the alias this connection gave it (client_alias_max)
        # QoS 1/2 deliveries past the client's Receive Maximum, sent as its acknowledgements free the window:
        # (durable, stream seq) -> the delivery's arguments (SubscribeMixin._hold)
        self.held: dict[tuple[str, int], tuple] = {}
        self.qos2_in: set[int] = set()
        self.session_expiry = 0
        self.problem_info = True
        self.rsp_sub: Any = None
        self.rsp_map: dict[str, tuple[str, bytes | None]] = {}
        self.rsp_n = 0

    # ---- asyncio ---------------------------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        if peer:
            self.host, self.port = peer[0], peer[1]
        so = transport.get_extra_info("ssl_object")
        if so is not None:
            self.tls_version = so.version() or ""
            ci = so.cipher()
            self.tls_cipher = ci[0] if ci else ""
        if not self.ms.register(self):
            return
        mt = self.server.opts.mqtt.get("tls")
        if so is not None and mt is not None and mt.pinned_certs and self.conn_type == "MQTT":
            from rillet.server.tls import pinned_error
            refused = pinned_error(so, mt.pinned_certs)
            if refused is not None:
                self.server.log.error(f"{self.log_prefix()} - TLS handshake error: {refused[0]}")
                self.close("TLS Handshake Failure")
                return
        self.task = asyncio.get_running_loop().create_task(self._run())
        # nats-server's auth timeout applies until CONNECT
        to = self.ms.auth_timeout()
        self.ka_handle = asyncio.get_running_loop().call_later(to, self._connect_timeout)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.last_read = time.monotonic()
        self.last_activity = time.time()
        if self.fast and not self.busy and not self.queue._queue:  # type: ignore[attr-defined]
            dbuf = self.decoder.buf
            if dbuf:  # (the start of a packet the last read ended in)
                data = bytes(dbuf) + data
                dbuf.clear()
            data = self._fast_in(data)
            if not data:
                self.server.flush_clients()
                return
        if not self.connected and not self.decoder.version and not self.queue.qsize() and data[:4] == b"GET " \
                and self.conn_type == "MQTT":
            self.fail("MQTT clients over websocket must connect to the Websocket port, not the MQTT port")
            return
        try:
            pkts = self.decoder.feed(data)
        except C.MQTTError as e:
            pkts = None
            err: C.MQTTError | None = e
        else:
            err = None
        q = self.queue
        for p in pkts or ():
            # in order: what needs no waiting is handled here, unless earlier packets wait in the queue
            if self.connected and not self.busy and not q._queue and not self.closed:  # type: ignore[attr-defined]
                t = p.type
                try:
                    if t == C.PUBLISH and self._publish_now(p):
                        continue
                    if t == C.PUBACK:
                        self.on_puback(p)
                        continue
                    if t == C.PINGREQ:
                        self.send(b"\xd0\x00")
                        continue
                    if t == C.PUBCOMP:
                        self.on_pubcomp(p)
                        continue
                except C.MQTTError as e:
                    q.put_nowait(e)
                    break
            q.put_nowait(p)
        if err is not None:
            q.put_nowait(err)
        self.server.flush_clients()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.close("Client Closed" if exc is None else "Read Error", abnormal=True)

    # ---- lifecycle -----------------------------------------------------------------------------------------

    def _connect_timeout(self) -> None:
        if not self.connected and not self.closed:
            self.server.log.error(f"{self.log_prefix()} - authentication timeout")
            self.close("Authentication Timeout")

    def log_prefix(self) -> str:
        cid = f' - "{self.client_id}"' if self.client_id else ""
        return f"{self.host}:{self.port} - mid:{self.cid}{cid}"

    def send(self, data: bytes) -> None:
        """Queue ``data``: written once per loop pass (with the server's other connections)."""
        if self.closed:
            return
        self.out += data
        if not self.flush_pending:
            self.flush_soon()

    def flush_soon(self) -> None:
        """Have ``out`` written in this loop pass's flush (with the server's other connections)."""
        self.flush_pending = True
        srv = self.server
        srv.pending_flush.append(self)
        srv.schedule_flush()

    def send_packet(self, p: Any) -> None:
        self.send(C.encode(p, self.version))

    def fail(self, reason: str, rc: int = RC_PROTOCOL) -> None:
        """A protocol error: logged, MQTT 5 gets a DISCONNECT with ``rc``, the connection closes."""
        self.server.log.error(f"{self.log_prefix()} - {reason}")
        if self.connected and self.version >= 5:
            self.send_packet(C.Disconnect(rc, {"reason_string": reason[:200]} if self.problem_info else {}))
        self.close("Protocol Violation" if rc in (RC_PROTOCOL, RC_MALFORMED) else reason, abnormal=True)

    def close(self, reason: str, abnormal: bool = False, err: str | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        self.close_reason = reason
        self.stop_time = time.time()
        if self.ka_handle is not None:
            self.ka_handle.cancel()
        jt = getattr(self, "jwt_timer", None)
        if jt is not None:
            jt.cancel()
        t = self.transport
        if t is not None:
            linger = False
            if self.out:
                t.write(bytes(self.out))  # (a DISCONNECT or CONNACK before the close)
                self.out.clear()
                # MQTT 5, a server DISCONNECT over plain TCP: the write side is shut and what the client still
                # sends is read (and dropped) for a moment before the close, so the client reads the DISCONNECT
                # rather than a reset (a socket closed with unread input resets the connection)
                linger = self.version >= 5 and self.connected and self.conn_type == "MQTT" and \
                    not self.server.shutting_down and t.can_write_eof()
            if linger:
                t.write_eof()
                asyncio.get_event_loop().call_later(2.0, t.close)
            else:
                t.close()
        self._unsubscribe_all()
        if self.connect_received:
            self.server.sysacc.client_disconnected(self)  # ($SYS.ACCOUNT.<acc>.DISCONNECT, as nats-server)
        loop = asyncio.get_event_loop()
        will = self.will if abnormal else None
        self.will = None
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()
        task = loop.create_task(self._after_close(will))
        sess, asm = self.sess, self.asm
        if sess is not None and asm is not None and sess.conn is self:
            # a connection with the same client id waits for this one's session to be settled (cleared,
            # or saved with its expiry) before it takes it
            asm.settling[sess.id] = task
            task.add_done_callback(lambda _t, cid=sess.id: asm.settling.pop(cid, None)
                                   if asm.settling.get(cid) is _t else None)

    async def _after_close(self, will: C.Will | None) -> None:
        sess = self.sess
        try:
            if will is not None and self.connected:
                delay = int(will.props.get("will_delay_interval", 0)) if self.version >= 5 else 0
                # (the will goes when its delay is over or the session ends, whichever is first: a session
                # expiry of 0 ends the session now, MQTT-3.1.3-9)
                delay = min(delay, self.session_expiry)
                if delay:
                    self.ms.delayed_will(self, will, delay)
                else:
                    await self.publish_will(will)
            if sess is not None and sess.conn is self:
                sess.conn = None
                asm = self.asm
                assert asm is not None
                if sess.clean and (self.version < 5 or self.session_expiry == 0):
                    async with sess.lock:
                        await sess.clear(self.version >= 5)
                    if asm.sessions.get(sess.id) is sess:
                        del asm.sessions[sess.id]
                elif self.version >= 5 and self.session_expiry != 0xFFFFFFFF:
                    self.ms.expire_later(asm, sess, self.session_expiry)
                    async with sess.lock:
                        sess.gone = time.time()  # type: ignore[attr-defined]
                        await sess.save()
        except Exception as e:  # (JetStream gone at shutdown, a timeout): logged, the connection is gone anyway
            if not self.server.shutting_down:
                self.server.log.error(f"{self.log_prefix()} - error cleaning up session: {e}")
        finally:
            self.ms.unregister(self)

    def _jwt_expired(self) -> None:
        if not self.closed:
            self.debug("User Authentication Expired")
            self.close("Authentication Expired", abnormal=True)

    def takeover(self) -> None:
        """Another connection (here or on another server) took this client id: closed without its will,
        leaving the session to the new owner."""
        self.will = None
        self.sess = None
        if self.version >= 5 and self.connected:
            self.send_packet(C.Disconnect(RC_TAKEN_OVER))
        self.close("Duplicate Client ID")

    def _unsubscribe_all(self) -> None:
        acc = self.account
        for s in list(self.subs.values()):
            acc.remove_sub(s)
        self.subs.clear()
        if self.rsp_sub is not None:
            self.rsp_sub = None

    # ---- the packet loop -----------------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while not self.closed:
                p = await self.queue.get()
                self.busy = True
                if self.ack_fifo:
                    await self._acks_sent()
                if isinstance(p, C.MQTTError):
                    self._decode_error(p)
                    return
                try:
                    await self.handle(p)
                    self.busy = False
                    self.server.flush_clients()
                except C.MQTTError as e:
                    self._decode_error(e)
                    return
                except (JSAPIError, TimeoutError, RuntimeError, ValueError) as e:
                    self.fail(str(e), RC_UNSPECIFIED)
                    return
                except Exception as e:  # a bug: reported with its traceback, and the connection closed
                    self.server.log.error(f"{self.log_prefix()} - internal error handling {type(p).__name__}: "
                                          f"{e!r}\n{traceback.format_exc()}")
                    self.fail(f"internal error: {e}", RC_UNSPECIFIED)
                    return
        except asyncio.CancelledError:
            pass

    def _decode_error(self, e: C.MQTTError) -> None:
        if not self.connected and e.connack:
            rc = e.connack
            if self.decoder.version >= 5 or getattr(e, "v5", False):
                self.version = 5
                rc = RC5.get(rc, e.reason)
            self.send_packet(C.ConnAck(False, rc))
        self.fail(str(e), e.reason)

    async def handle(self, p: Any) -> None:
        t = p.type
        if not self.connected:
            if t != C.CONNECT:
                raise C.ProtocolViolation(f"the first packet should be a CONNECT (16), got {t << 4}")
            await self.on_connect(p)
            return
        if t == C.PUBLISH:
            await self.on_publish(p)
        elif t == C.PUBACK:
            self.on_puback(p)
        elif t == C.PUBREC:
            await self.on_pubrec(p)
        elif t == C.PUBREL:
            await self.on_pubrel(p)
        elif t == C.PUBCOMP:
            self.on_pubcomp(p)
        elif t == C.SUBSCRIBE:
            await self.on_subscribe(p)
        elif t == C.UNSUBSCRIBE:
            await self.on_unsubscribe(p)
        elif t == C.PINGREQ:
            self.send(b"\xd0\x00")
        elif t == C.DISCONNECT:
            if self.version >= 5:
                if "session_expiry_interval" in p.props:
                    if self.session_expiry == 0 and p.props["session_expiry_interval"]:
                        raise C.ProtocolViolation("session expiry interval cannot be set on DISCONNECT when it was 0")
                    self.session_expiry = p.props["session_expiry_interval"]
                if p.rc == 0x04:  # disconnect with will message
                    self.close("Client Closed", abnormal=True)
                    return
            self.will = None
            self.close("Client Closed")
        elif t == C.CONNECT:
            raise C.ProtocolViolation("received a second CONNECT packet")
        elif t == C.AUTH:
            raise C.ProtocolViolation("AUTH packet received but no enhanced authentication method is supported")
        else:
            raise C.ProtocolViolation(f"received unexpected packet type {t}")

    # ---- monitoring ------------------------------------------------------------------------------------------

    def trace(self, msg: str) -> None:
        self.server.log.trace(f"{self.log_prefix()} - {msg}")

    def debug(self, msg: str) -> None:
        self.server.log.debug(f"{self.log_prefix()} - {msg}")

    def flush(self) -> None:
        self.write_out()

    def write_out(self) -> None:
        self.flush_pending = False
        self.acks_unwritten = 0
        if self.out:
            t = self.transport
            if t is not None:
                t.write(bytes(self.out))
                mp = self.server.opts.max_pending
                if mp and t.get_write_buffer_size() > mp and not self.closed:
                    # the client does not read: cut off as nats-server cuts off a slow consumer
                    self.server.count_slow(self)  # (a client's count: the server's, its kind's, its account's)
                    self.server.log.notice(f"{self.log_prefix()} - Slow Consumer Detected: MaxPending of {mp} "
                                           f"Exceeded")
                    self.out.clear()
                    self.close("Slow Consumer (Pending Bytes)", abnormal=True)
                    return
            self.out.clear()
