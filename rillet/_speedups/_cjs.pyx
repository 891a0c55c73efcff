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
from libc.string cimport memcpy

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
