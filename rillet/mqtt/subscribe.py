"""SUBSCRIBE and UNSUBSCRIBE of an MQTT client (NATS subscriptions and the durable consumers of QoS 1/2
subscriptions), what they deliver to the client (QoS 0 from NATS, QoS 1/2 from the consumers, retained
messages), and the client's acknowledgements (PUBACK, PUBREC, PUBCOMP) of those deliveries."""
from __future__ import annotations

import base64
import time
from functools import partial
from typing import Any

from rillet import lane

from . import codec as C
from . import sparkplug as spb
from .common import (_INTERNAL_HDRS, _TOPICS, MAX_PAYLOAD_MQTT, MSGS_PREFIX_B, RC_NO_SUB_EXISTED,
                     RC_NOT_AUTHORIZED, RC_PI_NOT_FOUND, RC_QUOTA, RC_TOPIC_FILTER_INVALID, _extra_of,
                     _props_from_extra, _Sub, parse_ack)
from .store import (MSGS_PREFIX, MSGS_STREAM, OUT_STREAM, PUBREL_DELIVER_PREFIX, PUBREL_DURABLE_PREFIX,
                    PUBREL_PREFIX, SUB_PREFIX, JSAPIError, Session, client_hash, make_headers, nuid,
                    parse_headers)
from .topics import TopicError, filter_to_subject, needs_level_up, subject_to_topic


def _topic_field(subject: bytes) -> bytes:
    """The topic field of a PUBLISH (length and topic) for a NATS subject, cached in _TOPICS."""
    tb = subject_to_topic(subject.decode("utf-8", "surrogateescape")).encode()
    tf = len(tb).to_bytes(2, "big") + tb
    if len(_TOPICS) > 8192:
        _TOPICS.clear()
    _TOPICS[subject] = tf
    return tf


# ``$MQTT.msgs.<subject>`` -> the topic field of ``<subject>``, for the subjects ``_on_js_msg``'s common case
# takes whatever the subscription (not Sparkplug B, not a ``$`` subject): its subject checks made once
_JS_TOPICS: dict[bytes, bytes] = {}


def _js_topic_field(subject: bytes) -> bytes:
    """The topic field for ``$MQTT.msgs.<subject>`` (``subject`` the whole one), kept in _JS_TOPICS when the
    subject is neither a Sparkplug B nor a ``$`` one."""
    tf = _TOPICS.get(subject[11:])
    if tf is None:
        tf = _topic_field(subject[11:])
    if subject[11] != 36:  # (b"$")
        if len(_JS_TOPICS) > 8192:
            _JS_TOPICS.clear()
        _JS_TOPICS[subject] = tf
    return tf


def _load_ack_numbers(reply: bytes) -> Any:
    """(delivery count, stream sequence, consumer sequence) of an ack subject: the JetStream lane's parser
    (compiled when the extension is), taken on first use (rillet.jetstream loads after this package)."""
    global _ack_numbers
    from rillet import lane
    _ack_numbers = lane.ack_numbers
    return _ack_numbers(reply)


_ack_numbers = _load_ack_numbers


class SubscribeMixin:
    """The subscribe part of ``MqttConn`` (its state is the connection's, set up in ``MqttConn.__init__``)."""

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
        """The subscription limit of this connection (ConnectMixin.apply_limits): -1 for none."""
        return self.sub_limit

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
            # (_on_js_msg queues bytes for this connection and acks nothing while called, see _ack_soon: the
            # consumer may deliver to it in runs, DeliveryMixin._run_new)
            s.js_sub.icb.run_safe = True
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
        # the delivery calls cb(sub, client, subject, reply, hdr, msg); with an owner (an _Sub) cb(owner, sub, ...)
        sub = Subscription(self, subject, queue, sid, icb=cb if owner is None else partial(cb, owner))
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

    def _on_msg(self, s: _Sub, _ns: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        """A message on a subscription's NATS subject: sent at QoS 0 unless it is a QoS 1/2 MQTT message for a
        QoS 1/2 subscription (that one comes from the subscription's consumer)."""
        if self.closed or not self.connected:
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
                tf = _topic_field(subject)
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
            out = self.out
            out += head
            out += tf
            out += payload
            if not self.flush_pending:
                self.flush_soon()
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

    def _on_js_msg(self, s: _Sub, _ns: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int,
                   msg: bytes) -> None:
        """A QoS 1/2 message from the subscription's consumer (``$MQTT.msgs.<subject>``)."""
        sess = self.sess
        if s is None or sess is None or self.closed or not reply or not self.connected:
            return
        if hdr == 25 and self.version < 5 and self.perms is None and msg.startswith(b"NATS/1.0\r\nNmqtt-Pub:") and (
                subject in _JS_TOPICS or (subject.startswith(MSGS_PREFIX_B) and len(subject) > 11 and
                                          not subject.startswith(b"spBv1//0.", 11) and
                                          (not s.reserved or not subject.startswith(b"$", 11)))):
            # the common case: a 3.1.1 MQTT message (no other header) to a 3.1.1 client, no checks to make
            mq = msg[20] - 48  # (a digit, or the packet path decides)
            qos = mq if mq < s.qos else s.qos
            if 0 < qos and mq < 10:
                # the PUBLISH written without a packet object
                nums = _ack_numbers(reply)
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
                tf = _JS_TOPICS.get(subject)
                if tf is None:
                    tf = _js_topic_field(subject)
                pl = len(msg) - 25
                n = len(tf) + 2 + pl
                if n < 128:
                    head = bytes((first, n))
                elif n < 16384:
                    head = bytes((first, (n & 0x7F) | 0x80, n >> 7))
                else:
                    head = bytes((first,)) + C.encode_varint(n)
                self.out_msgs += 1
                self.out_bytes += pl
                out = self.out  # (as ``send``: the connection is open, checked above)
                out += head
                out += tf
                out += pi.to_bytes(2, "big")
                out += msg[25:]
                if not self.flush_pending:
                    self.flush_soon()
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
            self._ack_soon(rep)
            return
        extra = _extra_of(h)
        if s.opts.no_local and extra and extra.get("cid") == self.client_id:
            self._ack_soon(rep)
            return
        props = self._out_props(h, extra, None, s) if self.version >= 5 else {}
        if props is None:
            self._ack_soon(rep)
            return
        sseq = nums[1] if nums else 0
        dup = False
        pi = sess.cpending.get((s.durable, sseq)) if sseq else None
        if pi is not None and pi in sess.pending_pub:
            dup = True
            sess.pending_pub[pi] = (rep, s.durable, sseq)
        else:
            per_sub = int(self.server.opts.mqtt.get("max_ack_pending") or 1024)
            # (MQTT 5: a QoS 2 delivery keeps its place in the client's window until PUBCOMP)
            inflight = len(sess.pending_pub) + (len(sess.pending_rel) if self.version >= 5 else 0)
            if inflight >= min(self.client_recv_max, per_sub * max(len(self.msubs), 1)):
                if self.version >= 5 and sseq:
                    # (MQTT 5: sent once the client acknowledges one; held as long as the consumer would wait)
                    self.held[(s.durable, sseq)] = (s, subject, reply, hdr, msg)
                return  # (3.1.1, as nats-server: redelivered by JetStream after ack_wait)
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
            self._ack_soon(rep)

    def _ack_soon(self, rep: bytes) -> None:
        """Ack a delivery ``_on_js_msg`` does not pass on (QoS 0, not allowed, expired, too large) once the
        consumer's delivery is over: called from inside a run of deliveries, the consumer must not see an ack
        before it has recorded the run (its subscription is ``run_safe``)."""
        self.server.loop.call_soon(self.asm.jsa.send, rep)  # type: ignore[union-attr]

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
        new_alias = 0
        if self.client_alias_max and p.topic:
            # MQTT 5, a client that holds topic aliases (its CONNECT's Topic Alias Maximum): its first topics get
            # one each, sent with the topic once, then alone with an empty topic (MQTT-3.3.2-7 .. 3.3.2-11)
            a = self.aliases_out.get(p.topic)
            if a is None and len(self.aliases_out) < self.client_alias_max:
                a = new_alias = len(self.aliases_out) + 1
                p.props = dict(p.props, topic_alias=a)
            elif a is not None:
                p.props = dict(p.props, topic_alias=a)
                p.topic = ""
        data = C.encode(p, self.version)
        if self.client_max_packet and len(data) > self.client_max_packet:
            return False  # (a new alias not sent is not taken)
        if new_alias:
            self.aliases_out[p.topic] = new_alias
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
            self.asm.jsa.ack(ack, dur)  # type: ignore[union-attr]
        if self.held:
            self._send_held()

    def _send_held(self) -> None:
        """MQTT 5: the deliveries held back by the client's Receive Maximum, oldest first, while the window has
        room (one whose subscription is gone is left to its consumer's redelivery)."""
        sess = self.sess
        held = self.held
        while held and sess is not None and not self.closed:
            if len(sess.pending_pub) + len(sess.pending_rel) >= self.client_recv_max:
                return
            key = next(iter(held))
            s, subject, reply, hdr, msg = held.pop(key)
            if s.js_sub is not None and self.msubs.get(f"$share/{s.queue}/{s.subject}" if s.queue
                                                       else s.subject) is s:
                self._on_js_msg(s, None, None, subject, reply, hdr, msg)

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
            if self.held:  # (an error PUBREC ends the exchange: its place in the window is free)
                self._send_held()
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
        if self.held:  # (a QoS 2 delivery holds its place in the window until PUBCOMP)
            self._send_held()


# the delivery sessions' consumers call: ``reference_on_js_msg`` (the method above, the reference and the pure lane's)
# or, in the compiled lane, its twin rillet._speedups._cmqtt.on_js_msg (the common case; the rest to the reference)
reference_on_js_msg = SubscribeMixin._on_js_msg
lane.use_compiled_methods(SubscribeMixin, "rillet._speedups._cmqtt", _on_js_msg="on_js_msg")
