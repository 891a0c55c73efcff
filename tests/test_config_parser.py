"""The NATS configuration language parser (rillet.config.parser)."""
from __future__ import annotations

import datetime as dt
import random
import re
import shutil
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rillet.config import ConfigError, parse_file, parse_go_duration, parse_string
from rillet.gocompat.goquote import go_quote


def parse(text: str) -> dict:
    return parse_string(text, "t.conf")


def error_of(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse(text)
    return info.value


# -- key/value syntax -----------------------------------------------------------


@pytest.mark.parametrize("text", ["port: 4222", "port = 4222", "port 4222", "port:4222",
                                  "port=4222", "  port   :   4222  ", "port\t4222",
                                  "port 4222;", "port: 4222,", "port\n4222"])
def test_key_value_separators(text):
    assert parse(text) == {"port": 4222}


def test_quoted_keys():
    assert parse('"a b": 1\n\'c:d\' = 2') == {"a b": 1, "c:d": 2}


def test_several_entries_on_one_line():
    assert parse("a: 1; b: 2, c: 3") == {"a": 1, "b": 2, "c": 3}


def test_later_key_wins():
    assert parse("a: 1\na: 2") == {"a": 2}


def test_keys_keep_their_case():
    assert parse("Port: 1") == {"Port": 1}


def test_comments():
    text = """
    # hash comment
    // slash comment
    a: 1 # after a value
    b: "x" // after a string
    c: [1, # in an array
        2 // also here
    ]
    d { # in a map
      e: 1
    }
    """
    assert parse(text) == {"a": 1, "b": "x", "c": [1, 2], "d": {"e": 1}}


def test_empty_and_comment_only_files():
    assert parse("") == {}
    assert parse("# nothing\n\n// here\n") == {}


def test_json_style_document():
    text = '{\n  "port": 4222,\n  "cluster": {"name": "c", "routes": ["nats://a:1", "nats://b:2"]}\n}\n'
    assert parse(text) == {"port": 4222,
                           "cluster": {"name": "c", "routes": ["nats://a:1", "nats://b:2"]}}


# -- maps and arrays --------------------------------------------------------------


def test_nested_maps_with_all_separator_styles():
    text = """
    cluster {
      name: c1
      listen = 0.0.0.0:6222
      authorization { user: u, password: p; timeout: 2 }
    }
    tls: { cert_file: "a.pem", key_file: 'b.pem', }
    """
    assert parse(text) == {
        "cluster": {"name": "c1", "listen": "0.0.0.0:6222",
                    "authorization": {"user": "u", "password": "p", "timeout": 2}},
        "tls": {"cert_file": "a.pem", "key_file": "b.pem"},
    }


def test_arrays_commas_newlines_and_trailing_commas():
    assert parse("a: [1, 2, 3 ]") == {"a": [1, 2, 3]}
    assert parse("a: [1, 2, 3,]") == {"a": [1, 2, 3]}
    assert parse("a: [x, y, z]") == {"a": ["x", "y", "z"]}
    assert parse("a: [\n  x\n  y,\n  z,\n]") == {"a": ["x", "y", "z"]}
    assert parse("a: []") == {"a": []}
    assert parse("a: [ ]") == {"a": []}


def test_number_directly_before_closing_bracket():
    # as in nats-server, "1]" is a string (its integers do not end at "]"), so the array is never closed
    assert str(error_of("a: [1]")) == ("Parse error on line 1: 'Expected an array value terminator \",\" or an "
                                       "array terminator \"]\", but got '\x00' instead.'")
    assert parse("a: [1 ]") == {"a": [1]}
    assert parse("a: [1, 2.5]") == {"a": [1, 2.5]}  # floats and negative integers do end there
    assert parse("a: [-1]") == {"a": [-1]}


def test_arrays_of_maps_and_nested_arrays():
    text = "users: [{user: a, pass: b}, {user: c}]\nm: [[1, 2 ], [x]]"
    assert parse(text) == {"users": [{"user": "a", "pass": "b"}, {"user": "c"}],
                           "m": [[1, 2], ["x"]]}


def test_map_without_separator_before_brace():
    assert parse("a {\n b: 1\n}") == {"a": {"b": 1}}
    assert parse("a={b=1}") == {"a": {"b": 1}}


# -- scalars ----------------------------------------------------------------------


@pytest.mark.parametrize("word,value", [
    ("true", True), ("TRUE", True), ("True", True), ("yes", True), ("YES", True),
    ("on", True), ("On", True), ("false", False), ("False", False), ("no", False),
    ("NO", False), ("off", False), ("OFF", False)])
def test_booleans(word, value):
    assert parse(f"b: {word}") == {"b": value}


def test_quoted_boolean_words_are_strings():
    assert parse('b: "true"\nc: \'off\'') == {"b": "true", "c": "off"}


@pytest.mark.parametrize("text,value", [
    ("0", 0), ("4222", 4222), ("-1", -1), ("-42", -42), ("9223372036854775807", 2**63 - 1),
    ("1.5", 1.5), ("-0.25", -0.25), ("10.0", 10.0)])
def test_numbers(text, value):
    result = parse(f"n: {text}")["n"]
    assert result == value and type(result) is type(value)


@pytest.mark.parametrize("text,value", [
    ("1k", 1000), ("1K", 1000), ("1kb", 1024), ("1KB", 1024), ("1Ki", 1024), ("1KiB", 1024),
    ("2m", 2_000_000), ("64MB", 64 * 1024**2), ("8mi", 8 * 1024**2),
    ("1G", 1000**3), ("1GB", 1024**3), ("1T", 1000**4), ("1TB", 1024**4), ("2P", 2 * 1000**5),
    ("1PB", 1024**5), ("1E", 1000**6), ("-1k", -1000), ("-2MB", -2 * 1024**2)])
def test_size_suffixes(text, value):
    # nats-server 2.x: a bare letter is a power of 1000, with b/i/ib a power of 1024.
    assert parse(f"n: {text}") == {"n": value}


def test_size_suffix_errors():
    assert str(error_of("n: 99999999999999999999")) == "integer '99999999999999999999' is out of the range"
    # nats-server drops a key with an unknown suffix and wraps an overflowing size around; Rillet refuses both
    assert str(error_of("n: 1kbi")) == "t.conf:1:0: invalid size suffix in '1kbi'"
    assert str(error_of("n: 10E")) == "integer '10E' is out of the range"


def test_a_digit_after_a_size_suffix_makes_a_string():
    assert parse("a: 0K1abc\nb: 5e7") == {"a": "0K1abc", "b": "5e7"}


def test_strings_that_start_with_digits():
    assert parse("a: 4222abc") == {"a": "4222abc"}
    assert parse("d: 500ms\ne: 1h30m\nf: 10s") == {"d": "500ms", "e": "1h30m", "f": "10s"}
    assert parse("a: 1:2") == {"a": "1:2"}


def test_addresses_and_urls_unquoted():
    text = ("host: 127.0.0.1\nlisten: 0.0.0.0:4222\nurl: nats://x:4222\n"
            "u2: nats://user:pw@10.0.0.1:4222\nv6: \"[::1]:4222\"\npath: /var/lib/nats\n")
    assert parse(text) == {"host": "127.0.0.1", "listen": "0.0.0.0:4222", "url": "nats://x:4222",
                           "u2": "nats://user:pw@10.0.0.1:4222", "v6": "[::1]:4222",
                           "path": "/var/lib/nats"}


def test_unquoted_strings_stop_at_space_and_separators():
    assert parse("a: [x.y, z.>]") == {"a": ["x.y", "z.>"]}
    assert parse("a { b: c}") == {"a": {"b": "c"}}
    assert parse("a: b;c: d") == {"a": "b", "c": "d"}


def test_double_quoted_escapes():
    assert parse(r's: "a\tb\nc\rd\"e\\f\x41"') == {"s": 'a\tb\nc\rd"e\\fA'}
    assert parse(r's: "\xc3\xa9"') == {"s": "é"}
    assert parse('s: "multi\nline"') == {"s": "multi\nline"}
    assert parse('s: "with # and // inside"') == {"s": "with # and // inside"}


def test_single_quoted_strings_are_raw():
    assert parse(r"s: 'a\q\n'") == {"s": r"a\q\n"}
    assert parse("s: '$NOT_A_VAR'") == {"s": "$NOT_A_VAR"}


def test_escape_errors():
    err = error_of(r's: "a\q"')
    assert str(err) == ("Parse error on line 1: 'Invalid escape character 'q'. Only the following escape characters "
                        "are allowed: \\xXX, \\t, \\n, \\r, \\\", \\\\.'")
    assert (err.line, err.column) == (1, 7)
    assert str(error_of(r's: "\xZZ"')) == "Parse error on line 1: 'Expected two hexadecimal digits after '\\x', but got 'ZZ''"


def test_block_strings():
    text = "motd: (\nfirst line\n  second (with parens)\n)\nnext: 1\n"
    assert parse(text) == {"motd": "\nfirst line\n  second (with parens)\n", "next": 1}


def test_unterminated_block_string():
    assert str(error_of("a: (\nxx\n")) == "Parse error on line 3: 'Unexpected EOF processing block.'"


def test_datetime():
    assert parse("d: 2021-03-04T05:06:07Z") == {
        "d": dt.datetime(2021, 3, 4, 5, 6, 7, tzinfo=dt.timezone.utc)}
    assert str(error_of("d: 20211-03")) == "Parse error on line 1: 'All ISO8601 dates must be in full Zulu form.'"
    assert str(error_of("d: 2021-03-04")) == ("Parse error on line 1: 'Expected 'T' in ISO8601 datetime, but found "
                                              "'\x00' instead.'")
    assert str(error_of("d: 2021-02-30T00:00:00Z")) == ("expected Zulu formatted DateTime, but got "
                                                        "'2021-02-30T00:00:00Z'")


def test_bcrypt_hash_unquoted_is_not_a_variable():
    h = "$2a$11$W2zko751KUvVy59mUTWmpOdWjpEm5qhcCZRd05GjI/sSOT.xtiHyG"
    assert parse(f"password: {h}") == {"password": h}


# -- variables --------------------------------------------------------------------


def test_variables_from_the_file():
    text = "PORT: 4333\nport: $PORT\nname = $NAME_\nNAME_ = x"
    with pytest.raises(ConfigError):  # must be defined before use
        parse(text)
    assert parse("PORT: 4333\nport: $PORT") == {"PORT": 4333, "port": 4333}


def test_variables_hold_any_value():
    text = "L = [a, b]\nM = {x: 1}\nl: $L\nm: $M\ns: {inner: $M}"
    result = parse(text)
    assert result["l"] == ["a", "b"] and result["m"] == {"x": 1} and result["s"] == {"inner": {"x": 1}}


def test_variables_use_block_scope():
    text = "X: 1\na { X: 2, v: $X }\nb { v: $X }\nc { d { e { v: $X } } }"
    result = parse(text)
    assert result["a"]["v"] == 2 and result["b"]["v"] == 1 and result["c"]["d"]["e"]["v"] == 1


def test_variable_defined_inside_block_is_not_visible_outside():
    err = error_of("a { Y: 1 }\nb: $Y")
    assert str(err) == "variable reference for 'Y' on line 2 can not be found" and err.line == 2


def test_variables_in_arrays_of_maps():
    text = "P = {publish: [a]}\nusers: [{user: u, permissions: $P}, {user: v, permissions: $P}]"
    users = parse(text)["users"]
    assert users[0]["permissions"] == users[1]["permissions"] == {"publish": ["a"]}


def test_used_variables_are_recorded():
    result = parse("X = 1\nY = 2\nport: $X\nc { Z: 3, p: $Z }")
    assert result.used_vars == {"X"}
    assert result["c"].used_vars == {"Z"}


def test_environment_variables(monkeypatch):
    monkeypatch.setenv("RILLET_T_PORT", "4555")
    monkeypatch.setenv("RILLET_T_STR", "hello")
    monkeypatch.setenv("RILLET_T_SIZE", "2MB")
    monkeypatch.setenv("RILLET_T_BOOL", "off")
    monkeypatch.setenv("RILLET_T_LIST", "[a, b]")
    result = parse("p: $RILLET_T_PORT\ns: $RILLET_T_STR\nz: $RILLET_T_SIZE\n"
                   "b: $RILLET_T_BOOL\nl: $RILLET_T_LIST")
    assert result == {"p": 4555, "s": "hello", "z": 2 * 1024**2, "b": False, "l": ["a", "b"]}


def test_file_variables_shadow_the_environment(monkeypatch):
    monkeypatch.setenv("RILLET_T_X", "env")
    assert parse("RILLET_T_X: file\nv: $RILLET_T_X")["v"] == "file"


def test_undefined_variable_error(monkeypatch):
    monkeypatch.delenv("RILLET_T_NOPE", raising=False)
    err = error_of("a: 1\nport: $RILLET_T_NOPE")
    assert (err.file, err.line, err.column) == ("t.conf", 2, 8)
    assert str(err) == "variable reference for 'RILLET_T_NOPE' on line 2 can not be found"  # nats-server's words


def test_environment_variable_errors(monkeypatch):
    monkeypatch.setenv("RILLET_T_BAD", "a b")
    assert str(error_of("v: $RILLET_T_BAD")) == (
        "variable reference for 'RILLET_T_BAD' on line 1 could not be parsed: Parse error on line 1: 'Expected a "
        "top-level value to end with a new line, comment or EOF, but got 'b' instead.'")
    monkeypatch.setenv("RILLET_T_CYCLE", "$RILLET_T_CYCLE")
    assert str(error_of("v: $RILLET_T_CYCLE")) == (
        "variable reference for 'RILLET_T_CYCLE' on line 1 could not be parsed: variable reference for "
        "'RILLET_T_CYCLE' on line 1 could not be parsed: variable reference cycle for 'RILLET_T_CYCLE'")
    monkeypatch.setenv("RILLET_T_A", "$RILLET_T_B")
    monkeypatch.setenv("RILLET_T_B", "$RILLET_T_A")
    assert "cycle" in error_of("v: $RILLET_T_A").reason


def test_dollar_inside_quotes_is_literal():
    assert parse('s: "$HOME"') == {"s": "$HOME"}


# -- includes ---------------------------------------------------------------------


def test_include_forms(tmp_path):
    (tmp_path / "a.conf").write_text("port: 4333\n")
    (tmp_path / "b.conf").write_text("host: 127.0.0.1\n")
    (tmp_path / "c.conf").write_text("debug: true\n")
    main = tmp_path / "main.conf"
    main.write_text("include a.conf\ninclude 'b.conf'\ninclude \"c.conf\"\nserver_name: s\n")
    assert parse_file(main) == {"port": 4333, "host": "127.0.0.1", "debug": True,
                                "server_name": "s"}


def test_include_is_relative_to_the_including_file(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "inner.conf").write_text("x: 1\n")
    (sub / "middle.conf").write_text("include inner.conf\ny: 2\n")
    (tmp_path / "main.conf").write_text("include sub/middle.conf\n")
    assert parse_file(tmp_path / "main.conf") == {"x": 1, "y": 2}


def test_include_inside_a_block(tmp_path):
    (tmp_path / "auth.conf").write_text("user: a\npassword: b\n")
    (tmp_path / "main.conf").write_text("authorization {\n  include auth.conf\n  timeout: 3\n}\n")
    assert parse_file(tmp_path / "main.conf") == {
        "authorization": {"user": "a", "password": "b", "timeout": 3}}


def test_included_keys_serve_as_variables(tmp_path):
    (tmp_path / "vars.conf").write_text("PORT: 4999\n")
    (tmp_path / "main.conf").write_text("include vars.conf\nport: $PORT\n")
    result = parse_file(tmp_path / "main.conf")
    assert result["port"] == 4999 and "PORT" in result.used_vars


def test_include_errors_name_the_included_file(tmp_path):
    (tmp_path / "bad.conf").write_text("a: 1\nb: [1,,2]\n")
    (tmp_path / "main.conf").write_text("include bad.conf\n")
    with pytest.raises(ConfigError) as info:
        parse_file(tmp_path / "main.conf")
    err = info.value
    assert err.file == str(tmp_path / "bad.conf") and err.line == 2
    assert str(err) == "error parsing include file 'bad.conf', Parse error on line 2: 'Unexpected array value terminator ','.'"


def test_missing_include(tmp_path):
    (tmp_path / "main.conf").write_text("a: 1\ninclude nope.conf\n")
    with pytest.raises(ConfigError) as info:
        parse_file(tmp_path / "main.conf")
    err = info.value
    assert err.file == str(tmp_path / "main.conf") and err.line == 2
    # as nats-server says it: no position in front
    assert str(err) == f"error parsing include file 'nope.conf', open {tmp_path / 'nope.conf'}: no such file or directory"


def test_include_cycle(tmp_path):
    (tmp_path / "a.conf").write_text("include b.conf\n")
    (tmp_path / "b.conf").write_text("include a.conf\n")
    with pytest.raises(ConfigError) as info:
        parse_file(tmp_path / "a.conf")
    assert "cycle" in info.value.reason


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        parse_file(tmp_path / "none.conf")
    assert str(info.value) == f"open {tmp_path / 'none.conf'}: no such file or directory"  # nats-server's words


# -- positions and errors -----------------------------------------------------------


def test_key_positions_are_recorded(tmp_path):
    path = tmp_path / "p.conf"
    path.write_text("a: 1\n  b {\n    c: 2\n  }\nlist: [x,\n   y]\n")
    result = parse_file(path)
    # nats-server's columns: from 0 on the first line, from 1 on the others
    assert tuple(result.pos("a")) == (str(path), 1, 0)
    assert tuple(result.pos("b")) == (str(path), 2, 3)
    assert tuple(result["b"].pos("c")) == (str(path), 3, 5)
    assert result["list"].pos(1).line == 6 and result["list"].pos(1).column == 4


_ARRAY_END = 'Expected an array value terminator "," or an array terminator "]", but got'
_MAP_END = 'Expected a map value terminator "," or a map terminator "}", but got'
_TOP_END = "Expected a top-level value to end with a new line, comment or EOF, but got"


# What nats-server 2.15 says for each (recorded from ``nats-server -t -c``; tests/test_startup_errors.py runs a
# selection of them against nats-server itself).
@pytest.mark.parametrize("text,line,message", [
    ("a: 1\nb: [,1]", 2, "Parse error on line 2: 'Unexpected array value terminator ','.'"),
    ("a: 1\nb: [1,,2]", 2, "Parse error on line 2: 'Unexpected array value terminator ','.'"),
    ("a: {b: 1", 1, f"Parse error on line 1: '{_MAP_END} '\x00' instead.'"),
    ("a: [1, 2", 1, f"Parse error on line 1: '{_ARRAY_END} '\x00' instead.'"),
    ('a: "abc', 1, "Parse error on line 1: 'Unexpected EOF.'"),
    ("a: 'abc", 1, "Parse error on line 1: 'Unexpected EOF.'"),
    ("a: 1.5s", 1, f"Parse error on line 1: '{_TOP_END} 's' instead.'"),
    ("a: b c", 1, f"Parse error on line 1: '{_TOP_END} 'c' instead.'"),
    (": 1", 1, "Parse error on line 1: 'Unexpected key separator ':''"),
    ("a { = 1 }", 1, "Parse error on line 1: 'Unexpected key separator '='.'"),
    ("a: .5", 1, "Parse error on line 1: 'Floats must start with a digit'"),
    ("a: -x", 1, "Parse error on line 1: 'Expected a digit but got 'x'.'"),
    ("a: 1.x", 1, "Parse error on line 1: 'Floats must have a digit after the '.', but got 'x' instead.'"),
    ("a:\n1", 2, "Parse error on line 2: 'Expected value but found new line'"),
    ("a: [1 2]", 1, f"Parse error on line 1: '{_ARRAY_END} '2' instead.'"),
    ("a { b: 1 ] }", 1, f"Parse error on line 1: '{_MAP_END} ']' instead.'"),
    ("a {\n b: 1", 2, f"Parse error on line 2: '{_MAP_END} '\x00' instead.'"),
    ("port: {\n", 2, "Parse error on line 2: 'Unexpected EOF processing map.'"),
    ("a { b: [1, 2 ] ] }", 1, f"Parse error on line 1: '{_MAP_END} ']' instead.'"),
    ("a { ] }", 1, "Parse error on line 1: 'Unexpected array end ']' processing map.'"),
    ("include [a]", 1, "Parse error on line 1: 'Expected include value but found start of an array'"),
    ("include 12", 1, "Parse error on line 1: 'Expected include value but found start of a number'"),
    ('include "x.conf', 1, "Parse error on line 1: 'Unexpected EOF in double quoted include'"),
    ("{ a: 1 ]", 1, "Parse error on line 1: 'Expected a block-level value to end with a new line, comment or EOF, "
                    "but got ']' instead.'"),
    # a key and nothing else: the parser's own message, with the position of the end of the file
    ("port", 1, "config is invalid (t.conf:1:4)"),
    ("x\n  = 1\n]", 3, "config is invalid (t.conf:3:2)"),
])
def test_syntax_errors_in_nats_server_words(text, line, message):
    err = error_of(text)
    assert str(err) == message
    assert (err.file, err.line) == ("t.conf", line)
    assert isinstance(err, ValueError)


# nats-server's columns: the distance in bytes from the new line before (so from 0 on the first line)
@pytest.mark.parametrize("text,key,line,col", [
    ("foo: 1", "foo", 1, 0),
    ("  foo: 1", "foo", 1, 2),
    ("\nfoo: 1", "foo", 2, 1),
    ("\n  foo: 1", "foo", 2, 3),
    ("a: 1; foo: 2", "foo", 1, 6),
    ('"foo": 1', "foo", 1, 1),  # after the quote
    ("\r\nfoo: 1", "foo", 2, 1),
    ("é: 1; foo: 2", "foo", 1, 7),  # bytes, not characters
])
def test_key_columns(text, key, line, col):
    assert tuple(parse(text).pos(key)) == ("t.conf", line, col)


def test_array_element_positions():
    result = parse('a: [x, "y",\n  {b: 1}, [2 ]\n]')
    lst = result["a"]
    assert [tuple(lst.pos(i))[1:] for i in range(4)] == [(1, 4), (1, 8), (2, 9), (2, 15)]
    # a map or an array inside an array is placed at its closing bracket, as nats-server places it
    assert tuple(lst[2].position)[1:] == (2, 9)


# -- durations ----------------------------------------------------------------------


@pytest.mark.parametrize("text,seconds", [
    ("0", 0.0), ("2m", 120.0), ("500ms", 0.5), ("1h30m", 5400.0), ("1.5s", 1.5),
    ("-2s", -2.0), ("100us", 1e-4), ("100µs", 1e-4), ("10ns", 1e-8), (".5s", 0.5),
    ("1h2m3s4ms", 3723.004)])
def test_go_durations(text, seconds):
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "1x", "s", "1.s2", "--1s", "1 s"])
def test_bad_go_durations(text):
    with pytest.raises(ValueError):
        parse_go_duration(text)


# -- round trip property ------------------------------------------------------------

_KEY = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True).filter(
    lambda k: k.lower() != "include")
# (no NUL: nats-server reads a NUL as the end of the file, even in a quoted string, and so does Rillet)
_TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=12)
_SCALAR = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.booleans(),
    _TEXT,
    st.tuples(st.integers(0, 10**6), st.integers(0, 10**4)).map(lambda t: float(f"{t[0]}.{t[1]}")),
)
_VALUE = st.recursive(
    _SCALAR,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_KEY, inner, max_size=4)),
    max_leaves=12,
)
_BOOL_WORDS = {True: ["true", "TRUE", "yes", "Yes", "on", "ON"],
               False: ["false", "False", "no", "NO", "off", "Off"]}
_SAFE_UNQUOTED = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_.")


def _serialize_string(value: str, draw) -> str:
    style = draw(st.sampled_from(["double", "single", "bare"]))
    if (style == "bare" and value and set(value) <= _SAFE_UNQUOTED and value[0] != "."
            and value.lower() not in ("true", "false", "yes", "no", "on", "off")):
        return value
    if style == "single" and "'" not in value:
        return f"'{value}'"
    out = []
    for ch in value:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch in "\t\n\r":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r"}[ch])
        elif ord(ch) < 0x20 and draw(st.booleans()):
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _serialize(value, draw, indent: str = "") -> str:
    if isinstance(value, bool):
        return draw(st.sampled_from(_BOOL_WORDS[value]))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return _serialize_string(value, draw)
    if isinstance(value, list):
        if not value:
            return "[]"
        sep = draw(st.sampled_from([", ", ",\n", "\n"]))
        items = [_serialize(v, draw, indent + "  ") for v in value]
        trailing = draw(st.sampled_from(["", ","])) if sep.strip() == "," else ""
        if not trailing and items[-1][-1].isdigit() and not isinstance(value[-1], float):
            trailing = " "  # "1]" would be a string (nats-server's integers do not end at "]")
        return "[" + sep.join(items) + trailing + "]"
    body = _serialize_entries(value, draw, indent + "  ")
    return "{" + ("\n" + body + "\n" + indent if value else "") + "}"


def _serialize_entries(mapping: dict, draw, indent: str) -> str:
    lines = []
    for key, val in mapping.items():
        sep = draw(st.sampled_from([": ", " = ", " ", ":", "="]))
        if sep == " " and isinstance(val, str) and val == "":
            sep = ": "  # nothing after a bare key would leave it without a value
        quoted_key = draw(st.sampled_from([key, f'"{key}"']))
        end = draw(st.sampled_from(["", ",", ";", "  # note"]))
        lines.append(f"{indent}{quoted_key}{sep}{_serialize(val, draw, indent)}{end}")
    return "\n".join(lines)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(_KEY, _VALUE, max_size=5), st.data())
def test_round_trip(doc, data):
    text = _serialize_entries(doc, data.draw, "")
    assert parse_string(text) == doc, text


def test_stray_closing_brace_at_top_level_is_ignored():
    # nats-server accepts these (its JSON-style support); so do we.
    assert parse("port: 1\n}\n") == {"port": 1}
    assert parse("port: 1 }\ndebug: true") == {"port": 1, "debug": True}


# -- the same verdict as nats-server on arbitrary text ------------------------------------------------------------

_PIECES = ["a", "b1", "include", "inc.conf", " ", "\t", "\n", "\n", "\r\n", ":", "=", "{", "}", "[", "]", ",", ";",
           "#c", "//c", "/", '"', "'", "\\", "\\x4", "\\t", "\\q", "1", "12", "-", ".", "k", "kb",
           "2020-01-01T00:00:00Z", "2020-", "(", ")", "\n)\n", "$a", "true", "1.2", "127.0.0.1:4", "é", "1]", '"s"',
           "'q'", "a: {b: [1 ,{c: 2}]}\n", "  k = $a\n", "\nm {\n n: 1\n}\n"]


@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server not on PATH")
def test_random_texts_get_nats_server_verdict(tmp_path):
    """300 seeded random texts: where nats-server's parser refuses one, Rillet's refuses it in the same words;
    where nats-server's parser accepts one (it then complains of unknown fields), Rillet's accepts it, with the
    keys at the same line and column."""
    rng = random.Random(20261125)
    (tmp_path / "inc.conf").write_text("a: 1\n")
    path = tmp_path / "t.conf"
    mismatches = []
    for _ in range(300):
        text = "".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 14)))
        path.write_bytes(text.encode())
        go = subprocess.run(["nats-server", "-t", "-c", str(path)], capture_output=True, timeout=10)
        said = go.stderr.decode("utf-8", "surrogateescape").strip().removeprefix("nats-server: ")
        try:
            root = parse_file(path)
        except ConfigError as e:
            ours = str(e)
        else:
            ours = None
        fields = re.findall(rf'{re.escape(str(path))}:(\d+):(\d+): unknown field (".*")', said)
        if fields or "is valid" in said or "config has no values" in said:  # the parser accepted it
            keys = sorted((pos.line, pos.column, go_quote(k)) for k, pos in root.positions.items()
                          if k not in root.used_vars) if ours is None else ours
            if keys != sorted((int(a), int(b), k) for a, b, k in fields):
                mismatches.append((text, said, keys))
        elif ours != said:
            mismatches.append((text, said, ours))
    assert not mismatches, mismatches[:3]
