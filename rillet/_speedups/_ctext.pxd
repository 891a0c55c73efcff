# cython: language_level=3
"""C helpers the compiled parsers share (rillet._speedups._cparser, _cserver): ``cdef inline`` functions,
compiled into each module that cimports them (nothing of this file is imported at run time)."""
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.string cimport memchr


cdef inline Py_ssize_t _size(const char* p, Py_ssize_t n) noexcept:
    """1 to 9 ASCII digits -> their value; anything else -> -1 (the reference's _parse_size)."""
    cdef Py_ssize_t v = 0
    cdef Py_ssize_t i
    cdef char c
    if n < 1 or n > 9:
        return -1
    for i in range(n):
        c = p[i]
        if c < 48 or c > 57:
            return -1
        v = v * 10 + (c - 48)
    return v


cdef inline int _ping_pong(const char* p, Py_ssize_t avail, object handler) except -1:
    """``PING\\r\\n`` or ``PONG\\r\\n`` at ``p`` (its ``P`` already seen; ``avail`` bytes there): the handler
    told (``proto_ping``/``proto_pong``) and 1; else 0 (the caller reads the operation another way)."""
    if avail < 6 or p[4] != 13 or p[5] != 10 or p[2] != 78 or p[3] != 71:
        return 0
    if p[1] == 73:
        handler.proto_ping()
    elif p[1] == 79:
        handler.proto_pong()
    else:
        return 0
    return 1


cdef inline int _tokens(const char* buf, Py_ssize_t s, Py_ssize_t e, Py_ssize_t* ts, Py_ssize_t* te,
                        int maxtok) noexcept:
    """Split buf[s:e] at single spaces into at most ``maxtok`` non-empty tokens (their bounds into ts/te);
    -1 when the line is not in that canonical form (an empty token, a tab or CR, too many tokens): the
    reference parser then takes it."""
    cdef int k = 0
    cdef Py_ssize_t i = s
    cdef Py_ssize_t start = s
    cdef char c
    while i < e:
        c = buf[i]
        if c == 32:
            if i == start or k == maxtok:
                return -1
            ts[k] = start
            te[k] = i
            k += 1
            start = i + 1
        elif c == 9 or c == 13:
            return -1
        i += 1
    if start >= e or k == maxtok:
        return -1
    ts[k] = start
    te[k] = e
    return k + 1


cdef inline int _control_line(const char* buf, Py_ssize_t arg, Py_ssize_t n, Py_ssize_t limit, Py_ssize_t* nl,
                              Py_ssize_t* ts, Py_ssize_t* te, int maxtok) noexcept:
    """The arguments of a control line that starts at buf[arg] (after the operation's name): their count,
    their bounds in ts/te and the position of the line's LF in nl[0]. -1 (the reference parser then takes
    the operation) when the LF has not arrived yet, the line does not end in CRLF, is empty or longer than
    ``limit``, or its arguments are not in the canonical form (see ``_tokens``)."""
    cdef const char* q = <const char*>memchr(buf + arg, 10, n - arg)
    cdef Py_ssize_t e
    if q == NULL:
        return -1
    e = q - buf
    nl[0] = e
    if e - 1 <= arg or buf[e - 1] != 13 or e - 1 - arg > limit:
        return -1
    return _tokens(buf, arg, e - 1, ts, te, maxtok)


cdef inline bytes _slice(const char* buf, Py_ssize_t s, Py_ssize_t e):
    return PyBytes_FromStringAndSize(buf + s, e - s)
