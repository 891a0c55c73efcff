"""An account's MQTT state in JetStream, reached through the JetStream API as any client would reach it.

nats-server keeps MQTT state in five streams of the client's account; so does Rillet, with the same
names, subjects and limits, so a JetStream stream list, /jsz and a cluster's replication see the same:

* ``$MQTT_sess``  ``$MQTT.sess.<hash of client id>``: one JSON record per persistent session (max 1 per subject);
* ``$MQTT_msgs``  ``$MQTT.msgs.<subject>``: QoS 1/2 messages, interest retention, one durable consumer per
  QoS 1/2 subscription of a session (filter ``$MQTT.msgs.<filter subject>``, deliver ``$MQTT.sub.<nuid>``);
* ``$MQTT_rmsgs`` ``$MQTT.rmsgs.<subject>``: retained messages (max 1 per subject; an empty body clears);
* ``$MQTT_qos2in`` ``$MQTT.qos2.in.<client id>.<packet id>``: incoming QoS 2 messages until PUBREL
  (discard new per subject: a resent PUBLISH is stored once);
* ``$MQTT_out``   ``$MQTT.out.pubrel.<hash>``: PUBRELs the server owes a QoS 2 subscriber.

Requests go out on the account's internal client with replies to ``$MQTT.JSA.<server hash>.<n>``; ``JSA``
turns them into awaitables. ``AccountSessions`` is the per-account manager: sessions by client id, the
retained-message cache (fed by an ephemeral consumer on ``$MQTT_rmsgs``, so retained messages set through
other servers of a cluster are seen), and the flapping jail of client id takeovers.
"""
from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import secrets
import time
from typing import TYPE_CHECKING, Any, Callable

import msgspec

import rillet.server.msgtrace as _mt

if TYPE_CHECKING:
    from .conn import MqttConn

__all__ = ["JSA", "JSAPIError", "AccountSessions", "Session", "RetainedMsg", "client_hash", "subject_matches",
           "SESS_STREAM", "MSGS_STREAM", "RMSGS_STREAM", "QOS2IN_STREAM", "OUT_STREAM"]

SESS_STREAM = "$MQTT_sess"
MSGS_STREAM = "$MQTT_msgs"
RMSGS_STREAM = "$MQTT_rmsgs"
QOS2IN_STREAM = "$MQTT_qos2in"
OUT_STREAM = "$MQTT_out"
SESS_PREFIX = "$MQTT.sess."
MSGS_PREFIX = "$MQTT.msgs."
RMSGS_PREFIX = "$MQTT.rmsgs."
QOS2IN_PREFIX = "$MQTT.qos2.in."
PUBREL_PREFIX = "$MQTT.out.pubrel."
PUBREL_DELIVER_PREFIX = "$MQTT.deliver.pubrel."
PUBREL_DURABLE_PREFIX = "$MQTT_PUBREL_"
SUB_PREFIX = "$MQTT.sub."

ERR_NOT_FOUND = 10059  # stream not found
ERR_NO_MESSAGE = 10037
ERR_CONSUMER_NOT_FOUND = 10014
ERR_STORE_FAILED = 10077
ERR_STREAM_EXISTS = 10058

_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def client_hash(name: str, size: int = 8) -> str:
    """The short hash nats-server names per-client subjects and durables with (SHA-256, base 62 digits)."""
    d = hashlib.sha256(name.encode()).digest()
    return "".join(_DIGITS[b % 62] for b in d[:size])


def nuid() -> str:
    return secrets.token_urlsafe(16).replace("-", "A").replace("_", "B")[:22]


def subject_matches(flt: str, subject: str) -> bool:
    """Does the NATS subject filter ``flt`` (``*``, ``>``) match the literal ``subject``?"""
    ft = flt.split(".")
    st = subject.split(".")
    for i, t in enumerate(ft):
        if t == ">":
            return len(st) > i
        if i >= len(st):
            return False
        if t != "*" and t != st[i]:
            return False
    return len(ft) == len(st)


class JSAPIError(Exception):
    def __init__(self, err: dict) -> None:
        super().__init__(err.get("description", "JetStream API error"))
        self.code = err.get("code", 0)
        self.err_code = err.get("err_code", 0)


def make_headers(pairs: list[tuple[str, str]]) -> bytes:
    return ("NATS/1.0\r\n" + "".join(f"{k}:{v}\r\n" for k, v in pairs) + "\r\n").encode()


def parse_headers(hdr: bytes) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    lines = hdr.decode("utf-8", "surrogateescape").split("\r\n")
    for line in lines[1:]:
        if not line:
            continue
        k, sep, v = line.partition(":")
        if sep:
            out.setdefault(k.strip(), []).append(v.strip())
    return out


def _store_error(hdr: int, msg: bytes) -> BaseException | None:
    """The error a stream's answer to a store carries (None: a PubAck)."""
    data = msg[hdr:] if hdr > 0 else msg
    if not data:
        return JSAPIError({"code": 503, "description": "no stream stored the message"})
    if b'"error"' in data:  # (a PubAck is {"stream":..,"seq":..}: only an error answer is parsed)
        d = json.loads(data)
        if d.get("error"):
            return JSAPIError(d["error"])
    return None


_DIRECT_TYPES: tuple[Any, Any] | None = None
_ON_ACK: Any = None


def _consumer_on_ack() -> Any:
    """The consumers' ack callback (``AckMixin._on_ack``; imported when first needed): ``JSA.ack_many`` hands a
    subscription's acks to its consumer together only when that is its callback."""
    global _ON_ACK
    if _ON_ACK is None:
        from rillet.jetstream.consumer.acks import AckMixin
        _ON_ACK = AckMixin._on_ack
    return _ON_ACK


_STORE_DIRECT: Any = None


def _store_direct() -> Any:
    """``rillet.mqtt.direct.store_direct`` (the running lane's), imported on first use (it imports the stream)."""
    global _STORE_DIRECT
    if _STORE_DIRECT is None:
        from rillet.mqtt.direct import store_direct
        _STORE_DIRECT = store_direct
    return _STORE_DIRECT


def _direct_types() -> tuple[Any, Any]:
    """(Stream, SingleNodeLog), imported on first use (rillet.jetstream imports this package's users)."""
    global _DIRECT_TYPES
    if _DIRECT_TYPES is None:
        from rillet.jetstream.log import SingleNodeLog
        from rillet.jetstream.stream import Stream
        _DIRECT_TYPES = (Stream, SingleNodeLog)
    return _DIRECT_TYPES


class QoS1Store:
    """A QoS 1 PUBLISH being stored in ``$MQTT_msgs``: the connection's PUBACK queue entry (``ack_fifo``, in order)
    and the store's answer in one object. ``e`` is None until the store answers, then True (stored) or the error;
    ``done(err)`` records the answer and sends the PUBACKs now due (``MqttConn._drain_acks``).

    A store that goes straight to its stream (``JSA.store_cb``) is answered through the stream's seam for answers
    that are not a reply subject (``Stream.process``'s ``fast``; the fast batch's ``FastMsg`` is the other one):
    stored (after the message is written) or a duplicate is ``done(None)``, an error ``done(JSAPIError)`` with the
    error the PubAck would have carried. That answer is counted as the reply subject's would be (the stream's
    internal client sent it, the JSA's reply subscription got it), so the server's message totals (/varz) do not
    change with the path (``jsa`` and ``stream`` are set for it)."""

    __slots__ = ("e", "pi", "rc", "conn", "jsa", "stream")
    wait_write = True  # (answered once written: held with the pass's other answers while the store gathers)

    def __init__(self, conn: Any, pi: int, rc: int) -> None:
        self.e: Any = None
        self.pi = pi
        self.rc = rc
        self.conn = conn

    def done(self, err: BaseException | None) -> None:
        self.e = err or True
        fifo = self.conn.ack_fifo
        if fifo and fifo[0] is self:
            self.conn._drain_acks()

    def _count(self, size: int) -> None:
        ic = self.stream.ic
        ic.in_msgs += 1
        ic.in_bytes += size
        self.jsa._sub.nm += 1

    def proposed(self) -> None:
        pass

    def stored(self, seq: int) -> bool:
        # (_count and done, inline: {"stream":<name>[,"domain":..],"seq":<seq>})
        jsa = self.jsa
        ic = self.stream.ic
        ic.in_msgs += 1
        ic.in_bytes += jsa._dack + len(str(seq))
        jsa._sub.nm += 1
        self.e = True
        conn = self.conn
        fifo = conn.ack_fifo
        if fifo and fifo[0] is self:
            if self.rc or conn.closed or conn._acks_waiter is not None or (len(fifo) > 1 and fifo[1].e is not None):
                conn._drain_acks()
            else:  # (_drain_acks when this PUBACK alone is due, inline: the burst's usual case)
                fifo.popleft()
                conn.acks_unwritten += 1
                conn.out += b"\x40\x02" + self.pi.to_bytes(2, "big")
                if not conn.flush_pending:
                    conn.flush_soon()
        return False

    def duplicate(self, dseq: int) -> None:
        self._count(self.jsa._dack + len(str(dseq)) + len(',"duplicate": true'))
        self.done(None)

    def error(self, err: Any, proposed: bool = False) -> None:
        d = err.to_dict()
        self._count(len(msgspec.json.encode({"error": d, "stream": self.stream.name, "seq": 0})))
        self.done(JSAPIError(d))


_qos1_done = QoS1Store.done


class JSA:
    """JetStream API requests and stream publishes of one account, from this server's MQTT side."""

    def __init__(self, server: Any, account: Any) -> None:
        self.server = server
        self.account = account
        m = server.opts.mqtt
        self.timeout = float(m.get("js_api_timeout") or 5.0)
        domain = m.get("js_domain") or ""
        self.api = f"$JS.{domain}.API" if domain else "$JS.API"
        self.id = client_hash(server.name or server.server_id)
        self.ic = server.internal_client(account, "mqtt")
        self.prefix = f"$MQTT.JSA.{self.id}."
        self._n = 0
        self._pending: dict[str, asyncio.Future] = {}
        self.prefix_b = self.prefix.encode()
        self._plen = len(self.prefix_b)
        # stores waiting for their PubAck, by reply token, oldest first: (callback, its argument, deadline, subject)
        self._stores: dict[bytes, tuple[Callable[[Any, BaseException | None], None], Any, float, bytes]] = {}
        self._sweeper: Any = None
        self._dsub: Any = None  # (the last stream subscription ``_direct`` checked, and its stream)
        self._dstream: Any = None
        self._dack = 0
        # acks straight to a consumer's ack subscription (``ack``): by durable, (sublist stamp, the ack subject's
        # prefix, the subscription or None)
        self._ack_to: dict[str, tuple[tuple[int, int], bytes, Any]] = {}
        # (``_direct``'s answers by subject: the sublist's insert and remove counts, the answer, the stream's
        # config and log type when it was made)
        self._dcache: dict[bytes, tuple[int, int, tuple[Any, Any, str], Any, Any]] = {}
        self._sub = self.ic.subscribe(self.prefix + ">", self._on_reply)

    def close(self) -> None:
        self.ic.remove_sub(self._sub)
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        st, self._stores = self._stores, {}
        for cb, arg, _dl, _subject in st.values():  # (no answer will come: given up, as a cancelled wait)
            cb(arg, asyncio.CancelledError())
        for f in self._pending.values():
            if not f.done():
                f.cancel()
        self._pending.clear()

    def _on_reply(self, sub: Any, c: Any, subject: bytes, reply: Any, hdr: int, msg: bytes) -> None:
        ent = self._stores.pop(subject[self._plen:], None)
        if ent is not None:
            ent[0](ent[1], _store_error(hdr, msg))
            return
        tok = subject.decode()[len(self.prefix):]
        fut = self._pending.pop(tok, None)
        if fut is not None and not fut.done():
            fut.set_result((hdr, msg))

    async def _send(self, subject: str, payload: bytes, hdr: bytes = b"") -> tuple[int, bytes]:
        self._n += 1
        tok = str(self._n)
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending[tok] = fut
        reply = (self.prefix + tok).encode()
        if hdr:
            self.ic.publish(subject.encode(), reply, hdr + payload, len(hdr))
        else:
            self.ic.publish(subject.encode(), reply, payload)
        if fut.done():  # answered during the publish (a local stream or API): no timer, no wait for the loop
            self._pending.pop(tok, None)
            return fut.result()  # type: ignore[no-any-return]
        try:
            return await asyncio.wait_for(fut, self.timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"timeout for request type \"{subject}\" on \"{subject}\"") from None
        finally:
            self._pending.pop(tok, None)

    async def request(self, api: str, body: Any = None) -> dict:
        """An ``$JS.API.<api>`` request; its JSON answer (JSAPIError for an ``error`` answer)."""
        payload = b"" if body is None else json.dumps(body).encode()
        hdr, msg = await self._send(f"{self.api}.{api}", payload)
        data = msg[hdr:] if hdr > 0 else msg
        if not data and hdr > 0:
            # a status-only answer (503 no responders)
            raise JSAPIError({"code": 503, "description": "JetStream not available"})
        d = json.loads(data)
        if isinstance(d, dict) and d.get("error"):
            raise JSAPIError(d["error"])
        return d

    async def store(self, subject: str, payload: bytes, hdr: bytes = b"") -> dict:
        """Publish into a stream and wait for its PubAck."""
        h, msg = await self._send(subject, payload, hdr)
        data = msg[h:] if h > 0 else msg
        if not data:
            raise JSAPIError({"code": 503, "description": "no stream stored the message (no responders)"})
        d = json.loads(data)
        if d.get("error"):
            raise JSAPIError(d["error"])
        return d

    def store_cb(self, subject: bytes, payload: bytes, hdr: bytes, ans: QoS1Store) -> None:
        """Publish into a stream now; ``ans.done(None)`` once stored, ``ans.done(error)`` for an error answer or
        no stream (JSAPIError) or no answer within js_api_timeout (TimeoutError), called from the delivery of the
        answer: no future, task or timer per message (one sweep a second fails the late ones).

        When the subject's only subscriber is a local, unreplicated stream (``_direct``), the message goes to
        the stream's publish checks at once and ``ans`` is the answer object the stream calls (its seam for
        answers that are not a reply subject): what the publish would do, without the reply subject, its
        sublist miss and the answer's delivery; ``Stream.process`` shortened to what can happen to such a
        message (rillet.mqtt.direct.store_direct, which hands anything else to ``process``)."""
        # (_direct's answer kept for the subject, its checks inline: the per-message case)
        acc = self.account
        sl = acc.sublist
        ent = self._dcache.get(subject)
        st = None
        if ent is not None and ent[0] == sl._inserts and ent[1] == sl._removes and not acc.mappings and \
                acc.gw is None and not self.server.trace_on and _mt.CURRENT is None:
            st = ent[2]
            stream = st[0]
            if stream.cfg is not ent[3] or stream.closed or stream.replication is not None or \
                    type(stream.log) is not ent[4] or st[1].max or stream.js.sync_always:
                st = None
        if st is None:
            st = self._direct(subject)
        if st is not None:
            stream, sub, isubj = st
            sub.nm += 1
            ic = self.ic
            ic.in_msgs += 1
            ic.in_bytes += len(hdr) + len(payload)
            ans.jsa = self
            ans.stream = stream
            (_STORE_DIRECT or _store_direct())(stream, isubj, hdr, payload, ans)
            srv = self.server
            if not srv._flush_scheduled:  # (schedule_flush's own first test, without its call)
                srv.schedule_flush()
            return
        self._n += 1
        tok = b"%d" % self._n
        self._stores[tok] = (_qos1_done, ans, time.monotonic() + self.timeout, subject)
        if self._sweeper is None:
            self._sweeper = self.server.loop.call_later(1.0, self._sweep)
        if hdr:
            self.ic.publish(subject, self.prefix_b + tok, hdr + payload, len(hdr))
        else:
            self.ic.publish(subject, self.prefix_b + tok, payload)

    def _direct(self, subject: bytes) -> tuple[Any, Any, str] | None:
        """The stream (and its subscription) a store on ``subject`` may go to without the account's delivery:
        the subject's sublist result here is that one stream's subscription and nothing else (no queue group,
        no route, leaf or gateway interest, no mapping, no trace), the stream is this server's own
        (``SingleNodeLog``, not replicated) and answers a publish with a plain PubAck once the message is
        written (no ``no_ack``, no counter, no fsync awaited: an answer that may never come is left to the
        reply subject's timeout). Anything else: None, the publish takes the account's delivery and the answer
        its reply subject. Returns (stream, subscription, the subject the stream stores), kept per subject
        until the account's subscriptions or the stream's config change (``_dcache``)."""
        acc = self.account
        if acc.mappings or acc.gw is not None or self.server.trace_on or _mt.CURRENT is not None:
            return None
        sl = acc.sublist
        ins, rem = sl._inserts, sl._removes  # (both only grow: any change to the subscriptions moves one)
        ent = self._dcache.get(subject)
        if ent is not None and ent[0] == ins and ent[1] == rem:
            st = ent[2]
            stream = st[0]
            if stream.cfg is ent[3] and not stream.closed and stream.replication is None and \
                    type(stream.log) is ent[4] and not st[1].max and not stream.js.sync_always:
                return st
        st = self._direct_check(subject)
        if st is not None:
            if len(self._dcache) > 4096:
                self._dcache.clear()
            self._dcache[subject] = (ins, rem, st, st[0].cfg, type(st[0].log))
        return st

    def _direct_check(self, subject: bytes) -> tuple[Any, Any, str] | None:
        acc = self.account
        r = acc.match(subject.decode("utf-8", "surrogateescape"))
        ps = r.psubs
        if r.qsubs or len(ps) != 1:
            return None
        sub = ps[0]
        stream_t, log_t = _DIRECT_TYPES or _direct_types()
        if sub is self._dsub:
            stream = self._dstream
        else:
            self._dsub = self._dstream = None
            icb = sub.icb
            stream = getattr(icb, "__self__", None)
            if stream is None or type(stream) is not stream_t or getattr(icb, "__func__", None) is not \
                    stream_t._on_msg or sub.client is not stream.ic:
                return None
            self._dsub, self._dstream = sub, stream
            dom = stream.js.domain
            # the length of a PubAck without its sequence digits (what QoS1Store counts)
            self._dack = len(msgspec.json.encode(stream.name)) + len(b'{"stream":,"seq":}') + \
                (len(b',"domain":') + len(msgspec.json.encode(dom)) if dom else 0)
        if sub.max or stream.closed or stream.replication is not None or type(stream.log) is not log_t:
            return None
        cfg = stream.cfg
        if cfg.no_ack or cfg.allow_msg_counter or (stream.js.sync_always and cfg.persist_mode != "async"):
            return None
        return stream, sub, stream.input_subject(subject.decode("utf-8", "surrogateescape"))

    def ack(self, subject: bytes, durable: str) -> None:
        """The ack (an empty body) of a delivery by consumer ``durable``: handed to the consumer's ack
        subscription as the account's delivery would hand it (counted the same, same arguments) when that
        subscription is the ack subject's only receiver here: an internal callback, no route, leaf or gateway
        interest, no mapping, import or trace. Which subscription that is, is found once per durable and kept
        until the account's subscriptions change; anything else is published (``send``)."""
        acc = self.account
        sl = acc.sublist
        stamp = (sl._inserts, sl._removes)  # (both only grow: any change to the subscriptions moves one)
        ent = self._ack_to.get(durable)
        if ent is None or ent[0] != stamp or not subject.startswith(ent[1]):
            ent = self._ack_target(subject, durable, stamp)
        sub = ent[2]
        if sub is None or acc.mappings or acc.gw is not None or self.server.trace_on:
            self.send(subject)
            return
        ic = self.ic
        ic.in_msgs += 1
        sub.nm += 1
        sub.icb(sub, ic, subject, None, -1, b"")
        self.server.schedule_flush()

    def ack_many(self, durable: str, subjects: list[bytes], seqs: list[int] | None = None) -> None:
        """``ack`` of several deliveries of consumer ``durable`` (the PUBACKs a connection read in one go), in
        order: where ``ack`` would hand them to the consumer's ack subscription and that is a consumer's own
        ``_on_ack``, the consumer takes them together (``on_acks``: one entry for all where its log is this
        server's alone); the rest one by one (``ack``). ``seqs``: the stream sequence of each subject, as the
        delivery read it from the subject (0: none), handed on so that the consumer does not parse them again."""
        acc = self.account
        sl = acc.sublist
        stamp = (sl._inserts, sl._removes)
        first = subjects[0]
        ent = self._ack_to.get(durable)
        if ent is None or ent[0] != stamp or not first.startswith(ent[1]):
            ent = self._ack_target(first, durable, stamp)
        sub = ent[2]
        cons = getattr(sub.icb, "__self__", None) if sub is not None else None
        if cons is None or acc.mappings or acc.gw is not None or self.server.trace_on or \
                getattr(sub.icb, "__func__", None) is not _consumer_on_ack():
            for subject in subjects:
                self.ack(subject, durable)
            return
        pre = ent[1]
        mine = [x for x in subjects if x.startswith(pre)]
        if len(mine) != len(subjects):  # (another consumer's subjects: ``ack`` finds theirs)
            for subject in subjects:
                if not subject.startswith(pre):
                    self.ack(subject, durable)
            seqs = None  # (the consumer reads its own from its subjects)
        n = len(mine)
        self.ic.in_msgs += n
        sub.nm += n
        cons.on_acks(mine, seqs)
        self.server.schedule_flush()

    def _ack_target(self, subject: bytes, durable: str, stamp: tuple[int, int]) -> tuple[tuple[int, int], bytes, Any]:
        toks = subject.split(b".")
        k = 4 if len(toks) == 9 else 6 if len(toks) >= 11 else 0
        sub = None
        if k:
            r = self.account.match(subject.decode("utf-8", "surrogateescape"))
            if not r.qsubs and len(r.psubs) == 1:
                s = r.psubs[0]
                icb = s.icb
                if icb is not None and getattr(icb, "import_to", None) is None and not s.max and \
                        s.client is not self.ic:
                    sub = s
        if len(self._ack_to) > 4096:
            self._ack_to.clear()
        ent = self._ack_to[durable] = (stamp, b".".join(toks[:k]) + b"." if k else b"\0", sub)
        return ent

    def _sweep(self) -> None:
        self._sweeper = None
        st = self._stores
        now = time.monotonic()
        late = []
        for tok, ent in st.items():  # (oldest first: the first one not late ends the sweep)
            if ent[2] > now:
                break
            late.append(tok)
        for tok in late:
            cb, arg, _dl, subject = st.pop(tok)
            cb(arg, TimeoutError(f"timeout storing a message on \"{subject.decode('utf-8', 'replace')}\""))
        if st:
            self._sweeper = self.server.loop.call_later(1.0, self._sweep)

    def store_no_wait(self, subject: str, payload: bytes, hdr: bytes = b"") -> None:
        if hdr:
            self.ic.publish(subject.encode(), None, hdr + payload, len(hdr))
        else:
            self.ic.publish(subject.encode(), None, payload)

    def send(self, subject: str | bytes, payload: bytes = b"") -> None:
        """A plain message (acks: ``+ACK`` is the empty body)."""
        self.ic.publish(subject if subject.__class__ is bytes else subject.encode(), None,  # type: ignore[union-attr]
                        payload)

    async def last_msg(self, stream: str, subject: str) -> dict | None:
        try:
            d = await self.request(f"STREAM.MSG.GET.{stream}", {"last_by_subj": subject})
        except JSAPIError as e:
            if e.err_code == ERR_NO_MESSAGE or e.code == 404:
                return None
            raise
        m = d.get("message") or {}
        return {"seq": m.get("seq", 0), "subject": m.get("subject", ""),
                "hdrs": base64.b64decode(m["hdrs"]) if m.get("hdrs") else b"",
                "data": base64.b64decode(m["data"]) if m.get("data") else b""}

    async def delete_msg(self, stream: str, seq: int) -> None:
        try:
            await self.request(f"STREAM.MSG.DELETE.{stream}", {"seq": seq, "no_erase": True})
        except JSAPIError as e:
            if e.code != 404 and e.err_code not in (ERR_NO_MESSAGE, 10057):
                raise

    async def create_consumer(self, stream: str, cfg: dict) -> dict:
        name = cfg.get("durable_name") or cfg.get("name")
        return await self.request(f"CONSUMER.CREATE.{stream}.{name}", {"stream_name": stream, "config": cfg})

    async def delete_consumer(self, stream: str, name: str) -> None:
        try:
            await self.request(f"CONSUMER.DELETE.{stream}.{name}")
        except JSAPIError as e:
            if e.err_code != ERR_CONSUMER_NOT_FOUND and e.code != 404:
                raise

    async def ensure_stream(self, cfg: dict) -> dict:
        try:
            return await self.request(f"STREAM.INFO.{cfg['name']}")
        except JSAPIError as e:
            if e.err_code != ERR_NOT_FOUND and e.code != 404:
                raise
        try:
            return await self.request(f"STREAM.CREATE.{cfg['name']}", cfg)
        except JSAPIError as e:
            if e.err_code != ERR_STREAM_EXISTS:
                raise
            return await self.request(f"STREAM.INFO.{cfg['name']}")


# the QoS 1 store ``_fast_in`` calls: ``reference_store_cb`` (``JSA.store_cb`` as written, the pure lane's) or, in
# the compiled lane, its twin rillet._speedups._cmqtt.store_cb (its per-message case; installed by
# rillet.mqtt.publish, which loads after this module and the extension's imports)
reference_store_cb = JSA.store_cb


# ---- sessions -----------------------------------------------------------------------------------------

class RetainedMsg:
    __slots__ = ("subject", "topic", "payload", "flags", "origin", "source", "seq", "props")

    def __init__(self, subject: str, topic: str, payload: bytes, flags: int, origin: str, source: str,
                 seq: int = 0, props: dict | None = None) -> None:
        self.subject = subject
        self.topic = topic
        self.payload = payload
        self.flags = flags
        self.origin = origin
        self.source = source
        self.seq = seq
        self.props = props or {}

    @property
    def qos(self) -> int:
        return (self.flags >> 1) & 3

    def encode(self) -> tuple[bytes, bytes]:
        """(headers, body) as stored in ``$MQTT_rmsgs`` (nats-server's header form; an empty body is a
        deletion, flagged with ``-`` before the flags)."""
        flags = ("-" if not self.payload else "") + format(self.flags, "x")
        pairs = [("Nmqtt-RTopic", self.topic), ("Nmqtt-RFlags", flags)]
        if self.origin:
            pairs.append(("Nmqtt-ROrigin", self.origin))
        if self.source:
            pairs.append(("Nmqtt-RSource", self.source))
        if self.props:
            pairs.append(("Rillet-Mqtt-Props", base64.b64encode(json.dumps(self.props).encode()).decode()))
        return make_headers(pairs), self.payload

    @classmethod
    def decode(cls, subject: str, hdr: bytes, body: bytes, seq: int) -> "RetainedMsg | None":
        h = parse_headers(hdr) if hdr else {}
        topic = (h.get("Nmqtt-RTopic") or [""])[0]
        fl = (h.get("Nmqtt-RFlags") or ["0"])[0].lstrip("-")
        try:
            flags = int(fl, 16)
        except ValueError:
            return None
        props = {}
        if h.get("Rillet-Mqtt-Props"):
            try:
                props = json.loads(base64.b64decode(h["Rillet-Mqtt-Props"][0]))
            except ValueError:
                props = {}
        return cls(subject[len(RMSGS_PREFIX):], topic, body, flags, (h.get("Nmqtt-ROrigin") or [""])[0],
                   (h.get("Nmqtt-RSource") or [""])[0], seq, props)


class Session:
    """One client id's session: what is persisted (subscriptions and their consumers) and the in-flight
    packet identifiers of the current connection."""

    def __init__(self, asm: "AccountSessions", cid: str) -> None:
        self.asm = asm
        self.id = cid
        self.hash = client_hash(cid)
        self.seq = 0  # the session record's sequence in $MQTT_sess (0: none)
        self.clean = True
        self.subs: dict[str, int] = {}  # NATS filter subject -> QoS
        self.filters: dict[str, dict] = {}  # NATS filter subject -> {"topic": MQTT filter, v5 options...}
        self.cons: dict[str, dict] = {}  # NATS filter subject -> its consumer config
        self.pubrel: dict | None = None  # the PUBREL consumer config
        self.conn: "MqttConn | None" = None
        self.expiry = 0  # MQTT 5 session expiry interval (s); 0xFFFFFFFF never
        self.version = 4
        self.last_pi = 0
        self.pending_pub: dict[int, tuple[str | None, str, int]] = {}  # pi -> (ack subject, durable, sseq)
        self.cpending: dict[tuple[str, int], int] = {}  # (durable, stream seq) -> pi
        self.pending_rel: dict[int, str] = {}  # pi -> PUBREL ack subject
        self.rel_sub_made = False
        self.lock = asyncio.Lock()

    @property
    def subject(self) -> str:
        return SESS_PREFIX + self.hash

    def record(self) -> dict:
        d: dict[str, Any] = {"origin": self.asm.jsa.id, "id": self.id}
        if self.clean:
            d["clean"] = True
        if self.subs:
            d["subs"] = dict(self.subs)
        if self.cons:
            d["cons"] = dict(self.cons)
        if self.pubrel:
            d["pubrel"] = self.pubrel
        if self.filters:
            d["rillet_filters"] = dict(self.filters)
        if self.expiry:
            d["rillet_expiry"] = self.expiry
        return d

    def restore(self, d: dict, seq: int) -> None:
        self.seq = seq
        self.clean = bool(d.get("clean"))
        self.subs = {k: int(v) for k, v in (d.get("subs") or {}).items()}
        self.cons = dict(d.get("cons") or {})
        self.pubrel = d.get("pubrel")
        self.filters = dict(d.get("rillet_filters") or {})
        self.expiry = int(d.get("rillet_expiry") or 0)

    async def save(self) -> None:
        hdr = b""
        if self.seq:
            hdr = make_headers([("Nats-Expected-Last-Subject-Sequence", str(self.seq))])
        body = json.dumps(self.record(), separators=(",", ":")).encode()
        try:
            ack = await self.asm.jsa.store(self.subject, body, hdr)
        except JSAPIError as e:
            if self.seq and e.err_code == 10071:  # wrong last sequence: another server wrote it; take it over
                self.seq = 0
                ack = await self.asm.jsa.store(self.subject, body)
            else:
                raise RuntimeError(f"unable to persist session {self.id!r} (seq={self.seq}): {e}") from None
        self.seq = int(ack.get("seq", 0))

    async def create(self) -> bool:
        """Store the record on the condition that the client id has none (expected last subject sequence 0):
        True if stored, False if a record is there (nothing written)."""
        hdr = make_headers([("Nats-Expected-Last-Subject-Sequence", "0")])
        body = json.dumps(self.record(), separators=(",", ":")).encode()
        try:
            ack = await self.asm.jsa.store(self.subject, body, hdr)
        except JSAPIError as e:
            if e.err_code == 10071:  # wrong last sequence: there is a record
                return False
            raise RuntimeError(f"unable to persist session {self.id!r}: {e}") from None
        self.seq = int(ack.get("seq", 0))
        return True

    async def clear(self, qos2_in: bool = False) -> None:
        """Forget everything persisted: consumers, PUBREL consumer, the record; ``qos2_in`` (MQTT 5): also the
        QoS 2 messages the client sent and never released with a PUBREL (nats-server, so 3.1.1, keeps those:
        a later QoS 2 PUBLISH with the same packet id is then taken for a resend of the old one)."""
        jsa = self.asm.jsa
        if qos2_in:
            await self.purge_qos2_in()
        for cc in list(self.cons.values()):
            await jsa.delete_consumer(MSGS_STREAM, cc["durable_name"])
        self.cons.clear()
        if self.pubrel:
            await jsa.delete_consumer(OUT_STREAM, self.pubrel["durable_name"])
            self.pubrel = None
        self.subs.clear()
        self.filters.clear()
        self.pending_pub.clear()
        self.cpending.clear()
        self.pending_rel.clear()
        self.last_pi = 0
        if self.seq:
            await jsa.delete_msg(SESS_STREAM, self.seq)
            self.seq = 0

    async def purge_qos2_in(self) -> None:
        """The client's QoS 2 messages waiting for their PUBREL in ``$MQTT_qos2in``, dropped."""
        await self.asm.jsa.request(f"STREAM.PURGE.{QOS2IN_STREAM}", {"filter": f"{QOS2IN_PREFIX}{self.id}.>"})

    def next_pi(self) -> int:
        """A free packet identifier (0: all 65535 in flight)."""
        pi = self.last_pi % 0xFFFF + 1
        if pi not in self.pending_pub and pi not in self.pending_rel:  # (the usual case: the next one is free)
            self.last_pi = pi
            return pi
        for _ in range(0xFFFF):
            self.last_pi = self.last_pi % 0xFFFF + 1
            pi = self.last_pi
            if pi not in self.pending_pub and pi not in self.pending_rel:
                return pi
        return 0


class AccountSessions:
    """The MQTT sessions and retained messages of one account on this server."""

    def __init__(self, server: Any, account: Any, replicas: int) -> None:
        self.server = server
        self.account = account
        self.jsa = JSA(server, account)
        self.replicas = replicas
        self.sessions: dict[str, Session] = {}
        self.retained: dict[str, RetainedMsg] = {}
        self.flappers: dict[str, float] = {}
        self.locked: set[str] = set()
        self.settling: dict[str, asyncio.Task] = {}  # client id -> its closed connection's session clean-up
        self._rm_sub: Any = None
        self._sess_sub: Any = None
        self.on_remote_session: Callable[[str], None] | None = None

    async def start(self) -> None:
        r = self.replicas
        jsa = self.jsa
        acc = self.account.name

        async def ensure(label: str, cfg: dict) -> None:
            try:
                await jsa.ensure_stream(cfg)
            except JSAPIError as e:
                raise RuntimeError(f'lookup {label} stream for account "{acc}": {e} ({e.err_code})') from None

        await ensure("sessions", {"name": SESS_STREAM, "subjects": [SESS_PREFIX + ">"], "storage": "file",
                                 "retention": "limits", "num_replicas": r, "max_msgs_per_subject": 1})
        # (per-message TTL allowed: an MQTT 5 message expiry interval is the stored message's TTL)
        await ensure("messages", {"name": MSGS_STREAM, "subjects": [MSGS_PREFIX + ">"], "storage": "file",
                                 "retention": "interest", "num_replicas": r, "allow_msg_ttl": True})
        await ensure("QoS2 incoming messages", {"name": QOS2IN_STREAM, "subjects": [QOS2IN_PREFIX + ">"],
                                                "storage": "file",
                                 "retention": "limits", "discard": "new", "max_msgs_per_subject": 1,
                                 "discard_new_per_subject": True, "num_replicas": r})
        await ensure("QoS2 outgoing PUBREL", {"name": OUT_STREAM, "subjects": ["$MQTT.out.>"], "storage": "file",
                                 "retention": "interest", "num_replicas": r})
        await ensure("retained messages", {"name": RMSGS_STREAM, "subjects": [RMSGS_PREFIX + ">"], "storage": "file",
                                 "retention": "limits", "num_replicas": r, "max_msgs_per_subject": 1})
        # every retained message, then each new one: an ephemeral push consumer into the cache
        rm_inbox = f"$MQTT.JSA.{jsa.id}.RM.{nuid()}"
        self._rm_sub = jsa.ic.subscribe(rm_inbox, self._on_retained)
        info = await jsa.request(f"STREAM.INFO.{RMSGS_STREAM}")
        last = int((info.get("state") or {}).get("last_seq", 0))
        self._rm_loaded = asyncio.get_running_loop().create_future()
        self._rm_last = last
        if last == 0 or int((info.get("state") or {}).get("messages", 0)) == 0:
            self._rm_loaded.set_result(None)
        name = f"{RMSGS_STREAM}_{nuid()}"
        await jsa.request(f"CONSUMER.CREATE.{RMSGS_STREAM}.{name}", {"stream_name": RMSGS_STREAM, "config": {
            "name": name, "deliver_subject": rm_inbox, "deliver_policy": "all", "ack_policy": "none",
            "replay_policy": "instant", "filter_subject": RMSGS_PREFIX + ">", "inactive_threshold": 300_000_000_000,
            "flow_control": False}})
        try:
            await asyncio.wait_for(asyncio.shield(self._rm_loaded), jsa.timeout)
        except asyncio.TimeoutError:
            self.server.log.warn("MQTT: retained messages not all loaded before the timeout")
        # session records other servers write: a client id connecting there takes the session over from here
        sess_inbox = f"$MQTT.JSA.{jsa.id}.SS.{nuid()}"
        self._sess_sub = jsa.ic.subscribe(sess_inbox, self._on_session_record)
        name = f"{SESS_STREAM}_{nuid()}"
        await jsa.request(f"CONSUMER.CREATE.{SESS_STREAM}.{name}", {"stream_name": SESS_STREAM, "config": {
            "name": name, "deliver_subject": sess_inbox, "deliver_policy": "new", "ack_policy": "none",
            "filter_subject": SESS_PREFIX + ">", "inactive_threshold": 300_000_000_000}})

    def _on_session_record(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int,
                           msg: bytes) -> None:
        body = msg[hdr:] if hdr > 0 else msg
        try:
            d = json.loads(body) if body else None
        except ValueError:
            return
        if not isinstance(d, dict) or d.get("origin") == self.jsa.id:
            return
        cid = d.get("id")
        sess = self.sessions.pop(cid, None) if isinstance(cid, str) else None
        if sess is None:
            return
        conn = sess.conn
        sess.conn = None
        if conn is not None:
            self.server.log.warn(f"{conn.log_prefix()} - client ID {cid!r} connected on another server: "
                                 f"this connection is taken over")
            conn.takeover()

    def close(self) -> None:
        self.jsa.close()

    def _on_retained(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        if not reply:
            return
        toks = reply.decode().split(".")
        try:
            seq = int(toks[-4]) if len(toks) >= 9 else 0
            pending = int(toks[-1]) if len(toks) == 9 else int(toks[-2]) if len(toks) >= 11 else 0
        except ValueError:
            seq = pending = 0
        h = msg[:hdr] if hdr > 0 else b""
        body = msg[hdr:] if hdr > 0 else msg
        s = subject.decode()
        rm = RetainedMsg.decode(s, h, body, seq)
        if rm is not None:
            key = s[len(RMSGS_PREFIX):]
            cur = self.retained.get(key)
            if cur is None or cur.seq <= seq:
                if rm.payload:
                    self.retained[key] = rm
                else:
                    self.retained.pop(key, None)
        fut = getattr(self, "_rm_loaded", None)
        if fut is not None and not fut.done() and (seq >= self._rm_last or pending == 0):
            fut.set_result(None)

    async def set_retained(self, rm: RetainedMsg) -> None:
        hdr, body = rm.encode()
        ack = await self.jsa.store(RMSGS_PREFIX + rm.subject, body, hdr)
        rm.seq = int(ack.get("seq", 0))
        cur = self.retained.get(rm.subject)
        if cur is None or cur.seq <= rm.seq:
            if rm.payload:
                self.retained[rm.subject] = rm
            else:
                self.retained.pop(rm.subject, None)

    def retained_for(self, flt: str) -> list[RetainedMsg]:
        return [rm for subj, rm in self.retained.items() if subject_matches(flt, subj)]

    async def load_session(self, cid: str) -> Session:
        sess = Session(self, cid)
        m = await self.jsa.last_msg(SESS_STREAM, sess.subject)
        if m is not None and m["data"]:
            d = json.loads(m["data"])
            if d.get("id") != cid:
                raise ValueError("stored session does not match client ID")
            sess.restore(d, m["seq"])
            sess.exists = True  # type: ignore[attr-defined]
        else:
            sess.exists = False  # type: ignore[attr-defined]
        return sess

    def jailed(self, cid: str) -> bool:
        t = self.flappers.get(cid)
        if t is None:
            return False
        if time.monotonic() - t > 1.0:
            del self.flappers[cid]
            return False
        return True
