"""Subject transforms and account subject mappings, behaving as nats-server's.

``SubjectTransform`` compiles a source/destination pair once into a plan of per-token
operations (literal tokens, wildcard copies, and the mapping functions nats-server
supports: ``wildcard``/``$n``, ``partition``, ``split``, ``splitFromLeft``,
``splitFromRight``, ``sliceFromLeft``, ``sliceFromRight``, ``left``, ``right`` and
``random``). No regular expression runs at transform time.

``Mapping`` holds the weighted (and optionally cluster scoped) destinations of one
account mapping, as nats-server's ``AddWeightedMappings`` builds them.
``parse_mappings`` turns the config's ``mappings {}`` block into ``Mapping`` objects.

Errors are ``ValueError`` carrying nats-server's error text.
"""
from __future__ import annotations

import random as _random
from typing import Any, Callable, Iterable, Optional, Sequence, Union

from rillet.gocompat.goquote import go_quote
from rillet.subjects.destination import (
    LEFT as _LEFT,
    NONE as _NONE,
    PARTITION as _PARTITION,
    RANDOM as _RANDOM,
    RIGHT as _RIGHT,
    SFL as _SFL,
    SFR as _SFR,
    SLL as _SLL,
    SLR as _SLR,
    SPLIT as _SPLIT,
    WILDCARD as _WILDCARD,
    _ERR_BAD_SUBJECT,
    _ERR_INDEX_RANGE,
    _MapErr,
    _atoi,
    _map_err,
    _subject_info,
    placeholder as _placeholder,
    validate_mapping,
)

__all__ = ["SubjectTransform", "Mapping", "parse_mappings", "mapped_from", "fnv1a32", "go_quote"]

_FNV_OFFSET = 2166136261
_FNV_PRIME = 16777619
_M32 = 0xFFFFFFFF


def fnv1a32(data: bytes) -> int:
    """32-bit FNV-1a (Go's ``hash/fnv`` ``New32a``)."""
    h = _FNV_OFFSET
    for b in data:
        h = ((h ^ b) * _FNV_PRIME) & _M32
    return h


# ---------------------------------------------------------------------------------------------------
# Runtime operations (each takes the source subject's tokens, returns the destination text)


def _op_wildcard(si: int) -> Callable[[list[str]], str]:
    def op(toks: list[str]) -> str:
        return toks[si] if si < len(toks) else ""
    return op


def _fnv_mod(data: bytes, mod: int) -> int:
    """FNV-1a 32 of ``data``, modulo ``mod``: the fast path of the partition function.

    The 32-bit mask is applied once at the end instead of after every byte: XOR with a byte only touches
    the low 8 bits and a product's low 32 bits only depend on its factors' low 32 bits, so the result is
    the same as Go's ``hash/fnv`` (checked against ``fnv1a32`` in the tests) for a third less work.
    """
    h = _FNV_OFFSET
    for b in data:
        h = (h ^ b) * _FNV_PRIME
    return (h & _M32) % mod


def _partition_str(key: str, n: int) -> str:
    if n == 0:
        return "0"
    return str(_fnv_mod(key.encode(), n & _M32))


def _op_partition(sis: list[int], n: int) -> Callable[[list[str]], str]:
    if n == 0:
        return lambda toks: "0"
    mod = n & _M32
    # the partition numbers as text, made once (for the usual small partition counts)
    names: Any = [str(i) for i in range(mod)] if mod <= 4096 else _StrOf()

    # hot path: constants bound as defaults (local lookups), mask once at the end (see _fnv_mod)
    if not sis:
        def op(toks: list[str], O: int = _FNV_OFFSET, P: int = _FNV_PRIME, M: int = _M32) -> str:
            h = O
            for b in ".".join(toks).encode():
                h = (h ^ b) * P
            return names[(h & M) % mod]
    elif len(sis) == 1:
        si = sis[0]

        def op(toks: list[str], O: int = _FNV_OFFSET, P: int = _FNV_PRIME, M: int = _M32) -> str:
            h = O
            for b in toks[si].encode():
                h = (h ^ b) * P
            return names[(h & M) % mod]
    else:
        def op(toks: list[str], O: int = _FNV_OFFSET, P: int = _FNV_PRIME, M: int = _M32) -> str:
            h = O
            for b in "".join([toks[i] for i in sis]).encode():
                h = (h ^ b) * P
            return names[(h & M) % mod]
    return op


class _StrOf:
    def __getitem__(self, i: int) -> str:
        return str(i)


def _op_split_from_left(si: int, pos: int) -> Callable[[list[str]], str]:
    def op(toks: list[str]) -> str:
        t = toks[si]
        if 0 < pos < len(t):
            return t[:pos] + "." + t[pos:]
        return t
    return op


def _op_split_from_right(si: int, pos: int) -> Callable[[list[str]], str]:
    def op(toks: list[str]) -> str:
        t = toks[si]
        n = len(t)
        if 0 < pos < n:
            return t[:n - pos] + "." + t[n - pos:]
        return t
    return op


def _op_slice_from_left(si: int, size: int) -> Callable[[list[str]], str]:
    def op(toks: list[str]) -> str:
        t = toks[si]
        n = len(t)
        if 0 < size < n:
            parts = [t[i:i + size] for i in range(0, n - size + 1, size)]
            rest = len(parts) * size
            if rest < n:
                parts.append(t[rest:])
            return ".".join(parts)
        return t
    return op


def _op_slice_from_right(si: int, size: int) -> Callable[[list[str]], str]:
    def op(toks: list[str]) -> str:
        t = toks[si]
        n = len(t)
        if 0 < size < n:
            r = n % size
            parts = [t[:r]] if r else []
            parts.extend(t[i:i + size] for i in range(r, n, size))
            return ".".join(parts)
        return t
    return op


def _op_split(si: int, delim: str) -> Callable[[list[str]], str]:
    def op(toks: list[str]) -> str:
        t = toks[si]
        pieces = list(t) if delim == "" else t.split(delim)
        if len(pieces) == 1:
            return t
        # nats-server's joining: empty pieces are skipped, a separator goes before each
        # non-empty piece except a first one following an empty leading piece.
        out = []
        last = len(pieces) - 1
        for j, p in enumerate(pieces):
            if p:
                out.append(p)
            if j < last and pieces[j + 1] and not (j == 0 and not p):
                out.append(".")
        return "".join(out)
    return op


def _op_left(si: int, size: int) -> Callable[[list[str]], str]:
    def op(toks: list[str]) -> str:
        t = toks[si]
        return t[:size] if 0 < size < len(t) else t
    return op


def _op_right(si: int, size: int) -> Callable[[list[str]], str]:
    def op(toks: list[str]) -> str:
        t = toks[si]
        return t[len(t) - size:] if 0 < size < len(t) else t
    return op


def _op_random(n: int) -> Callable[[list[str]], str]:
    if n == 0:
        return lambda toks: "0"
    mod = abs(n)  # Go's % keeps the (non negative) dividend's sign
    rb = _random.getrandbits
    return lambda toks: str(rb(31) % mod)


_OPS_WITH_INT = {_SFL: _op_split_from_left, _SFR: _op_split_from_right, _SLL: _op_slice_from_left,
                 _SLR: _op_slice_from_right, _LEFT: _op_left, _RIGHT: _op_right}


class SubjectTransform:
    """A compiled subject transform from ``src`` (may hold wildcards) to ``dest``."""

    __slots__ = ("src", "dest", "_stoks", "_literal_src", "_fwc_src", "_ops", "_tail", "_const", "_ntoks")

    def __init__(self, src: str, dest: str):
        if not dest:
            raise ValueError("empty transform destination")
        if not src:
            src = ">"
        self.src = src
        self.dest = dest
        sv, stoks, npwc, sfwc = _subject_info(src)
        dv, dtoks, dnpwc, dfwc = _subject_info(dest)
        if not sv or not dv or dnpwc > 0 or sfwc != dfwc:
            raise ValueError(_ERR_BAD_SUBJECT)
        self._stoks = stoks
        self._ntoks = len(stoks)
        self._fwc_src = sfwc
        self._literal_src = npwc == 0 and not sfwc
        # position in the source of the n-th partial wildcard (1 based); missing ones are 0 as in Go
        sti: dict[int, int] = {}
        for i, t in enumerate(stoks):
            if t == "*":
                sti[len(sti) + 1] = i
        ops: list[Union[str, Callable[[list[str]], str]]] = []
        try:
            for t in dtoks:
                if t == ">":
                    break  # the rest of the subject is appended at transform time
                kind, idx, iarg, sarg = _placeholder(t)
                if kind == _NONE:
                    ops.append(t)
                    continue
                if npwc == 0 and not sfwc and kind not in (_RANDOM, _PARTITION):
                    raise _map_err(t, _ERR_INDEX_RANGE)
                sis: list[int] = []
                if npwc > 0 or sfwc:
                    for w in idx:
                        if w > npwc:
                            raise _map_err(f"{t}: [{w}]", _ERR_INDEX_RANGE)
                        sis.append(sti.get(w, 0))
                if kind == _WILDCARD:
                    ops.append(_op_wildcard(sis[0]))
                elif kind == _PARTITION:
                    ops.append(_op_partition(sis, iarg))
                elif kind == _RANDOM:
                    ops.append(_op_random(iarg))
                elif kind == _SPLIT:
                    ops.append(_op_split(sis[0], sarg))
                else:
                    ops.append(_OPS_WITH_INT[kind](sis[0], iarg))
        except _MapErr as e:
            raise ValueError(str(e)) from None
        self._ops = ops
        self._tail = dfwc
        self._const = dest if (not dfwc and all(isinstance(o, str) for o in ops)) else None

    def __repr__(self) -> str:
        return f"SubjectTransform({self.src!r}, {self.dest!r})"

    def match(self, subject: str) -> bool:
        """Does the literal ``subject`` match the source of this transform?"""
        if self._literal_src:
            return subject == self.src
        toks = subject.split(".")
        return self._match_tokens(toks)

    def _match_tokens(self, toks: list[str]) -> bool:
        stoks = self._stoks
        n = len(toks)
        if self._fwc_src:
            if n < self._ntoks:
                return False
            last = self._ntoks - 1
            for i in range(last):
                s = stoks[i]
                if s != "*" and s != toks[i]:
                    return False
            return True
        if n != self._ntoks:
            return False
        for s, t in zip(stoks, toks):
            if s != "*" and s != t:
                return False
        return True

    def transform(self, subject: str) -> str:
        """The destination subject for ``subject`` (which must match the source)."""
        if self._const is not None:
            return self._const
        toks = subject.split(".")
        return self._transform_tokens(toks)

    def _transform_tokens(self, toks: list[str]) -> str:
        out = [op if op.__class__ is str else op(toks) for op in self._ops]
        if self._tail:
            out.extend(toks[self._ntoks - 1:])
        return ".".join(out)

    def match_transform(self, subject: str) -> Optional[str]:
        """``transform(subject)`` if it matches, else ``None``."""
        if self._literal_src:
            if subject != self.src:
                return None
            if self._const is not None:
                return self._const
            return self._transform_tokens(subject.split("."))
        toks = subject.split(".")
        if not self._match_tokens(toks):
            return None
        if self._const is not None:
            return self._const
        return self._transform_tokens(toks)


# ---------------------------------------------------------------------------------------------------
# Account mappings (weighted and cluster scoped destinations)


def _transform_tokenize(subject: str) -> str:
    """``foo.*.*`` -> ``foo.$1.$2`` (the identity destination of a wildcard source)."""
    i = 1
    out = []
    for t in subject.split("."):
        if t == "*":
            out.append(f"${i}")
            i += 1
        else:
            out.append(t)
    return ".".join(out)


def _is_valid_subject(subject: str) -> bool:
    ok, _t, _n, _f = _subject_info(subject)
    if not ok:
        return False
    return not any(c in subject for c in " \t\r\n\f")


DestSpec = Union[str, Sequence[Any]]


class Mapping:
    """One account mapping: ``src`` to weighted destinations, some maybe cluster scoped.

    ``destinations`` holds ``(dest, weight_percent, cluster)`` (or ``(dest, weight)``, or a bare
    destination string); a weight of ``None`` means 100. As nats-server does, when the weights
    (per cluster) add up to less than 100, the remainder keeps the original subject, unless the
    source itself is listed as a destination: then the remainder is dropped.
    """

    __slots__ = ("src", "dests", "cdests", "_wc", "_tr0", "cluster_name")

    def __init__(self, src: str, destinations: Iterable[DestSpec], cluster_name: str = ""):
        if not _is_valid_subject(src):
            raise ValueError(_ERR_BAD_SUBJECT)
        self.src = src
        self.cluster_name = cluster_name
        self._wc = "*" in src.split(".") or src.endswith(">") and src.split(".")[-1] == ">"
        self._tr0: Optional[SubjectTransform] = None
        seen: set[str] = set()
        totals: dict[str, int] = {}
        dests: list[list[Any]] = []
        cdests: dict[str, list[list[Any]]] = {}
        for d in destinations:
            if isinstance(d, str):
                subj, weight, cluster = d, None, ""
            else:
                subj = d[0]
                weight = d[1] if len(d) > 1 else None
                cluster = (d[2] if len(d) > 2 else "") or ""
            weight = 100 if weight is None else int(weight)
            if subj in seen:
                raise ValueError(f"duplicate entry for {go_quote(subj)}")
            seen.add(subj)
            if weight > 100:
                raise ValueError("individual weights need to be <= 100")
            if weight < 0:
                raise ValueError(f"Invalid weight {weight} for mapping destination")
            totals[cluster] = totals.get(cluster, 0) + weight
            if totals[cluster] > 100:
                raise ValueError("total weight needs to be <= 100")
            err = validate_mapping(src, subj)
            if err:
                raise ValueError(err)
            tr = SubjectTransform(src, subj)
            if cluster:
                cdests.setdefault(cluster, []).append([tr, weight])
            else:
                dests.append([tr, weight])

        def process(ds: list[list[Any]]) -> list[tuple[int, SubjectTransform]]:
            ltw = sum(w for _tr, w in ds)
            if ltw != 100 and src not in seen:
                ident = _transform_tokenize(src) if self._wc else src
                ds.append([SubjectTransform(src, ident), 100 - ltw if ds else 100])
            ds.sort(key=lambda e: e[1])
            out = []
            cum = 0
            for tr, w in ds:
                cum += w
                out.append((cum, tr))
            return out

        self.dests = process(dests)
        self.cdests = {c: process(ds) for c, ds in cdests.items()}
        if self.dests:
            self._tr0 = self.dests[0][1]

    def __repr__(self) -> str:
        return f"Mapping({self.src!r}, dests={[(w, t.dest) for w, t in self.dests]!r}, cdests={self.cdests!r})"

    def match(self, subject: str) -> bool:
        if not self._wc:
            return subject == self.src
        return (self._tr0 or SubjectTransform(self.src, _transform_tokenize(self.src))).match(subject)

    def select(self, subject: str, cluster_name: Optional[str] = None, rnd: Optional[float] = None) -> Optional[str]:
        """The mapped subject for ``subject`` (which must match ``src``), or ``None`` to drop it.

        ``rnd`` is a number in [0, 1) (random when not given); ``cluster_name`` picks the
        cluster scoped destinations when there are some for that cluster.
        """
        dests = self.dests
        if self.cdests:
            cn = self.cluster_name if cluster_name is None else cluster_name
            dests = self.cdests.get(cn) or self.dests
        if len(dests) == 1 and dests[0][0] == 100:
            return dests[0][1].transform(subject)
        if rnd is None:
            rnd = _random.random()
        w = int(rnd * 100)
        for cum, tr in dests:
            if w < cum:
                return tr.transform(subject)
        return None


    def results(self, subject: str) -> list[str]:
        """Every subject this mapping can turn ``subject`` (which must match ``src``) into: each destination
        of every cluster and weight (a remainder that keeps the subject included)."""
        out: list[str] = []
        for ds in (self.dests, *self.cdests.values()):
            for _cum, tr in ds:
                d = tr.transform(subject)
                if d not in out:
                    out.append(d)
        return out


def mapped_from(mappings: Sequence[Mapping], original: str, mapped: str) -> bool:
    """Could ``mappings`` (an account's, in order) have turned the subject ``original`` into ``mapped``?

    The first mapping whose source matches ``original`` is the one a publish applies; any of its
    destinations counts, in any cluster: the answer must not depend on which server asks (a JetStream API
    request mapped in one cluster is handled by the meta leader, which may be in another).
    """
    for m in mappings:
        if m.match(original):
            return mapped in m.results(original)
    return False


# ---------------------------------------------------------------------------------------------------
# Config


def _parse_map_dest(v: Any) -> tuple[str, int, str]:
    if not isinstance(v, dict):
        raise ValueError("Expected an entry for the mapping destination")
    subj = ""
    weight: Optional[int] = None
    cluster = ""
    for k, dv in v.items():
        lk = k.lower()
        if lk in ("dest", "destination"):
            subj = str(dv)
        elif lk == "weight":
            if isinstance(dv, str):
                ws = dv[:-1] if dv.endswith("%") else dv
                try:
                    wv = _atoi(ws)
                except ValueError:
                    raise ValueError(f"Invalid weight {go_quote(ws)} for mapping destination") from None
            elif isinstance(dv, int) and not isinstance(dv, bool):
                wv = dv
            else:
                raise ValueError(f"Unknown entry type for weight of {dv}\n")
            if wv > 100 or wv < 0:
                raise ValueError(f"Invalid weight {wv} for mapping destination")
            weight = wv
        elif lk == "cluster":
            cluster = str(dv)
        else:
            raise ValueError(f"Unknown field {go_quote(k)} for mapping destination")
    if weight is None:
        raise ValueError(f"Missing weight for mapping destination {go_quote(subj)}")
    return subj, weight, cluster


def parse_mappings(raw: Optional[dict], cluster_name: str = "") -> list[Mapping]:
    """Build the mappings of a config ``mappings {}`` block (as ``Options.mappings`` stores it)."""
    out: list[Mapping] = []
    if not raw:
        return out
    if not isinstance(raw, dict):
        raise ValueError(f"Expected mappings to be a map, got {type(raw).__name__}")
    by_src: dict[str, int] = {}
    for subj, mv in raw.items():
        if not _is_valid_subject(subj):
            raise ValueError(f"Subject {go_quote(subj)} is not a valid subject")
        if isinstance(mv, str):
            try:
                m = Mapping(subj, [(mv, 100, "")], cluster_name)
            except ValueError as e:
                raise ValueError(f"Error adding mapping for {go_quote(subj)} to {go_quote(mv)} : {e}") from None
        elif isinstance(mv, (list, dict)):
            entries = mv if isinstance(mv, list) else [mv]
            dests = [_parse_map_dest(e) for e in entries]
            try:
                m = Mapping(subj, dests, cluster_name)
            except ValueError as e:
                raise ValueError(f"Error adding mapping for {go_quote(subj)} : {e}") from None
        else:
            raise ValueError(f"Unknown type {type(mv).__name__} for mapping destination")
        if subj in by_src:  # a later one replaces an earlier one, as in nats-server
            out[by_src[subj]] = m
        else:
            by_src[subj] = len(out)
            out.append(m)
    return out
