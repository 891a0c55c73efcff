# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled twin of rillet.jetstream.acksubject.ack_numbers (see rillet.lane).

The subject's dots are counted and the three numbers read in C where each is 1 to 18 ASCII digits; any other
token (a sign, spaces, underscores, more digits, nothing) is given to Python's ``int`` as the reference does,
so both accept and refuse the same subjects and give the same numbers.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE

from rillet.jetstream import acksubject as _pure

cdef object _pure_ack_numbers = _pure.ack_numbers


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
