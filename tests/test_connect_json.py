"""rillet.server.connect_json decodes a client's CONNECT with the standard library's json module (issue 20: not
msgspec, ~2 MB of a server's memory from its first client on). It must accept and refuse what msgspec's typed
decoding into the same fields did: compared here with msgspec itself, on chosen documents and generated ones."""
from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rillet.server import connect_json as cj


class _MsgspecConnect(msgspec.Struct, omit_defaults=True):
    """What the CONNECT was decoded into before (the same fields, types and defaults)."""
    verbose: bool = True
    pedantic: bool = True
    tls_required: bool = False
    auth_token: str = ""
    user: str = ""
    password: str = msgspec.field(default="", name="pass")
    name: str = ""
    lang: str = ""
    version: str = ""
    protocol: int = 0
    echo: bool = True
    headers: bool = False
    no_responders: bool = False
    sig: str = ""
    jwt: str = ""
    nkey: str = ""


FIELDS = _MsgspecConnect.__struct_fields__


def _msgspec(doc: bytes, typed: bool):
    try:
        r = msgspec.json.decode(doc, type=_MsgspecConnect) if typed else msgspec.json.decode(doc)
    except msgspec.DecodeError:  # (ValidationError included: a subclass)
        return ("refused",)
    except RecursionError:
        return ("RecursionError",)
    return ("ok", {f: getattr(r, f) for f in FIELDS}, msgspec.to_builtins(r)) if typed else ("ok", r)


def _ours(doc: bytes, typed: bool):
    try:
        r = cj.decode(doc, type=cj.ConnectOpts) if typed else cj.decode(doc)
    except cj.DecodeError:  # (ValidationError included: a subclass, as msgspec's)
        return ("refused",)
    except RecursionError:
        return ("RecursionError",)
    return ("ok", {f: getattr(r, f) for f in FIELDS}, r.to_builtins()) if typed else ("ok", r)


def _same(doc: bytes) -> None:
    """Accepted with the same values, or refused, by both. (Which of DecodeError and its subclass ValidationError
    is raised is not compared: every caller catches DecodeError, and for a document with two faults, msgspec
    reports the first it meets while reading, json the syntax error before any type.)"""
    for typed in (True, False):
        want, got = _msgspec(doc, typed), _ours(doc, typed)
        if want[0] == "ok" and got[0] == "ok" and not typed:
            # (floats: compared by their JSON text; NaN cannot come out of either)
            want, got = json.dumps(want[1], sort_keys=True), json.dumps(got[1], sort_keys=True)
        assert got == want, (doc, typed)


CHOSEN = [
    b'{"verbose":false,"pedantic":false,"tls_required":false,"name":"","lang":"python3","version":"2.9.0",'
    b'"protocol":1,"echo":true,"headers":true,"no_responders":true}',
    b'{"user":"a","pass":"b","auth_token":"t","jwt":"e.y.j","sig":"s","nkey":"U1"}',
    b'{}', b' {"a":1} \r\n\t', b'{"user":"a","user":"b"}', b'{"user":1,"user":"b"}', b'{"x":{"a":1,"a":2}}',
    b'{"pass":"p","password":"q"}', b'{"pass":1}', b'{"Verbose":false}',
    # wrong types, not an object
    b'{"protocol":1.0}', b'{"protocol":1E0}', b'{"protocol":1e2}', b'{"protocol":-0.0}', b'{"protocol":true}',
    b'{"verbose":1}', b'{"verbose":null}', b'{"user":null}', b'{"user":["a"]}', b'{"echo":"true"}',
    b'[]', b'"x"', b'null', b'1', b'true',
    # numbers: out of range where read, anything where skipped
    b'{"protocol":-0}', b'{"protocol":2}', b'{"protocol":18446744073709551616}', b'{"protocol":-9223372036854775809}',
    b'{"protocol":1e400}', b'{"protocol":1.8e308}', b'{"x":1e400}', b'{"x":-1e400}', b'{"x":1e-400}', b'{"x":1.8e308}',
    b'{"x":[1e400]}', b'{"x":{"y":1e400}}', b'{"x":1.7976931348623157e308}', b'{"x":12345678901234567890.5}',
    b'{"x":1' + b'0' * 4299 + b'}', b'{"x":1' + b'0' * 4300 + b'}', b'{"x":-1' + b'0' * 4300 + b'}',
    b'{"protocol":1' + b'0' * 4300 + b'}',
    # not JSON
    b'', b' ', b'{', b'{"a":1} x', b'{"a":1}{}', b'{"a":1}\x00', b'\x00{"a":1}', b'{"x":1,}', b'{,}', b"{'a':1}",
    b'{"protocol":01}', b'{"x":-}', b'{"x":.5}', b'{"x":5.}', b'{"x":-.5}', b'{"x":+1}', b'{"x":tru}', b'{"x":True}',
    b'{"x":NaN}', b'{"x":Infinity}', b'{"x":-Infinity}', b'{"x":[]]}', b'{"x":{}}}', b'{"x":"\\x"}',
    b'{"user":"a\x01b"}', b'{"x":"\t"}', b'{"x":"\x7f"}', b'{"user":"a\\u0000b"}', b'{"x":"\\/"}',
    # UTF-8 and escaped UTF-16
    b'{"user":"\xc3\xa9"}', b'{"user":"\\u00e9\\n"}', b'{"user":"\\ud83d\\ude00"}', b'{"user":"\\uD83D\\uDE00"}',
    b'{"user":"\\ud800"}', b'{"x":"\\ud800"}', b'{"\\ud800":1}', b'{"user":"\\udc00\\ud800"}', b'{"x":"\\uDC00"}',
    b'{"x":"\\ud800\\u0041"}', b'{"x":["\\ud800"]}',
]


@pytest.mark.parametrize("doc", CHOSEN)
def test_chosen_documents_as_msgspec(doc):
    _same(doc)


def test_connect_opts_defaults_are_nats_servers():
    co = cj.ConnectOpts()
    assert (co.verbose, co.pedantic, co.echo, co.protocol, co.user, co.password, co.headers) == \
        (True, True, True, 0, "", "", False)
    assert cj.decode(b'{"pass":"pw","protocol":1}', type=cj.ConnectOpts).password == "pw"
    assert issubclass(cj.ValidationError, cj.DecodeError)  # (as msgspec's: a DecodeError handler takes both)
    assert cj.ConnectOpts() == cj.ConnectOpts() and "password='pw'" in repr(
        cj.decode(b'{"pass":"pw"}', type=cj.ConnectOpts))


def test_not_utf8_is_a_decode_error():
    """(msgspec raised UnicodeDecodeError when the byte was inside a string: Client.proto_connect makes a CONNECT
    UTF-8 first, so only a client's INFO can get here; now a parse error either way)"""
    for doc in (b'{"user":"\xff"}', b'{"x":\xff}', b'\xfe{}'):
        with pytest.raises(cj.DecodeError):
            cj.decode(doc)
        with pytest.raises(cj.DecodeError):
            cj.decode(doc, type=cj.ConnectOpts)


_names = st.sampled_from(list(cj._FIELDS) + ["x", "Verbose", "password", "\\ud800", "\u00e9"])
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2 ** 70), max_value=2 ** 70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
    st.sampled_from(["1e400", "-1e400", "1E0", "-0", "-0.0", "1.0", "NaN", "\"\\ud800\"", "\"\\ud83d\\ude00\"",
                     "\"\\uDC00\"", "01", "\"a\x01\""]).map(lambda raw: _Raw(raw)))


class _Raw(str):
    """JSON text written as it is (what a generator of Python values cannot make)."""


def _write(v) -> str:
    if isinstance(v, _Raw):
        return str(v)
    if isinstance(v, dict):
        return "{" + ",".join(f"{json.dumps(k) if not isinstance(k, _Raw) else k}:{_write(x)}"
                              for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ",".join(_write(x) for x in v) + "]"
    return json.dumps(v)


def _key(k: str) -> str:
    return '"' + k + '"' if k.startswith("\\u") else json.dumps(k)  # (an escape written as it is)


_values = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                          st.dictionaries(st.text(max_size=4), inner, max_size=3)),
                       max_leaves=6)
_members = st.lists(st.tuples(_names, _values), max_size=6)


@settings(max_examples=400, deadline=None, derandomize=True)  # (the same documents every run)
@given(_members, st.sampled_from(["", " ", "\n", "x", ",", "}"]))
def test_generated_documents_as_msgspec(members, tail):
    doc = "{" + ",".join(f"{_key(k)}:{_write(v)}" for k, v in members) + "}" + tail
    _same(doc.encode("utf-8", "surrogatepass"))
