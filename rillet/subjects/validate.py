"""Subject syntax: validation, wildcard detection and pattern comparisons.

A subject is a ``str`` made of tokens separated by ``.``.  In a pattern
(a subscription subject) the token ``*`` matches exactly one token and the
token ``>`` matches one or more tokens and may only be the last token.
The wildcard characters are only wildcards when they form a whole token:
``foo.*bar`` and ``foo.>x`` are ordinary literal subjects.

The rules follow the Go nats-server so that Rillet accepts and rejects the
same subjects:

* ``is_valid_subject``: non-empty, no empty token (so no leading, trailing
  or doubled dot), no whitespace (space, tab, CR, LF, FF) anywhere, and
  nothing after a ``>`` token.  With ``check_runes`` it also rejects NUL
  and text that did not come from valid UTF-8 (see below).
* ``is_valid_literal_subject``: no empty token and no wildcard token.  Like
  the Go server's version it does *not* look for whitespace; it is what the
  server uses for pedantic PUB checks, where the protocol parser has
  already split the arguments on whitespace.
* ``is_valid_publish_subject``: ``is_valid_subject`` and no wildcard token.

The comparison helpers assume their arguments are valid subjects (they do
not re-validate on every call); where a result for malformed input is
stated it mirrors the Go server.

Everything here is plain functions on ``str`` with no regexes, written so
that it can later be compiled with mypyc.
"""

from __future__ import annotations

__all__ = [
    "PWC",
    "FWC",
    "TSEP",
    "tokenize",
    "num_tokens",
    "token_at",
    "is_valid_subject",
    "is_valid_literal_subject",
    "is_valid_publish_subject",
    "subject_has_wildcard",
    "subject_is_literal",
    "subject_matches_filter",
    "subject_is_subset_match",
    "subjects_collide",
    "match_literal",
    "tokens_match_literal",
]

PWC = "*"  # partial wildcard token: exactly one token
FWC = ">"  # full wildcard token: one or more tokens, last only
TSEP = "."  # token separator


def tokenize(subject: str) -> list[str]:
    """Split a subject into its tokens (no validation)."""
    return subject.split(TSEP)


def num_tokens(subject: str) -> int:
    """Number of tokens in ``subject`` (0 for the empty string)."""
    if not subject:
        return 0
    return subject.count(TSEP) + 1


def token_at(subject: str, index: int) -> str:
    """The ``index``-th token, counting from 1; ``""`` when out of range."""
    if index < 1:
        return ""
    toks = subject.split(TSEP)
    if index > len(toks):
        return ""
    return toks[index - 1]


def _runes_ok(subject: str) -> bool:
    # The Go server rejects embedded NUL bytes and anything that decodes to
    # the Unicode replacement character (invalid UTF-8, or an encoded
    # U+FFFD).  Our subjects are ``str``: invalid UTF-8 shows up either as
    # U+FFFD (decoded with errors="replace") or as lone surrogates (decoded
    # with errors="surrogateescape"); both are rejected.
    if "\x00" in subject:
        return False
    if subject.isascii():
        return True
    if "\ufffd" in subject:
        return False
    try:
        subject.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def is_valid_subject(subject: str, check_runes: bool = False) -> bool:
    """True if ``subject`` is a valid subject, wildcards allowed (SUB)."""
    if not subject:
        return False
    if check_runes and not _runes_ok(subject):
        return False
    # Whitespace is never allowed (the Go server checks exactly these five).
    if (
        " " in subject
        or "\t" in subject
        or "\n" in subject
        or "\r" in subject
        or "\f" in subject
    ):
        return False
    # Empty tokens: leading, trailing or doubled separator.
    if subject[0] == TSEP or subject[-1] == TSEP or ".." in subject:
        return False
    # A '>' token must be the last token.
    if FWC in subject and (subject.startswith(">.") or ".>." in subject):
        return False
    return True


def subject_has_wildcard(subject: str) -> bool:
    """True if some whole token of ``subject`` is ``*`` or ``>``."""
    if PWC not in subject and FWC not in subject:
        return False
    for t in subject.split(TSEP):
        if t == PWC or t == FWC:
            return True
    return False


def subject_is_literal(subject: str) -> bool:
    """True if no whole token of ``subject`` is a wildcard (no validation)."""
    return not subject_has_wildcard(subject)


def is_valid_literal_subject(subject: str) -> bool:
    """True if ``subject`` has no empty token and no wildcard token.

    Used for PUB subjects in pedantic mode and for the ``/subsz`` test
    subject.  Mirrors the Go server, which does not check whitespace here.
    """
    if not subject or subject[0] == TSEP or subject[-1] == TSEP or ".." in subject:
        return False
    return not subject_has_wildcard(subject)


def is_valid_publish_subject(subject: str) -> bool:
    """A valid subject (whitespace checked) with no wildcard token."""
    return is_valid_subject(subject) and not subject_has_wildcard(subject)


def _subset_tokens(tokens: list[str], test: list[str]) -> bool:
    # Is every subject matched by the pattern ``tokens`` also matched by the
    # pattern ``test``?  Malformed input (an empty token reached before the
    # answer is known) yields False, as in the Go server.
    n = len(tokens)
    i = 0
    for t2 in test:
        if i >= n:
            return False
        if not t2:
            return False
        if t2 == FWC:
            return True
        t1 = tokens[i]
        if not t1 or t1 == FWC:
            return False
        if t1 == PWC:
            if t2 != PWC:
                return False
        elif t2 != PWC and t1 != t2:
            return False
        i += 1
    return n == len(test)


def subject_is_subset_match(subject: str, test: str) -> bool:
    """True if pattern ``subject`` is entirely contained in pattern ``test``.

    ``foo.*`` is a subset of ``>``, ``*.*``, ``foo.*`` and ``foo.>`` but not
    of ``foo.bar``.  Both arguments may contain wildcards; a literal
    ``subject`` is a subset of ``test`` exactly when ``test`` matches it.
    Used for permissions, stream subject overlap and consumer filters.
    """
    if test == FWC:
        return True
    return _subset_tokens(subject.split(TSEP), test.split(TSEP))


def subject_matches_filter(subject: str, filter: str) -> bool:
    """True if ``subject`` matches ``filter`` (a pattern).

    Same as ``subject_is_subset_match``, as in the Go server: with a literal
    ``subject`` it is ordinary wildcard matching; a wildcard token in
    ``subject`` only matches an equal-or-wider wildcard in ``filter``.
    """
    if filter == FWC:
        return True
    return _subset_tokens(subject.split(TSEP), filter.split(TSEP))


def tokens_match_literal(literal: list[str], pattern: list[str]) -> bool:
    """Token-list form of ``match_literal``."""
    n = len(literal)
    i = 0
    for p in pattern:
        if p == FWC:
            return i < n
        if i >= n:
            return False
        if p != PWC and p != literal[i]:
            return False
        i += 1
    return i == n


def match_literal(literal: str, pattern: str) -> bool:
    """Does a subscription on ``pattern`` receive a publish on ``literal``?

    Every token of ``literal`` is taken literally, even ``*`` or ``>``: this
    is exactly what ``Sublist.match`` computes, and what the ``/subsz``
    ``test`` filter uses.  (``subject_matches_filter`` instead treats
    wildcards in its first argument as wildcards.)
    """
    if pattern == FWC:
        return bool(literal)
    return tokens_match_literal(literal.split(TSEP), pattern.split(TSEP))


def subjects_collide(subj1: str, subj2: str) -> bool:
    """True if some literal subject is matched by both patterns.

    ``foo.*`` and ``*.bar`` collide (``foo.bar``); ``foo.*`` and
    ``foo.*.bar.>`` do not (different token counts).
    """
    if subj1 == subj2:
        return True
    t1 = subj1.split(TSEP)
    t2 = subj2.split(TSEP)
    n1 = len(t1)
    n2 = len(t2)
    n = n1 if n1 < n2 else n2
    for i in range(n):
        a = t1[i]
        b = t2[i]
        if not a or not b:
            return False
        if a == FWC or b == FWC:
            # '>' is last and swallows the other's remaining (>= 1) tokens.
            return True
        if a != b and a != PWC and b != PWC:
            return False
    # No '>' seen in the common prefix: token counts must agree.
    return n1 == n2
