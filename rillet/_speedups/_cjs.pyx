# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled twins of rillet.jetstream.acksubject's ack_numbers and ack_reply (see rillet.lane).

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
