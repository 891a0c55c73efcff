"""PUBLISH from an MQTT client: the bulk read of the steady state, the packet path (topic aliases,
retain, QoS 2 until PUBREL, MQTT 5 properties as NATS headers), the QoS 1 stores and their PUBACKs in
order, wills, and MQTT 5 requests through a response inbox."""
from __future__ import annotations

import asyncio
import base64
import json
import time
from functools import partial
from typing import Any

from rillet import lane

from . import codec as C
from . import sparkplug as spb
from .common import (_HDRS, _INTERNAL_HDRS, MSGS_PREFIX_B, PROPS_HDR, RC_ALIAS_INVALID, RC_NO_SUBSCRIBERS,
                     RC_NOT_AUTHORIZED, RC_PI_NOT_FOUND, RC_PROTOCOL, RC_QOS_NOT_SUPPORTED, RC_RECV_MAX,
                     RC_TOO_LARGE, RC_TOPIC_NAME_INVALID, RC_UNSPECIFIED, SERVER_ALIAS_MAX, _extra_of,
                     _props_from_extra)
from .store import (JSA, MSGS_PREFIX, QOS2IN_PREFIX, QOS2IN_STREAM, JSAPIError, QoS1Store, RetainedMsg, client_hash,
                    make_headers, nuid, parse_headers)
from .topics import TopicError, subject_to_topic, topic_to_subject


class PublishMixin:
    """The publish part of ``MqttConn`` (its state is the connection's, set up in ``MqttConn.__init__``)."""

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
        mp = self.mpay  # (the server's, the account's, and after an account update the user JWT's: apply_limits)
        if mp >= 0 and size > mp:
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
        if 0 <= self.mpay < len(hdr) + len(payload):
            return False
        if p.qos == 1 and self.version >= 5 and len(self.ack_fifo) + self.acks_unwritten >= self.ms.receive_max:
            # MQTT 5: more QoS 1 PUBLISH without their PUBACK than the Receive Maximum told in CONNACK
            raise C.ProtocolViolation("receive maximum exceeded", RC_RECV_MAX)
        self.in_msgs += 1
        self.in_bytes += len(hdr) + len(payload) - 2  # (as nats-server counts it, see on_publish)
        got = acc.deliver(self, sb, None, len(hdr), hdr + payload)
        if p.qos == 1:
            rc = 0 if got or self.version < 5 else RC_NO_SUBSCRIBERS
            a = QoS1Store(self, p.pi, rc)
            self.ack_fifo.append(a)
            self.asm.jsa.store_cb((MSGS_PREFIX + subject).encode(), p.payload, hdr, a)  # type: ignore[union-attr]
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
        # whether a publish to NATS may reach anyone, by subject and the account's sublist stamp
        # (``_nats_interest``): with nobody, or only MQTT QoS 1/2 subscriptions (which take it from their
        # consumers), a QoS 1 message only goes to ``$MQTT_msgs``
        quiet = self.quiet if acc.gw is None and not self.server.trace_on else {}
        sl = acc.sublist
        maxp = self.decoder.max_packet
        h0, h1 = self.fast_hdrs
        hl = len(h0)  # (the QoS 1 header is as long)
        mpay = (self.mpay if self.mpay >= 0 else 1 << 62) - hl
        hb = hl - 2  # what in_bytes counts besides the payload (as nats-server, see on_publish)
        v5 = self.version >= 5
        rmax = self.ms.receive_max if v5 else 0
        skip = 1 if v5 else 0  # (MQTT 5: the properties length, 0)
        fifo = self.ack_fifo
        store = self.asm.jsa.store_cb  # type: ignore[union-attr]
        pos = 0
        n = len(data)
        # PUBACKs read: the ack subjects owed and their stream sequences (0: none in the subject), by durable
        acks: dict[str, tuple[list[bytes], list[int]]] = {}
        sess = self.sess
        try:
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
                        q = quiet.get(sb)
                        if q is None or q[0] is not sl or q[1] != sl._inserts or q[2] != sl._removes:
                            q = self._nats_interest(sb)
                        if q[4] is not None:  # (only MQTT QoS 1/2 subscriptions: as their _on_msg, which drops it)
                            for ns in q[4]:
                                ns.nm += 1
                            got = True
                        else:
                            got = q[3] and deliver(self, sb, None, hl, h1 + payload)
                        a = QoS1Store(self, pi, 0 if got or not v5 else RC_NO_SUBSCRIBERS)
                        fifo.append(a)
                        store(ent[1], payload, h1, a)
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
                    # (on_puback_pi, the consumer's ack gathered: sent after the loop)
                    pe = sess.pending_pub.pop(pi, None)  # type: ignore[union-attr]
                    if pe is not None:
                        ack, dur, sseq = pe
                        sess.cpending.pop((dur, sseq), None)  # type: ignore[union-attr]
                        if ack:
                            al = acks.get(dur)
                            if al is None:
                                acks[dur] = ([ack], [sseq])
                            else:
                                al[0].append(ack)
                                al[1].append(sseq)
                        if self.held:
                            self._send_held()
                elif first == 0xC0 and rl == 0:
                    self.send(b"\xd0\x00")
                else:
                    break
                pos = end
        finally:
            if acks:
                self._acks_out(acks)
        return data[pos:] if pos else data

    def _acks_out(self, acks: dict[str, tuple[list[bytes], list[int]]]) -> None:
        """The consumer acks for the PUBACKs ``_fast_in`` read, together per consumer (``JSA.ack_many``, with the
        stream sequences the deliveries' ack subjects were read for: not parsed again)."""
        jsa = self.asm.jsa  # type: ignore[union-attr]
        for dur, (subjects, seqs) in acks.items():
            if len(subjects) == 1:
                jsa.ack(subjects[0], dur)
            else:
                jsa.ack_many(dur, subjects, seqs)

    def _nats_interest(self, sb: bytes) -> tuple[Any, int, int, bool, list | None]:
        """(sublist, its inserts, its removes, interest, QoS 1/2 only) for a publish on subject ``sb``: interest is
        False when ``Account.deliver`` would do nothing with it (no subscription matches it in the account: local
        clients, routes, leaf nodes and imports all subscribe there; no gateway that may want it, no mapping);
        QoS 1/2 only, when every match is the NATS subscription of an MQTT QoS 1/2 subscription (no queue group,
        no trace): those subscriptions, whose ``_on_msg`` drops a QoS 1/2 MQTT message (their consumer delivers
        it), so ``_fast_in`` only counts it for them. Kept in ``quiet`` while the stamp holds (the sublist's counts
        of inserts and removes only grow: a subscription made or removed makes every entry stale; a
        subscription's QoS never changes, a new SUBSCRIBE makes new ones)."""
        acc = self.account
        sl = acc.sublist
        if acc.gw is not None or acc.mappings or self.server.trace_on:
            return (None, -1, -1, True, None)  # (never kept: checked again each time)
        r = acc.match(sb.decode("utf-8", "surrogateescape"))
        qos12: list | None = None
        if r.psubs and not r.qsubs:
            on_msg = type(self)._on_msg  # type: ignore[attr-defined]
            qos12 = []
            for ns in r.psubs:
                icb = ns.icb
                if icb.__class__ is not partial or getattr(icb.func, "__func__", None) is not on_msg or \
                        not icb.args or icb.args[0].qos < 1 or ns.max:
                    qos12 = None
                    break
                qos12.append(ns)
        q = (sl, sl._inserts, sl._removes, bool(r.psubs or r.qsubs), qos12)
        if len(self.quiet) > 4096:
            self.quiet.clear()
        self.quiet[sb] = q
        return q

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

    def _drain_acks(self) -> None:
        """(QoS1Store.done, once the oldest QoS 1 store is answered) The PUBACKs now due, in order."""
        fifo = self.ack_fifo
        while fifo and fifo[0].e is not None:
            a = fifo.popleft()
            e = a.e
            pi = a.pi
            rc = a.rc
            if e is not True:
                if e.__class__ is asyncio.CancelledError:  # (the account's MQTT state closed: no PUBACK)
                    continue
                # (no PUBACK for a message the stream refused: a full disk's 10023 too, as nats-server; only a
                # store nobody answered, code 503 without an error code, is let through)
                if not (isinstance(e, JSAPIError) and e.code == 503 and not e.err_code):
                    fifo.clear()
                    self.fail(f"unable to store QoS 1 message: {e}", RC_UNSPECIFIED)
                    break
            if self.closed:
                fifo.clear()
                break
            self.acks_unwritten += 1
            if rc:
                self.send(C.encode(C.Ack(C.PUBACK, pi, rc), 5))
            else:  # (send, inline: the connection is open, checked above)
                self.out += b"\x40\x02" + pi.to_bytes(2, "big")
                if not self.flush_pending:
                    self.flush_soon()
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
                elif e.code != 503 or e.err_code:
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


# the bulk read connections run: ``reference_fast_in`` (the method above, the reference and the pure lane's) or,
# in the compiled lane, its twin rillet._speedups._cmqtt.fast_in (the same steps, the packet framing read in C)
reference_fast_in = PublishMixin._fast_in
lane.use_compiled_methods(PublishMixin, "rillet._speedups._cmqtt", _fast_in="fast_in")
lane.use_compiled_methods(JSA, "rillet._speedups._cmqtt", store_cb="store_cb")  # (store.reference_store_cb)
