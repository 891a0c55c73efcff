# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled twins of a replicated stream's log entry codec, rillet.jetstream.cluster.log's ``encode_entry`` and
``decode_entry`` (see rillet.lane), for the entries every message makes: a stream's MSG and a consumer's entries
(delivered, ack, ...).

They take the shortest way through the reference's own logic for those ops -- the same msgspec encoder and
decoder, the same bytes and the same ``Entry`` -- and hand every other op, every other type and every error to
the reference, which stays the one that decides (tests/test_lanes_cluster.py compares both on the same
entries and on arbitrary bytes).
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE

cdef object _pure_encode, _pure_decode, _enc_encode, _dec_decode, _Entry, _FastMsg, _DecodeError
cdef frozenset _CONSUMER_OPS, _RESHAPED
cdef long _MSG
cdef tuple _PREFIX = tuple(bytes((i,)) for i in range(256))
cdef bint _ready = False


cdef int _init() except -1:
    """The reference's definitions, taken on first use (rillet.jetstream.cluster.log takes this module's
    functions when it loads: importing it from here at load time would be circular)."""
    global _pure_encode, _pure_decode, _enc_encode, _dec_decode, _Entry, _FastMsg, _DecodeError
    global _CONSUMER_OPS, _RESHAPED, _MSG, _ready
    import msgspec
    from rillet.jetstream.cluster import log as pure
    _pure_encode = pure.encode_entry
    _pure_decode = pure.decode_entry
    _enc_encode = pure._enc.encode
    _dec_decode = pure._dec.decode
    _Entry = pure.Entry
    _FastMsg = pure.FastMsg
    _DecodeError = msgspec.DecodeError
    _CONSUMER_OPS = pure.CONSUMER_OPS
    _MSG = pure.Entry.MSG
    # consumer ops whose arguments the reference reshapes (_tuple_args): left to it
    _RESHAPED = frozenset((pure.Entry.C_DUE, pure.Entry.C_DROP, pure.Entry.BATCH))
    # the ops this twin encodes itself are one byte, as the reference's code assumes
    if not all(0 <= op < 256 for op in _CONSUMER_OPS) or _MSG in _CONSUMER_OPS or not 0 < _MSG < 256:
        raise ImportError("rillet._speedups._ccluster does not match rillet.jetstream.cluster.log's ops: rebuild")
    _ready = True
    return 0


def encode_entry(entry, target=""):
    cdef long op
    if not _ready:
        _init()
    if type(entry) is _Entry:
        o = entry.op
        if type(o) is int:
            op = o
            if op == _MSG:
                ctx = entry.ctx
                if ctx is None or ctx.__class__ is not _FastMsg:
                    return _PREFIX[op] + _enc_encode(entry.args)
            elif o in _CONSUMER_OPS:
                return _PREFIX[op] + _enc_encode((target, entry.args))
    return _pure_encode(entry, target)


def decode_entry(data):
    cdef long op
    if not _ready:
        _init()
    if type(data) is bytes and PyBytes_GET_SIZE(data) > 1:
        op = (<const unsigned char*>PyBytes_AS_STRING(data))[0]
        if op == _MSG or (op in _CONSUMER_OPS and op not in _RESHAPED):
            try:
                body = _dec_decode(memoryview(data)[1:])
            except _DecodeError:
                return _pure_decode(data)  # (which raises its own error for it)
            if type(body) is list:
                if op == _MSG:
                    return "", _Entry(op, tuple(body))
                if len(body) == 2 and type(body[0]) is str and type(body[1]) is list:
                    return body[0], _Entry(op, tuple(body[1]))
    return _pure_decode(data)
