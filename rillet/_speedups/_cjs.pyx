# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled twins of rillet.jetstream.acksubject's ack_numbers and ack_reply, and of a consumer's run of
deliveries, rillet.jetstream.consumer.delivery.reference_run_frames (``run_frames``; see rillet.lane).

``ack_numbers``: the subject's dots are counted and the three numbers read in C where each is 1 to 18 ASCII
digits; any other token (a sign, spaces, underscores, more digits, nothing) is given to Python's ``int`` as
the reference does, so both accept and refuse the same subjects and give the same numbers.

``ack_reply``: an ASCII prefix and five non-negative ints below 2**63 are written into one new ASCII string;
anything else (a prefix with other characters, a negative number, an int subclass) is the reference's.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.string cimport memcmp, memcpy

cdef extern from "Python.h":
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    bint PyUnicode_IS_ASCII(object u)
    void* PyUnicode_DATA(object u)
    Py_ssize_t PyUnicode_GET_LENGTH(object u)

from rillet.jetstream import acksubject as _pure

cdef object _pure_ack_numbers = _pure.ack_numbers
cdef object _pure_ack_reply = _pure.ack_reply


cdef inline object _number(const char* p, Py_ssize_t n):
    """The token's int, or None where int() refuses it."""
    cdef long long v = 0
    cdef Py_ssize_t i
    cdef char c
    if 0 < n <= 18:
        for i in range(n):
            c = p[i]
            if c < 48 or c > 57:
                break
            v = v * 10 + (c - 48)
        else:
            return v
    try:
        return int(PyBytes_FromStringAndSize(p, n))
    except ValueError:
        return None


def ack_numbers(subject):
    if type(subject) is not bytes:
        return _pure_ack_numbers(subject)
    cdef const char* s = PyBytes_AS_STRING(subject)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(subject)
    cdef Py_ssize_t starts[10]
    cdef Py_ssize_t ends[10]
    cdef Py_ssize_t k = 0, i, start = 0
    for i in range(n):
        if s[i] == 46:  # '.'
            if k < 10:
                starts[k] = start
                ends[k] = i
            k += 1
            start = i + 1
    if k < 10:
        starts[k] = start
        ends[k] = n
    k += 1  # tokens
    cdef int off
    if k == 9:
        off = 2
    elif k >= 11:
        off = 4
    else:
        return None
    dc = _number(s + starts[off + 2], ends[off + 2] - starts[off + 2])
    if dc is None:
        return None
    sseq = _number(s + starts[off + 3], ends[off + 3] - starts[off + 3])
    if sseq is None:
        return None
    dseq = _number(s + starts[off + 4], ends[off + 4] - starts[off + 4])
    if dseq is None:
        return None
    return dc, sseq, dseq


cdef inline int _digits(unsigned long long v) noexcept:
    cdef int n = 1
    while v >= 10:
        v //= 10
        n += 1
    return n


cdef inline char* _put(char* w, unsigned long long v, int n) noexcept:
    cdef char* e = w + n
    while n:
        n -= 1
        w[n] = <char>(48 + v % 10)
        v //= 10
    return e


def ack_reply(prefix, dc, sseq, dseq, ts, pending):
    if (type(prefix) is not str or not PyUnicode_IS_ASCII(prefix) or type(dc) is not int or type(sseq) is not int
            or type(dseq) is not int or type(ts) is not int or type(pending) is not int):
        return _pure_ack_reply(prefix, dc, sseq, dseq, ts, pending)
    cdef long long v[5]
    try:
        v[0] = dc
        v[1] = sseq
        v[2] = dseq
        v[3] = ts
        v[4] = pending
    except OverflowError:
        return _pure_ack_reply(prefix, dc, sseq, dseq, ts, pending)
    cdef int nd[5]
    cdef Py_ssize_t plen = PyUnicode_GET_LENGTH(prefix)
    cdef Py_ssize_t size = plen + 4
    cdef int i
    for i in range(5):
        if v[i] < 0:
            return _pure_ack_reply(prefix, dc, sseq, dseq, ts, pending)
        nd[i] = _digits(<unsigned long long>v[i])
        size += nd[i]
    out = PyUnicode_New(size, 127)
    cdef char* w = <char*>PyUnicode_DATA(out)
    memcpy(w, PyUnicode_DATA(prefix), plen)
    w += plen
    for i in range(5):
        if i:
            w[0] = 46  # '.'
            w += 1
        w = _put(w, <unsigned long long>v[i], nd[i])
    return out


# ---- a run of deliveries (rillet.jetstream.consumer.delivery.reference_run_frames) ---------------------------

cdef extern from "Python.h":
    object PyUnicode_AsEncodedString(object u, const char* encoding, const char* errors)

cdef object _clock = None
cdef object _pure_run_frames = None


cdef inline bytes _utf8(object s):
    """``s.encode("utf-8", "surrogateescape")`` (an ASCII str: its bytes as they are)."""
    if type(s) is str and PyUnicode_IS_ASCII(s):
        return PyBytes_FromStringAndSize(<const char*>PyUnicode_DATA(s), PyUnicode_GET_LENGTH(s))
    return PyUnicode_AsEncodedString(s, "utf-8", "surrogateescape")


def run_frames(c, m, Py_ssize_t budget, acc, r, dsubj, wr, list seqs):
    """``reference_run_frames`` (see there), compiled: the same calls on the consumer, the store and the
    account's executor in the same order, the ack reply subject written as bytes in one piece (the pure
    one's ``ack_reply(...).encode()``), the subject's bytes made once for a run of messages sharing one
    subject object (as stores keep them)."""
    global _clock, _pure_run_frames
    if _clock is None:
        from rillet.jetstream.consumer import common, delivery
        _clock = common._clock
        _pure_run_frames = delivery.reference_run_frames
    prefix = c.ack_prefix
    if type(prefix) is not str or not PyUnicode_IS_ASCII(prefix):
        return _pure_run_frames(c, m, budget, acc, r, dsubj, wr, seqs)
    ic = c.ic
    deliver = acc.deliver_result
    cdef bytes pre = _utf8(prefix)
    cdef Py_ssize_t prelen = PyBytes_GET_SIZE(pre)
    maxpb = c.maxpb
    cdef bint fc = bool(maxpb)
    dseq = c.dseq
    ndseq = c._ndseq
    nd = dseq if dseq >= ndseq else ndseq
    cdef double expires = wr.expires if wr is not None else 0.0
    cdef long long v[5]
    cdef int ndig[5]
    cdef Py_ssize_t size, k, i, n, sz
    cdef char* w
    cdef bytes reply
    cdef bytes sb = None
    last_subj = None
    cdef Py_ssize_t sent = 0
    lts = None
    # The consumer's fields the loop moves (the scan position, the pending count, the bytes in flight) are kept
    # here and written back before every call that may read them (num_pending, _need_fc, _send_fc,
    # _next_in_run) and at the end; what those calls may change is read again after them.
    cdef bint unsynced = False
    cdef bint dirty = c.npc_dirty
    npc = c.npc
    pbytes = c.pbytes if fc else None
    sseq = c.sseq
    ahead = c._ahead
    try:
        while True:
            seq = m.seq
            sseq = seq + 1
            unsynced = True
            if not dirty:
                npc = npc - 1
                pending = npc if npc > 0 else 0  # (num_pending with a clean count)
            else:
                c.sseq = sseq
                c.npc = npc
                if fc:
                    c.pbytes = pbytes
                unsynced = False
                pending = c.num_pending()
                dirty = c.npc_dirty
                npc = c.npc
                if fc:
                    pbytes = c.pbytes
            ts = m.ts
            if (type(seq) is not int or type(nd) is not int or type(ts) is not int or type(pending) is not int
                    or seq < 0 or nd < 0 or ts < 0 or pending < 0 or seq >= 2**62 or nd >= 2**62 or ts >= 2**62
                    or pending >= 2**62):
                rs = _pure_ack_reply(prefix, 1, seq, nd, ts, pending)
                reply = rs.encode()
                n = len(rs)
            else:
                v[0] = 1
                v[1] = seq
                v[2] = nd
                v[3] = ts
                v[4] = pending
                size = prelen + 4
                for i in range(5):
                    ndig[i] = _digits(<unsigned long long>v[i])
                    size += ndig[i]
                reply = PyBytes_FromStringAndSize(NULL, size)
                w = PyBytes_AS_STRING(reply)
                memcpy(w, PyBytes_AS_STRING(pre), prelen)
                w += prelen
                for i in range(5):
                    if i:
                        w[0] = 46  # '.'
                        w += 1
                    w = _put(w, <unsigned long long>v[i], ndig[i])
                n = size
            hdr = m.hdr
            data = m.data
            subj = m.subject
            if subj is not last_subj:
                sb = _utf8(subj)
                last_subj = subj
            sz = len(subj) + n + len(hdr) + len(data)
            if fc:
                pbytes = pbytes + sz
                unsynced = True
            sent += 1
            if hdr:
                ok = deliver(ic, r, sb, reply, len(hdr), hdr + data, dsubj)
            else:
                ok = deliver(ic, r, sb, reply, -1, data, dsubj)
            seqs.append(seq)
            lts = ts
            nd += 1
            if not ok:
                c._failed = True
                break
            if fc:
                fcid = c.fcid
                if (pbytes - c.fcsz >= maxpb) if fcid else (pbytes > maxpb // 2 or c.ack_policy == "flow_control"):
                    c.sseq = sseq
                    c.npc = npc
                    c.pbytes = pbytes
                    unsynced = False
                    if c._need_fc(sz):
                        c._send_fc()
                    dirty = c.npc_dirty
                    npc = c.npc
                    pbytes = c.pbytes
                    maxpb = c.maxpb
                    ahead = c._ahead
                if pbytes > maxpb:
                    break
            if len(seqs) >= budget or (expires and _clock() >= expires):
                break
            if ahead and ahead[len(ahead) - 1].seq == sseq:  # (no negative index here: wraparound is off)
                m = ahead.pop()
            else:
                c.sseq = sseq
                c.npc = npc
                if fc:
                    c.pbytes = pbytes
                unsynced = False
                m = c._next_in_run()
                dirty = c.npc_dirty
                npc = c.npc
                if fc:
                    pbytes = c.pbytes
                ahead = c._ahead
                if m is None:
                    break
    finally:
        if unsynced:
            c.sseq = sseq
            c.npc = npc
            if fc:
                c.pbytes = pbytes
        ic.out_msgs += sent
        if lts is not None:
            c._replay_lts = lts


# ---- a stream's plain publish -----------------------------------------------------------------------------------
# ``stream_on_msg`` is Stream._on_msg (the reference: rillet.jetstream.stream.reference_on_msg) compiled for the
# plain case: no headers, no subject transform, a reply that is bytes (or none) and not a fast batch's, nothing in
# flight, a stream neither sealed, failed, interest-retained nor counting, a one-member log (SingleNodeLog) and the
# ingest and account limits not reached. It does what _on_msg -> process -> SingleNodeLog's propose -> _msg_done do
# for such a message, in the same order and with the same calls for what it does not do itself (the log's apply,
# Stream.apply, which stores it; the consumers, expiry, republish, the first PubAck of a pass). Anything else goes
# to the reference before anything has changed. ``memstore_store_msg`` is MemStore.store_msg's twin.

cdef bint _st_ready = False
cdef object _st_reference = None
cdef object _st_Entry = None
cdef object _st_MSG = None
cdef object _st_SNL = None
cdef object _st_now_ns = None
cdef object _st_json = None
cdef object _st_schedules = None
cdef object _st_mem_reference = None
cdef object _st_StoredMsg = None
cdef object _st_last_seq = None


cdef int _st_setup() except -1:
    global _st_ready, _st_reference, _st_Entry, _st_MSG, _st_SNL, _st_now_ns, _st_json, _st_schedules
    global _st_mem_reference, _st_StoredMsg, _st_last_seq
    from rillet.jetstream.store._common import StoreCommon
    _st_last_seq = StoreCommon.__dict__["last_seq"]
    from rillet.jetstream.store import memstore
    from rillet.jetstream.store.base import StoredMsg
    _st_mem_reference = memstore.reference_store_msg
    _st_StoredMsg = StoredMsg
    from rillet.jetstream import stream as s
    from rillet.jetstream import schedules
    _st_reference = s.reference_on_msg
    _st_Entry = s.Entry
    _st_MSG = s.Entry.MSG
    _st_SNL = s.SingleNodeLog
    _st_now_ns = s.now_ns
    _st_json = s._json
    _st_schedules = schedules
    _st_ready = True
    return 0


cdef bytes _st_ack(bytes pre, object seq):
    """``pre + b"%d}" % seq`` for a non-negative int below 2**63 (else Python's formatting)."""
    cdef unsigned long long v
    cdef char digits[24]
    cdef int nd = 0, i
    cdef Py_ssize_t n
    cdef bytes out
    cdef char* p
    if type(seq) is not int or seq < 0 or seq >= 9223372036854775807:
        return pre + b"%d}" % seq
    v = seq
    if v == 0:
        digits[0] = 48
        nd = 1
    while v:
        digits[nd] = <char>(48 + v % 10)
        v //= 10
        nd += 1
    n = PyBytes_GET_SIZE(pre)
    out = PyBytes_FromStringAndSize(NULL, n + nd + 1)
    p = PyBytes_AS_STRING(out)
    memcpy(p, PyBytes_AS_STRING(pre), n)
    for i in range(nd):
        p[n + i] = digits[nd - 1 - i]
    p[n + nd] = 125  # '}'
    return out


def memstore_store_msg(self, subject, hdr, data, ts=None, ttl=0):
    """MemStore.store_msg (the reference: rillet.jetstream.store.memstore.reference_store_msg) compiled for its
    inline case -- a subject stored before, a time given, no TTL, no limit to enforce, a store not closed --
    the rest handed to the reference."""
    if not _st_ready:
        _st_setup()
    if type(subject) is not str or type(hdr) is not bytes or type(data) is not bytes or ts is None or ttl:
        return _st_mem_reference(self, subject, hdr, data, ts, ttl)
    ss = self._subjects.get(subject)
    if ss is None or type(ss) is not list or self._closed or self._pre_check or self._maxp or self._post_limits:
        return _st_mem_reference(self, subject, hdr, data, ts, ttl)
    seq = self._last + 1
    msgs = self._msgs
    if not msgs:
        self._first = seq
    msgs[seq] = _st_StoredMsg(subject, seq, ts, hdr, data)
    self._last = seq
    self._last_ts = ts
    if PyBytes_GET_SIZE(hdr):
        self._bytes += len(subject) + PyBytes_GET_SIZE(hdr) + PyBytes_GET_SIZE(data) + self._size_overhead + \
            self._hdr_overhead
    else:
        self._bytes += len(subject) + PyBytes_GET_SIZE(data) + self._size_overhead
    cdef list sl = <list>ss
    sl[0] += 1
    sl.append(seq)
    if len(sl) - sl[1] > 2 * sl[0] + 8:
        self._compact_subj(sl)
    return seq, ts


cdef inline bint _fast_batch_reply(bytes reply) noexcept:
    """``reply.endswith(b".$FI")`` (a fast batch's reply: rillet.jetstream.fastbatch)."""
    cdef Py_ssize_t n = PyBytes_GET_SIZE(reply)
    return n >= 4 and memcmp(PyBytes_AS_STRING(reply) + n - 4, b".$FI", 4) == 0


def stream_on_msg(self, sub, client, subject, reply, hdr, msg):
    if not _st_ready:
        _st_setup()
    if (hdr >= 0 or type(subject) is not bytes or type(msg) is not bytes
            or (reply is not None and (type(reply) is not bytes or _fast_batch_reply(reply)))):
        return _st_reference(self, sub, client, subject, reply, hdr, msg)
    cfg = self.cfg
    st = cfg.subject_transform
    log = self.log
    if (st is not None and st.dest) or type(log) is not _st_SNL or self._inflight or self.store_failed or \
            cfg.sealed or cfg.allow_msg_counter or cfg.retention == "interest":
        return _st_reference(self, sub, client, subject, reply, hdr, msg)
    subj = subject.decode("utf-8", "surrogateescape")
    cdef Py_ssize_t rlen = PyBytes_GET_SIZE(reply) if reply is not None else 0
    cdef Py_ssize_t dlen = PyBytes_GET_SIZE(msg)
    cdef Py_ssize_t size = len(subj) + dlen
    n = self._bl_n + self._wb_n
    if n:  # the ingest limits (rillet.jetstream.ingest), as process tests them
        max_n, max_b = self.ingest_limits
        if (max_n and n >= max_n) or (max_b and self._bl_b + self._wb_b + size + rlen > max_b):
            return _st_reference(self, sub, client, subject, reply, hdr, msg)
    mms = cfg.max_msg_size
    if mms > 0 and dlen > mms:
        return _st_reference(self, sub, client, subject, reply, hdr, msg)
    jsa = self.jsa
    store = self.store
    try:  # (reads of the store: whatever they raise, the reference raises again and answers as it does)
        if jsa.limited and jsa.over_limit(cfg.storage, size):
            return _st_reference(self, sub, client, subject, reply, hdr, msg)
        if getattr(type(store), "last_seq", None) is _st_last_seq:  # (the property's read, without its call)
            seq = store._last + 1
        else:
            seq = store.last_seq + 1
    except Exception:
        return _st_reference(self, sub, client, subject, reply, hdr, msg)
    hdr_b = b""
    ts = _st_now_ns()
    entry = _st_Entry(_st_MSG, (subj, hdr_b, msg, ts, 0, "", seq), reply)
    inflight = self._inflight
    inflight.append(entry)
    # (the ingest backlog's count of this message, _bl_n and _bl_b, is not moved: nothing reads it while the
    # entry is applied, and it is back where it was once it is; a failed apply counts it for _msg_done)
    log.index += 1
    try:
        res = log.apply(entry)  # (Stream.apply: the only place a store changes; tests/test_js_log_apply.py)
    except Exception as e:
        self._bl_n += 1
        self._bl_b += size + rlen
        self._msg_done(entry, None, e)
        return None
    # _msg_done's plain case
    inflight.popleft()
    if self._wb_pending:
        self._wb_n += 1
        self._wb_b += size + rlen
    if self._fx:
        self._run_fx()
    seq = res[0]
    cfg = self.cfg
    if self._expire_timer is None and cfg.max_age:
        self._schedule_expiry()
    if cfg.allow_msg_schedules:
        _st_schedules.track_stored(self, subj, hdr_b, seq, res[1])
    if cfg.republish is not None:
        self._republish(subj, hdr_b, msg, seq, res[1])
    consumers = self.consumers
    if consumers:
        for c in list(consumers.values()):
            c.on_stream_msg(seq, subj)
    if cfg.retention == "interest":
        self.jsa.after_stream_msg(self, seq, subj)
    if reply and not cfg.no_ack:
        ap = self._ack_parts
        if ap is None:
            dom = b',"domain":' + _st_json(self.js.domain) if self.js.domain else b""
            pre = b'{"stream":' + _st_json(self.name) + dom + b',"seq":'
            ap = self._ack_parts = (pre, b"}", pre.replace(b"%", b"%%") + b"%d}")
        if cfg.allow_msg_counter:
            from rillet.jetstream.counters import ack_val
            self._ack_payload(reply, b'%s%d,"val":"%s"%s' % (ap[0], seq, ack_val(msg), ap[1]), seq)
            return None
        ack = _st_ack(ap[0], seq)
        held = self._held
        if held is not None and self._hold and not self.js.sync_always:
            held.append((reply, ack, b"", seq))
            return None
        self._ack_payload(reply, ack, seq)
    return None


# ---- a stream's held replies (rillet.jetstream.streamreplies.reference_send_replies) ---------------------------
# The same loop, compiled: each reply's prefix (up to its last dot) is compared with the previous one's in place,
# a new prefix's bytes made only when it differs; the same calls (publish, match, memo, deliver) in the same order.
# A list whose items are not (bytes, bytes, bytes, seq) tuples goes to the reference before anything is sent.

cdef object _sr_reference = None
cdef object _sr_memo_for = None
cdef object _sr_same = None


def send_replies(ic, held, memo=None, fill=True):
    global _sr_reference, _sr_memo_for, _sr_same
    if _sr_reference is None:
        from rillet.jetstream import streamreplies
        _sr_reference = streamreplies.reference_send_replies
        _sr_memo_for = streamreplies.memo_for
        _sr_same = streamreplies.same_for_last_token
    if type(held) is not list:
        return _sr_reference(ic, held, memo, fill)
    for item in <list>held:
        if (type(item) is not tuple or len(<tuple>item) != 4 or type((<tuple>item)[0]) is not bytes
                or type((<tuple>item)[1]) is not bytes or type((<tuple>item)[2]) is not bytes):
            return _sr_reference(ic, held, memo, fill)
    acc = ic.account
    if acc.mappings or acc.gw is not None:
        return _sr_reference(ic, held, memo, fill)
    memo = _sr_memo_for(acc, memo)
    deliver = acc.deliver_result
    cdef Py_ssize_t n = 0, nb = 0, i, ll = -1
    cdef const char* p
    cdef const char* lp = NULL
    cdef bytes reply, payload, hdr
    cdef bytes last_pre = None
    last_r = None
    try:
        for item in <list>held:
            reply = <bytes>(<tuple>item)[0]
            payload = <bytes>(<tuple>item)[1]
            hdr = <bytes>(<tuple>item)[2]
            p = PyBytes_AS_STRING(reply)
            i = PyBytes_GET_SIZE(reply) - 1
            while i >= 0 and p[i] != 46:  # reply.rfind(b".")
                i -= 1
            if PyBytes_GET_SIZE(hdr) or i <= 0:
                if PyBytes_GET_SIZE(hdr):
                    ic.publish(reply, None, hdr + payload, PyBytes_GET_SIZE(hdr))
                else:
                    ic.publish(reply, None, payload)
                continue
            if i == ll and memcmp(p, lp, i) == 0:
                r = last_r
            else:
                pre = PyBytes_FromStringAndSize(p, i)
                r = memo.get(pre, False)
                if r is False:
                    ic.publish(reply, None, payload)
                    if not fill:
                        continue
                    rs = reply.decode("utf-8", "surrogateescape")
                    r = acc.match(rs)
                    memo[pre] = r if _sr_same(acc, rs[:rs.rfind(".")], r) else None
                    continue
                last_pre = pre
                lp = PyBytes_AS_STRING(last_pre)
                ll = i
                last_r = r
            if r is None:
                ic.publish(reply, None, payload)
                continue
            n += 1  # (the counters the publish would move, added once at the end)
            nb += PyBytes_GET_SIZE(payload)
            deliver(ic, r, reply, None, -1, payload)
    finally:
        if n:
            ic.in_msgs += n
            ic.in_bytes += nb
    if n:
        ic.server.schedule_flush()


# ---- a direct get by sequence -----------------------------------------------------------------------------------
# ``direct_on_get`` is DirectApi.on_direct_get (the reference: rillet.jetstream.api.direct.reference_on_direct_get)
# compiled for its short path: ``DIRECT.GET.<stream>`` with a body that is only ``{"seq":N}`` (JSON whitespace
# allowed, at most 19 digits) and no headers. The body is matched in C (what the reference's _SEQ_ONLY pattern
# matches), the message read through the store's load_msg (a damaged record is a missing one, as _or_none), and the
# answer's headers (the stored ones, then Nats-Stream, Nats-Subject, Nats-Sequence, Nats-Time-Stamp: the bytes of
# _direct_reply) written into one new bytes object with the payload; statuses through the router's _status. Anything
# else (a subject with a tail, headers, another body, a message whose fields are not plain str/int/bytes) goes to
# the reference, before anything has been answered.

cdef bint _dg_ready = False
cdef object _dg_reference = None
cdef object _dg_corrupt = None
cdef object _dg_time_stamp = None
cdef dict _dg_secs = None
cdef bytes _dg_hdr_line = None
cdef object _dg_direct_reply = None


cdef int _dg_setup() except -1:
    global _dg_ready, _dg_reference, _dg_corrupt, _dg_time_stamp, _dg_secs, _dg_hdr_line, _dg_direct_reply
    from rillet.jetstream.api import direct as d
    from rillet.jetstream import headers as h
    from rillet.jetstream.store.base import ErrStoreCorrupt
    _dg_reference = d.reference_on_direct_get
    _dg_direct_reply = d.DirectApi._direct_reply
    _dg_corrupt = ErrStoreCorrupt
    _dg_time_stamp = d._time_stamp
    _dg_secs = d._STAMP_SECS
    _dg_hdr_line = h.HDR_LINE
    _dg_ready = True
    return 0


cdef inline bint _js_ws(char c) noexcept:
    return c == 32 or c == 9 or c == 10 or c == 13


cdef int _seq_only(const char* p, Py_ssize_t n, unsigned long long* out) noexcept:
    """1 and the number if the body is ``{"seq":N}`` as the reference's _SEQ_ONLY pattern matches it (JSON
    whitespace around the tokens, N 0 or 1 to 19 digits without a leading zero), else 0."""
    cdef Py_ssize_t i = 0, k
    cdef unsigned long long v = 0
    while i < n and _js_ws(p[i]):
        i += 1
    if i >= n or p[i] != b'{':
        return 0
    i += 1
    while i < n and _js_ws(p[i]):
        i += 1
    if n - i < 5 or memcmp(p + i, b'"seq"', 5) != 0:
        return 0
    i += 5
    while i < n and _js_ws(p[i]):
        i += 1
    if i >= n or p[i] != b':':
        return 0
    i += 1
    while i < n and _js_ws(p[i]):
        i += 1
    k = i
    while i < n and 48 <= p[i] <= 57:
        v = v * 10 + <unsigned long long>(p[i] - 48)
        i += 1
    if i == k or i - k > 19 or (p[k] == b'0' and i - k > 1):
        return 0
    while i < n and _js_ws(p[i]):
        i += 1
    if i >= n or p[i] != b'}':
        return 0
    i += 1
    while i < n and _js_ws(p[i]):
        i += 1
    if i != n:
        return 0
    out[0] = v
    return 1


cdef Py_ssize_t _put_u64(char* p, unsigned long long v) noexcept:
    """``v``'s decimal digits at ``p`` (at most 20); their count."""
    cdef char tmp[20]
    cdef Py_ssize_t n = 0, i
    while True:
        tmp[n] = <char>(48 + v % 10)
        n += 1
        v //= 10
        if v == 0:
            break
    for i in range(n):
        p[i] = tmp[n - 1 - i]
    return n


cdef object _stamp(object ts):
    """``_time_stamp(ts)``: the kept text of a whole second with the fraction written here; the reference's function
    for a second it has not kept (it keeps it) and for anything not a positive int64."""
    cdef long long t
    if type(ts) is not int:
        return _dg_time_stamp(ts)
    try:
        t = ts
    except OverflowError:
        return _dg_time_stamp(ts)
    if t < 1000000000:
        return _dg_time_stamp(ts)
    cdef long long secs = t // 1000000000
    cdef long long frac = t % 1000000000
    p = _dg_secs.get(secs)
    if p is None or type(p) is not bytes:
        return _dg_time_stamp(ts)
    if not frac:
        return <bytes>p + b"Z"
    cdef char buf[11]
    cdef int nd = 9
    while frac % 10 == 0:
        frac //= 10
        nd -= 1
    buf[0] = b'.'
    cdef int i
    for i in range(nd, 0, -1):
        buf[i] = <char>(48 + frac % 10)
        frac //= 10
    buf[nd + 1] = b'Z'
    return <bytes>p + PyBytes_FromStringAndSize(buf, nd + 2)


def direct_on_get(self, stream, sub, subject, reply, hdr, msg):
    if not _dg_ready:
        _dg_setup()
    if (hdr >= 0 or not reply or sub is None or type(msg) is not bytes or type(reply) is not bytes):
        return _dg_reference(self, stream, sub, subject, reply, hdr, msg)
    ss = sub.subject
    if type(ss) is not str or not ss or (<str>ss).endswith(">"):
        return _dg_reference(self, stream, sub, subject, reply, hdr, msg)
    cdef unsigned long long v
    st = self.jsa.streams.get(stream.name)
    if st is None or not _seq_only(PyBytes_AS_STRING(msg), PyBytes_GET_SIZE(msg), &v):
        return _dg_reference(self, stream, sub, subject, reply, hdr, msg)
    cfg = st.cfg
    if not (cfg.allow_direct or cfg.mirror_direct):
        return None  # no responder (as the reference)
    if v == 0:
        self._status(reply, 408, "Empty Request")
        return None
    try:
        m = st.store.load_msg(v)
    except _dg_corrupt:
        m = None
    if m is None:
        self._status(reply, 404, "Message Not Found")
        return None
    mh = m.hdr
    md = m.data
    ms = m.subject
    mq = m.seq
    name = st.name
    if (type(mh) is not bytes or type(md) is not bytes or type(ms) is not str or type(mq) is not int
            or type(name) is not str or mq < 0 or mq > 0xFFFFFFFFFFFFFFFF):
        _dg_direct_reply(self, st, reply, m)
        return None
    stamp = _stamp(m.ts)
    nb = (<str>name).encode("utf-8", "surrogateescape")
    sb = (<str>ms).encode("utf-8", "surrogateescape")
    cdef Py_ssize_t hl = PyBytes_GET_SIZE(mh)
    cdef const char* hp
    if hl > 2:  # (the stored headers without their closing CRLF; else the status line alone)
        hp = PyBytes_AS_STRING(mh)
        hl -= 2
    else:
        hp = PyBytes_AS_STRING(_dg_hdr_line)
        hl = PyBytes_GET_SIZE(_dg_hdr_line)
    cdef Py_ssize_t nl = PyBytes_GET_SIZE(nb), sl = PyBytes_GET_SIZE(sb), tl = PyBytes_GET_SIZE(stamp)
    cdef Py_ssize_t dl = PyBytes_GET_SIZE(md)
    # "Nats-Stream: " 13, "\r\nNats-Subject: " 16, "\r\nNats-Sequence: " 17, "\r\nNats-Time-Stamp: " 19, "\r\n\r\n" 4
    cdef Py_ssize_t cap = hl + 13 + nl + 16 + sl + 17 + 20 + 19 + tl + 4
    cdef char tmp[20]
    cdef Py_ssize_t ql = _put_u64(tmp, <unsigned long long>mq)
    cdef Py_ssize_t total = cap - 20 + ql
    out = PyBytes_FromStringAndSize(NULL, total + dl)
    cdef char* o = PyBytes_AS_STRING(out)
    memcpy(o, hp, hl)
    o += hl
    memcpy(o, b"Nats-Stream: ", 13)
    o += 13
    memcpy(o, PyBytes_AS_STRING(nb), nl)
    o += nl
    memcpy(o, b"\r\nNats-Subject: ", 16)
    o += 16
    memcpy(o, PyBytes_AS_STRING(sb), sl)
    o += sl
    memcpy(o, b"\r\nNats-Sequence: ", 17)
    o += 17
    memcpy(o, tmp, ql)
    o += ql
    memcpy(o, b"\r\nNats-Time-Stamp: ", 19)
    o += 19
    memcpy(o, PyBytes_AS_STRING(stamp), tl)
    o += tl
    memcpy(o, b"\r\n\r\n", 4)
    o += 4
    memcpy(o, PyBytes_AS_STRING(md), dl)
    self.jsa.ic.publish(reply, None, out, total)
    return None
