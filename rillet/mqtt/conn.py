"""One MQTT connection: packets in (through ``codec.Decoder``), NATS and JetStream behind, packets out.

The connection is the owner of its NATS subscriptions (callbacks, as an internal client's are) and
publishes through its account like any client, so NATS subscribers, JetStream streams, imports, mappings
and routes see MQTT traffic as nats-server delivers it: a PUBLISH to ``a/b`` is a message on ``a.b`` with a
``Nmqtt-Pub:<qos>`` header; QoS 1/2 messages are also stored in ``$MQTT_msgs`` and reach QoS 1/2
subscriptions through their durable consumers (``rillet.mqtt.store``).

Packets are handled in order by one task per connection (CONNECT, SUBSCRIBE and QoS 1/2 PUBLISH wait for
JetStream); deliveries from NATS are written at once from the delivering callback.
"""
from __future__ import annotations

import asyncio
import base64
import json
import time
import traceback
from collections import deque
from typing import TYPE_CHECKING, Any

from rillet.server.delivery import ConnKind

from . import codec as C
from . import sparkplug as spb
from .store import (MSGS_PREFIX, MSGS_STREAM, OUT_STREAM, PUBREL_DELIVER_PREFIX, PUBREL_DURABLE_PREFIX,
                    PUBREL_PREFIX, QOS2IN_PREFIX, QOS2IN_STREAM, SUB_PREFIX, AccountSessions, JSAPIError,
                    RetainedMsg, Session, client_hash, make_headers, nuid, parse_headers)
from .topics import (TopicError, filter_to_subject, needs_level_up, reserved_filter, subject_to_topic,
                     topic_to_subject)

if TYPE_CHECKING:
    from .listener import MqttServer

__all__ = ["MqttConn", "parse_ack"]

# CONNACK return codes (3.1.1) and MQTT 5 reason codes
RC311_BAD_VERSION, RC311_ID_REJECTED, RC311_UNAVAILABLE, RC311_BAD_AUTH, RC311_NOT_AUTHORIZED = 1, 2, 3, 4, 5
RC5 = {1: 0x84, 2: 0x85, 3: 0x88, 4: 0x86, 5: 0x87}
RC_NORMAL = 0x00
RC_UNSPECIFIED = 0x80
RC_MALFORMED = 0x81
RC_PROTOCOL = 0x82
RC_NOT_AUTHORIZED = 0x87
RC_BAD_AUTH_METHOD = 0x8C
RC_SHUTDOWN = 0x8B
RC_KEEPALIVE = 0x8D
RC_TAKEN_OVER = 0x8E
RC_TOPIC_FILTER_INVALID = 0x8F
RC_TOPIC_NAME_INVALID = 0x90
RC_PI_IN_USE = 0x91
RC_PI_NOT_FOUND = 0x92
RC_RECV_MAX = 0x93
RC_ALIAS_INVALID = 0x94
RC_TOO_LARGE = 0x95
RC_QUOTA = 0x97
RC_QOS_NOT_SUPPORTED = 0x9B
RC_SHARED_NOT_SUPPORTED = 0x9E
RC_NO_SUBSCRIBERS = 0x10
RC_NO_SUB_EXISTED = 0x11

SERVER_ALIAS_MAX = 65535
MAX_PAYLOAD_MQTT = 0xFFFFFFF
PROPS_HDR = "Nmqtt-Props"
_INTERNAL_HDRS = ("Nmqtt-", "Rillet-Mqtt-")


_TOPICS: dict[bytes, bytes] = {}  # subject -> the PUBLISH topic field (length and topic; a cache)
MSGS_PREFIX_B = MSGS_PREFIX.encode()
_HDRS = [b"NATS/1.0\r\nNmqtt-Pub:%d\r\n\r\n" % q for q in range(3)]  # (3.1.1 publishes carry no more)


def parse_ack(reply: str | bytes) -> tuple[int, int, int] | None:
    """(delivery count, stream sequence, pending) of a JetStream ack subject."""
    toks = reply.split(b"." if reply.__class__ is bytes else ".")  # type: ignore[arg-type]
    n = len(toks)
    off = 2 if n == 9 else 4 if n >= 11 else -1
    if off < 0:
        return None
    try:
        return int(toks[off + 2]), int(toks[off + 3]), int(toks[off + 6])
    except (ValueError, IndexError):
        return None


class _Sub:
    """The MQTT side of one subscription (filter) of a connection."""

    __slots__ = ("subject", "topic", "qos", "reserved", "nats_subs", "js_sub", "durable", "opts", "sid", "queue")

    def __init__(self, subject: str, topic: str, qos: int, opts: C.SubOpts, sid: int, queue: str | None) -> None:
        self.subject = subject
        self.topic = topic
        self.qos = qos
        self.reserved = reserved_filter(subject)
        self.nats_subs: list[Any] = []
        self.js_sub: Any = None
        self.durable = ""
        self.opts = opts
        self.sid = sid  # MQTT 5 subscription identifier (0: none)
        self.queue = queue


class MqttConn(asyncio.Protocol):
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
        # QoS 1 PUBACKs in order: [None until stored (then True, or the error), packet id, reason code]
        self.ack_fifo: deque = deque()
        self._acks_waiter: asyncio.Future | None = None  # the packet task waits for the PUBACKs owed
        self._stored_cb = self._stored
        self.acks_unwritten = 0  # PUBACKs in ``out`` (MQTT 5: the client has not seen them yet)
        self._per_sub = int(srv.opts.mqtt.get("max_ack_pending") or 1024)  # QoS 1/2 in flight per subscription
        self.topics: dict[str, str] = {}  # topic -> subject (a cache)
        self.pubs: dict[str, tuple[str, bytes, bool]] = {}  # topic -> (subject, its bytes, publish allowed)
        self.fpubs: dict[bytes, bytes] = {}  # topic bytes -> subject bytes (_fast_in: checked, allowed)
        self.fast = False  # a connected client: _fast_in reads its PUBLISH/PUBACK/PINGREQ
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
            if self.out:
                t.write(bytes(self.out))  # (a DISCONNECT or CONNACK before the close)
                self.out.clear()
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
                if delay and self.session_expiry:
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
                        await sess.clear()
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

    # ---- CONNECT -------------------------------------------------------------------------------------------

    async def on_connect(self, p: C.Connect) -> None:
        srv = self.server
        ms = self.ms
        self.version = p.version
        v5 = p.version >= 5
        if self.ka_handle is not None:
            self.ka_handle.cancel()
            self.ka_handle = None

        def refuse(rc311: int, reason: str, log: str) -> None:
            self.send_packet(C.ConnAck(False, RC5[rc311] if v5 else rc311,
                                       {"reason_string": reason} if v5 and self.problem_info else {}))
            srv.log.error(f"{self.log_prefix()} - {log}")
            self.close(reason)

        if v5:
            self.problem_info = p.props.get("request_problem_information", 1) == 1
            self.client_recv_max = p.props.get("receive_maximum", 65535)
            self.client_max_packet = p.props.get("maximum_packet_size", 0)
            self.client_alias_max = p.props.get("topic_alias_maximum", 0)
            self.session_expiry = p.props.get("session_expiry_interval", 0)
            if "authentication_method" in p.props:
                self.send_packet(C.ConnAck(False, RC_BAD_AUTH_METHOD,
                                           {"reason_string": "enhanced authentication is not supported"}))
                self.close("Authentication Failure")
                return
        cid = p.client_id
        if not cid:
            if not p.clean:
                self.client_id = ""
                refuse(RC311_ID_REJECTED, "Client ID rejected",
                       "when client ID is empty, clean session flag must be set to 1")
                return
            cid = nuid()
            self.assigned = cid  # type: ignore[attr-defined]
        if any(ch in cid for ch in " \t\r\n.*>"):
            self.client_id = cid
            refuse(RC311_ID_REJECTED, "Client ID rejected", f"invalid character in client ID {cid!r}")
            return
        self.client_id = cid
        if p.username:
            self.opts.user = p.username
        if p.password is not None:  # (nats-server: the password is also the token)
            self.opts.password = self.opts.auth_token = p.password.decode("utf-8", "surrogateescape")
        if p.will is not None:
            if ms.reject_qos2 and p.will.qos == 2:
                self.send_packet(C.ConnAck(False, RC_QOS_NOT_SUPPORTED if v5 else 0x10))  # (nats-server's code)
                self.close("Protocol Violation")
                return
            try:
                self.will_subject = topic_to_subject(p.will.topic)
            except TopicError as e:
                raise C.MalformedPacket(str(e), RC_TOPIC_NAME_INVALID) from None
        # authentication, as a NATS CONNECT with the MQTT user name and password (the password is also the token);
        # an auth callout (the server's, or an account JWT's) decides when it is configured to
        if not await self._authorize(p):
            if self.closed:
                return
            srv.sysacc.auth_error(self, "Authentication Failure")
            refuse(RC311_NOT_AUTHORIZED, "Not authorized", "authentication error"
                   + (f" - User \"{p.username}\"" if p.username else ""))
            return
        if self.closed:
            return
        # as nats-server (isClientAuthorized): the account's CONNECT event once the client is authenticated
        self.connect_received = True
        srv.sysacc.client_connected(self)
        self.will = p.will
        self.keepalive = p.keepalive
        self.connect_packet = p  # (a configuration reload signs the client in again)
        try:
            asm = await ms.sessions_for(self.account)
        except Exception as e:
            srv.log.error(f"{self.log_prefix()} - unable to connect: {e}")
            if v5:  # (3.1.1: closed without a CONNACK, as nats-server)
                self.send_packet(C.ConnAck(False, RC5[3]))
            self.close("Protocol Violation")
            return
        self.asm = asm
        if asm.jailed(cid):
            await asyncio.sleep(1.0)
            self.close("Duplicate Client ID")
            return
        for _ in range(20):
            if cid not in asm.locked:
                break
            await asyncio.sleep(0.1)
        else:
            raise RuntimeError(f"other session with client ID {cid!r} is in the process of connecting")
        asm.locked.add(cid)
        try:
            sess_present = await self._bind_session(asm, cid, p)
        finally:
            asm.locked.discard(cid)
        if self.closed:
            return
        self.connected = True
        # the steady state's PUBLISH headers (MQTT 5: the client id in the properties header, nothing else)
        self.fast_hdrs = (_HDRS[0], _HDRS[1]) if not v5 else (
            self._nats_headers(C.Publish("", b"", 0), 0), self._nats_headers(C.Publish("", b"", 1), 1))
        self.fast = True
        # after CONNECT: packets up to what MQTT 5 clients are told (a PUBLISH of max_payload and its topic and
        # properties); the NATS message's size is what max_payload limits (checked per PUBLISH, as nats-server)
        self.decoder.max_packet = ms.max_packet()
        ms.cancel_will(self.account, cid)
        props: dict[str, Any] = {}
        if v5:
            props = {"receive_maximum": ms.receive_max, "topic_alias_maximum": SERVER_ALIAS_MAX,
                     "maximum_packet_size": self.ms.max_packet(), "retain_available": 1,
                     "wildcard_subscription_available": 1, "subscription_identifier_available": 1,
                     "shared_subscription_available": 1}
            if ms.reject_qos2:
                props["maximum_qos"] = 1
            if getattr(self, "assigned", None):
                props["assigned_client_identifier"] = cid
            if p.props.get("request_response_information") == 1:
                props["response_information"] = f"rsp/{client_hash(cid)}"
        self.send_packet(C.ConnAck(sess_present, 0, props))
        if self.keepalive:
            self._arm_keepalive()
        srv.log.debug(f"{self.log_prefix()} - Client connected")
        # the session's saved subscriptions, then the PUBRELs it is owed
        sess = self.sess
        assert sess is not None
        if sess.subs:
            for subject, qos in list(sess.subs.items()):
                f = sess.filters.get(subject) or {}
                o = C.SubOpts(qos, bool(f.get("nl")), bool(f.get("rap")), int(f.get("rh", 0)))
                await self._add_sub(subject, f.get("topic") or subject_to_topic(subject), o, int(f.get("sid", 0)),
                                    f.get("queue"), restoring=True)
        if sess.pubrel:
            await self._ensure_pubrel()

    async def _authorize(self, p: C.Connect) -> bool:
        """Authenticate, or have the auth callout decide (nats-server sends MQTT users to it as other clients:
        the config's ``authorization { auth_callout }`` unless the mqtt block has its own authorization, or
        the callout of the account the user JWT names)."""
        srv = self.server
        callout: list = []
        if not self._authenticate(p, callout):
            return False
        if not callout:
            return True
        ac, jwt_sub = callout
        loop = asyncio.get_running_loop()
        self._callout_wait = loop.create_future()
        ac.start(self, self.opts, jwt_sub=jwt_sub)
        user = await self._callout_wait
        self._callout_wait = None
        if user is None or self.closed:
            return False
        self.jwt_user = None
        if self.jwt_timer is not None:
            self.jwt_timer.cancel()
            self.jwt_timer = None
        self.perms = None
        self._apply_user(user)
        self.user = user.username or self.opts.user or user.nkey
        self.callout_user = user
        (getattr(user, "callout", None) or srv.auth_callout).apply_limits(self, user)
        return True

    def callout_started(self) -> None:
        """(AuthCallout.start) The CONNECT waits in ``_authorize`` for the answer; nothing else is read meanwhile:
        the packet task is busy with the CONNECT."""

    def callout_done(self, user: Any, reason: str) -> None:
        """(AuthCallout) The callout admitted the client as ``user``, or refused it (None). After a reload's
        recheck (no CONNECT waiting) a refusal closes the connection."""
        w = self._callout_wait
        if w is not None:
            if not w.done():
                w.set_result(user)
            return
        if user is None and not self.closed:
            self.server.sysacc.auth_error(self, "Authentication Failure")
            self.server.log.error(f"{self.log_prefix()} - authentication error after reload")
            if self.version >= 5:
                self.send_packet(C.Disconnect(RC_NOT_AUTHORIZED))
            self.close("Authentication Failure", abnormal=True)

    def update_slow_path(self) -> None:
        """(Called when permissions change) forget the publish permissions cached per topic."""
        self.pubs.clear()
        self.fpubs.clear()

    def prune_subscriptions(self) -> None:
        """Drop the subscriptions the connection's (new) permissions no longer allow."""
        self.update_slow_path()
        if self.perms is not None:
            for key, s in list(self.msubs.items()):
                if not self.perms.can_subscribe(s.subject, s.queue):
                    self._drop_sub(s)
                    del self.msubs[key]

    def _authenticate(self, p: C.Connect, callout: list | None = None) -> bool:
        srv = self.server
        auth = self.ms.authenticator()
        self.auth = auth
        connect: dict[str, Any] = {}
        if p.username is not None:
            connect["user"] = p.username
        if p.password is not None:
            pw = p.password.decode("utf-8", "surrogateescape")
            connect["pass"] = pw
            connect["auth_token"] = pw
        if srv.operator is not None and auth.operator_mode:
            # nats-server: the password field carries the user JWT (bearer: no nonce to sign)
            if p.password:
                connect["jwt"] = self.opts.jwt = p.password.decode("utf-8", "surrogateescape")
            res = srv.operator.authenticate(self, connect) or False
            oc = srv.operator.callout_for(res.account) if res is not False and callout is not None else None
            if oc is not None and oc.raw_user(self.opts, res.nkey) not in oc.cfg.auth_users:
                # the account's JWT delegates its users' admission to its auth callout service
                callout[:] = [oc, res.nkey]
                return True
        else:
            peer = None
            t = self.transport
            so = t.get_extra_info("ssl_object") if t is not None else None
            if so is not None:
                peer = so.getpeercert()
            mt = srv.opts.mqtt.get("tls")
            if mt is not None and mt.verify_and_map and auth.users and self.conn_type == "MQTT":
                # the client certificate names the user (as nats-server's tls_map for MQTT)
                from rillet.server.auth import tls_map_user
                u = tls_map_user(auth.users, peer or {}, self.conn_type)
                res = u if u is not None else False
            else:
                res = auth.authenticate(connect, None, self.conn_type, peer)
            ac = srv.auth_callout
            if callout is not None and ac is not None and srv.operator is None and ac.delegates(self, self.opts, res):
                callout[:] = [ac, ""]  # (an mqtt block with its own authorization is not delegated)
                return True
        if res is False:
            return False
        if res is not True and res is not None:
            self._apply_user(res)
            if getattr(res, "jwt", None):
                self.jwt_user = res
                exp = int(res.claims.get("exp") or 0)
                delay = max(exp - time.time(), 0.0) if exp else None
                vf = getattr(res, "valid_for", 0.0)
                if vf:
                    delay = vf if delay is None else min(delay, vf)
                if delay is not None:
                    # the user JWT expires: the connection goes then, as nats-server closes it
                    self.jwt_timer = asyncio.get_event_loop().call_later(delay, self._jwt_expired)
        elif p.username:
            self.user = p.username
        return True

    def recheck_auth(self) -> None:
        p = getattr(self, "connect_packet", None)
        if p is None:
            return
        cu = self.callout_user
        if cu is not None:
            # admitted by an auth callout: asked again (as nats-server after a reload); the answer applies
            # through AuthCallout._done
            ac = getattr(cu, "callout", None) or self.server.auth_callout
            if ac is not None:
                ac.recheck(self)
                return
        acc = self.account
        self.perms = None
        if not self._authenticate(p) or self.account is not acc:
            self.server.log.error(f"{self.log_prefix()} - authentication error after reload")
            if self.version >= 5:
                self.send_packet(C.Disconnect(RC_NOT_AUTHORIZED))
            self.close("Authentication Failure", abnormal=True)
            return
        self.prune_subscriptions()

    def _apply_user(self, u: Any) -> None:
        from rillet.server.auth import PermChecker
        self.user = getattr(u, "username", "") or getattr(u, "nkey", "")
        if getattr(u, "permissions", None) is not None:
            self.perms = PermChecker(u.permissions)
        name = getattr(u, "account", None)
        if name:
            acc = self.server.lookup_account(name)
            self.account.clients.discard(self)
            self.account = acc

    async def _bind_session(self, asm: AccountSessions, cid: str, p: C.Connect) -> bool:
        """Take over or restore the client id's session (discarding it for a clean one); True if one is
        present for the client."""
        v5 = p.version >= 5
        # MQTT 5: clean start discards, the expiry interval says whether it outlives the connection;
        # 3.1.1: clean session does both
        persistent = (self.session_expiry > 0) if v5 else not p.clean
        settling = asm.settling.get(cid)
        if settling is not None:
            await asyncio.wait([settling], timeout=asm.jsa.timeout)
        sess = asm.sessions.get(cid)
        if sess is None:
            sess = await asm.load_session(cid)
            exists = getattr(sess, "exists", False)
            gone = getattr(sess, "gone", 0) or 0
            if exists and sess.expiry and sess.expiry != 0xFFFFFFFF and gone and time.time() - gone > sess.expiry:
                async with sess.lock:
                    await sess.clear()  # expired while no server held it
                exists = False
        else:
            exists = True
        present = False
        old = sess.conn
        if old is not None and old is not self:
            old.will = None
            asm.flappers[cid] = time.monotonic()
            self.server.log.warn(f"{self.log_prefix()} - Replacing old client {old.log_prefix()} since both have "
                                 f"the same client ID {cid!r}")
            old.takeover()
        async with sess.lock:
            if exists:
                discard = p.clean if v5 else (p.clean or sess.clean)
                if discard:
                    await sess.clear()
                else:
                    present = True
            sess.conn = self
            sess.clean = not persistent
            sess.version = p.version
            sess.expiry = self.session_expiry if v5 else 0
            sess.gone = 0  # type: ignore[attr-defined]
            sess.rel_sub_made = False
            sess.pending_pub.clear()
            sess.cpending.clear()
            asm.sessions[cid] = sess
            self.sess = sess
            await sess.save()
        return present

    # ---- keep-alive ------------------------------------------------------------------------------------------

    def _arm_keepalive(self) -> None:
        loop = asyncio.get_event_loop()
        limit = self.keepalive * 1.5
        wait = limit - (time.monotonic() - self.last_read)
        if wait <= 0:
            self.server.log.debug(f"{self.log_prefix()} - keep-alive timeout")
            if self.version >= 5:
                self.send_packet(C.Disconnect(RC_KEEPALIVE))
            self.close("Read Error", abnormal=True)
            return
        self.ka_handle = loop.call_later(wait, self._arm_keepalive)

    # ---- PUBLISH from the client -------------------------------------------------------------------------------

    async def on_publish(self, p: C.Publish) -> None:
        ms = self.ms
        if p.qos == 2 and ms.reject_qos2:
            raise C.ProtocolViolation("QoS=2 is disabled for PUBLISH messages", RC_QOS_NOT_SUPPORTED)
        topic = p.topic
        if self.version >= 5:
            alias = p.props.pop("topic_alias", None)
            if alias is not None:
                if alias > SERVER_ALIAS_MAX:
                    raise C.ProtocolViolation(f"topic alias {alias} over the maximum", RC_ALIAS_INVALID)
                if topic:
                    self.aliases_in[alias] = topic
                else:
                    topic = self.aliases_in.get(alias, "")
                    if not topic:
                        raise C.ProtocolViolation(f"unknown topic alias {alias}", RC_PROTOCOL)
            if p.qos == 2 and p.pi not in self.qos2_in and len(self.qos2_in) >= ms.receive_max:
                raise C.ProtocolViolation("receive maximum exceeded", RC_RECV_MAX)
        try:
            subject = topic_to_subject(topic)
        except TopicError as e:
            raise C.MalformedPacket(str(e), RC_TOPIC_NAME_INVALID) from None
        acc = self.account
        if acc.mappings:
            mapped = acc.map_subject(subject.encode())
            if mapped is not None:
                subject = mapped.decode()
                topic = subject_to_topic(subject)
        p.topic = topic
        hdr = self._nats_headers(p, p.qos)
        size = len(hdr) + len(p.payload)
        mp = self.server.opts.max_payload
        if mp and size > mp:
            self.server.log.error(f"{self.log_prefix()} - Maximum Payload Violation")
            if self.version >= 5:
                self.send_packet(C.Disconnect(RC_TOO_LARGE))
            self.close("Maximum Payload Violation", abnormal=True)
            return
        self.in_msgs += 1
        self.in_bytes += size - 2  # (as nats-server counts it: the NATS message less a CRLF it does not have)
        if p.qos == 2:
            # stored once under the packet id until PUBREL; a resend is refused by the stream (discard new per
            # subject) and answered with the same PUBREC
            h2 = hdr[:-2] + f"Nmqtt-Subject:{subject}\r\n".encode() + \
                (b"Nmqtt-Retain:1\r\n" if p.retain else b"") + b"\r\n"
            try:
                await self.asm.jsa.store(  # type: ignore[union-attr]
                    f"{QOS2IN_PREFIX}{self.client_id}.{p.pi}", p.payload, h2)
            except JSAPIError as e:
                if e.err_code not in (10077,) and "maximum messages per subject" not in str(e):
                    raise
            self.qos2_in.add(p.pi)
            self.send_packet(C.Ack(C.PUBREC, p.pi))
            return
        ok = await self._deliver(p, subject, hdr)
        if p.qos == 1:
            rc = 0
            if self.version >= 5:
                rc = RC_NOT_AUTHORIZED if ok is None else 0 if ok else RC_NO_SUBSCRIBERS
            self.send_packet(C.Ack(C.PUBACK, p.pi, rc))

    def _subject_of(self, topic: str) -> str:
        sub = self.topics.get(topic)
        if sub is None:
            try:
                sub = topic_to_subject(topic)
            except TopicError as e:
                raise C.MalformedPacket(str(e), RC_TOPIC_NAME_INVALID) from None
            if len(self.topics) > 4096:
                self.topics.clear()
            self.topics[topic] = sub
        return sub

    def _publish_now(self, p: C.Publish) -> bool:
        """A QoS 0 or 1 PUBLISH without retain, alias or MQTT 5 request properties, handled without waiting:
        delivered now; a QoS 1 one is stored in $MQTT_msgs with its PUBACK sent, in order, once stored.
        False: the packet goes through the packet task."""
        if p.retain or p.qos == 2 or (self.version >= 5 and p.props) or p.topic.startswith("spBv1.0/"):
            return False
        acc = self.account
        if acc.mappings:
            return False
        ent = self.pubs.get(p.topic)
        if ent is None:
            subject = self._subject_of(p.topic)
            sb = subject.encode()
            # (a subject this connection may not publish to takes the packet task's path, which logs it)
            ok = self.perms is None or self.perms.can_publish(sb)
            if len(self.pubs) > 4096:
                self.pubs.clear()
            ent = self.pubs[p.topic] = (subject, sb, ok)
        subject, sb, ok = ent
        if not ok:
            return False
        hdr = _HDRS[p.qos] if self.version < 5 else self._nats_headers(p, p.qos)
        payload = p.payload
        if len(hdr) + len(payload) > self.server.opts.max_payload:
            return False
        if p.qos == 1 and self.version >= 5 and len(self.ack_fifo) + self.acks_unwritten >= self.ms.receive_max:
            # MQTT 5: more QoS 1 PUBLISH without their PUBACK than the Receive Maximum told in CONNACK
            raise C.ProtocolViolation("receive maximum exceeded", RC_RECV_MAX)
        self.in_msgs += 1
        self.in_bytes += len(hdr) + len(payload) - 2  # (as nats-server counts it, see on_publish)
        got = acc.deliver(self, sb, None, len(hdr), hdr + payload)
        if p.qos == 1:
            rc = 0 if got or self.version < 5 else RC_NO_SUBSCRIBERS
            ent = [None, p.pi, rc]
            self.ack_fifo.append(ent)
            self.asm.jsa.store_cb((MSGS_PREFIX + subject).encode(), p.payload, hdr,  # type: ignore[union-attr]
                                  self._stored_cb, ent)
        return True

    def _fast_in(self, data: bytes) -> bytes:
        """The steady state of a connection, read without packet objects: QoS 0 and 1 PUBLISH (not retained;
        topics seen before, already checked and mapped; MQTT 5: without properties), PUBACK (MQTT 5: without a
        reason code) and PINGREQ, as ``_publish_now`` and ``handle`` do them. Returns the bytes from the first
        packet it leaves to the decoder (any other packet, one not complete, or anything to check or refuse)."""
        acc = self.account
        if acc.mappings:
            return data
        cache = self.fpubs
        deliver = acc.deliver
        maxp = self.decoder.max_packet
        h0, h1 = self.fast_hdrs
        hl = len(h0)  # (the QoS 1 header is as long)
        mpay = self.server.opts.max_payload - hl
        hb = hl - 2  # what in_bytes counts besides the payload (as nats-server, see on_publish)
        v5 = self.version >= 5
        rmax = self.ms.receive_max if v5 else 0
        skip = 1 if v5 else 0  # (MQTT 5: the properties length, 0)
        fifo = self.ack_fifo
        store = self.asm.jsa.store_cb  # type: ignore[union-attr]
        stored = self._stored_cb
        pos = 0
        n = len(data)
        while pos + 1 < n and not self.closed:
            first = data[pos]
            b = data[pos + 1]
            if b < 128:
                rl, i = b, pos + 2
            elif pos + 2 < n and data[pos + 2] < 128:
                rl, i = (b & 0x7F) | (data[pos + 2] << 7), pos + 3
            else:
                break
            end = i + rl
            if end > n or (maxp and end - pos > maxp):
                break
            if first == 0x30 or first == 0x32:
                if rl < 2:
                    break
                te = i + 2 + ((data[i] << 8) | data[i + 1])
                if te > end:
                    break
                tb = data[i + 2:te]
                ent = cache.get(tb)
                if ent is None:
                    ent = self._fast_topic(tb)
                    if ent is None:
                        break
                sb = ent[0]
                if first == 0x32:
                    ps = te + 2 + skip
                    if ps > end or (v5 and (data[te + 2] or len(fifo) + self.acks_unwritten >= rmax)):
                        break
                    pi = (data[te] << 8) | data[te + 1]
                    if not pi:
                        break
                    payload = data[ps:end]
                    if len(payload) > mpay:
                        break
                    self.in_msgs += 1
                    self.in_bytes += hb + len(payload)
                    got = deliver(self, sb, None, hl, h1 + payload)
                    a = [None, pi, 0 if got or not v5 else RC_NO_SUBSCRIBERS]
                    fifo.append(a)
                    store(ent[1], payload, h1, stored, a)
                else:
                    ps = te + skip
                    if ps > end or (v5 and data[te]):
                        break
                    payload = data[ps:end]
                    if len(payload) > mpay:
                        break
                    self.in_msgs += 1
                    self.in_bytes += hb + len(payload)
                    deliver(self, sb, None, hl, h0 + payload)
            elif first == 0x40 and rl == 2:
                pi = (data[i] << 8) | data[i + 1]
                if not pi:
                    break
                self.on_puback_pi(pi)
            elif first == 0xC0 and rl == 0:
                self.send(b"\xd0\x00")
            else:
                break
            pos = end
        return data[pos:] if pos else data

    def _fast_topic(self, tb: bytes) -> tuple[bytes, bytes] | None:
        """The NATS subject of a PUBLISH topic for ``_fast_in`` and its ``$MQTT_msgs`` subject (remembered), or
        None: the decoder and ``_publish_now`` take it (to refuse it, or for what the fast path does not do)."""
        try:
            topic = tb.decode("utf-8")
        except UnicodeDecodeError:
            return None
        if not topic or "\x00" in topic or "+" in topic or "#" in topic or topic.startswith("spBv1.0/"):
            return None
        try:
            subject = topic_to_subject(topic)
        except TopicError:
            return None
        sb = subject.encode()
        if self.perms is not None and not self.perms.can_publish(sb):
            return None
        if len(self.fpubs) > 4096:
            self.fpubs.clear()
        ent = self.fpubs[tb] = (sb, MSGS_PREFIX_B + sb)
        return ent

    def _stored(self, ent: list, err: BaseException | None) -> None:
        """(JSA.store_cb) A QoS 1 message is stored (or refused): the PUBACKs now due go out, in order."""
        ent[0] = err or True
        fifo = self.ack_fifo
        if fifo and fifo[0] is ent:
            self._drain_acks()

    def _drain_acks(self) -> None:
        fifo = self.ack_fifo
        while fifo and fifo[0][0] is not None:
            e, pi, rc = fifo.popleft()
            if e is not True and not (isinstance(e, JSAPIError) and e.code == 503):
                fifo.clear()
                self.fail(f"unable to store QoS 1 message: {e}", RC_UNSPECIFIED)
                break
            if self.closed:
                fifo.clear()
                break
            self.acks_unwritten += 1
            if rc:
                self.send(C.encode(C.Ack(C.PUBACK, pi, rc), 5))
            else:
                self.send(b"\x40\x02" + pi.to_bytes(2, "big"))
        w = self._acks_waiter
        if not fifo and w is not None:
            self._acks_waiter = None
            if not w.done():
                w.set_result(None)

    async def _acks_sent(self) -> None:
        """Wait until the PUBACKs owed for the QoS 1 messages before are sent (or the connection failed)."""
        if self._acks_waiter is None:
            self._acks_waiter = asyncio.get_running_loop().create_future()
        await self._acks_waiter

    def _nats_headers(self, p: C.Publish, qos: int) -> bytes:
        pairs = [("Nmqtt-Pub", str(qos))]
        if self.version >= 5:
            for k, v in p.props.get("user_property", ()):
                if k and not any(ch in k for ch in ":\r\n \t") and "\r" not in v and "\n" not in v:
                    pairs.append((k, v))
            extra: dict[str, Any] = {}
            for name in ("payload_format_indicator", "content_type", "message_expiry_interval"):
                if name in p.props:
                    extra[name] = p.props[name]
            if "correlation_data" in p.props:
                extra["correlation_data"] = base64.b64encode(p.props["correlation_data"]).decode()
            if "response_topic" in p.props:
                extra["response_topic"] = p.props["response_topic"]
            extra["cid"] = self.client_id
            if p.retain:
                extra["retain"] = 1
            if "message_expiry_interval" in p.props:
                extra["t"] = int(time.time())
            pairs.append((PROPS_HDR, base64.b64encode(json.dumps(extra, separators=(",", ":")).encode()).decode()))
        return make_headers(pairs)

    async def _deliver(self, p: C.Publish, subject: str, hdr: bytes) -> bool | None:
        """Onward delivery of an accepted PUBLISH: NATS (with the reply subject of an MQTT 5 response topic),
        the retained store, and ``$MQTT_msgs`` for QoS 1/2. None: the publish permission denies it."""
        if self.perms is not None and not self.perms.can_publish(subject.encode()):
            self.server.log.error(f'{self.log_prefix()} - Publish Violation - User "{self.user}", Subject "{subject}"')
            return None
        reply: bytes | None = None
        if self.version >= 5 and "response_topic" in p.props:
            try:
                reply = topic_to_subject(p.props["response_topic"]).encode()
            except TopicError:
                raise C.MalformedPacket("invalid response topic", RC_TOPIC_NAME_INVALID) from None
            if "correlation_data" in p.props:
                reply = self._response_inbox(reply.decode(), p.props["correlation_data"]).encode()
        birth, _death, cert = spb.kind(p.topic)
        if birth and not cert:
            if not p.retain:
                # Sparkplug B: the BIRTH is kept as the retained message of its certificate topic
                ctopic = spb.CERT_PREFIX + p.topic
                csubj = topic_to_subject(ctopic)
                await self._retain(C.Publish(ctopic, p.payload, p.qos, True, False, 0, {}), csubj)
                if p.payload:
                    self.asm.jsa.send(csubj, p.payload)  # type: ignore[union-attr]
        elif p.retain:
            await self._retain(p, subject)
        msg = hdr + p.payload
        got = self.account.deliver(self, subject.encode(), reply, len(hdr), msg)
        self.server.flush_clients()
        if p.qos > 0:
            sh = hdr
            exp = p.props.get("message_expiry_interval") if self.version >= 5 else None
            if exp:
                sh = hdr[:-2] + f"Nats-TTL:{max(int(exp), 1)}s\r\n".encode() + b"\r\n"
            try:
                await self.asm.jsa.store(MSGS_PREFIX + subject, p.payload, sh)  # type: ignore[union-attr]
            except JSAPIError as e:
                if e.err_code == 10166 and sh is not hdr:
                    # a $MQTT_msgs made by nats-server has no per-message TTL: kept without it (the expiry
                    # is still applied when the message is delivered)
                    await self.asm.jsa.store(MSGS_PREFIX + subject, p.payload, hdr)  # type: ignore[union-attr]
                elif e.code != 503:
                    raise
        return bool(got)

    def _response_inbox(self, rsp_subject: str, corr: bytes) -> str:
        """An MQTT 5 request with correlation data: the NATS reply is an inbox of this connection, and what a
        NATS responder sends there is forwarded to the response topic with the correlation data restored."""
        if self.rsp_sub is None:
            prefix = f"$MQTT.rsp.{client_hash(self.client_id)}{nuid()[:6]}."
            self.rsp_prefix = prefix
            self.rsp_sub = self._nats_sub(prefix + ">", self._on_response, None)
        self.rsp_n += 1
        tok = str(self.rsp_n)
        self.rsp_map[tok] = (rsp_subject, corr)
        if len(self.rsp_map) > 1024:
            self.rsp_map.pop(next(iter(self.rsp_map)))
        return self.rsp_prefix + tok

    def _on_response(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        tok = subject.decode().rsplit(".", 1)[-1]
        ent = self.rsp_map.pop(tok, None)
        if ent is None:
            return
        rsp_subject, corr = ent
        h = msg[:hdr] if hdr > 0 else b""
        body = msg[hdr:] if hdr > 0 else msg
        hd = parse_headers(h) if h else {}
        extra = _extra_of(hd) or {}
        if extra.get("cid") == self.client_id:
            extra = {}  # (the request's own headers, echoed back by the responder's library)
        extra.pop("response_topic", None)
        extra.pop("retain", None)
        if corr is not None:
            extra["correlation_data"] = base64.b64encode(corr).decode()
        # a plain NATS message on the response topic (QoS 0), with the responder's own headers
        pairs = [("Nmqtt-Pub", "0")] + [(k, v) for k, vs in hd.items() for v in vs if not k.startswith(_INTERNAL_HDRS)]
        pairs.append((PROPS_HDR, base64.b64encode(json.dumps(extra, separators=(",", ":")).encode()).decode()))
        nh = make_headers(pairs)
        self.account.deliver(self, rsp_subject.encode(), reply, len(nh), nh + body)

    async def _retain(self, p: C.Publish, subject: str) -> None:
        flags = (p.qos << 1) | 1
        props = {k: v for k, v in p.props.items() if k in ("payload_format_indicator", "content_type",
                                                              "user_property", "response_topic")}
        if "correlation_data" in p.props:
            props["correlation_data"] = base64.b64encode(p.props["correlation_data"]).decode()
        if "message_expiry_interval" in p.props:
            props["message_expiry_interval"] = p.props["message_expiry_interval"]
            props["t"] = time.time()
        assert self.asm is not None
        rm = RetainedMsg(subject, p.topic, p.payload, flags, self.asm.jsa.id, self.user, props=props)
        try:
            await self.asm.set_retained(rm)  # type: ignore[union-attr]
        except (JSAPIError, TimeoutError) as e:
            self.server.log.error(f"{self.log_prefix()} - unable to store retained message for account "
                                  f"\"{self.account.name}\", subject \"{subject}\": {e}")

    async def publish_will(self, will: C.Will) -> None:
        p = C.Publish(will.topic, will.payload, will.qos, will.retain, False, 0, dict(will.props))
        p.props.pop("will_delay_interval", None)
        subject = self.will_subject
        hdr = self._nats_headers(p, will.qos)
        await self._deliver(p, subject, hdr)

    async def on_pubrel(self, p: C.Ack) -> None:
        asm = self.asm
        assert asm is not None
        subj = f"{QOS2IN_PREFIX}{self.client_id}.{p.pi}"
        m = await asm.jsa.last_msg(QOS2IN_STREAM, subj)
        self.qos2_in.discard(p.pi)
        if m is None:
            self.send_packet(C.Ack(C.PUBCOMP, p.pi, RC_PI_NOT_FOUND if self.version >= 5 else 0))
            return
        await asm.jsa.delete_msg(QOS2IN_STREAM, m["seq"])
        h = parse_headers(m["hdrs"])
        subject = (h.get("Nmqtt-Subject") or [""])[0]
        if not subject:
            raise RuntimeError("invalid message in QoS2 PUBREL stream")
        props: dict[str, Any] = {}
        if h.get(PROPS_HDR):
            extra = json.loads(base64.b64decode(h[PROPS_HDR][0]))
            props = _props_from_extra(extra, user_props=[(k, v) for k, vs in h.items() for v in vs
                                                         if not k.startswith(_INTERNAL_HDRS)])
        pub = C.Publish(subject_to_topic(subject), m["data"], 2, bool(h.get("Nmqtt-Retain")), False, p.pi, props)
        # the stored header without the QoS 2 bookkeeping
        hdr = make_headers([(k, v) for k, vs in h.items() for v in vs if k not in ("Nmqtt-Subject", "Nmqtt-Retain")])
        await self._deliver(pub, subject, hdr)
        self.send_packet(C.Ack(C.PUBCOMP, p.pi))

    # ---- SUBSCRIBE / UNSUBSCRIBE ---------------------------------------------------------------------------------

    async def on_subscribe(self, p: C.Subscribe) -> None:
        sess = self.sess
        assert sess is not None
        codes: list[int] = []
        sid = (p.props.get("subscription_identifier") or [0])[0] if self.version >= 5 else 0
        retained: list[tuple[_Sub, bool]] = []
        changed = False
        async with sess.lock:
            for flt, o in p.filters:
                queue = None
                topic = flt
                if flt.startswith("$share/") and self.version >= 5:
                    parts = flt.split("/", 2)
                    if len(parts) < 3 or not parts[1] or not parts[2] or "+" in parts[1] or "#" in parts[1]:
                        codes.append(RC_TOPIC_FILTER_INVALID)
                        continue
                    queue, flt = parts[1], parts[2]
                    if o.no_local:
                        raise C.ProtocolViolation("no local cannot be set on a shared subscription")
                try:
                    subject = filter_to_subject(flt)
                except TopicError as e:
                    self.server.log.error(f"{self.log_prefix()} - {e}")
                    codes.append(RC_TOPIC_FILTER_INVALID if self.version >= 5 else 0x80)
                    continue
                if subject.startswith("$MQTT."):
                    # (the MQTT state's own subjects: never, whatever the permissions say, as nats-server)
                    codes.append(RC_NOT_AUTHORIZED if self.version >= 5 else 0x80)
                    continue
                key0 = f"$share/{queue}/{subject}" if queue else subject
                need = (2 if needs_level_up(subject) else 1) * (2 if o.qos else 1)
                mx = self._max_subs()
                if mx >= 0 and key0 not in self.msubs and len(self.subs) + need > mx:
                    self.server.log.error(f"{self.log_prefix()} - maximum subscriptions exceeded")
                    codes.append(RC_QUOTA if self.version >= 5 else 0x80)
                    continue
                if self.perms is not None and not (self.perms.can_subscribe(subject, queue) and (
                        not needs_level_up(subject) or self.perms.can_subscribe(subject[:-2], queue))):
                    self.server.log.error(f'{self.log_prefix()} - Subscription Violation - User "{self.user}", '
                                          f'Subject "{subject}"')
                    codes.append(RC_NOT_AUTHORIZED if self.version >= 5 else 0x80)
                    continue
                qos = o.qos
                if qos == 2 and self.ms.downgrade_qos2:
                    qos = 1
                o.qos = qos
                key = f"$share/{queue}/{subject}" if queue else subject
                existed = key in self.msubs
                try:
                    s = await self._add_sub(subject, topic, o, sid, queue)
                except (JSAPIError, TimeoutError) as e:
                    self.server.log.error(f"{self.log_prefix()} - Unable to add JetStream consumer for subscription "
                                          f"on {subject!r}: err={e}")
                    codes.append(0x80)
                    continue
                sess.subs[key] = qos
                info: dict[str, Any] = {"topic": topic}
                if o.no_local:
                    info["nl"] = 1
                if o.retain_as_published:
                    info["rap"] = 1
                if o.retain_handling:
                    info["rh"] = o.retain_handling
                if sid:
                    info["sid"] = sid
                if queue:
                    info["queue"] = queue
                if info != {"topic": topic} or topic != subject_to_topic(subject):
                    sess.filters[key] = info
                else:
                    sess.filters.pop(key, None)
                changed = True
                codes.append(qos)
                if not queue and (o.retain_handling == 0 or (o.retain_handling == 1 and not existed)):
                    retained.append((s, existed))
            if changed and not sess.clean:
                await sess.save()
            elif changed:
                sess.seq = sess.seq  # (a clean session's record says only that it is in use)
        self.send_packet(C.SubAck(p.pi, codes))
        for s, _existed in retained:
            self._send_retained(s)

    def _max_subs(self) -> int:
        """The subscription limit of this connection (max_subscriptions, the account's): -1 for none."""
        mx = self.server.opts.max_subscriptions or -1
        am = getattr(self.account, "msubs", -1)
        if am is not None and am >= 0:
            mx = am if mx < 0 else min(mx, am)
        return mx

    async def _add_sub(self, subject: str, topic: str, o: C.SubOpts, sid: int, queue: str | None,
                       restoring: bool = False) -> _Sub:
        sess = self.sess
        assert sess is not None and self.asm is not None
        key = f"$share/{queue}/{subject}" if queue else subject
        old = self.msubs.get(key)
        s = _Sub(subject, topic, o.qos, o, sid, queue)
        # the new NATS subscriptions first, then the old ones go: no message falls in between
        s.nats_subs.append(self._nats_sub(subject, self._on_msg, queue, s))
        if needs_level_up(subject):
            s.nats_subs.append(self._nats_sub(subject[:-2], self._on_msg, queue, s))
        cc = sess.cons.get(key)
        if o.qos > 0:
            if cc is None:
                cc = await self._create_consumer(subject, queue)
                sess.cons[key] = cc
            s.durable = cc["durable_name"]
            s.js_sub = self._nats_sub(cc["deliver_subject"], self._on_js_msg, queue, s)
        elif cc is not None:
            del sess.cons[key]
            await self.asm.jsa.delete_consumer(MSGS_STREAM, cc["durable_name"])
        if old is not None:
            self._drop_sub(old)
        self.msubs[key] = s
        return s

    async def _create_consumer(self, subject: str, queue: str | None) -> dict:
        sess = self.sess
        assert sess is not None and self.asm is not None
        m = self.server.opts.mqtt
        if queue:
            # one consumer per shared group and filter: its members share it as a queue group
            durable = f"shr_{client_hash(queue + ' ' + subject)}"
            inbox = f"$MQTT.shr.{client_hash(queue + ' ' + subject, 12)}"
        else:
            durable = f"{sess.hash}_{nuid()}"
            inbox = SUB_PREFIX + nuid()
        cfg: dict[str, Any] = {
            "durable_name": durable, "deliver_subject": inbox, "ack_policy": "explicit", "deliver_policy": "new",
            "filter_subject": MSGS_PREFIX + subject,
            "ack_wait": int(float(m.get("ack_wait") or 30.0) * 1e9),
            "max_ack_pending": int(m.get("max_ack_pending") or 1024),
        }
        if needs_level_up(subject):  # ('a/#' matches 'a' too)
            del cfg["filter_subject"]
            cfg["filter_subjects"] = [MSGS_PREFIX + subject, MSGS_PREFIX + subject[:-2]]
        if queue:
            cfg["deliver_group"] = queue
        if m.get("consumer_memory_storage"):
            cfg["mem_storage"] = True
        if m.get("consumer_inactive_threshold"):
            cfg["inactive_threshold"] = int(float(m["consumer_inactive_threshold"]) * 1e9)
        await self.asm.jsa.create_consumer(MSGS_STREAM, cfg)
        return cfg

    def _nats_sub(self, subject: str, cb: Any, queue: str | None, owner: Any = None) -> Any:
        from rillet.server.client import Subscription
        self._sidn += 1
        sid = str(self._sidn).encode()
        if owner is not None:
            def icb(sub: Any, c: Any, subj: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
                cb(owner, c, subj, reply, hdr, msg)
        else:
            def icb(sub: Any, c: Any, subj: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
                cb(None, c, subj, reply, hdr, msg)
        sub = Subscription(self, subject, queue, sid, icb=icb)
        self.subs[sid] = sub
        self.account.add_sub(sub)
        return sub

    def _drop_sub(self, s: _Sub) -> None:
        for ns in s.nats_subs + ([s.js_sub] if s.js_sub is not None else []):
            if self.subs.pop(ns.sid, None) is not None:
                self.account.remove_sub(ns)
        s.nats_subs = []
        s.js_sub = None

    async def on_unsubscribe(self, p: C.Unsubscribe) -> None:
        sess = self.sess
        assert sess is not None and self.asm is not None
        codes = []
        async with sess.lock:
            for flt in p.filters:
                queue = None
                if flt.startswith("$share/") and self.version >= 5:
                    parts = flt.split("/", 2)
                    if len(parts) == 3:
                        queue, flt = parts[1], parts[2]
                try:
                    subject = filter_to_subject(flt)
                except TopicError:
                    codes.append(RC_TOPIC_FILTER_INVALID)
                    continue
                key = f"$share/{queue}/{subject}" if queue else subject
                s = self.msubs.pop(key, None)
                if s is not None:
                    self._drop_sub(s)
                    for pi, (_ack, dur, _seq) in list(sess.pending_pub.items()):
                        if dur == s.durable:
                            del sess.pending_pub[pi]
                cc = sess.cons.pop(key, None)
                if cc is not None and not queue:
                    await self.asm.jsa.delete_consumer(MSGS_STREAM, cc["durable_name"])
                existed = sess.subs.pop(key, None) is not None
                sess.filters.pop(key, None)
                codes.append(0 if existed else RC_NO_SUB_EXISTED)
            if not sess.clean:
                await sess.save()
        self.send_packet(C.UnsubAck(p.pi, codes))

    # ---- deliveries to the client ------------------------------------------------------------------------------

    def _on_msg(self, s: _Sub | None, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        """A message on a subscription's NATS subject: sent at QoS 0 unless it is a QoS 1/2 MQTT message for a
        QoS 1/2 subscription (that one comes from the subscription's consumer)."""
        if s is None or self.closed or not self.connected:
            return
        if reply and reply.startswith(b"$JS.ACK."):
            return
        if self.version < 5 and (hdr < 0 or (hdr == 25 and msg[:20] == b"NATS/1.0\r\nNmqtt-Pub:")):
            # the common case: a plain NATS message or a 3.1.1 MQTT one, to a 3.1.1 client
            if hdr > 0 and s.qos > 0 and msg[20] != 48:
                return  # (QoS 1/2 to a QoS 1/2 subscription: from its consumer)
            if s.reserved and subject[:1] == b"$":
                return
            if subject[:9] == b"spBv1//0." or subject[:11] == b"$sparkplug.":
                self._on_msg_slow(s, c, subject, reply, hdr, msg)
                return
            tf = _TOPICS.get(subject)
            if tf is None:
                tb = subject_to_topic(subject.decode("utf-8", "surrogateescape")).encode()
                tf = len(tb).to_bytes(2, "big") + tb  # the topic field of the PUBLISH
                if len(_TOPICS) > 8192:
                    _TOPICS.clear()
                _TOPICS[subject] = tf
            payload = msg[hdr:] if hdr > 0 else msg
            n = len(tf) + len(payload)
            if n < 128:
                head = bytes((0x30, n))
            elif n < 16384:
                head = bytes((0x30, (n & 0x7F) | 0x80, n >> 7))
            elif n <= C.MAX_REMAINING:
                head = b"\x30" + C.encode_varint(n)
            else:
                return
            self.out_msgs += 1
            self.out_bytes += len(payload)
            self.send(head + tf + payload)
            return
        self._on_msg_slow(s, c, subject, reply, hdr, msg)

    def _on_msg_slow(self, s: _Sub, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        subj = subject.decode("utf-8", "surrogateescape")
        if s.reserved and subj.startswith("$"):
            return
        h = parse_headers(msg[:hdr]) if hdr > 0 else {}
        pq = h.get("Nmqtt-Pub")
        mq = int(pq[0]) if pq and pq[0].isdigit() else 0
        if s.qos > 0 and mq > 0:
            return
        extra = _extra_of(h)
        if s.opts.no_local and c is self:
            return
        payload = msg[hdr:] if hdr > 0 else msg
        if len(payload) > MAX_PAYLOAD_MQTT:
            payload = payload[:MAX_PAYLOAD_MQTT]
        props = self._out_props(h, extra, reply, s) if self.version >= 5 else {}
        if props is None:
            return
        retain = bool(s.opts.retain_as_published and extra and extra.get("retain"))
        self._write_publish(self._sparkplug(C.Publish(subject_to_topic(subj), payload, 0, retain, False, 0, props)))

    def _out_props(self, h: dict, extra: dict | None, reply: bytes | None, s: _Sub,
                   stored_at: float = 0.0) -> dict | None:
        """MQTT 5 properties of a delivery (None: expired)."""
        props: dict[str, Any] = {}
        if extra:
            props = _props_from_extra(extra)
            if "message_expiry_interval" in props:
                t0 = extra.get("t") or stored_at or time.time()
                left = int(props["message_expiry_interval"] - (time.time() - t0))
                if left <= 0:
                    return None
                props["message_expiry_interval"] = left
        ups = [(k, v) for k, vs in h.items() for v in vs if not k.startswith(_INTERNAL_HDRS) and k != "Nats-TTL"]
        if ups:
            props["user_property"] = ups
        if reply and "response_topic" not in props:
            props["response_topic"] = subject_to_topic(reply.decode("utf-8", "surrogateescape"))
        elif reply and "response_topic" in props:
            # a request through an MQTT 5 requester's inbox: the responder answers the NATS reply subject
            props["response_topic"] = subject_to_topic(reply.decode("utf-8", "surrogateescape"))
        if s.sid:
            props["subscription_identifier"] = [s.sid]
        return props

    def _on_js_msg(self, s: _Sub | None, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        """A QoS 1/2 message from the subscription's consumer (``$MQTT.msgs.<subject>``)."""
        sess = self.sess
        if s is None or sess is None or self.closed or not reply or not self.connected:
            return
        if hdr == 25 and self.version < 5 and msg[:20] == b"NATS/1.0\r\nNmqtt-Pub:" and self.perms is None and \
                subject[:11] == MSGS_PREFIX_B and len(subject) > 11 and subject[11:20] != b"spBv1//0." and \
                (subject[11:12] != b"$" or not s.reserved):
            # the common case: a 3.1.1 MQTT message (no other header) to a 3.1.1 client, no checks to make
            mq = msg[20] - 48
            qos = mq if mq < s.qos else s.qos
            if qos > 0:
                self._js_publish(s, sess, subject[11:], reply, msg[25:], qos)
                return
        subj = subject.decode("utf-8", "surrogateescape")
        if not subj.startswith(MSGS_PREFIX) or len(subj) <= len(MSGS_PREFIX):
            return
        rep = reply
        nums = parse_ack(rep)
        if hdr == 25 and msg[:20] == b"NATS/1.0\r\nNmqtt-Pub:":  # (a 3.1.1 MQTT message: no other header)
            h: dict = {}
            mq = msg[20] - 48 if 48 <= msg[20] <= 57 else 0
        else:
            h = parse_headers(msg[:hdr]) if hdr > 0 else {}
            pq = h.get("Nmqtt-Pub")
            mq = int(pq[0]) if pq and pq[0].isdigit() else 0
        qos = min(mq, s.qos)
        stripped = subj[len(MSGS_PREFIX):]
        if qos == 0 or (s.reserved and stripped.startswith("$")) or \
                (self.perms is not None and self.perms.deliver_denied(stripped)):
            self.asm.jsa.send(rep)  # type: ignore[union-attr]
            return
        extra = _extra_of(h)
        if s.opts.no_local and extra and extra.get("cid") == self.client_id:
            self.asm.jsa.send(rep)  # type: ignore[union-attr]
            return
        props = self._out_props(h, extra, None, s) if self.version >= 5 else {}
        if props is None:
            self.asm.jsa.send(rep)  # type: ignore[union-attr]
            return
        sseq = nums[1] if nums else 0
        dup = False
        pi = sess.cpending.get((s.durable, sseq)) if sseq else None
        if pi is not None and pi in sess.pending_pub:
            dup = True
            sess.pending_pub[pi] = (rep, s.durable, sseq)
        else:
            per_sub = int(self.server.opts.mqtt.get("max_ack_pending") or 1024)
            if len(sess.pending_pub) >= min(self.client_recv_max, per_sub * max(len(self.msubs), 1)):
                return  # (redelivered by JetStream after ack_wait)
            pi = sess.next_pi()
            if not pi:
                return
            sess.pending_pub[pi] = (rep, s.durable, sseq)
            if sseq:
                sess.cpending[(s.durable, sseq)] = pi
            dup = bool(nums and nums[0] > 1)
        payload = msg[hdr:] if hdr > 0 else msg
        retain = bool(s.opts.retain_as_published and extra and extra.get("retain"))
        if not self._write_publish(self._sparkplug(C.Publish(subject_to_topic(stripped), payload, qos, retain, dup,
                                                             pi, props))):
            # too large for the client: dropped as if delivered
            del sess.pending_pub[pi]
            sess.cpending.pop((s.durable, sseq), None)
            self.asm.jsa.send(rep)  # type: ignore[union-attr]

    def _js_publish(self, s: _Sub, sess: Session, subject: bytes, reply: bytes, payload: bytes, qos: int) -> None:
        """``_on_js_msg`` for a 3.1.1 message to a 3.1.1 client: the PUBLISH written without a packet object."""
        nums = parse_ack(reply)
        sseq = nums[1] if nums else 0
        pp = sess.pending_pub
        pi = sess.cpending.get((s.durable, sseq)) if sseq else None
        if pi is not None and pi in pp:
            first = 0x38 | (qos << 1)  # (DUP)
            pp[pi] = (reply, s.durable, sseq)
        else:
            ps = self._per_sub
            if len(pp) >= ps * (len(self.msubs) or 1) or len(pp) >= self.client_recv_max:
                return  # (redelivered by JetStream after ack_wait)
            pi = sess.next_pi()
            if not pi:
                return
            pp[pi] = (reply, s.durable, sseq)
            if sseq:
                sess.cpending[(s.durable, sseq)] = pi
            first = (0x38 if nums and nums[0] > 1 else 0x30) | (qos << 1)
        tf = _TOPICS.get(subject)
        if tf is None:
            tb = subject_to_topic(subject.decode("utf-8", "surrogateescape")).encode()
            tf = len(tb).to_bytes(2, "big") + tb  # the topic field of the PUBLISH
            if len(_TOPICS) > 8192:
                _TOPICS.clear()
            _TOPICS[subject] = tf
        n = len(tf) + 2 + len(payload)
        if n < 128:
            head = bytes((first, n))
        elif n < 16384:
            head = bytes((first, (n & 0x7F) | 0x80, n >> 7))
        else:
            head = bytes((first,)) + C.encode_varint(n)
        self.out_msgs += 1
        self.out_bytes += len(payload)
        self.send(head + tf + pi.to_bytes(2, "big") + payload)

    @staticmethod
    def _sparkplug(p: C.Publish) -> C.Publish:
        """Sparkplug B on delivery: certificate topics flagged retained, DEATH timestamps set to now."""
        if p.topic.startswith(("spBv1.0/", spb.CERT_PREFIX)):
            birth, death, cert = spb.kind(p.topic)
            if birth and p.qos == 0:
                p.retain = cert
            elif death and not cert:
                p.payload = spb.death_with_timestamp(p.payload)
        return p

    def _write_publish(self, p: C.Publish) -> bool:
        data = C.encode(p, self.version)
        if self.client_max_packet and len(data) > self.client_max_packet:
            return False
        self.out_msgs += 1
        self.out_bytes += len(p.payload)
        self.send(data)
        return True

    def _send_retained(self, s: _Sub) -> None:
        asm, sess = self.asm, self.sess
        assert asm is not None and sess is not None
        for rm in asm.retained_for(s.subject):
            if s.reserved and rm.subject.startswith("$"):
                continue
            if self.perms is not None and self.perms.deliver_denied(rm.subject):
                continue
            qos = min(rm.qos, s.qos)
            props: dict[str, Any] = {}
            if self.version >= 5:
                props = {k: v for k, v in rm.props.items() if k in ("payload_format_indicator", "content_type",
                                                                       "response_topic")}
                if rm.props.get("user_property"):
                    props["user_property"] = [tuple(x) for x in rm.props["user_property"]]
                if rm.props.get("correlation_data"):
                    props["correlation_data"] = base64.b64decode(rm.props["correlation_data"])
                if "message_expiry_interval" in rm.props:
                    left = int(rm.props["message_expiry_interval"] - (time.time() - rm.props.get("t", time.time())))
                    if left <= 0:
                        continue
                    props["message_expiry_interval"] = left
                if s.sid:
                    props["subscription_identifier"] = [s.sid]
            pi = 0
            if qos:
                pi = sess.next_pi()
                if not pi:
                    continue
                sess.pending_pub[pi] = (None, "", 0)
            self._write_publish(self._sparkplug(C.Publish(rm.topic or subject_to_topic(rm.subject), rm.payload, qos,
                                                          True, False, pi, props)))

    # ---- acknowledgements from the client --------------------------------------------------------------------

    def on_puback(self, p: C.Ack) -> None:
        self.on_puback_pi(p.pi)

    def on_puback_pi(self, pi: int) -> None:
        sess = self.sess
        assert sess is not None
        ent = sess.pending_pub.pop(pi, None)
        if ent is None:
            return
        ack, dur, sseq = ent
        sess.cpending.pop((dur, sseq), None)
        if ack:
            self.asm.jsa.send(ack)  # type: ignore[union-attr]

    async def on_pubrec(self, p: C.Ack) -> None:
        """QoS 2 to the client, step 2: the message is acknowledged in its consumer, the PUBREL owed is stored
        in ``$MQTT_out`` (so it is sent again after a reconnect) and sent."""
        sess = self.sess
        assert sess is not None and self.asm is not None
        ent = sess.pending_pub.pop(p.pi, None)
        if ent is None:
            if self.version >= 5:
                self.send_packet(C.Ack(C.PUBREL, p.pi, RC_PI_NOT_FOUND))
            return
        ack, dur, sseq = ent
        sess.cpending.pop((dur, sseq), None)
        if p.rc >= 0x80:
            if ack:
                self.asm.jsa.send(ack)
            return
        async with sess.lock:
            await self._ensure_pubrel()
        await self.asm.jsa.store(PUBREL_PREFIX + sess.hash, b"", make_headers([("Nmqtt-PubRel", str(p.pi))]))
        if ack:
            self.asm.jsa.send(ack)

    async def _ensure_pubrel(self) -> None:
        sess = self.sess
        assert sess is not None and self.asm is not None
        deliver = PUBREL_DELIVER_PREFIX + sess.hash
        if not sess.rel_sub_made:
            self._nats_sub(deliver, self._on_pubrel_msg, None, None)
            sess.rel_sub_made = True
        if sess.pubrel is None:
            m = self.server.opts.mqtt
            cfg = {"durable_name": PUBREL_DURABLE_PREFIX + sess.hash, "deliver_subject": deliver,
                   "ack_policy": "explicit", "deliver_policy": "new", "filter_subject": PUBREL_PREFIX + sess.hash,
                   "ack_wait": int(float(m.get("ack_wait") or 30.0) * 1e9),
                   "max_ack_pending": int(m.get("max_ack_pending") or 1024)}
            await self.asm.jsa.create_consumer(OUT_STREAM, cfg)
            sess.pubrel = cfg
            if not sess.clean:
                await sess.save()

    def _on_pubrel_msg(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        sess = self.sess
        if sess is None or not reply or self.closed:
            return
        h = parse_headers(msg[:hdr]) if hdr > 0 else {}
        v = (h.get("Nmqtt-PubRel") or ["0"])[0]
        try:
            pi = int(v)
        except ValueError:
            return
        if not 0 < pi <= 0xFFFF:
            return
        sess.pending_rel[pi] = reply
        self.send_packet(C.Ack(C.PUBREL, pi))

    def on_pubcomp(self, p: C.Ack) -> None:
        sess = self.sess
        assert sess is not None
        ack = sess.pending_rel.pop(p.pi, None)
        if ack:
            self.asm.jsa.send(ack)  # type: ignore[union-attr]

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
                    self.server.slow_consumers += 1
                    self.server.log.notice(f"{self.log_prefix()} - Slow Consumer Detected: MaxPending of {mp} "
                                           f"Exceeded")
                    self.out.clear()
                    self.close("Slow Consumer (Pending Bytes)", abnormal=True)
                    return
            self.out.clear()


class _ConnOpts:
    """What /connz reads of a CONNECT (the MQTT client id is the name)."""

    name = ""
    lang = ""
    version = ""
    protocol = 0
    user = ""
    nkey = ""
    jwt = ""
    auth_token = ""
    password = ""
    sig = ""


def _extra_of(h: dict) -> dict | None:
    v = h.get(PROPS_HDR)
    if not v:
        return None
    try:
        d = json.loads(base64.b64decode(v[0]))
    except ValueError:
        return None
    return d if isinstance(d, dict) else None


def _props_from_extra(extra: dict, user_props: list | None = None) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for name in ("payload_format_indicator", "content_type", "message_expiry_interval", "response_topic"):
        if name in extra:
            props[name] = extra[name]
    if "correlation_data" in extra:
        try:
            props["correlation_data"] = base64.b64decode(extra["correlation_data"])
        except ValueError:
            pass
    if user_props:
        props["user_property"] = user_props
    return props
