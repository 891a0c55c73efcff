# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled twin of ``PublishMixin._fast_in`` (rillet/mqtt/publish.py), the bulk read of a connected MQTT
client's QoS 0/1 PUBLISH, PUBACK and PINGREQ (see rillet.lane).

The pure method stays the reference: this one takes the same packets, makes the same calls in the same order
(``Account.deliver``, ``_nats_interest``, ``_fast_topic``, ``QoS1Store``, ``JSA.store_cb``, ``_send_held``,
``send``, ``_acks_out``) and stops at the same byte, returning the same rest. The packet framing (fixed header,
remaining length, topic and packet id) is read from the bytes in C, without an int object per byte read.
Anything that is not ``bytes`` goes to the reference.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_FromStringAndSize
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from libc.string cimport memcpy


cdef extern from "string.h":
    # (a header search without ``in``: bytes.__contains__ first tries its argument as an integer, whose failure
    # formats an error message each time, ~0.1 us)
    const void* memmem(const void* haystack, size_t hlen, const void* needle, size_t nlen) nogil

from rillet.mqtt.common import RC_NO_SUBSCRIBERS as _RC_NO_SUBSCRIBERS
from rillet.mqtt.store import QoS1Store as _QoS1Store


cdef _reference_fast_in(self, data):
    from rillet.mqtt.publish import reference_fast_in  # (loaded by now: it installs this twin)
    return reference_fast_in(self, data)


def fast_in(self, data):
    """``PublishMixin._fast_in``, compiled (the reference: rillet.mqtt.publish.reference_fast_in)."""
    if type(data) is not bytes:
        return _reference_fast_in(self, data)
    acc = self.account
    if acc.mappings:
        return data
    cache = self.fpubs
    deliver = acc.deliver
    quiet = self.quiet if acc.gw is None and not self.server.trace_on else {}
    sl = acc.sublist
    maxp_o = self.decoder.max_packet
    cdef Py_ssize_t maxp = maxp_o if maxp_o else 0
    h0, h1 = self.fast_hdrs
    cdef Py_ssize_t hl = len(h0)
    mp = self.mpay
    cdef long long mpay = (mp if mp >= 0 else (1 << 62)) - hl
    cdef Py_ssize_t hb = hl - 2
    cdef bint v5 = self.version >= 5
    rmax = self.ms.receive_max if v5 else 0
    cdef Py_ssize_t skip = 1 if v5 else 0
    fifo = self.ack_fifo
    store = self.asm.jsa.store_cb
    cdef const unsigned char* d = <const unsigned char*>PyBytes_AS_STRING(data)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
    cdef Py_ssize_t pos = 0, i, rl, end, te, ps
    cdef unsigned char first, b
    cdef int pi
    acks = {}
    sess = self.sess
    try:
        while pos + 1 < n and not self.closed:
            first = d[pos]
            b = d[pos + 1]
            if b < 128:
                rl = b
                i = pos + 2
            elif pos + 2 < n and d[pos + 2] < 128:
                rl = (b & 0x7F) | (d[pos + 2] << 7)
                i = pos + 3
            else:
                break
            end = i + rl
            if end > n or (maxp and end - pos > maxp):
                break
            if first == 0x30 or first == 0x32:
                if rl < 2:
                    break
                te = i + 2 + ((d[i] << 8) | d[i + 1])
                if te > end:
                    break
                tb = PyBytes_FromStringAndSize(<const char*>d + i + 2, te - i - 2)
                ent = cache.get(tb)
                if ent is None:
                    ent = self._fast_topic(tb)
                    if ent is None:
                        break
                sb = ent[0]
                if first == 0x32:
                    ps = te + 2 + skip
                    if ps > end or (v5 and (d[te + 2] or len(fifo) + self.acks_unwritten >= rmax)):
                        break
                    pi = (d[te] << 8) | d[te + 1]
                    if not pi:
                        break
                    if end - ps > mpay:
                        break
                    payload = PyBytes_FromStringAndSize(<const char*>d + ps, end - ps)
                    self.in_msgs += 1
                    self.in_bytes += hb + (end - ps)
                    q = quiet.get(sb)
                    if q is None or q[0] is not sl or q[1] != sl._inserts or q[2] != sl._removes:
                        q = self._nats_interest(sb)
                    if q[4] is not None:  # (only MQTT QoS 1/2 subscriptions: as their _on_msg, which drops it)
                        for ns in q[4]:
                            ns.nm += 1
                        got = True
                    else:
                        got = q[3] and deliver(self, sb, None, hl, h1 + payload)
                    a = _QoS1Store(self, pi, 0 if got or not v5 else _RC_NO_SUBSCRIBERS)
                    fifo.append(a)
                    store(ent[1], payload, h1, a)
                else:
                    ps = te + skip
                    if ps > end or (v5 and d[te]):
                        break
                    if end - ps > mpay:
                        break
                    payload = PyBytes_FromStringAndSize(<const char*>d + ps, end - ps)
                    self.in_msgs += 1
                    self.in_bytes += hb + (end - ps)
                    deliver(self, sb, None, hl, h0 + payload)
            elif first == 0x40 and rl == 2:
                pi = (d[i] << 8) | d[i + 1]
                if not pi:
                    break
                # (on_puback_pi, the consumer's ack gathered: sent after the loop)
                pe = sess.pending_pub.pop(pi, None)
                if pe is not None:
                    ack, dur, sseq = pe
                    sess.cpending.pop((dur, sseq), None)
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


# ---- a QoS 1/2 delivery from a session's consumer ------------------------------------------------------------------

cdef object _JS_TOPICS = None
cdef object _js_topic_field = None
cdef object _ack_numbers = None
cdef object _reference_on_js_msg = None
cdef object _encode_varint = None
cdef bytes _PUB_HDR = b"NATS/1.0\r\nNmqtt-Pub:"
cdef bytes _MSGS = b"$MQTT.msgs."
cdef bytes _SPB = b"spBv1//0."


cdef int _setup() except -1:
    global _JS_TOPICS, _js_topic_field, _reference_on_js_msg, _encode_varint
    from rillet.mqtt import codec, subscribe
    _encode_varint = codec.encode_varint
    _JS_TOPICS = subscribe._JS_TOPICS  # (a dict cleared, never replaced)
    _js_topic_field = subscribe._js_topic_field
    _reference_on_js_msg = subscribe.reference_on_js_msg
    return 0


cdef _load_ack_numbers(reply):
    # (the reference's ``_ack_numbers``: the JetStream lane's parser, registered by rillet.jetstream, taken on
    # first use as the reference takes it)
    global _ack_numbers
    from rillet import lane
    _ack_numbers = lane.ack_numbers
    return _ack_numbers(reply)


def on_js_msg(self, s, _ns, c, subject, reply, hdr, msg):
    """``SubscribeMixin._on_js_msg``, compiled for its common case (a 3.1.1 MQTT message with no other header to a
    3.1.1 client without permissions, QoS 1/2 after the subscription's maximum): the same checks, the same
    session bookkeeping, the same PUBLISH bytes appended to the connection's output. Anything else goes to the
    reference (rillet.mqtt.subscribe.reference_on_js_msg), before anything is changed."""
    if _JS_TOPICS is None:
        _setup()
    sess = self.sess
    if s is None or sess is None or self.closed or not reply or not self.connected:
        return
    if type(msg) is not bytes or type(subject) is not bytes or hdr != 25 or PyBytes_GET_SIZE(msg) < 25 or \
            self.version >= 5 or self.perms is not None or not msg.startswith(_PUB_HDR) or not (
                subject in _JS_TOPICS or (subject.startswith(_MSGS) and PyBytes_GET_SIZE(subject) > 11 and
                                          not subject.startswith(_SPB, 11) and
                                          (not s.reserved or not subject.startswith(b"$", 11)))):
        return _reference_on_js_msg(self, s, _ns, c, subject, reply, hdr, msg)
    cdef const unsigned char* m = <const unsigned char*>PyBytes_AS_STRING(msg)
    cdef int mq = <int>m[20] - 48
    sq = s.qos
    cdef int qos = mq if mq < sq else sq
    if not (0 < qos and mq < 10):
        return _reference_on_js_msg(self, s, _ns, c, subject, reply, hdr, msg)
    cdef int first
    nums = _ack_numbers(reply) if _ack_numbers is not None else _load_ack_numbers(reply)
    sseq = nums[1] if nums else 0
    pp = sess.pending_pub
    durable = s.durable
    pi = sess.cpending.get((durable, sseq)) if sseq else None
    if pi is not None and pi in pp:
        first = 0x38 | (qos << 1)  # (DUP)
        pp[pi] = (reply, durable, sseq)
    else:
        ps = self._per_sub
        if len(pp) >= ps * (len(self.msubs) or 1) or len(pp) >= self.client_recv_max:
            return  # (redelivered by JetStream after ack_wait)
        pi = sess.next_pi()
        if not pi:
            return
        pp[pi] = (reply, durable, sseq)
        if sseq:
            sess.cpending[(durable, sseq)] = pi
        first = (0x38 if nums and nums[0] > 1 else 0x30) | (qos << 1)
    tf = _JS_TOPICS.get(subject)
    if tf is None:
        tf = _js_topic_field(subject)
    cdef Py_ssize_t pl = PyBytes_GET_SIZE(msg) - 25
    cdef Py_ssize_t tl = PyBytes_GET_SIZE(tf)
    cdef Py_ssize_t n = tl + 2 + pl
    cdef unsigned char head[8]
    cdef int hn
    head[0] = <unsigned char>first
    if n < 128:
        head[1] = <unsigned char>n
        hn = 2
    elif n < 16384:
        head[1] = <unsigned char>((n & 0x7F) | 0x80)
        head[2] = <unsigned char>(n >> 7)
        hn = 3
    else:
        hv = _encode_varint(n)  # (its ValueError past the MQTT maximum, as the reference)
        hn = 1 + PyBytes_GET_SIZE(hv)
        memcpy(head + 1, PyBytes_AS_STRING(hv), hn - 1)
    cdef unsigned int p = pi
    self.out_msgs += 1
    self.out_bytes += pl
    out = self.out  # (as ``send``: the connection is open, checked above)
    cdef Py_ssize_t o
    cdef char* w
    if type(out) is bytearray:
        o = PyByteArray_GET_SIZE(out)
        PyByteArray_Resize(out, o + hn + tl + 2 + pl)
        w = PyByteArray_AS_STRING(out) + o
        memcpy(w, head, hn)
        w += hn
        memcpy(w, PyBytes_AS_STRING(tf), tl)
        w += tl
        w[0] = <char>(p >> 8)
        w[1] = <char>(p & 0xFF)
        memcpy(w + 2, <const char*>m + 25, pl)
    else:
        out += PyBytes_FromStringAndSize(<const char*>head, hn)
        out += tf
        out += pi.to_bytes(2, "big")
        out += msg[25:]
    if not self.flush_pending:
        self.flush_soon()


# ---- a QoS 1 PUBLISH stored straight into $MQTT_msgs ---------------------------------------------------------------

cdef object _APPLY = None
cdef object _SingleNodeLog = None
cdef object _Entry = None
cdef object _now_ns = None
cdef object _mt = None


cdef int _setup_direct() except -1:
    global _APPLY, _SingleNodeLog, _Entry, _now_ns, _mt
    import rillet.server.msgtrace as mt
    from rillet.jetstream.log import Entry, SingleNodeLog
    from rillet.jetstream.stream import Stream, now_ns
    _SingleNodeLog = SingleNodeLog
    _Entry = Entry
    _now_ns = now_ns
    _mt = mt
    _APPLY = Stream.apply
    return 0


cdef object _ok_app = None  # (the last log's apply found to be its stream's own Stream.apply)


cdef bint _direct_checks(stream, subject, hdr, data, ans) except -1:
    # (the reference's _checks_pass)
    global _ok_app
    cdef bint nats_hdr = False
    if hdr:
        if type(hdr) is bytes:
            nats_hdr = memmem(PyBytes_AS_STRING(hdr), PyBytes_GET_SIZE(hdr), b"Nats-", 5) != NULL
        else:
            nats_hdr = hdr.find(b"Nats-") >= 0
    cfg = stream.cfg
    if not ans.wait_write or stream._inflight or stream.store_failed or cfg.sealed or stream.jsa.limited or \
            nats_hdr or cfg.allow_msg_counter or cfg.allow_msg_schedules or cfg.republish is not None or \
            _mt.CURRENT is not None:
        return False
    log = stream.log
    if log.__class__ is not _SingleNodeLog:
        return False
    app = log.apply
    if app is not _ok_app:
        if getattr(app, "__func__", None) is not _APPLY or getattr(app, "__self__", None) is not stream:
            return False
        _ok_app = app  # (a bound method knows its stream: the same object, the same answer)
    cdef Py_ssize_t hl = len(hdr), dl = len(data)
    mms = cfg.max_msg_size
    if mms > 0 and hl + dl > mms:
        return False
    n = stream._bl_n + stream._wb_n
    if n:
        max_n, max_b = stream.ingest_limits
        if (max_n and n >= max_n) or (max_b and stream._bl_b + stream._wb_b + hl + dl + len(subject) > max_b):
            return False
    if cfg.retention == "interest":
        for c in stream.consumers.values():
            if not c.closed and c._matches(subject):
                c._mtook = subject
                return True
        return False
    return True


def store_direct(stream, subject, hdr, data, ans):
    """``rillet.mqtt.direct.store_direct``, compiled (the same steps; the reference is
    rillet.mqtt.direct.reference_store_direct)."""
    return _store_direct(stream, subject, hdr, data, ans)


cdef object _reference_store_cb = None


def store_cb(self, subject, payload, hdr, ans):
    """``JSA.store_cb``, compiled for its per-message case (the subject's direct store kept in ``_dcache`` and
    still good: the same checks), the store then made by ``store_direct``'s compiled steps; anything else goes
    to the reference (rillet.mqtt.store.reference_store_cb) before anything is changed."""
    global _reference_store_cb
    acc = self.account
    sl = acc.sublist
    ent = self._dcache.get(subject)
    st = None
    if _APPLY is None:
        _setup_direct()
    if ent is not None and ent[0] == sl._inserts and ent[1] == sl._removes and not acc.mappings and \
            acc.gw is None and not self.server.trace_on and _mt.CURRENT is None:
        st = ent[2]
        stream = st[0]
        if stream.cfg is not ent[3] or stream.closed or stream.replication is not None or \
                type(stream.log) is not ent[4] or st[1].max or stream.js.sync_always:
            st = None
    if st is None:
        if _reference_store_cb is None:
            from rillet.mqtt.store import reference_store_cb
            _reference_store_cb = reference_store_cb
        return _reference_store_cb(self, subject, payload, hdr, ans)
    stream, sub, isubj = st
    sub.nm += 1
    ic = self.ic
    ic.in_msgs += 1
    ic.in_bytes += len(hdr) + len(payload)
    ans.jsa = self
    ans.stream = stream
    _store_direct(stream, isubj, hdr, payload, ans)
    srv = self.server
    if not srv._flush_scheduled:
        srv.schedule_flush()


cdef object _store_direct(stream, subject, hdr, data, ans):
    if _APPLY is None:
        _setup_direct()
    if not _direct_checks(stream, subject, hdr, data, ans):
        return stream.process(subject, None, hdr, data, fast=ans)
    store = stream.store
    seq = store.last_seq + 1
    ts = _now_ns()
    ans.proposed()
    stream.log.index += 1
    fx = stream._fx
    if fx:
        fx.clear()
    try:
        r = store.store_msg(subject, hdr, data, ts, 0)
    except Exception as e:
        entry = _Entry(_Entry.MSG, (subject, hdr, data, ts, 0, "", seq), ans)
        stream._inflight.append(entry)
        stream._bl_n += 1
        stream._bl_b += len(subject) + len(hdr) + len(data)
        stream._msg_done(entry, None, e)
        return seq
    stream._last_msg_id = ""
    if stream._wb_pending:
        stream._wb_n += 1
        stream._wb_b += len(subject) + len(hdr) + len(data)
    if stream._fx:
        stream._run_fx()
    sseq = r[0]
    cfg = stream.cfg
    if stream._expire_timer is None and cfg.max_age:
        stream._schedule_expiry()
    consumers = stream.consumers
    hit = None
    if consumers:
        if type(consumers) is dict and len(consumers) == 1:  # (the list of one, without the list: one call)
            for c in (<dict>consumers).values():
                if c.on_stream_msg(sseq, subject) is True:
                    hit = c
                break
        else:
            for c in list(consumers.values()):
                if c.on_stream_msg(sseq, subject) is True and hit is None:
                    hit = c
    if cfg.retention == "interest" and (hit is None or hit.closed or consumers.get(hit.name) is not hit):
        stream.jsa.after_stream_msg(stream, sseq, subject)
    stream._fast_answer(ans, sseq, 0, None)
    return seq
