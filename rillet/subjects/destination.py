"""Parsing and checking subject-mapping destinations, as nats-server does: the one place that knows the
destination syntax (``$n``, ``{{wildcard(n)}}``, ``{{partition(...)}}``, ...) and its error texts. The
mapping engine (``rillet.subjects.mapping``) builds transforms from ``placeholder``; the JetStream config
checks use ``check_subject_transform`` and ``validate_mapping``."""
from __future__ import annotations

import re

_MAP_DEST_ERR = "invalid mapping destination"
_ERR_BAD_SUBJECT = "invalid subject"
_ERR_INVALID_TRANSFORM = _MAP_DEST_ERR + ": invalid transform"
_ERR_NOT_ENOUGH_ARGS = _MAP_DEST_ERR + ": not enough arguments passed to the function"
_ERR_TOO_MANY_ARGS = _MAP_DEST_ERR + ": too many arguments passed to the function"
_ERR_INVALID_ARG = _MAP_DEST_ERR + ": function argument is invalid or in the wrong format"
_ERR_INDEX_RANGE = _MAP_DEST_ERR + ": wildcard index out of range"
_ERR_UNKNOWN_FN = _MAP_DEST_ERR + ": unknown function"

_RS = r"[\t\n\f\r ]*"


def _fn_re(name: str) -> re.Pattern:
    letters = "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() and c.isupper() else
                      (f"[{c}{c.upper()}]" if i == 0 else re.escape(c))
                      for i, c in enumerate(name))
    return re.compile(r"\{\{" + _RS + letters + _RS + r"\((.*)\)" + _RS + r"\}\}")


_FN = {n: _fn_re(n) for n in ("wildcard", "partition", "splitFromLeft", "splitFromRight", "sliceFromLeft",
                              "sliceFromRight", "split", "left", "right", "random")}
_COMMA = re.compile(r",[\t\n\f\r ]*")
_MAX_INT32 = (1 << 31) - 1


class _MapErr(Exception):
    pass


def _map_err(token: str, err: str) -> _MapErr:
    return _MapErr(f"{err} in {token}" if token else err)


def _atoi(s: str) -> int:
    if not re.fullmatch(r"[+-]?[0-9]+", s):
        raise ValueError(s)
    v = int(s)
    if not -(1 << 63) <= v < (1 << 63):
        raise ValueError(s)
    return v


def _fn_args(pat: re.Pattern, token: str) -> list[str] | None:
    m = pat.search(token)
    if m is None:
        return None
    return _COMMA.split(m.group(1))


# ---------------------------------------------------------------------------------------------------
# Destination token classification (nats-server's indexPlaceHolders)

NONE, PARTITION, WILDCARD, SFL, SFR, SLL, SLR, SPLIT, LEFT, RIGHT, RANDOM = range(11)


def _two_args(token: str, args: list[str]) -> None:
    if len(args) < 2:
        raise _map_err(token, _ERR_NOT_ENOUGH_ARGS)
    if len(args) > 2:
        raise _map_err(token, _ERR_TOO_MANY_ARGS)


def _int_args(token: str, args: list[str], kind: int) -> tuple[int, list[int], int, str]:
    _two_args(token, args)
    try:
        i = _atoi(args[0].strip(" "))
        v = _atoi(args[1].strip(" "))
        if not -(1 << 31) <= v <= _MAX_INT32:
            raise ValueError
    except ValueError:
        raise _map_err(token, _ERR_INVALID_ARG) from None
    return kind, [i], v, ""


def placeholder(token: str) -> tuple[int, list[int], int, str]:
    """(kind, wildcard indexes, int argument, string argument) of one destination token."""
    n = len(token)
    if n > 1:
        if token[0] == "$":
            try:
                return WILDCARD, [_atoi(token[1:])], -1, ""
            except ValueError:
                return NONE, [-1], -1, ""
        if n > 4 and token[0] == "{" and token[1] == "{" and token[-2] == "}" and token[-1] == "}":
            args = _fn_args(_FN["wildcard"], token)
            if args is not None:
                if len(args) == 1 and args[0] == "":
                    raise _map_err(token, _ERR_NOT_ENOUGH_ARGS)
                if len(args) == 1:
                    try:
                        return WILDCARD, [_atoi(args[0].strip(" "))], -1, ""
                    except ValueError:
                        raise _map_err(token, _ERR_INVALID_ARG) from None
                raise _map_err(token, _ERR_TOO_MANY_ARGS)
            args = _fn_args(_FN["partition"], token)
            if args is not None:
                try:
                    num = _atoi(args[0].strip(" "))
                    if num > _MAX_INT32:
                        raise ValueError
                    idx = [_atoi(t.strip(" ")) for t in args[1:]]
                except ValueError:
                    raise _map_err(token, _ERR_INVALID_ARG) from None
                return PARTITION, idx, num, ""
            for name, kind in (("splitFromLeft", SFL), ("splitFromRight", SFR), ("sliceFromLeft", SLL),
                               ("sliceFromRight", SLR), ("right", RIGHT), ("left", LEFT)):
                args = _fn_args(_FN[name], token)
                if args is not None:
                    return _int_args(token, args, kind)
            args = _fn_args(_FN["split"], token)
            if args is not None:
                _two_args(token, args)
                try:
                    i = _atoi(args[0].strip(" "))
                except ValueError:
                    raise _map_err(token, _ERR_INVALID_ARG) from None
                if " " in args[1] or "." in args[1]:
                    raise _map_err(token, _ERR_INVALID_ARG)
                return SPLIT, [i], -1, args[1]
            args = _fn_args(_FN["random"], token)
            if args is not None:
                if len(args) != 1:
                    raise _map_err(token, _ERR_NOT_ENOUGH_ARGS)
                try:
                    v = _atoi(args[0].strip(" "))
                    if v > _MAX_INT32:
                        raise ValueError
                except ValueError:
                    raise _map_err(token, _ERR_INVALID_ARG) from None
                return RANDOM, [], v, ""
            raise _map_err(token, _ERR_UNKNOWN_FN)
    return NONE, [-1], -1, ""


def _subject_info(subject: str) -> tuple[bool, list[str], int, bool]:
    if not subject:
        return False, [], 0, False
    npwc = 0
    fwc = False
    toks = subject.split(".")
    for t in toks:
        if not t or fwc:
            return False, [], 0, False
        if t == ">":
            fwc = True
        elif t == "*":
            npwc += 1
    return True, toks, npwc, fwc


def check_subject_transform(src: str, dest: str) -> str | None:
    """Can a transform from ``src`` to ``dest`` be built? The error text, or ``None`` if it can."""
    if not dest:
        return None
    if not src:
        src = ">"
    sv, _stoks, npwc, sfwc = _subject_info(src)
    dv, dtoks, dnpwc, dfwc = _subject_info(dest)
    if not sv or not dv or dnpwc > 0 or sfwc != dfwc:
        return _ERR_BAD_SUBJECT
    try:
        if npwc > 0 or sfwc:
            for t in dtoks:
                kind, idx, _i, _s = placeholder(t)
                if kind == NONE or kind == RANDOM:
                    continue
                for w in idx:
                    if w > npwc:
                        raise _map_err(f"{t}: [{w}]", _ERR_INDEX_RANGE)
        else:
            for t in dtoks:
                kind, _idx, _i, _s = placeholder(t)
                if kind != NONE and kind != RANDOM and kind != PARTITION:
                    raise _map_err(t, _ERR_INDEX_RANGE)
    except _MapErr as e:
        return str(e)
    return None


_VALIDATE_FNS = ("partition", "wildcard", "splitFromLeft", "splitFromRight", "sliceFromLeft", "sliceFromRight",
                 "split", "left", "right", "random")


def validate_mapping(src: str, dest: str) -> str | None:
    """nats-server's mapping validation (destination syntax, then the transform itself)."""
    if not dest:
        return None
    fwc = False
    for t in dest.split("."):
        if not t or fwc:
            return str(_map_err(t, _ERR_INVALID_TRANSFORM))
        if len(t) > 4 and t.startswith("{{") and t.endswith("}}"):
            if not any(_FN[f].search(t) for f in _VALIDATE_FNS):
                return str(_map_err(t, _ERR_UNKNOWN_FN))
            continue
        if t == ">":
            fwc = True
        elif any(c in t for c in "\t\n\f\r "):
            return _ERR_INVALID_TRANSFORM
    return check_subject_transform(src, dest)
