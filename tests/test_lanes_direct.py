"""The direct get handler's compiled twin (rillet._speedups._cjs.direct_on_get) against the reference,
rillet.jetstream.api.direct.reference_on_direct_get (DirectApi.on_direct_get as written, the pure-Python lane's):
the same request given to each, with a router whose answers are recorded, must give the same answers (statuses,
messages byte for byte, the general path called with the same arguments), whatever the body, the headers, the
stored message and its time."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lanes import COMPILED_ERROR
from rillet.jetstream.api import direct as D
from rillet.jetstream.store.base import ErrStoreCorrupt, StoredMsg

pytestmark = pytest.mark.skipif(bool(COMPILED_ERROR), reason=f"compiled lane not built: {COMPILED_ERROR}")


def _twin():
    from rillet._speedups import _cjs
    return _cjs.direct_on_get


class _Rec:
    def __init__(self) -> None:
        self.out: list = []


class _IC:
    def __init__(self, rec: _Rec) -> None:
        self.rec = rec

    def publish(self, subject, reply, payload, hdr_len=-1):
        self.rec.out.append(("pub", subject, reply, payload, hdr_len))


class _JSA:
    def __init__(self, rec: _Rec, streams: dict) -> None:
        self.ic = _IC(rec)
        self.streams = streams


class _Router(D.DirectApi):
    def __init__(self, rec: _Rec, streams: dict) -> None:
        self.rec = rec
        self.jsa = _JSA(rec, streams)

    def direct_get(self, args, reply, hdr, body):  # (the general path: recorded, not run)
        self.rec.out.append(("general", args, reply, hdr, body))


class _Cfg:
    def __init__(self, allow_direct=True, mirror_direct=False) -> None:
        self.allow_direct = allow_direct
        self.mirror_direct = mirror_direct


class _Store:
    def __init__(self, msgs: dict, corrupt=()) -> None:
        self.msgs = msgs
        self.corrupt = set(corrupt)

    def load_msg(self, seq):
        if seq in self.corrupt:
            raise ErrStoreCorrupt(f"message {seq} is corrupt", seq=seq)
        return self.msgs.get(seq)


class _Stream:
    def __init__(self, name, store, cfg=None) -> None:
        self.name = name
        self.store = store
        self.cfg = cfg or _Cfg()


class _Sub:
    def __init__(self, subject: str) -> None:
        self.subject = subject


def _both(stream, sub, subject, reply, hdr, msg, streams=None):
    outs = []
    for fn in (D.reference_on_direct_get, _twin()):
        rec = _Rec()
        r = _Router(rec, streams if streams is not None else {stream.name: stream})
        try:
            fn(r, stream, sub, subject, reply, hdr, msg)
        except Exception as e:  # (both must raise the same)
            rec.out.append(("raised", type(e).__name__, str(e)))
        outs.append(rec.out)
    assert outs[0] == outs[1], (msg, outs)
    return outs[0]


BASE = 1_700_000_000 * 10**9
MSGS = {
    1: StoredMsg("a.b", 1, BASE, b"", b"one"),
    2: StoredMsg("a.c", 2, BASE + 120_000_000, b"NATS/1.0\r\nX-Kept: yes\r\n\r\n", b"two"),
    3: StoredMsg("ünï.cødé", 3, BASE + 1, b"", b""),
    4: StoredMsg("sur\udcffrogate", 4, BASE + 999_999_999, b"NATS/1.0\r\n\r\n", b"x" * 5000),
    5: StoredMsg("z", 5, 0, b"", b"zero time"),
    6: StoredMsg("z", 6, -3 * 10**9 - 7, b"", b"before the epoch"),
    7: StoredMsg("z", 7, 2**63 - 1, b"", b"far"),
    8: StoredMsg("z", 8, 999, b"", b"a fraction of the first second"),
    2**64 - 1: StoredMsg("big", 2**64 - 1, BASE + 5 * 10**8, b"", b"last"),
}


def _stream(name="S", **cfg):
    return _Stream(name, _Store(MSGS, corrupt={9}), _Cfg(**cfg))


SUB = _Sub("$JS.API.DIRECT.GET.S")
SUBJ = b"$JS.API.DIRECT.GET.S"


def test_same_answers_for_the_short_path_and_its_edges():
    s = _stream()
    bodies = [b'{"seq":%d}' % n for n in (*MSGS, 0, 9, 10, 99)]
    bodies += [b' {\n"seq" : 2 }\t', b'{"seq":01}', b'{"seq":-1}', b'{"seq":1.0}', b'{"seq":"1"}', b'{"seq":1,}',
               b'{"seq":1}x', b'{"Seq":1}', b'{"seq":99999999999999999999}', b'{"seq":9999999999999999999}',
               b'{"seq":18446744073709551616}', b'{"seq":1,"no_hdr":true}', b"", b"{}", b"{", b'{"seq":}',
               b'{"seq" 1}', b'\x00{"seq":1}', b'{"seq":1}\x0b']
    for body in bodies:
        for ts_round in range(2):  # (the second time from the kept seconds)
            _both(s, SUB, SUBJ, b"_R.1", -1, body)
    out = _both(s, SUB, SUBJ, b"_R.1", -1, b'{"seq":2}')
    assert out[0][3].startswith(b"NATS/1.0\r\nX-Kept: yes\r\nNats-Stream: S\r\nNats-Subject: a.c\r\nNats-Sequence: 2\r\n")
    assert out[0][3].endswith(b"Nats-Time-Stamp: 2023-11-14T22:13:20.12Z\r\n\r\ntwo")
    assert _both(s, SUB, SUBJ, b"_R.1", -1, b'{"seq":9}')[0][3] == b"NATS/1.0 404 Message Not Found\r\n\r\n"
    assert _both(s, SUB, SUBJ, b"_R.1", -1, b'{"seq":0}')[0][3] == b"NATS/1.0 408 Empty Request\r\n\r\n"


def test_same_answers_off_the_short_path():
    s = _stream()
    for reply in (None, b""):
        assert _both(s, SUB, SUBJ, reply, -1, b'{"seq":1}') == [("general", ["S"], reply, b"", b'{"seq":1}')]
    hdr = b"NATS/1.0\r\nNats-Required-Api-Level: 0\r\n\r\n"
    _both(s, SUB, SUBJ, b"_R.1", len(hdr), hdr + b'{"seq":1}')
    _both(s, _Sub("$JS.API.DIRECT.GET.S.>"), SUBJ + b".a.b", b"_R.1", -1, b"")
    _both(s, None, SUBJ, b"_R.1", -1, b'{"seq":1}')
    assert _both(_stream(allow_direct=False), SUB, SUBJ, b"_R.1", -1, b'{"seq":1}') == []
    _both(_stream(allow_direct=False, mirror_direct=True), SUB, SUBJ, b"_R.1", -1, b'{"seq":1}')
    _both(s, SUB, SUBJ, b"_R.1", -1, b'{"seq":1}', streams={})  # (the stream gone: the general path)
    other = _Stream("S", _Store({1: StoredMsg("q", 1, BASE, b"", b"replaced")}))
    _both(s, SUB, SUBJ, b"_R.1", -1, b'{"seq":1}', streams={"S": other})  # (the stream the account has now)
    odd = _Stream("S", _Store({1: StoredMsg("q", 1, BASE, bytearray(b""), memoryview(b"data"))}))
    _both(odd, SUB, SUBJ, b"_R.1", -1, b'{"seq":1}')  # (fields of other types: the reference's reply)


def test_same_time_stamps():
    rnd = random.Random(20)
    values = [BASE + rnd.randrange(10**10) for _ in range(500)]
    values += [BASE + rnd.randrange(10**4) * 10**rnd.randrange(10) for _ in range(500)]
    values += [10**9, 10**9 - 1, 10**9 + 1, 2**63 - 1, -1, 0]
    for ts in values:
        s = _Stream("S", _Store({1: StoredMsg("a", 1, ts, b"", b"")}))
        _both(s, SUB, SUBJ, b"_R.1", -1, b'{"seq":1}')
        _both(s, SUB, SUBJ, b"_R.1", -1, b'{"seq":1}')


_ws = st.sampled_from([b"", b" ", b"\t", b"\n", b"\r", b"  ", b"\x0b", b"\xa0"])


@settings(max_examples=400, deadline=None)
@given(_ws, _ws, _ws, _ws, _ws, _ws, st.sampled_from([b"{", b"[", b""]), st.sampled_from([b"}", b"]", b"},"]),
       st.sampled_from([b'"seq"', b'"seq', b'"SEQ"', b"seq", b'"seqs"']), st.sampled_from([b":", b"=", b""]),
       st.one_of(st.integers(0, 2**66).map(lambda n: b"%d" % n), st.binary(max_size=6),
                 st.sampled_from([b"00", b"01", b"-0", b"1e3", b"2"])))
def test_same_answers_for_bodies_near_the_short_one(w1, w2, w3, w4, w5, w6, lb, rb, key, colon, num):
    body = w1 + lb + w2 + key + w3 + colon + w4 + num + w5 + rb + w6
    _both(_stream(), SUB, SUBJ, b"_R.1", -1, body)
