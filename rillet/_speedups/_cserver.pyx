# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled twin of rillet.cluster.protocol: the route/gateway/leaf parser and the message frame builders
(see rillet.lane).

``ServerParser`` is a subclass of the pure-Python parser whose ``_parse`` walks the buffer in C and handles
the message operations itself -- ``RMSG``, ``HMSG`` and ``LMSG`` in upper case, single spaces between the
arguments, every reply/queue form, a CRLF after the control line and after the payload -- the interest
operations ``RS+``, ``RS-``, ``LS+``, ``LS-`` in the same form, and exact ``PING``/``PONG`` lines. Anything
else (``SUB``/``UNSUB``/``A+``/``A-``, the handshake, other spellings, any error, an incomplete operation) goes, one operation at a time, to the inherited pure-Python ``_parse_general``, which stays the
reference for every error text, limit and partial-frame rule.

The frame builders produce the same bytes as the pure ones (for arguments other than ``bytes`` and
tuple/list queues they call the pure ones).
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.string cimport memcpy

from rillet._speedups._ctext cimport _control_line, _ping_pong, _size, _slice

from rillet.cluster import protocol as _pure
from rillet.cluster.protocol import *  # noqa: F401,F403  (the rest of the module, so that this one stands in)
from rillet.cluster.protocol import __all__  # noqa: F401

cdef enum:
    MAXTOK = 24

cdef object _pure_parse = _pure.ServerParser._parse
cdef object _parse_general = _pure.ServerParser._parse_general
cdef object _LEAF = _pure.LEAF
cdef object _ROUTE = _pure.ROUTE
cdef object _GATEWAY = _pure.GATEWAY
cdef tuple _NO_QUEUES = _pure.NO_QUEUES

# operation kinds on the fast path
cdef enum:
    OP_RMSG = 1
    OP_HMSG = 2
    OP_LMSG = 3


class ServerParser(_pure.ServerParser):
    __slots__ = ()

    def _parse(self, data):
        if type(data) is not bytes or self.awaiting_connect:
            return _pure_parse(self, data)
        cdef const char* buf = PyBytes_AS_STRING(data)
        cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
        cdef Py_ssize_t pos = 0, newpos, nl, arg, stop, size, hdr, j
        cdef Py_ssize_t ts[MAXTOK]
        cdef Py_ssize_t te[MAXTOK]
        cdef int na, base, t, op, first, qa, qb
        cdef const char* p
        cdef char c
        cdef bint leaf = self.kind is _LEAF or self.kind == _LEAF
        cdef bint route = self.kind is _ROUTE or self.kind == _ROUTE
        cdef Py_ssize_t limit = self._limit
        cdef Py_ssize_t max_payload
        cdef bint has_max
        mp = self.max_payload
        has_max = mp is not None
        max_payload = min(mp, 1 << 62) if has_max else 0
        pinned = self.account
        handler = self.handler
        cdef bint gateway = self.kind is _GATEWAY or self.kind == _GATEWAY
        cdef bint lnocu = bool(self.lnocu)
        cdef bint plus, done, has_origin
        rmsg = hmsg = lmsg = None
        rs_sub = rs_unsub = ls_sub = ls_unsub = leaf_sub = leaf_unsub = None
        while pos < n:
            p = buf + pos
            c = p[0]
            op = 0
            if c == 80:  # P
                if _ping_pong(p, n - pos, handler):
                    pos += 6
                    continue
            elif n - pos > 5 and p[1] == 77 and p[2] == 83 and p[3] == 71 and p[4] == 32:  # ?MSG
                if c == 82:
                    op = OP_RMSG
                elif c == 72:
                    op = OP_HMSG
                elif c == 76 and not gateway:
                    op = OP_LMSG
            elif n - pos > 4 and p[1] == 83 and (p[2] == 43 or p[2] == 45) and p[3] == 32 and \
                    (c == 82 or (c == 76 and not gateway)):  # RS+ RS- LS+ LS-: interest
                arg = pos + 4
                na = _control_line(buf, arg, n, limit, &nl, ts, te, MAXTOK)
                if na > 0:
                    plus = p[2] == 43
                    done = False
                    if leaf:  # subject [queue weight] / subject [queue]
                        if plus:
                            if na == 1 or na == 3:
                                if leaf_sub is None:
                                    leaf_sub = handler.proto_leaf_sub
                                if na == 1:
                                    leaf_sub(_slice(buf, ts[0], te[0]), None, 0)
                                else:
                                    leaf_sub(_slice(buf, ts[0], te[0]), _slice(buf, ts[1], te[1]),
                                             _size(buf + ts[2], te[2] - ts[2]))
                                done = True
                        elif na == 1 or na == 2:
                            if leaf_unsub is None:
                                leaf_unsub = handler.proto_leaf_unsub
                            leaf_unsub(_slice(buf, ts[0], te[0]),
                                       _slice(buf, ts[1], te[1]) if na == 2 else None)
                            done = True
                    elif gateway:  # account subject [queue weight] / account subject [queue]
                        if plus:
                            if na == 2 or na == 4:
                                if rs_sub is None:
                                    rs_sub = handler.proto_rs_sub
                                if na == 2:
                                    rs_sub(_slice(buf, ts[0], te[0]), _slice(buf, ts[1], te[1]), None, 0)
                                else:
                                    rs_sub(_slice(buf, ts[0], te[0]), _slice(buf, ts[1], te[1]),
                                           _slice(buf, ts[2], te[2]), _size(buf + ts[3], te[3] - ts[3]))
                                done = True
                        elif na == 2 or na == 3:
                            if rs_unsub is None:
                                rs_unsub = handler.proto_rs_unsub
                            rs_unsub(_slice(buf, ts[0], te[0]), _slice(buf, ts[1], te[1]),
                                     _slice(buf, ts[2], te[2]) if na == 3 else None)
                            done = True
                    else:  # a route: [origin] [account] subject [queue [weight]]
                        has_origin = c == 76 and (plus or lnocu)
                        base = (1 if has_origin else 0) + (0 if pinned is not None else 1)
                        if na == base + 1 or na == base + (3 if plus else 2):
                            account = pinned if pinned is not None else _slice(buf, ts[base - 1], te[base - 1])
                            subject = _slice(buf, ts[base], te[base])
                            queue = _slice(buf, ts[base + 1], te[base + 1]) if na > base + 1 else None
                            if plus:
                                weight = _size(buf + ts[base + 2], te[base + 2] - ts[base + 2]) \
                                    if na > base + 1 else 0
                                if c == 76:
                                    if ls_sub is None:
                                        ls_sub = handler.proto_ls_sub
                                    ls_sub(_slice(buf, ts[0], te[0]), account, subject, queue, weight)
                                else:
                                    if rs_sub is None:
                                        rs_sub = handler.proto_rs_sub
                                    rs_sub(account, subject, queue, weight)
                            elif c == 76:
                                if ls_unsub is None:
                                    ls_unsub = handler.proto_ls_unsub
                                ls_unsub(_slice(buf, ts[0], te[0]) if has_origin else None, account, subject,
                                         queue)
                            else:
                                if rs_unsub is None:
                                    rs_unsub = handler.proto_rs_unsub
                                rs_unsub(account, subject, queue)
                            done = True
                    if done:
                        pos = nl + 1
                        continue
            if op:
                arg = pos + 5
                na = _control_line(buf, arg, n, limit, &nl, ts, te, MAXTOK)
                if na > 0:
                    # leading fields: leaf: subject; route/gateway: account subject (the account
                    # not on the wire of a pinned route); route LMSG: origin account subject
                    if leaf:
                        base = 1
                        t = 2 if op == OP_HMSG else 1
                    elif op == OP_LMSG:
                        base = 3 if pinned is None else 2
                        t = 2
                    else:
                        base = 2 if pinned is None else 1
                        t = 2 if op == OP_HMSG else 1
                    # na: the tokens on the wire; the reply form sits after `base` of them
                    if na >= base + t:
                        size = _size(buf + ts[na - 1], te[na - 1] - ts[na - 1])
                        hdr = _size(buf + ts[na - 2], te[na - 2] - ts[na - 2]) if t == 2 else 0
                        stop = nl + 1 + size
                        first = -1  # token index of the first queue (none when -1)
                        qa = 0
                        rep = -1  # token index of the reply
                        if na == base + t:
                            pass
                        elif na == base + t + 1:
                            rep = base
                        elif te[base] - ts[base] == 1 and buf[ts[base]] == 43:  # '+'
                            rep = base + 1
                            first = base + 2
                        elif te[base] - ts[base] == 1 and buf[ts[base]] == 124:  # '|'
                            first = base + 1
                        else:
                            size = -1  # a bad reply indicator: the reference says so
                        if size >= 0 and hdr >= 0 and hdr <= size and \
                                (not has_max or size <= max_payload) and stop + 2 <= n and \
                                buf[stop] == 13 and buf[stop + 1] == 10:
                            reply = _slice(buf, ts[rep], te[rep]) if rep >= 0 else None
                            if first >= 0 and first < na - t:
                                queues = tuple([_slice(buf, ts[j], te[j]) for j in range(first, na - t)])
                            else:
                                queues = _NO_QUEUES
                            body = _slice(buf, nl + 1, stop)
                            if leaf:
                                if op == OP_HMSG:
                                    if hmsg is None:
                                        hmsg = handler.proto_leaf_hmsg
                                    hmsg(_slice(buf, ts[0], te[0]), reply, queues, hdr, body)
                                else:
                                    if rmsg is None:
                                        rmsg = handler.proto_leaf_msg
                                    rmsg(_slice(buf, ts[0], te[0]), reply, queues, body)
                            elif op == OP_LMSG:
                                if lmsg is None:
                                    lmsg = handler.proto_lmsg
                                if base == 3:
                                    lmsg(_slice(buf, ts[0], te[0]), _slice(buf, ts[1], te[1]),
                                         _slice(buf, ts[2], te[2]), reply, queues, hdr, body)
                                else:
                                    lmsg(_slice(buf, ts[0], te[0]), pinned, _slice(buf, ts[1], te[1]),
                                         reply, queues, hdr, body)
                            elif op == OP_HMSG:
                                if hmsg is None:
                                    hmsg = handler.proto_hmsg
                                if base == 2:
                                    hmsg(_slice(buf, ts[0], te[0]), _slice(buf, ts[1], te[1]), reply,
                                         queues, hdr, body)
                                else:
                                    hmsg(pinned, _slice(buf, ts[0], te[0]), reply, queues, hdr, body)
                            else:
                                if rmsg is None:
                                    rmsg = handler.proto_rmsg
                                if base == 2:
                                    rmsg(_slice(buf, ts[0], te[0]), _slice(buf, ts[1], te[1]), reply,
                                         queues, body)
                                else:
                                    rmsg(pinned, _slice(buf, ts[0], te[0]), reply, queues, body)
                            pos = stop + 2
                            continue
            # the reference parser, for exactly one operation
            newpos = _parse_general(self, data, pos, True)
            if newpos == pos or self.halt:
                return newpos
            if self.awaiting_connect:
                return _parse_general(self, data, newpos, False)
            pos = newpos
            # a handler may have changed the settings (CONNECT, an INFO pinning the account)
            limit = self._limit
            mp = self.max_payload
            has_max = mp is not None
            max_payload = min(mp, 1 << 62) if has_max else 0
            pinned = self.account
            lnocu = bool(self.lnocu)
            rmsg = hmsg = lmsg = None
            rs_sub = rs_unsub = ls_sub = ls_unsub = leaf_sub = leaf_unsub = None
        return pos


# ==== frame builders ==========================================================================================

cdef inline Py_ssize_t _digits(Py_ssize_t v) noexcept:
    cdef Py_ssize_t d = 1
    while v >= 10:
        v //= 10
        d += 1
    return d


cdef inline char* _put(char* w, bytes b) noexcept:
    cdef Py_ssize_t k = PyBytes_GET_SIZE(b)
    memcpy(w, PyBytes_AS_STRING(b), k)
    return w + k


cdef inline char* _put_lit(char* w, const char* s, Py_ssize_t k) noexcept:
    memcpy(w, s, k)
    return w + k


cdef inline char* _put_int(char* w, Py_ssize_t v, Py_ssize_t d) noexcept:
    cdef Py_ssize_t i = d
    while i > 0:
        i -= 1
        w[i] = <char>(48 + v % 10)
        v //= 10
    return w + d


cdef inline bint _plain(obj) noexcept:
    return obj is None or type(obj) is bytes


cdef inline bint _plain_queues(queues):
    if type(queues) is tuple or type(queues) is list:
        for x in queues:
            if type(x) is not bytes:
                return False
        return True
    return False


cdef inline bint _plain_int(v) noexcept:
    return type(v) is int and 0 <= v <= 999999999999999


cdef bytes _head(const char* op, bytes origin, bytes account, bytes subject, reply, queues, long long hdr,
                 long long size):
    """``<op> [<origin> ][<account> ]<subject> [reply forms ]<hdr >?<size>\\r\\n`` (hdr < 0: none)."""
    cdef Py_ssize_t total = 5 + PyBytes_GET_SIZE(subject) + 1 + _digits(size) + 2
    cdef bint has_reply = reply is not None and PyBytes_GET_SIZE(<bytes>reply) > 0
    cdef Py_ssize_t nq = len(queues) if queues else 0
    cdef Py_ssize_t i
    cdef char* w
    cdef bytes out
    if origin is not None:
        total += PyBytes_GET_SIZE(origin) + 1
    if account is not None:
        total += PyBytes_GET_SIZE(account) + 1
    if hdr >= 0:
        total += _digits(hdr) + 1
    if nq:
        total += 2  # "+ " or "| "
        for i in range(nq):
            total += PyBytes_GET_SIZE(<bytes>queues[i]) + 1
    if has_reply:
        total += PyBytes_GET_SIZE(<bytes>reply) + 1
    out = PyBytes_FromStringAndSize(NULL, total)
    w = PyBytes_AS_STRING(out)
    w = _put_lit(w, op, 5)
    if origin is not None:
        w = _put(w, origin)
        w[0] = 32
        w += 1
    if account is not None:
        w = _put(w, account)
        w[0] = 32
        w += 1
    w = _put(w, subject)
    w[0] = 32
    w += 1
    if nq:
        w[0] = 43 if has_reply else 124
        w[1] = 32
        w += 2
    if has_reply:
        w = _put(w, <bytes>reply)
        w[0] = 32
        w += 1
    for i in range(nq):
        w = _put(w, <bytes>queues[i])
        w[0] = 32
        w += 1
    if hdr >= 0:
        w = _put_int(w, hdr, _digits(hdr))
        w[0] = 32
        w += 1
    w = _put_int(w, size, _digits(size))
    w[0] = 13
    w[1] = 10
    return out


def rmsg_head(account, subject, reply, queues, size):
    """The control line of ``RMSG [<account>] <subject> [+ <reply> <q>... | '|' <q>... | <reply>] <size>``."""
    if _plain(account) and type(subject) is bytes and _plain(reply) and _plain_int(size) and \
            (not queues or _plain_queues(queues)):
        return _head(b"RMSG ", None, account, subject, reply, queues, -1, size)
    return _pure.rmsg_head(account, subject, reply, queues, size)


def hmsg_head(account, subject, reply, queues, hdr_len, size):
    """``HMSG [<account>] <subject> [reply forms] <hdr_len> <total_size>`` (route or gateway)."""
    if _plain(account) and type(subject) is bytes and _plain(reply) and _plain_int(size) and \
            _plain_int(hdr_len) and (not queues or _plain_queues(queues)):
        return _head(b"HMSG ", None, account, subject, reply, queues, hdr_len, size)
    return _pure.hmsg_head(account, subject, reply, queues, hdr_len, size)


def lmsg_head(origin, account, subject, reply, queues, hdr_len, size):
    """Route ``LMSG <origin> [<account>] <subject> [reply forms] <hdr_len> <size>`` (hdr_len 0 if none)."""
    if type(origin) is bytes and _plain(account) and type(subject) is bytes and _plain(reply) and \
            _plain_int(size) and type(hdr_len) is int and hdr_len <= 999999999999999 and \
            (not queues or _plain_queues(queues)):
        return _head(b"LMSG ", origin, account, subject, reply, queues, hdr_len if hdr_len > 0 else 0, size)
    return _pure.lmsg_head(origin, account, subject, reply, queues, hdr_len, size)


def leaf_msg_head(subject, reply, queues, size):
    """Leaf ``LMSG <subject> [reply forms] <size>``."""
    if type(subject) is bytes and _plain(reply) and _plain_int(size) and (not queues or _plain_queues(queues)):
        return _head(b"LMSG ", None, None, subject, reply, queues, -1, size)
    return _pure.leaf_msg_head(subject, reply, queues, size)


def leaf_hmsg_head(subject, reply, queues, hdr_len, size):
    """Leaf ``HMSG <subject> [reply forms] <hdr_len> <size>``."""
    if type(subject) is bytes and _plain(reply) and _plain_int(size) and _plain_int(hdr_len) and \
            (not queues or _plain_queues(queues)):
        return _head(b"HMSG ", None, None, subject, reply, queues, hdr_len, size)
    return _pure.leaf_hmsg_head(subject, reply, queues, hdr_len, size)


def frame(head, body):
    """A whole message frame: control line, payload (headers included), CRLF."""
    cdef Py_ssize_t a, b
    cdef bytes out
    cdef char* w
    if type(head) is bytes and type(body) is bytes:
        a = PyBytes_GET_SIZE(head)
        b = PyBytes_GET_SIZE(body)
        out = PyBytes_FromStringAndSize(NULL, a + b + 2)
        w = PyBytes_AS_STRING(out)
        memcpy(w, PyBytes_AS_STRING(head), a)
        memcpy(w + a, PyBytes_AS_STRING(body), b)
        w[a + b] = 13
        w[a + b + 1] = 10
        return out
    return _pure.frame(head, body)
