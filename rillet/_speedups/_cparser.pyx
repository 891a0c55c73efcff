# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled twin of rillet.protocol.parser.ClientParser (see rillet.lane).

A subclass of the pure-Python parser: ``_parse`` walks the buffer in C and handles the well-formed common
operations itself -- ``PUB``, ``HPUB``, ``SUB``, ``UNSUB`` in upper case with single spaces between their
arguments and a CRLF after the control line, and exact ``PING``/``PONG`` lines. Whatever else comes (other
operations, other spellings, errors of any kind, an incomplete operation, the CONNECT handshake) is handed,
one operation at a time, to the inherited pure-Python ``_parse_general``: the reference decides every error
text, limit and partial-frame rule, and the fast path only takes what the reference would accept, emitting
the same calls with the same arguments.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE

from rillet._speedups._ctext cimport _control_line, _ping_pong, _size, _slice

from rillet.protocol import parser as _pure

cdef enum:
    MAXTOK = 4

cdef object _PureClientParser = _pure.ClientParser
cdef object _pure_parse = _pure.ClientParser._parse
cdef object _parse_general = _pure.ClientParser._parse_general


class ClientParser(_PureClientParser):
    __slots__ = ()

    def _parse(self, data):
        if type(data) is not bytes or self.awaiting_connect:
            return _pure_parse(self, data)
        cdef const char* buf = PyBytes_AS_STRING(data)
        cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
        cdef Py_ssize_t pos = 0, newpos, nl, arg, stop, size, hdr
        cdef Py_ssize_t ts[MAXTOK]
        cdef Py_ssize_t te[MAXTOK]
        cdef int na
        cdef const char* p
        cdef char c
        cdef Py_ssize_t max_cl = self.max_control_line
        cdef Py_ssize_t max_payload = min(self.max_payload, 1 << 62)
        cdef bint headers = bool(self.headers)
        handler = self.handler
        pub = hpub = sub = unsub = None
        reply = None
        while pos < n:
            p = buf + pos
            c = p[0]
            if c == 80:  # P
                if _ping_pong(p, n - pos, handler):
                    pos += 6
                    continue
                if n - pos > 4 and p[1] == 85 and p[2] == 66 and p[3] == 32:  # PUB
                    arg = pos + 4
                    na = _control_line(buf, arg, n, max_cl, &nl, ts, te, MAXTOK)
                    if na == 2 or na == 3:
                        size = _size(buf + ts[na - 1], te[na - 1] - ts[na - 1])
                        stop = nl + 1 + size
                        if size >= 0 and size <= max_payload and stop + 2 <= n and buf[stop] == 13 \
                                and buf[stop + 1] == 10:
                            if pub is None:
                                pub = handler.proto_pub
                            pub(_slice(buf, ts[0], te[0]),
                                _slice(buf, ts[1], te[1]) if na == 3 else None,
                                _slice(buf, nl + 1, stop))
                            pos = stop + 2
                            continue
            elif c == 72:  # H
                if headers and n - pos > 5 and p[1] == 80 and p[2] == 85 and p[3] == 66 and p[4] == 32:  # HPUB
                    arg = pos + 5
                    na = _control_line(buf, arg, n, max_cl, &nl, ts, te, MAXTOK)
                    if na == 3 or na == 4:
                        size = _size(buf + ts[na - 1], te[na - 1] - ts[na - 1])
                        hdr = _size(buf + ts[na - 2], te[na - 2] - ts[na - 2])
                        stop = nl + 1 + size
                        if hdr >= 0 and size >= hdr and size <= max_payload and stop + 2 <= n \
                                and buf[stop] == 13 and buf[stop + 1] == 10:
                            if hpub is None:
                                hpub = handler.proto_hpub
                            hpub(_slice(buf, ts[0], te[0]),
                                 _slice(buf, ts[1], te[1]) if na == 4 else None,
                                 hdr, _slice(buf, nl + 1, stop))
                            pos = stop + 2
                            continue
            elif c == 83:  # S
                if n - pos > 4 and p[1] == 85 and p[2] == 66 and p[3] == 32:  # SUB
                    arg = pos + 4
                    na = _control_line(buf, arg, n, max_cl, &nl, ts, te, MAXTOK)
                    if na == 2 or na == 3:
                        if sub is None:
                            sub = handler.proto_sub
                        sub(_slice(buf, ts[0], te[0]),
                            _slice(buf, ts[1], te[1]) if na == 3 else None,
                            _slice(buf, ts[na - 1], te[na - 1]))
                        pos = nl + 1
                        continue
            elif c == 85:  # U
                if n - pos > 6 and p[1] == 78 and p[2] == 83 and p[3] == 85 and p[4] == 66 and p[5] == 32:
                    arg = pos + 6
                    na = _control_line(buf, arg, n, max_cl, &nl, ts, te, MAXTOK)
                    if na == 1 or na == 2:
                        size = _size(buf + ts[1], te[1] - ts[1]) if na == 2 else 0
                        if unsub is None:
                            unsub = handler.proto_unsub
                        unsub(_slice(buf, ts[0], te[0]), size if size > 0 else 0)
                        pos = nl + 1
                        continue
            # the reference parser, for exactly one operation
            newpos = _parse_general(self, data, pos, True)
            if newpos == pos:
                return pos  # incomplete: wait for more data
            if self.awaiting_connect:
                return newpos  # a CONNECT that waits (auth callout): the rest waits for resume()
            pos = newpos
            # a handler may have changed the limits (CONNECT: headers, the account's max payload)
            max_cl = self.max_control_line
            max_payload = min(self.max_payload, 1 << 62)
            headers = bool(self.headers)
        return pos


# ---- returning freed heap memory to the system (issue 20: idle RSS) --------------------------------------

cdef extern from *:
    """
    #include <stdlib.h>
    #if defined(__GLIBC__)
    #include <malloc.h>
    static int rillet_trim_heap(void) { return malloc_trim(0); }
    #else
    static int rillet_trim_heap(void) { return -1; }
    #endif
    """
    int rillet_trim_heap() nogil


def trim_heap():
    """Give the C heap's free pages back to the operating system (glibc ``malloc_trim(0)``): run once the server
    has started (rillet.server.gcpolicy), it returns what start-up left free inside the heap (~1.5 MB: the
    configuration's and the modules' loading buffers). 1 when memory was released, 0 when none, -1 where the C
    library has no such call."""
    return rillet_trim_heap()
