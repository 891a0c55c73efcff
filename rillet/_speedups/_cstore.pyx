# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled twin of the file store's append (rillet.jetstream.store.filestore.FileStore; see rillet.lane).

A subclass of the pure-Python FileStore whose ``_write`` (one message record: encode, CRC-32, write, index)
does the common case in C: an uncompressed record of a ``str`` subject and ``bytes`` header and data, in a
store with no state-log records waiting. The record is laid out as the pure code lays it out
(``_fsformat._REC``: little-endian header, subject, header bytes, data, CRC-32 of all before it), written with
one pwritev(2) of the same pieces at the same offset, and indexed with the same column appends (the common
slot: the next in the active block, a subject the block already has, no TTL column, no per-subject position
lists); anything else (compression, a pending state log, a first record, a new subject, a TTL, a sequence
gap, values the pure code's struct would refuse) goes to the inherited pure-Python methods, which stay the
reference. A failed write goes through the same ``_write_failed`` and ``_write_rest`` as the pure code's, so
a full disk gives the same ErrStoreFull and the same cut-back. A replaced ``filestore._write_all`` (how tests
fake a failing disk) is honoured: the whole record then takes the pure path.
"""
from cpython.array cimport array, resize_smart
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from libc.string cimport memcpy
from cpython.exc cimport PyErr_SetFromErrno
from libc.errno cimport errno
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from cpython.object cimport Py_SIZE
from cpython.ref cimport PyObject
from cpython.dict cimport PyDict_GetItemWithError
from cpython.mem cimport PyMem_Calloc, PyMem_Free, PyMem_Malloc
from posix.types cimport off_t
from posix.uio cimport iovec, pwritev
from posix.unistd cimport pread

import time as _time

from rillet.jetstream.store import filestore as _fsmod
from rillet.jetstream.store import _fsformat

cdef extern from "string.h":
    # (a header search without ``in``: bytes.__contains__ first tries its argument as an integer, whose failure
    # formats an error message each time, ~0.1 us)
    const void* memmem(const void* haystack, size_t hlen, const void* needle, size_t nlen) nogil

cdef extern from "zlib.h":
    unsigned long crc32(unsigned long crc, const unsigned char* buf, unsigned int len) nogil

cdef object _PureFileStore = _fsmod.FileStore
cdef object _pure_write = _fsmod.FileStore._write
cdef object _pure_index = _fsmod.FileStore._index_record
cdef object _pure_append = _fsmod.FileStore._append
cdef object _pure_store_msg = _fsmod.FileStore.store_msg
cdef object _pure_totals = _fsmod.index_totals
cdef object _pure_read = _fsmod.FileStore._read_msg
cdef object _pure_pread = _fsmod.FileStore._pread
cdef object _pure_load_msg = _fsmod.FileStore.load_msg
from bisect import bisect_right as _bisect_right
cdef object _os = _fsmod.os
cdef object _os_pread = _fsmod.os.pread
cdef long long _READ_AHEAD = _fsmod._READ_AHEAD
cdef object _StoredMsg = _fsmod.StoredMsg
cdef unsigned long _CRC_RESIDUE = _fsmod._CRC_RESIDUE
cdef uint8_t _F_COMPRESSED = _fsformat.F_COMPRESSED
cdef object _ErrStoreClosed = _fsmod.ErrStoreClosed
cdef object _time_ns = _time.time_ns
cdef object _pure_write_all = _fsmod._write_all
cdef object _write_rest = _fsmod._write_rest
cdef object _fsdict = _fsmod.__dict__
cdef Py_ssize_t _MAX_GAP = _fsmod._MAX_GAP
cdef Py_ssize_t _WB_MAX = _fsmod._WB_MAX
cdef Py_ssize_t _MAGIC_LEN = len(_fsformat.BLOCK_MAGIC)
cdef Py_ssize_t _OVERHEAD = _fsformat._OVERHEAD
cdef long long _MAX_REC = _fsformat._MAX_REC
cdef uint8_t _T_MSG = _fsformat.T_MSG
cdef object _NS = _fsmod._NS
cdef object _BlockIndex = _fsmod.BlockIndex
cdef object _Block = _fsmod.Block

# the record header must be what _fsformat's struct packs; a change there without this twin fails at import
assert _fsformat._REC.format == "<BBHIQqqII" and _fsformat._REC.size == 40 and _OVERHEAD == 44


cdef inline void _le16(unsigned char* p, uint16_t v) noexcept:
    p[0] = v & 0xFF
    p[1] = (v >> 8) & 0xFF


cdef inline void _le32(unsigned char* p, uint32_t v) noexcept:
    cdef int i
    for i in range(4):
        p[i] = (v >> (8 * i)) & 0xFF


cdef inline void _le64(unsigned char* p, uint64_t v) noexcept:
    cdef int i
    for i in range(8):
        p[i] = (v >> (8 * i)) & 0xFF




cdef inline void _head(unsigned char* head, Py_ssize_t slen, long long total, uint64_t cseq, int64_t cts,
                       Py_ssize_t hlen, Py_ssize_t dlen) noexcept:
    """A message record's 40-byte header (``_fsformat._REC``: type, flags 0, lengths, seq, ts, no TTL)."""
    head[0] = _T_MSG
    head[1] = 0
    _le16(head + 2, <uint16_t>slen)
    _le32(head + 4, <uint32_t>total)
    _le64(head + 8, cseq)
    _le64(head + 16, <uint64_t>cts)
    _le64(head + 24, 0)
    _le32(head + 32, <uint32_t>hlen)
    _le32(head + 36, <uint32_t>dlen)


cdef extern from *:
    # the array object as Cython's array header declares it (the struct it defines for cpython.array)
    ctypedef struct arrayobject:
        int ob_exports


cdef inline Py_ssize_t rillet_array_exports(object a) noexcept:
    return (<arrayobject*><PyObject*>a).ob_exports


cdef bint _check_layout():
    """Whether this interpreter's array objects have the layout Cython's header declares (the exported-buffer
    count read where it is): checked once with a real memoryview. If not, columns are appended to through
    their ``append`` method."""
    a = array("I", [1])
    if rillet_array_exports(a) != 0:
        return False
    m = memoryview(a)
    ok = rillet_array_exports(a) == 1
    m.release()
    return ok and rillet_array_exports(a) == 0


cdef bint _DIRECT = _check_layout()
# The store's own attributes this twin reads and writes are plain instance attributes: it goes to the
# instance's __dict__ for them (a fraction of a generic attribute access). Should any of them become a class
# attribute or descriptor, the twin leaves everything to the pure code (fast_paths() tells; a test checks).
_STORE_ATTRS = ("_closed", "_pre_check", "_log_pending", "_compress", "_active", "_block_size", "_afd", "_aidx", "_nmsgs", "_first",
                "_last", "_last_ts", "_bytes", "_subjects", "_maxp", "_post_limits", "_wb", "_wb_buf", "_wb_off", "_wb_ps", "_rc",
                "_rc_next", "_ra_on", "_keys", "_bfirst", "_bl")
cdef bint _DICT_OK = not any(name in vars(c) for c in _fsmod.FileStore.__mro__ for name in _STORE_ATTRS)


cdef inline bint _col(object a, char code) noexcept:
    """``a`` is an array of ``code`` that can grow in place (no exported buffer: else its ``append`` refuses)."""
    return type(a) is array and (<array>a).ob_descr.typecode == code and rillet_array_exports(a) == 0


cdef inline void _put_u64(array a, uint64_t v) except *:
    cdef Py_ssize_t n = Py_SIZE(a)
    resize_smart(a, n + 1)
    a.data.as_ulonglongs[n] = v


cdef inline void _put_u32(array a, uint32_t v) except *:
    cdef Py_ssize_t n = Py_SIZE(a)
    resize_smart(a, n + 1)
    a.data.as_uints[n] = v


cdef inline void _put_i64(array a, int64_t v) except *:
    cdef Py_ssize_t n = Py_SIZE(a)
    resize_smart(a, n + 1)
    a.data.as_longlongs[n] = v




cdef inline object _ga(object obj, dict d, str name):
    cdef PyObject* v = PyDict_GetItemWithError(d, name)
    if v == NULL:
        return getattr(obj, name)  # (an error is raised as the pure code's would be)
    return <object>v


def fast_paths():
    """Which of the twin's shortcuts this interpreter and this FileStore allow (tests)."""
    return {"direct_columns": bool(_DIRECT), "instance_dict": bool(_DICT_OK)}


class FileStore(_PureFileStore):
    """The file store with its append in C (see the module's docstring)."""

    def store_msg(self, subject, hdr, data, ts=None, ttl=0):
        # the pure StoreCommon.store_msg (_common.py), with this twin's append called directly
        if not _DICT_OK:
            return _pure_store_msg(self, subject, hdr, data, ts, ttl)
        cdef dict d = self.__dict__
        if _ga(self, d, "_closed"):
            raise _ErrStoreClosed()
        if _ga(self, d, "_pre_check"):
            self._discard_new_check(subject, hdr, data, self._msg_size(subject, hdr, data))
        if ts is None:
            ts = _time_ns()
        seq = _ga(self, d, "_last") + 1
        _append(self, d, seq, subject, hdr, data, ts, ttl, None)
        return seq, ts

    def _append(self, seq, subject, hdr, data, ts, ttl, e=None):
        if not _DICT_OK:
            return _pure_append(self, seq, subject, hdr, data, ts, ttl, e)
        _append(self, self.__dict__, seq, subject, hdr, data, ts, ttl, e)

    def _write(self, seq, subject, hdr, data, ts, ttl_ns):
        if ttl_ns or not _DICT_OK:
            return _pure_write(self, seq, subject, hdr, data, ts, ttl_ns)
        return _write(self, self.__dict__, seq, subject, hdr, data, ts)

    def load_msg(self, seq):
        # a live message's block, index and slot found here (the pure _locate's steps), then _read_msg; anything
        # else (no such message, a lost one, columns of other types) is the pure load_msg's, which decides
        if _DICT_OK:
            loc = _locate(self, self.__dict__, seq)
            if loc is not None:
                return self._read_msg(*loc)
        return _pure_load_msg(self, seq)

    def _read_msg(self, blk, x, slot):
        # a record inside the bytes a sequential read pass read ahead, or a record read by itself (one
        # pread(2), a read outside a read pass: a direct get, a MSG.GET), whose checks pass: decoded here;
        # anything else (encryption, a read ahead to start, a failed or short read, a record that fails a
        # check) is the pure code's, which reads again and decides
        if _DICT_OK:
            m = _read_ahead(self, self.__dict__, blk, x, slot)
            if m is not None:
                return m
            m = _read_one(self, self.__dict__, blk, x, slot)
            if m is not None:
                return m
        return _pure_read(self, blk, x, slot)


cdef int _append(object self, dict d, object seq, object subject, object hdr, object data, object ts, object ttl,
                 object e) except -1:
    """The pure ``_append``, with the record written by this twin's ``_write``."""
    if e is None:
        if ttl:
            e = _pure_write(self, seq, subject, hdr, data, ts, int(ttl * _NS))
        else:
            e = _write(self, d, seq, subject, hdr, data, ts)
    if not _ga(self, d, "_nmsgs"):
        d["_first"] = seq
    d["_nmsgs"] = _ga(self, d, "_nmsgs") + 1
    d["_last"] = seq
    d["_last_ts"] = ts
    d["_bytes"] = _ga(self, d, "_bytes") + e
    subjects = _ga(self, d, "_subjects")
    ps = subjects.get(subject)
    if ps is None:
        subjects[subject] = [1, _ga(self, d, "_active").index, seq]
    else:
        ps[0] += 1
        ps[2] = seq
        maxp = _ga(self, d, "_maxp")
        if maxp and ps[0] > maxp:
            self._enforce_per_subject(subject)
    if _ga(self, d, "_post_limits"):
        self._enforce_limits()
    return 0


cdef object _write(object self, dict d, object seq, object subject, object hdr, object data, object ts):
    """The pure ``_write`` of a record without TTL; anything but the common case goes to it."""
    if (_ga(self, d, "_log_pending") or _ga(self, d, "_compress") or type(subject) is not str or type(hdr) is not bytes
            or type(data) is not bytes or _fsdict["_write_all"] is not _pure_write_all):
        return _pure_write(self, seq, subject, hdr, data, ts, 0)
    cdef uint64_t cseq
    cdef int64_t cts
    try:
        cseq = seq
        cts = ts
    except (OverflowError, TypeError):
        return _pure_write(self, seq, subject, hdr, data, ts, 0)
    if cseq > <uint64_t>0x7FFFFFFFFFFFFFFF:
        return _pure_write(self, seq, subject, hdr, data, ts, 0)
    sb = subject.encode("utf-8", "surrogateescape")
    cdef Py_ssize_t slen = PyBytes_GET_SIZE(sb)
    cdef Py_ssize_t hlen = PyBytes_GET_SIZE(hdr)
    cdef Py_ssize_t dlen = PyBytes_GET_SIZE(data)
    if slen > 0xFFFF:
        return _pure_write(self, seq, subject, hdr, data, ts, 0)
    cdef long long total = _OVERHEAD + slen + hlen + dlen
    if total >= _MAX_REC:
        return _pure_write(self, seq, subject, hdr, data, ts, 0)
    # write-behind (the pure _write's test and _wb_put): a plain record gathered, not written
    wb = _ga(self, d, "_wb")
    if wb is not None:
        if (not hlen or memmem(PyBytes_AS_STRING(hdr), hlen, b"Nats-", 5) == NULL) and \
                _wb_ok(self, d, wb, cseq, subject, total):
            return _wb_put(self, d, wb, seq, subject, sb, hdr, data, ts, cts, cseq, total)
        if <Py_ssize_t>_ga(self, d, "_wb_off") >= 0:
            self.flush_writes()
    # the pure _target_block's test, inline: a new block when none is active, when this record would take
    # a block that holds records past its size, or after a large sequence gap
    blk = _ga(self, d, "_active")
    cdef long long bsize, blast
    if blk is None:
        blk = self._new_block()
    else:
        bsize = blk.size
        blast = blk.last
        if ((bsize + total > <long long>_ga(self, d, "_block_size") and bsize > _MAGIC_LEN)
                or (blast and <long long>cseq - blast > _MAX_GAP)):
            blk = self._new_block()
    cdef unsigned char head[40]
    cdef unsigned char tail[4]
    _head(head, slen, total, cseq, cts, hlen, dlen)
    cdef const unsigned char* ps = <const unsigned char*>PyBytes_AS_STRING(sb)
    cdef const unsigned char* ph = <const unsigned char*>PyBytes_AS_STRING(hdr)
    cdef const unsigned char* pd = <const unsigned char*>PyBytes_AS_STRING(data)
    cdef unsigned long crc = crc32(0, head, 40)
    crc = crc32(crc, ps, <unsigned int>slen)
    crc = crc32(crc, ph, <unsigned int>hlen)
    crc = crc32(crc, pd, <unsigned int>dlen)
    _le32(tail, <uint32_t>crc)
    cdef iovec iov[5]
    iov[0].iov_base = head
    iov[0].iov_len = 40
    iov[1].iov_base = <void*>ps
    iov[1].iov_len = slen
    iov[2].iov_base = <void*>ph
    iov[2].iov_len = hlen
    iov[3].iov_base = <void*>pd
    iov[3].iov_len = dlen
    iov[4].iov_base = tail
    iov[4].iov_len = 4
    off = blk.size
    cdef off_t coff = off
    cdef int fd = _ga(self, d, "_afd")
    cdef Py_ssize_t n
    with nogil:
        n = pwritev(fd, iov, 5, coff)
    if n != total:
        try:
            if n < 0:
                PyErr_SetFromErrno(OSError)
            rec = (PyBytes_FromStringAndSize(<char*>head, 40) + sb + hdr + data
                   + PyBytes_FromStringAndSize(<char*>tail, 4))
            _write_rest(fd, rec, off, n, total)
        except OSError as e:
            self._write_failed(blk, off, e)
    blk.size = off + total
    cdef Py_ssize_t size = (34 + slen + hlen + dlen) if hlen else (30 + slen + dlen)
    _index(self, blk, _ga(self, d, "_aidx"), seq, subject, sb, ts, cts, coff, total, size)
    return size


cdef bint _wb_ok(object self, dict d, object wb, uint64_t cseq, object subject, long long total) except -1:
    """The pure ``_write``'s test for gathering a record (its header and TTL tested by the caller)."""
    if type(wb) is not bytearray or _ga(self, d, "_maxp") or _ga(self, d, "_post_limits"):
        return False
    blk = _ga(self, d, "_active")
    x = _ga(self, d, "_aidx")
    if blk is None or x is None:
        return False
    cdef Py_ssize_t n = len(x.offs)
    if not n or <long long>blk.size + total > <long long>_ga(self, d, "_block_size"):
        return False
    if <long long>cseq - <long long>x.base != n or x.ttl is not None:
        return False
    return subject in blk.smap and PyByteArray_GET_SIZE(wb) + total <= _WB_MAX


cdef object _wb_put(object self, dict d, object wb, object seq, object subject, object sb, object hdr, object data,
                    object ts, int64_t cts, uint64_t cseq, long long total):
    """The pure ``_wb_put``: the record's bytes appended to the gathered ones, then indexed."""
    blk = _ga(self, d, "_active")
    x = _ga(self, d, "_aidx")
    off = blk.size
    if <Py_ssize_t>_ga(self, d, "_wb_off") < 0:
        self._wb_open(blk, x, off)
    wps = _ga(self, d, "_wb_ps")
    if subject not in wps:
        e = _ga(self, d, "_subjects").get(subject)
        wps[subject] = None if e is None else e[:]
    cdef Py_ssize_t slen = PyBytes_GET_SIZE(sb)
    cdef Py_ssize_t hlen = PyBytes_GET_SIZE(hdr)
    cdef Py_ssize_t dlen = PyBytes_GET_SIZE(data)
    cdef unsigned char head[40]
    _head(head, slen, total, cseq, cts, hlen, dlen)
    cdef Py_ssize_t n0 = PyByteArray_GET_SIZE(wb)
    PyByteArray_Resize(wb, n0 + total)
    cdef unsigned char* p = <unsigned char*>PyByteArray_AS_STRING(wb) + n0
    memcpy(p, head, 40)
    memcpy(p + 40, PyBytes_AS_STRING(sb), slen)
    memcpy(p + 40 + slen, PyBytes_AS_STRING(hdr), hlen)
    memcpy(p + 40 + slen + hlen, PyBytes_AS_STRING(data), dlen)
    _le32(p + 40 + slen + hlen + dlen, <uint32_t>crc32(0, p, <unsigned int>(40 + slen + hlen + dlen)))
    cdef off_t coff = off
    blk.size = off + total
    cdef Py_ssize_t size = (34 + slen + hlen + dlen) if hlen else (30 + slen + dlen)
    _index(self, blk, x, seq, subject, sb, ts, cts, coff, total, size)
    return size


cdef int _index(object fs, object blk, object x, object seq, object subject, object sb, object ts, int64_t cts,
                off_t off, long long total, Py_ssize_t size) except -1:
    """The pure ``_index_record`` for the common slot (the next of a block that has records and this subject, no
    TTL column, no per-subject position lists); anything else goes to it. Columns that cannot grow in place
    (an exported buffer: their ``append`` refuses, as in the pure code) are appended to through ``append``."""
    offs = x.offs
    l = blk.smap.get(subject) if len(offs) else None
    if l is None or x.spos_all or x.ttl is not None or seq - x.base - len(offs):
        _pure_index(fs, blk, x, seq, subject, sb, ts, 0, off, total, size)
        return 0
    rlen = x.rlen
    sz = x.sz
    tsc = x.ts
    sid = x.sid
    scnt = blk.scnt
    cdef Py_ssize_t li = l
    if (_DIRECT and _col(offs, c'Q') and _col(rlen, c'I') and _col(sz, c'I') and _col(tsc, c'q')
            and _col(sid, c'I') and type(scnt) is array and (<array>scnt).ob_descr.typecode == c'I'
            and 0 <= li < Py_SIZE(scnt) and (<array>scnt).data.as_uints[li] < <uint32_t>0xFFFFFFFF):
        _put_u64(<array>offs, <uint64_t>off)
        _put_u32(<array>rlen, <uint32_t>total)
        _put_u32(<array>sz, <uint32_t>size)
        _put_i64(<array>tsc, cts)
        _put_u32(<array>sid, <uint32_t>li)
        (<array>scnt).data.as_uints[li] += 1
    else:
        offs.append(off)
        rlen.append(total)
        sz.append(size)
        tsc.append(ts)
        sid.append(l)
        scnt[l] += 1
    blk.live += 1
    blk.last = seq
    blk.last_ts = ts
    return 0


cdef inline bint _arr(object a, char code) noexcept:
    return type(a) is array and (<array>a).ob_descr.typecode == code


cdef inline uint64_t _rd64(const unsigned char* p) noexcept:
    cdef uint64_t v = 0
    cdef int i
    for i in range(8):
        v |= (<uint64_t>p[i]) << (8 * i)
    return v


cdef inline uint32_t _rd32(const unsigned char* p) noexcept:
    return p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef object _read_ahead(object self, dict d, object blk, object x, object slot):
    """The pure ``_read_msg`` for a record that lies in the read-ahead bytes (``_rc``) and passes the inline
    checks (a message record at this sequence, its length, not compressed, lengths that add up, the CRC);
    None for anything else (the caller then runs the pure one, nothing changed)."""
    if _ga(self, d, "_closed"):
        return None
    rc = _ga(self, d, "_rc")
    if type(rc) is not tuple or len(<tuple>rc) != 3:
        return None
    rbuf = (<tuple>rc)[2]
    if type(rbuf) is not bytes or (<tuple>rc)[0] != blk.index:
        return None
    offs = x.offs
    rlen = x.rlen
    if type(slot) is not int or not (_arr(offs, c'Q') and _arr(rlen, c'I')):
        return None
    cdef Py_ssize_t i = slot
    if i < 0 or i >= Py_SIZE(offs) or i >= Py_SIZE(rlen):
        return None
    cdef unsigned long long off = (<array>offs).data.as_ulonglongs[i]
    cdef unsigned long long n = (<array>rlen).data.as_uints[i]
    cdef long long roff
    try:
        roff = (<tuple>rc)[1]
    except (OverflowError, TypeError):
        return None
    cdef Py_ssize_t blen = PyBytes_GET_SIZE(rbuf)
    if roff < 0 or <unsigned long long>roff > off or off + n > <unsigned long long>roff + blen or n < <unsigned long long>_OVERHEAD:
        return None
    cdef Py_ssize_t b0 = <Py_ssize_t>(off - <unsigned long long>roff)
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(rbuf) + b0
    seq = x.base + slot
    cdef uint64_t cseq
    try:
        cseq = seq
    except (OverflowError, TypeError):
        return None
    cdef uint32_t slen = p[2] | (<uint32_t>p[3] << 8)
    cdef uint32_t hlen = _rd32(p + 32)
    cdef uint32_t dlen = _rd32(p + 36)
    if (p[0] != _T_MSG or _rd64(p + 8) != cseq or _rd32(p + 4) != n or (p[1] & _F_COMPRESSED)
            or <long long>n - _OVERHEAD - <long long>slen != <long long>hlen + <long long>dlen
            or crc32(0, p, <unsigned int>n) != _CRC_RESIDUE):
        return None
    d["_rc_next"] = off + n
    cdef int64_t ts = <int64_t>_rd64(p + 16)
    subject = x.subjs[x.sid[slot]]
    cdef const char* q = <const char*>p + 40 + slen
    return _StoredMsg(subject, seq, ts, PyBytes_FromStringAndSize(q, hlen), PyBytes_FromStringAndSize(q + hlen, dlen))


cdef tuple _locate(object self, dict d, object seq):
    """The pure ``_locate`` (``_block_of``, ``_idx``, the slot's offset and the block's removed slots) for a live
    message in a block found in ``_bfirst``; None for anything else (the pure ``load_msg`` then decides)."""
    if type(seq) is not int:
        return None
    bfirst = _ga(self, d, "_bfirst")
    bl = _ga(self, d, "_bl")
    if type(bfirst) is not list or type(bl) is not list:
        return None
    cdef Py_ssize_t i = _bisect_right(bfirst, seq) - 1
    if i < 0 or i >= len(<list>bl):
        return None
    blk = (<list>bl)[i]
    if seq > blk.last or not blk.live:
        return None
    x = _ga(self, d, "_aidx") if blk is _ga(self, d, "_active") else self._idx(blk)
    slot = seq - x.base
    offs = x.offs
    if not _arr(offs, c'Q'):
        return None
    cdef long long s
    try:
        s = slot
    except OverflowError:
        return None
    if s < 0 or s >= Py_SIZE(offs) or not (<array>offs).data.as_ulonglongs[s]:
        return None
    dead = blk.dead
    if dead is not None:
        if type(dead) is not bytearray:
            return None
        if s < PyByteArray_GET_SIZE(dead) and PyByteArray_AS_STRING(dead)[s]:
            return None
    return (blk, x, slot)


cdef object _read_one(object self, dict d, object blk, object x, object slot):
    """The pure ``_read_msg`` for a record it reads by itself: no read-ahead bytes hold it, it starts no read
    ahead (outside a read pass, or not where the last read ended), the store has no encryption and its
    ``_pread`` and ``os.pread`` are the real ones; one pread(2) of the record, the inline checks of
    ``_read_ahead``, ``_rc_next`` set as the pure code sets it. None for anything else, a failed or short read
    and a record that fails a check included, before anything is changed: the pure code then reads it again
    and decides (its errors, its damage report)."""
    if _ga(self, d, "_closed") or _ga(self, d, "_keys") is not None:
        return None
    if type(slot) is not int or "_pread" in d or type(self)._pread is not _pure_pread or _os.pread is not _os_pread:
        return None
    offs = x.offs
    rlen = x.rlen
    if not (_arr(offs, c'Q') and _arr(rlen, c'I')):
        return None
    cdef Py_ssize_t i = slot
    if i < 0 or i >= Py_SIZE(offs) or i >= Py_SIZE(rlen):
        return None
    cdef unsigned long long off = (<array>offs).data.as_ulonglongs[i]
    cdef unsigned long long n = (<array>rlen).data.as_uints[i]
    if n < <unsigned long long>_OVERHEAD or off > <unsigned long long>0x7FFFFFFFFFFFFFFF:
        return None
    rc = _ga(self, d, "_rc")
    if rc is not None:  # (the pure code's test of the read-ahead bytes: a record inside them is theirs)
        if type(rc) is not tuple or len(<tuple>rc) != 3 or type((<tuple>rc)[2]) is not bytes:
            return None
        if rc[0] == blk.index and rc[1] <= off and off + n <= rc[1] + PyBytes_GET_SIZE((<tuple>rc)[2]):
            return None
    nxt = _ga(self, d, "_rc_next")
    if nxt == off and n < <unsigned long long>_READ_AHEAD and _ga(self, d, "_ra_on"):
        return None  # (a read ahead starts here)
    seq = x.base + slot
    cdef uint64_t cseq
    try:
        cseq = seq
    except (OverflowError, TypeError):
        return None
    try:
        fdo = self._fd_for(blk.index)
    except OSError:
        return None
    cdef int fd = fdo
    cdef unsigned char small[512]
    cdef unsigned char* p = small
    if n > sizeof(small):
        p = <unsigned char*>PyMem_Malloc(n)
        if p == NULL:
            raise MemoryError()
    cdef ssize_t got
    cdef off_t coff = <off_t>off
    cdef uint32_t slen, hlen, dlen
    cdef const char* q
    try:
        with nogil:
            got = pread(fd, p, n, coff)
        if got != <ssize_t>n:
            return None
        slen = p[2] | (<uint32_t>p[3] << 8)
        hlen = _rd32(p + 32)
        dlen = _rd32(p + 36)
        if (p[0] != _T_MSG or _rd64(p + 8) != cseq or _rd32(p + 4) != n or (p[1] & _F_COMPRESSED)
                or <long long>n - _OVERHEAD - <long long>slen != <long long>hlen + <long long>dlen
                or crc32(0, p, <unsigned int>n) != _CRC_RESIDUE):
            return None
        d["_rc_next"] = off + n
        subject = x.subjs[x.sid[slot]]
        q = <const char*>p + 40 + slen
        return _StoredMsg(subject, seq, <int64_t>_rd64(p + 16), PyBytes_FromStringAndSize(q, hlen),
                          PyBytes_FromStringAndSize(q + hlen, dlen))
    finally:
        if p != small:
            PyMem_Free(p)


def index_totals(x):
    """The pure ``_fsindex.index_totals`` (the pass over a block's columns for its index file) as a C loop over
    the columns; columns of another type or length, an out-of-range subject id or a TTL sum past 64 bits go
    to the pure one (which raises or computes as it does)."""
    offs, sid, sz, rlen, ts, ttl = x.offs, x.sid, x.sz, x.rlen, x.ts, x.ttl
    cdef Py_ssize_t nsubj = len(x.subjs)
    if not (_arr(offs, c'Q') and _arr(sid, c'I') and _arr(sz, c'I') and _arr(rlen, c'I') and _arr(ts, c'q')
            and (ttl is None or _arr(ttl, c'q'))):
        return _pure_totals(x)
    cdef Py_ssize_t n = Py_SIZE(offs)
    if Py_SIZE(sid) < n or Py_SIZE(sz) < n or Py_SIZE(rlen) < n:
        return _pure_totals(x)
    cdef Py_ssize_t nt = Py_SIZE(ttl) if ttl is not None else 0
    if nt > n or nt > Py_SIZE(ts):
        return _pure_totals(x)
    cdef unsigned long long* o = (<array>offs).data.as_ulonglongs
    cdef unsigned int* si = (<array>sid).data.as_uints
    cdef unsigned int* z = (<array>sz).data.as_uints
    cdef unsigned int* rl = (<array>rlen).data.as_uints
    cdef long long* tsp = (<array>ts).data.as_longlongs
    cdef long long* tt = (<array>ttl).data.as_longlongs if ttl is not None else NULL
    cdef unsigned long long* cnt = <unsigned long long*>PyMem_Calloc(nsubj + 1, sizeof(unsigned long long))
    cdef Py_ssize_t* last = <Py_ssize_t*>PyMem_Calloc(nsubj + 1, sizeof(Py_ssize_t))
    cdef Py_ssize_t i, s
    cdef unsigned long long nrec = 0, nbytes = 0, last_off = 0, last_rlen = 0
    cdef long long t, e, min_exp = 0, n_noexp = 0
    cdef bint bad = False
    if cnt == NULL or last == NULL:
        PyMem_Free(cnt)
        PyMem_Free(last)
        raise MemoryError()
    try:
        for i in range(n):
            if o[i]:
                s = si[i]
                if s >= nsubj:
                    bad = True
                    break
                cnt[s] += 1
                last[s] = i
                nrec += 1
                nbytes += z[i]
                last_off = o[i]
                last_rlen = rl[i]
        if not bad:
            for i in range(nt):
                t = tt[i]
                if t and o[i]:
                    if t < 0:
                        n_noexp += 1
                    else:
                        if tsp[i] > 0x7FFFFFFFFFFFFFFF - t:
                            bad = True
                            break
                        e = tsp[i] + t
                        if not min_exp or e < min_exp:
                            min_exp = e
        if bad:
            return _pure_totals(x)
        counts = [cnt[i] for i in range(nsubj)]
        lastslot = [last[i] for i in range(nsubj)]
    finally:
        PyMem_Free(cnt)
        PyMem_Free(last)
    return counts, lastslot, nrec, nbytes, last_off, last_rlen, min_exp, n_noexp


FileStore._index_totals = staticmethod(index_totals)
