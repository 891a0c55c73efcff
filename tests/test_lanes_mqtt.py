"""The MQTT connection's compiled twins (rillet._speedups._cmqtt) against their references on the same inputs:
the bulk read of a connected client (``PublishMixin._fast_in``: QoS 0/1 PUBLISH, PUBACK, PINGREQ, cut anywhere,
with other packets and bad bytes among them) and a QoS 1/2 delivery from a session's consumer
(``SubscribeMixin._on_js_msg``), on recording stand-ins: the same calls with the same arguments in the same
order, the same bytes out, the same counters and session state, the same rest returned. The end-to-end MQTT
tests run whichever lane the suite runs (RILLET_PURE)."""
from __future__ import annotations

import collections
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rillet.jetstream  # noqa: F401  (registers its lane twins: ack_numbers, which a delivery reads)
from lanes import COMPILED_ERROR
from rillet.mqtt import publish, subscribe
from rillet.mqtt.common import _HDRS, _Sub
from rillet.mqtt.codec import SubOpts
from rillet.mqtt.store import Session

try:
    from rillet._speedups import _cmqtt
except ImportError as e:  # (not built: tests/test_lanes.py::test_compiled_lane_is_built says so)
    _cmqtt = None
    CMQTT_ERROR = f"compiled lane not built: {COMPILED_ERROR or e}"
else:
    CMQTT_ERROR = ""

pytestmark = pytest.mark.skipif(_cmqtt is None, reason=CMQTT_ERROR)


# ---- recording stand-ins ------------------------------------------------------------------------------------------

class FakeSublist:
    def __init__(self) -> None:
        self._inserts, self._removes = 5, 2


class FakeAcc:
    def __init__(self, log: list, oks: list[bool]) -> None:
        self.log, self.oks = log, list(oks)
        self.mappings = None
        self.gw = None
        self.sublist = FakeSublist()

    def deliver(self, c, subject, reply, hdr, msg):
        self.log.append(("deliver", subject, reply, hdr, msg))
        return self.oks.pop(0) if self.oks else True


class NS:
    def __init__(self, **kw) -> None:
        self.__dict__.update(kw)


class FakeNatsSub:
    def __init__(self) -> None:
        self.nm = 0


class FakeConn(publish.PublishMixin, subscribe.SubscribeMixin):
    """The connection fields the twins read, and the methods they call, each call recorded."""

    def __init__(self, version: int, mpay: int, maxp: int, rmax: int, interest: dict, pending: dict,
                 close_on_send: int, held: bool, oks: list[bool]) -> None:
        self.log: list = []
        self.account = FakeAcc(self.log, oks)
        self.server = NS(trace_on=False, opts=NS(mqtt={}))
        self.fpubs: dict = {}
        self.quiet: dict = {}
        self.perms = None
        self.decoder = NS(max_packet=maxp)
        self.version = version
        self.fast_hdrs = (_HDRS[0], _HDRS[1]) if version < 5 else (b"NATS/1.0\r\nNmqtt-Pub: 0\r\n\r\n",
                                                                 b"NATS/1.0\r\nNmqtt-Pub: 1\r\n\r\n")
        self.mpay = mpay
        self.ms = NS(receive_max=rmax)
        self.ack_fifo: collections.deque = collections.deque()
        self.asm = NS(jsa=NS(store_cb=self._store_cb))
        self.sess = Session.__new__(Session)
        self.sess.pending_pub = dict(pending)
        self.sess.cpending = {(d, s): pi for pi, (_, d, s) in pending.items()}
        self.sess.pending_rel = {}
        self.sess.last_pi = 0
        self.closed = False
        self.connected = True
        self.acks_unwritten = 0
        self.in_msgs = self.in_bytes = 0
        self.out_msgs = self.out_bytes = 0
        self.out = bytearray()
        self.flush_pending = False
        self.held = held
        self.interest = interest
        self.close_on_send = close_on_send
        self._per_sub = 3
        self.msubs = {"a": 1}
        self.client_recv_max = 65535
        self.client_id = "me"

    def _store_cb(self, subject, payload, hdr, a):
        self.log.append(("store", subject, payload, hdr, a.pi, a.rc, a.conn is self))

    def _nats_interest(self, sb):
        sl = self.account.sublist
        interest, only = self.interest.get(sb, (True, None))
        q = (sl, sl._inserts, sl._removes, interest, [FakeNatsSub() for _ in range(only)] if only else None)
        self.log.append(("interest", sb))
        self.quiet[sb] = q
        return q

    def _send_held(self):
        self.log.append(("send_held",))

    def send(self, data):
        self.log.append(("send", bytes(data)))
        self.close_on_send -= 1
        if self.close_on_send == 0:
            self.closed = True

    def _acks_out(self, acks):
        self.log.append(("acks", {k: list(v) for k, v in acks.items()}))

    def flush_soon(self):
        self.log.append(("flush_soon",))
        self.flush_pending = True

    def _ack_soon(self, rep):
        self.log.append(("ack_soon", rep))

    def _write_publish(self, p):
        self.log.append(("write_publish", p))
        return True

    def state(self) -> tuple:
        return (self.log, self.in_msgs, self.in_bytes, [(a.pi, a.rc, a.e) for a in self.ack_fifo],
                self.sess.pending_pub, self.sess.cpending, self.sess.last_pi, self.fpubs, sorted(self.quiet),
                self.closed, bytes(self.out), self.out_msgs, self.out_bytes, self.flush_pending)


# ---- the bulk read ----------------------------------------------------------------------------------------------------

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


TOPICS = [b"a/b", b"x", b"s/1/t", b"c/+/d", b"", b"spBv1.0/g", b"$sys/x", b"\xff\xfe", b"a\x00b", b"#"]


def _packet(rnd: random.Random, v5: bool, valid: bool) -> bytes:
    kind = rnd.choice(["pub0", "pub1", "pub1", "pub1", "puback", "puback", "ping"] if valid else
                      ["pub0", "pub1", "other", "raw"])
    if kind in ("pub0", "pub1"):
        topic = rnd.choice(TOPICS[:2]) if valid else rnd.choice(TOPICS)
        n = rnd.choice([0, 1, 5, 100, 130, 300] if valid else [20000, 3])
        payload = bytes(range(256)) * (n // 256) + bytes(range(n % 256))
        body = len(topic).to_bytes(2, "big") + topic
        if kind == "pub1":
            body += rnd.randint(1 if valid else 0, 12).to_bytes(2, "big")
        if v5:
            body += bytes([0 if valid else rnd.choice([0, 1, 3])])
        body += payload
        return bytes([0x30 if kind == "pub0" else 0x32]) + _varint(len(body)) + body
    if kind == "puback":
        return b"\x40\x02" + rnd.randint(1, 12).to_bytes(2, "big")
    if kind == "ping":
        return b"\xc0\x00"
    if kind == "other":
        return rnd.choice([b"\x82\x08\x00\x09\x00\x03g/x\x00", b"\xe0\x00", b"\x40\x03\x00\x01\x00",
                           b"\x40\x02\x00\x00", b"\x34\x07\x00\x01q\x00\x01hi", b"\xc0\x01\x00"])
    return rnd.randbytes(rnd.randint(0, 6))


def _read_case(seed: int) -> dict:
    """A read of 0-40 packets, mostly what the bulk read takes, sometimes one it leaves (or bad bytes), cut
    anywhere now and then; the connection's limits and state drawn with it."""
    rnd = random.Random(seed)
    v5 = rnd.random() < 0.3
    pkts = [_packet(rnd, v5, True) for _ in range(rnd.randint(0, 40))]
    if rnd.random() < 0.4:
        pkts.insert(rnd.randint(0, len(pkts)), _packet(rnd, v5, False))
    data = b"".join(pkts)
    if rnd.random() < 0.3:
        data = data[:rnd.randint(0, len(data))]
    pending = {pi: (rnd.choice([b"$JS.ACK.s.d.1.%d.%d.0.0" % (pi, pi), None]), rnd.choice(["d1", "d2"]), pi * 10)
               for pi in rnd.sample(range(1, 13), rnd.randint(0, 8))}
    return dict(data=data, version=5 if v5 else 4, mpay=rnd.choice([-1, -1, -1, 0, 120, 1 << 20]),
                maxp=rnd.choice([0, 0, 0, 200, 1 << 20]), rmax=rnd.choice([0, 5, 20, 100, 100]),
                interest={b"a.b": (rnd.random() < 0.5, rnd.choice([0, 0, 2])), b"x": (rnd.random() < 0.5, 0)},
                pending=pending, close_on_send=rnd.choice([-1, -1, -1, 1, 2]), held=rnd.random() < 0.5,
                oks=[rnd.random() < 0.5 for _ in range(rnd.randint(0, 20))])


def _run_fast_in(fn, case: dict, prime: bool) -> tuple:
    kw = {k: v for k, v in case.items() if k != "data"}
    c = FakeConn(**kw)
    if prime:  # (topics and interest already known: the steady state)
        for tb in (b"a/b", b"x"):
            c._fast_topic(tb)
        c.log.clear()
    try:
        rest = fn(c, case["data"])
    except Exception as e:  # noqa: BLE001 (compared: both lanes must raise alike)
        rest = ("raised", type(e), str(e))
    return rest, c.state()


def test_fast_in_twin_matches_reference():
    seen: collections.Counter = collections.Counter()
    for seed in range(3000):
        case = _read_case(seed)
        prime = seed % 3 != 0
        got = _run_fast_in(_cmqtt.fast_in, case, prime)
        assert got == _run_fast_in(publish.reference_fast_in, case, prime), (seed, case)
        seen.update(e[0] for e in got[1][0])
        seen["all read"] += got[0] == b""
    # (the cases reach every step: a change of the generator that stops doing so fails here)
    assert min(seen[k] for k in ("deliver", "store", "interest", "send", "send_held", "acks", "all read")) > 50, seen


def test_fast_in_twin_reads_a_steady_state_burst():
    """The common case itself (not only what hypothesis happens to draw): 3.1.1 QoS 1 publishes and PUBACKs."""
    body = b"\x00\x03a/b\x00\x07" + b"p" * 128
    data = (b"\x32" + _varint(len(body)) + body) * 3 + b"\x40\x02\x00\x05" + b"\xc0\x00" + b"\x30\x05"
    case = dict(data=data, version=4, mpay=-1, maxp=0, rmax=0, interest={b"a.b": (False, 2)},
                pending={5: (b"$JS.ACK.s.d.1.50.50.0.0", "d1", 50)}, close_on_send=-1, held=True, oks=[])
    got = _run_fast_in(_cmqtt.fast_in, case, True)
    assert got == _run_fast_in(publish.reference_fast_in, case, True)
    rest, state = got
    assert rest == b"\x30\x05"
    assert [e[0] for e in state[0]] == ["interest", "store", "store", "store", "send_held", "send", "acks"]
    assert state[1:3] == (3, 3 * (len(_HDRS[1]) - 2 + 128))


# ---- a delivery from the session's consumer -------------------------------------------------------------------------

SUBJECTS = [b"$MQTT.msgs.a.b", b"$MQTT.msgs.x", b"$MQTT.msgs.$sys.x", b"$MQTT.msgs.spBv1//0.g", b"$MQTT.msgs.",
            b"$MQTT.msgs.t" + b".y" * 80, b"other.subject"]


@st.composite
def deliveries(draw):
    subject = draw(st.sampled_from(SUBJECTS))
    q = draw(st.sampled_from([b"0", b"1", b"2", b"x", b"9"]))
    n = draw(st.sampled_from([0, 3, 100, 200, 20000]))
    hdr = b"NATS/1.0\r\nNmqtt-Pub:" + q + b"\r\n\r\n"
    if draw(st.integers(0, 5)) == 0:
        hdr = b"NATS/1.0\r\nNmqtt-Pub:1\r\nX: 1\r\n\r\n"
    msg = hdr + b"m" * n
    dc = draw(st.integers(1, 3))
    sseq = draw(st.integers(1, 6))
    reply = draw(st.sampled_from([b"$JS.ACK.$MQTT_msgs.d1.%d.%d.%d.0.0" % (dc, sseq, sseq), b"", b"bad.reply"]))
    return subject, reply, len(hdr), msg


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(deliveries(), min_size=1, max_size=8), st.integers(0, 2), st.booleans(), st.booleans(),
       st.sets(st.integers(1, 4), max_size=3))
def test_on_js_msg_twin_matches_reference(msgs, sqos, reserved, v5, pending):
    def run(fn) -> tuple:
        c = FakeConn(5 if v5 else 4, -1, 0, 10, {}, {pi: (b"r%d" % pi, "d1", pi) for pi in pending}, -1, False, [])
        c.sess.last_pi = 2
        s = _Sub("a.b", "a/b", sqos, SubOpts(sqos), 0, None)
        s.durable = "d1"
        s.reserved = reserved
        out = []
        for subject, reply, hdr, msg in msgs:
            try:
                out.append(fn(c, s, None, None, subject, reply, hdr, msg))
            except Exception as e:  # noqa: BLE001 (compared: both lanes must raise alike)
                out.append(("raised", type(e), str(e)))
        return out, c.state()

    assert run(_cmqtt.on_js_msg) == run(subscribe.reference_on_js_msg)


def test_on_js_msg_twin_writes_the_common_publish():
    def run(fn) -> tuple:
        c = FakeConn(4, -1, 0, 10, {}, {}, -1, False, [])
        s = _Sub("a.b", "a/b", 1, SubOpts(1), 0, None)
        s.durable = "d1"
        hdr = _HDRS[1]
        fn(c, s, None, None, b"$MQTT.msgs.a.b", b"$JS.ACK.$MQTT_msgs.d1.1.7.7.0.0", len(hdr), hdr + b"hello")
        fn(c, s, None, None, b"$MQTT.msgs.a.b", b"$JS.ACK.$MQTT_msgs.d1.2.7.8.0.0", len(hdr), hdr + b"hello")
        return c.state()

    got = run(_cmqtt.on_js_msg)
    assert got == run(subscribe.reference_on_js_msg)
    out = got[10]
    one = b"\x32\x0c\x00\x03a/b\x00\x01hello"
    assert out == one + b"\x3a\x0c\x00\x03a/b\x00\x01hello"  # (the redelivery: same packet id, DUP set)
