"""Subject syntax rules: validation tables and pattern comparisons."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rillet.subjects import (
    is_valid_literal_subject,
    is_valid_publish_subject,
    is_valid_subject,
    match_literal,
    num_tokens,
    subject_has_wildcard,
    subject_is_literal,
    subject_is_subset_match,
    subject_matches_filter,
    subjects_collide,
    token_at,
    tokenize,
)

# (subject, valid for SUB, valid literal/pedantic PUB)
VALIDITY = [
    ("foo", True, True),
    ("foo.bar", True, True),
    ("foo.bar.baz", True, True),
    ("", False, False),
    (".", False, False),
    ("..", False, False),
    (".foo", False, False),
    ("foo.", False, False),
    ("foo..bar", False, False),
    ("foo...bar", False, False),
    ("*", True, False),
    (">", True, False),
    ("foo.*", True, False),
    ("foo.>", True, False),
    ("*.*", True, False),
    ("*.>", True, False),
    ("foo.*.bar", True, False),
    ("foo.bar.*", True, False),
    ("foo.bar.>", True, False),
    (">.bar", False, False),
    ("foo.>.bar", False, False),
    (">.>", False, False),
    ("foo.>.*", False, False),
    # Wildcard characters inside a longer token are ordinary characters.
    ("foo*", True, True),
    ("foo**", True, True),
    ("foo.**", True, True),
    ("foo*bar", True, True),
    ("foo.*bar", True, True),
    ("foo*.bar", True, True),
    ("*bar", True, True),
    ("foo>", True, True),
    ("foo>>", True, True),
    ("foo.>>", True, True),
    ("foo>bar", True, True),
    ("foo.>bar", True, True),
    ("foo>.bar", True, True),
    (">bar", True, True),
    (">>.bar", True, True),
    ("foo.>>.bar", True, True),
    # Unicode is fine.
    ("ünïcødé.主题", True, True),
    ("$JS.API.STREAM.INFO.x", True, True),
    ("_INBOX.abc123", True, True),
]


@pytest.mark.parametrize("subject,sub_ok,literal_ok", VALIDITY)
def test_validity_table(subject: str, sub_ok: bool, literal_ok: bool) -> None:
    assert is_valid_subject(subject) is sub_ok
    assert is_valid_subject(subject, check_runes=True) is sub_ok
    assert is_valid_literal_subject(subject) is literal_ok
    assert is_valid_publish_subject(subject) is (sub_ok and literal_ok)


@pytest.mark.parametrize(
    "subject",
    [
        " ",
        "foo bar",
        "foo. bar",
        " foo",
        "foo ",
        "foo\tbar",
        "\t",
        "foo.\t",
        "foo\nbar",
        "foo\rbar",
        "foo\fbar",
        "foo.bar baz.*",
        "foo. .bar",
        "> ",
    ],
)
def test_whitespace_is_invalid(subject: str) -> None:
    assert not is_valid_subject(subject)
    assert not is_valid_publish_subject(subject)


def test_literal_check_ignores_whitespace_like_nats_server() -> None:
    # The server's literal check (pedantic PUB, /subsz test) does not look
    # for whitespace: the protocol parser has already split on it.
    assert is_valid_literal_subject("foo bar")
    assert not is_valid_literal_subject("foo bar.*")


def test_vertical_tab_is_not_whitespace_for_nats() -> None:
    # Only space, \t, \n, \r and \f are rejected by nats-server.
    assert is_valid_subject("foo\vbar")


@pytest.mark.parametrize(
    "subject",
    [
        "foo.bar.baz.\x00",
        "foo\x00bar",
        "\x00",
        "foo.\ufffd",  # decoded with errors="replace"
        "foo.\udcff",  # decoded with errors="surrogateescape"
    ],
)
def test_check_runes(subject: str) -> None:
    assert not is_valid_subject(subject, check_runes=True)


def test_check_runes_accepts_plain_unicode() -> None:
    assert is_valid_subject("ünï.主题.>", check_runes=True)
    # Without the rune check, NUL is just another byte.
    assert is_valid_subject("foo\x00bar")


@pytest.mark.parametrize(
    "subject,has_wc",
    [
        ("foo", False),
        ("foo.bar", False),
        ("foo*.bar", False),
        ("foo.*bar", False),
        ("foo>", False),
        (">foo.bar", False),
        ("*", True),
        (">", True),
        ("foo.*", True),
        ("*.foo", True),
        ("foo.*.bar", True),
        ("foo.>", True),
        ("", False),
    ],
)
def test_has_wildcard(subject: str, has_wc: bool) -> None:
    assert subject_has_wildcard(subject) is has_wc
    assert subject_is_literal(subject) is (not has_wc)


def test_tokens() -> None:
    assert tokenize("a.b.c") == ["a", "b", "c"]
    assert tokenize("a") == ["a"]
    assert num_tokens("") == 0
    assert num_tokens("a") == 1
    assert num_tokens("a.b.c") == 3
    assert token_at("a.bb.ccc", 1) == "a"
    assert token_at("a.bb.ccc", 2) == "bb"
    assert token_at("a.bb.ccc", 3) == "ccc"
    assert token_at("a.bb.ccc", 4) == ""
    assert token_at("a.bb.ccc", 0) == ""


MATCH_LITERAL = [
    ("foo", "foo", True),
    ("foo", "bar", False),
    ("foo", "*", True),
    ("foo", ">", True),
    ("foo.bar", ">", True),
    ("foo.bar", "foo.>", True),
    ("foo.bar", "bar.>", False),
    ("foo", "foo.>", False),
    ("stats.test.22", "stats.>", True),
    ("stats.test.22", "stats.*.*", True),
    ("foo.bar", "foo", False),
    ("stats.test.foos", "stats.test.foos", True),
    ("stats.test.foos", "stats.test.foo", False),
    ("stats.test", "stats.test.*", False),
    ("stats.test.foos", "stats.*", False),
    ("stats.test.foos", "stats.*.*.foos", False),
    ("*bar", "*bar", True),
    ("xbar", "*bar", False),
    ("foo*", "foo*", True),
    ("foo.***.bar", "foo.***.bar", True),
    (">bar", ">bar", True),
    ("foo.>>>.bar", "foo.>>>.bar", True),
    ("foo.x.bar", "foo.>>>.bar", False),
    # The literal side is literal even when a token is "*" or ">".
    ("foo.*", "foo.*", True),
    ("foo.*", "foo.bar", False),
    ("foo.>", "foo.*", True),
    ("foo.>", "foo.>", True),
    ("", ">", False),
]


@pytest.mark.parametrize("literal,pattern,expected", MATCH_LITERAL)
def test_match_literal(literal: str, pattern: str, expected: bool) -> None:
    assert match_literal(literal, pattern) is expected


SUBSET = [
    ("foo.bar", "foo.bar", True),
    ("foo.bar", "foo.*", True),
    ("foo.bar", "*.bar", True),
    ("foo.bar", "foo.>", True),
    ("foo.bar", ">", True),
    ("foo.bar", "foo", False),
    ("foo.bar", "foo.bar.baz", False),
    ("foo.*", ">", True),
    ("foo.*", "*.*", True),
    ("foo.*", "foo.*", True),
    ("foo.*", "foo.>", True),
    ("foo.*", "foo.bar", False),
    ("foo.*", "*.bar", False),
    ("foo.>", ">", True),
    ("foo.>", "*.>", True),
    ("foo.>", "foo.>", True),
    ("foo.>", "foo.*", False),
    ("foo.>", "foo.bar", False),
    ("foo.>", "foo.*.>", False),
    ("foo.*.>", "foo.>", True),
    (">", "*", False),
    (">", "*.>", False),
    ("*", ">", True),
    ("*", "foo", False),
    ("foo.*bar", "foo.*bar", True),
    ("foo.*bar", "foo.*", True),
    ("foo..bar", "foo.*", False),  # malformed: False
    ("foo.*", "foo..bar", False),  # malformed: False
]


@pytest.mark.parametrize("subject,test,expected", SUBSET)
def test_subset_match(subject: str, test: str, expected: bool) -> None:
    assert subject_is_subset_match(subject, test) is expected
    assert subject_matches_filter(subject, test) is expected


COLLIDE = [
    ("foo.bar", "foo.bar", True),
    ("foo.bar", "foo.baz", False),
    ("foo.*", "foo.*.bar.>", False),
    ("foo.*.bar.>", "foo.*", False),
    ("foo.*", "foo.foo", True),
    ("foo.*", "*.foo", True),
    ("foo.bar.>", "*.bar.foo", True),
    ("foo.>", "foo", False),
    ("foo.>", "*", False),
    ("foo.>", "*.*.*", True),
    ("foo.*", "foo.>", True),
    ("foo.*", "bar.*", False),
    ("*.*", "*", False),
    ("*.*", ">", True),
    (">", "a", True),
    ("a.>", "b.>", False),
    ("a.*.c", "*.b.*", True),
    ("a.*.c", "*.b.d", False),
    ("foo.*bar", "foo.xyz", False),  # *bar is a literal token
    ("foo.*bar", "foo.*", True),
]


@pytest.mark.parametrize("a,b,expected", COLLIDE)
def test_subjects_collide(a: str, b: str, expected: bool) -> None:
    assert subjects_collide(a, b) is expected
    assert subjects_collide(b, a) is expected


# ---------------------------------------------------------------- properties
#
# Compare the pattern helpers against brute force over a finite universe of
# literal subjects.  Patterns use tokens {a, b, *, >}; the universe uses
# {a, b, x} ("x" stands for "any other token") up to one token longer than
# the longest pattern, which is enough to tell the answers apart.

PATTERN_TOKENS = ["a", "b", "*", ">"]
MAX_DEPTH = 4
UNIVERSE = [
    ".".join(p) for n in range(1, MAX_DEPTH + 2) for p in itertools.product("abx", repeat=n)
]


@st.composite
def patterns(draw: st.DrawFn) -> str:
    n = draw(st.integers(1, MAX_DEPTH))
    toks = [draw(st.sampled_from(PATTERN_TOKENS[:3])) for _ in range(n - 1)]
    toks.append(draw(st.sampled_from(PATTERN_TOKENS)))
    return ".".join(toks)


def _matched(pattern: str) -> set[str]:
    return {s for s in UNIVERSE if match_literal(s, pattern)}


def _reference_match(literal: str, pattern: str) -> bool:
    lt, pt = literal.split("."), pattern.split(".")
    for i, p in enumerate(pt):
        if p == ">":
            return len(lt) > i
        if i >= len(lt) or (p != "*" and p != lt[i]):
            return False
    return len(lt) == len(pt)


@settings(max_examples=300, deadline=None)
@given(patterns(), st.sampled_from(UNIVERSE))
def test_match_literal_against_reference(pattern: str, literal: str) -> None:
    assert match_literal(literal, pattern) is _reference_match(literal, pattern)
    assert subject_matches_filter(literal, pattern) is _reference_match(literal, pattern)


@settings(max_examples=300, deadline=None)
@given(patterns(), patterns())
def test_subset_is_set_inclusion(p1: str, p2: str) -> None:
    m1, m2 = _matched(p1), _matched(p2)
    assert subject_is_subset_match(p1, p2) is (m1 <= m2)


@settings(max_examples=300, deadline=None)
@given(patterns(), patterns())
def test_collide_is_nonempty_intersection(p1: str, p2: str) -> None:
    expected = bool(_matched(p1) & _matched(p2))
    assert subjects_collide(p1, p2) is expected
    assert subjects_collide(p2, p1) is expected


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab.*> \t", max_size=10))
def test_validity_agrees_with_token_rules(s: str) -> None:
    toks = s.split(".")
    expected = (
        s != ""
        and all(toks)
        and not any(c in s for c in " \t\n\r\f")
        and ">" not in toks[:-1]
    )
    assert is_valid_subject(s) is expected
    literal_expected = s != "" and all(toks) and "*" not in toks and ">" not in toks
    assert is_valid_literal_subject(s) is literal_expected
    assert subject_has_wildcard(s) is ("*" in toks or ">" in toks)
