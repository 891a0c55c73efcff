"""The sans-IO MQTT codec (rillet.mqtt.codec) and topic mapping (rillet.mqtt.topics), including hostile input."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from rillet.mqtt import codec as C
from rillet.mqtt.topics import TopicError, filter_to_subject, subject_to_topic, topic_to_subject

# ---- strategies ----------------------------------------------------------------------------------------

_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00+#"), max_size=20)
_topic = _text.filter(lambda s: len(s) > 0)
_user_props = st.lists(st.tuples(_text, _text), max_size=3)


@st.composite
def publishes(draw, v5: bool):
    qos = draw(st.integers(0, 2))
    props = {}
    if v5:
        if draw(st.booleans()):
            props["message_expiry_interval"] = draw(st.integers(0, 2**32 - 1))
        if draw(st.booleans()):
            props["response_topic"] = draw(_topic)
        if draw(st.booleans()):
            props["correlation_data"] = draw(st.binary(max_size=20))
        up = draw(_user_props)
        if up:
            props["user_property"] = up
    return C.Publish(draw(_topic), draw(st.binary(max_size=300)), qos, draw(st.booleans()),
                     draw(st.booleans()) if qos else False, draw(st.integers(1, 65535)) if qos else 0, props)


@st.composite
def client_packets(draw, v5: bool):
    kind = draw(st.sampled_from(["pub", "ack", "sub", "unsub", "ping"]))
    if kind == "pub":
        return draw(publishes(v5))
    if kind == "ack":
        return C.Ack(draw(st.sampled_from([C.PUBACK, C.PUBREC, C.PUBREL, C.PUBCOMP])), draw(st.integers(1, 65535)))
    if kind == "sub":
        fl = draw(st.lists(st.tuples(_topic, st.integers(0, 2)), min_size=1, max_size=4))
        return C.Subscribe(draw(st.integers(1, 65535)), [(f, C.SubOpts(q)) for f, q in fl])
    if kind == "unsub":
        return C.Unsubscribe(draw(st.integers(1, 65535)), draw(st.lists(_topic, min_size=1, max_size=4)))
    return C.PingReq()


def _connect(v: int = 4, **kw) -> C.Connect:
    return C.Connect(client_id=kw.pop("client_id", "c1"), version=v, **kw)


def _dec(v: int = 4) -> C.Decoder:
    d = C.Decoder()
    assert d.feed(C.encode(_connect(v), v))[0].version == v
    return d


# ---- round trips at every split point --------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(st.lists(client_packets(False), min_size=1, max_size=5), st.data())
def test_v311_round_trip_any_split(pkts, data):
    wire = b"".join(C.encode(p, 4) for p in pkts)
    d = _dec(4)
    cut = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=6)))
    got = []
    prev = 0
    for c in cut + [len(wire)]:
        got += d.feed(wire[prev:c])
        prev = c
    assert got == pkts
    assert not d.buf


@settings(max_examples=60, deadline=None)
@given(st.lists(client_packets(True), min_size=1, max_size=5))
def test_v5_round_trip_byte_by_byte(pkts):
    wire = b"".join(C.encode(p, 5) for p in pkts)
    d = _dec(5)
    got = []
    for i in range(len(wire)):
        got += d.feed(wire[i:i + 1])
    assert got == pkts


def test_connect_every_split_point():
    c = C.Connect("dev-1", 4, False, 30, C.Will("a/b", b"bye", 1, True), "u", b"p")
    wire = C.encode(c, 4)
    for i in range(len(wire) + 1):
        d = C.Decoder()
        got = d.feed(wire[:i]) + d.feed(wire[i:])
        assert got == [c]


def test_v5_connect_properties_round_trip():
    c = C.Connect("x", 5, True, 10, C.Will("w", b"", 2, False, {"will_delay_interval": 5, "user_property": [("a", "b")]}),
                  None, None, {"session_expiry_interval": 60, "receive_maximum": 10, "topic_alias_maximum": 5,
                               "user_property": [("k", "v"), ("k", "w")]})
    d = C.Decoder()
    assert d.feed(C.encode(c, 5)) == [c]
    assert d.version == 5


# ---- hostile input ---------------------------------------------------------------------------------------

def test_remaining_length_over_four_bytes():
    d = _dec()
    with pytest.raises(C.MalformedPacket, match="malformed variable int"):
        d.feed(b"\x30\xff\xff\xff\xff\x01")


def test_remaining_length_max_is_accepted_as_a_length():
    assert C.encode_varint(C.MAX_REMAINING) == b"\xff\xff\xff\x7f"
    with pytest.raises(ValueError):
        C.encode_varint(C.MAX_REMAINING + 1)


def test_packet_over_the_limit_fails_before_its_body():
    d = C.Decoder(max_packet=100)
    with pytest.raises(C.MalformedPacket) as e:
        d.feed(b"\x10\xc8\x01")  # CONNECT of 200 bytes, nothing of the body yet
    assert e.value.reason == 0x95


def test_qos3_publish_refused_from_its_first_byte():
    d = _dec()
    with pytest.raises(C.MalformedPacket, match="QoS=3"):
        d.feed(b"\x36\x05")


@pytest.mark.parametrize("first", [0x11, 0x41, 0x60, 0x80, 0xA0, 0xC1, 0xE8])
def test_reserved_fixed_header_flags(first):
    d = _dec()
    with pytest.raises(C.MalformedPacket, match="invalid fixed header flags"):
        d.feed(bytes([first, 2, 0, 1]))


def test_packet_type_zero_and_auth_in_311():
    with pytest.raises(C.MalformedPacket):
        _dec().feed(b"\x00\x00")
    with pytest.raises(C.MalformedPacket):
        _dec(4).feed(b"\xf0\x00")


def test_wrong_fixed_remaining_lengths():
    with pytest.raises(C.MalformedPacket, match="remaining length"):
        _dec().feed(b"\x40\x03\x00\x01\x00")
    with pytest.raises(C.MalformedPacket, match="remaining length"):
        _dec().feed(b"\xc0\x01\x00")


@settings(max_examples=80, deadline=None)
@given(st.binary(min_size=1, max_size=8).filter(lambda b: _bad_utf8(b)))
def test_bad_utf8_topic_refused(raw):
    body = len(raw).to_bytes(2, "big") + raw + b"x"
    with pytest.raises(C.MQTTError, match="utf8"):
        _dec().feed(bytes([0x30, len(body)]) + body)


def _bad_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def test_null_character_in_topic():
    body = b"\x00\x03a\x00b"
    with pytest.raises(C.MalformedPacket, match="null"):
        _dec().feed(bytes([0x30, len(body)]) + body)


def test_wildcards_in_publish_topic():
    for t in ("a/+", "#"):
        with pytest.raises(C.MalformedPacket, match="wildcards"):
            _dec().feed(C.encode(C.Publish(t, b""), 4))


def test_connect_checks():
    good = C.encode(_connect(), 4)
    with pytest.raises(C.MalformedPacket, match="reserved bit"):
        C.Decoder().feed(good[:9] + bytes([good[9] | 1]) + good[10:])
    with pytest.raises(C.MQTTError) as e:
        C.Decoder().feed(good[:8] + b"\x03" + good[9:])
    assert e.value.connack == 1
    with pytest.raises(C.MalformedPacket, match="older protocol"):
        C.Decoder().feed(b"\x10\x0e\x00\x06MQIsdp\x03\x02\x00\x00\x00\x00")
    with pytest.raises(C.MalformedPacket, match="password flag"):
        C.Decoder().feed(good[:9] + bytes([0x42]) + good[10:] + b"\x00\x00")
    # will QoS without the will flag
    with pytest.raises(C.MalformedPacket, match="Will QoS"):
        C.Decoder().feed(good[:9] + bytes([0x0A]) + good[10:])


def test_subscribe_bad_qos_and_empty():
    with pytest.raises(C.MalformedPacket):
        _dec().feed(b"\x82\x06\x00\x01\x00\x01a\x03")
    with pytest.raises(C.ProtocolViolation):
        _dec().feed(b"\x82\x02\x00\x01")
    with pytest.raises(C.ProtocolViolation, match="identifier"):
        _dec().feed(b"\x82\x06\x00\x00\x00\x01a\x00")


def test_v5_property_checks():
    d = _dec(5)
    # topic alias 0, in a PUBLISH
    body = b"\x00\x01a" + b"\x03\x23\x00\x00"
    with pytest.raises(C.ProtocolViolation):
        d.feed(bytes([0x30, len(body)]) + body)
    d = _dec(5)
    # a property not allowed in PUBLISH (session expiry)
    body = b"\x00\x01a" + b"\x05\x11\x00\x00\x00\x01"
    with pytest.raises(C.MQTTError):
        d.feed(bytes([0x30, len(body)]) + body)
    d = _dec(5)
    # the same property twice
    body = b"\x00\x01a" + b"\x0a\x02\x00\x00\x00\x01\x02\x00\x00\x00\x01"
    with pytest.raises(C.ProtocolViolation, match="more than once"):
        d.feed(bytes([0x30, len(body)]) + body)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64), st.integers(4, 5))
def test_garbage_never_crashes(data, v):
    d = _dec(v)
    try:
        d.feed(data)
    except C.MQTTError:
        pass


# ---- topics ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("topic,subject", [
    ("a/b", "a.b"), ("/a", "/.a"), ("a//b", "a./.b"), ("a/", "a./"), ("a.b", "a//b"), ("foo", "foo"),
    ("sensors/1/temp", "sensors.1.temp"), ("//a", "/./.a"), ("/", "/./"),
])
def test_topic_subject_mapping(topic, subject):
    assert topic_to_subject(topic) == subject
    assert subject_to_topic(subject) == topic


def test_filters():
    assert filter_to_subject("a/+/c") == "a.*.c"
    assert filter_to_subject("a/#") == "a.>"
    assert filter_to_subject("#") == ">"
    for bad in ("a/#/b", "a/b#", "a+/b"):
        with pytest.raises(TopicError):
            filter_to_subject(bad)
    with pytest.raises(TopicError):
        topic_to_subject("a b")
    with pytest.raises(TopicError):
        topic_to_subject("a/+")


@given(_topic.filter(lambda t: not any(c in t for c in " \t\n\r\f\x7f")))
def test_topic_round_trip(t):
    assert subject_to_topic(topic_to_subject(t)) == t
