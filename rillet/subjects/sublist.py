"""The sublist: the subscription index that routes a publish to its subscribers.

A token trie.  Each ``_Level`` holds a dict of literal child nodes plus
optional ``*`` (``pwc``) and ``>`` (``fwc``) nodes; each ``_Node`` holds the
plain subscriptions and the queue subscriptions (grouped by queue name) of
the subject that ends there, and the next level.  In front of the trie sits
a result cache keyed by the published subject.

Subscriptions belong to the caller: any object with ``.subject: str`` and
``.queue: str | None`` (``None`` or ``""`` means a plain subscription).  They
are compared by identity, never by ``==``/``hash``, and must not change
``.subject``/``.queue`` while inserted.

Hot path: ``match`` on a cached subject is one dict lookup (plus one counter
increment) and returns the cached ``SublistResult`` itself.  Results are
shared and must be treated as read-only; the sublist never mutates a result
once handed out (changes build new result objects), so holding on to one
while subscriptions come and go is safe, it just goes out of date.

Cache rules (mirroring the Go server):

* insert: cached results the new subscription matches are replaced by a
  copy with the subscription appended (literal: that one key; wildcard:
  every key the pattern matches);
* remove: cached results the old subscription matched are dropped;
* the cache holds at most ``CACHE_MAX`` entries; when a miss pushes it over,
  only the ``CACHE_SWEEP`` most recently added entries are kept.

Behind the cache, for subjects that differ only in their last token (a
reply subject ``_INBOX.<id>.<n>``, new at each request and matched by the
requester's ``_INBOX.<id>.*``), ``_tails`` keeps, per prefix (the subject up
to its last dot), the result of one such subject and the trie levels
its walk reached at the last token (kept from a prefix's second subject on:
the first only marks the prefix as seen): a later subject with that prefix
whose last token names no literal node in those levels has that very result
(the last token only ever picks a literal node there), so its miss is a dict
lookup and one membership test per level, with no walk, no new result (so
the delivery plan made for it is used again) and nothing put in the cache.
Emptied by every change to the subscriptions, as ``_acks``.

Not thread-safe: meant for a single event loop.
"""

from __future__ import annotations

from itertools import islice
from typing import Any, Callable

from .validate import FWC, PWC, TSEP, tokens_match_literal

__all__ = [
    "CACHE_MAX",
    "CACHE_SWEEP",
    "InvalidSubjectError",
    "Sublist",
    "SublistResult",
    "aggregate_stats",
]

# Most result sets kept in the match cache.
CACHE_MAX = 1024
# What a sweep shrinks a cache that went past CACHE_MAX down to.
CACHE_SWEEP = 256
# Most ack-subject results kept (``Sublist._ack_result``).
ACKS_MAX = 256
# Most subject prefixes kept with their shared result (``Sublist._tails``).
TAILS_MAX = 1024
# Above this many wildcard subscriptions in one remove_batch, the cache is
# cleared instead of scanned once per pattern.
_BATCH_SCAN_MAX = 16


class InvalidSubjectError(ValueError):
    """The subscription's subject cannot be indexed (empty token, or a
    token after ``>``)."""


class SublistResult:
    """Subscriptions interested in one published subject.

    ``psubs``: plain subscriptions.  ``qsubs``: one list per queue group
    (``group[0].queue`` is its name) holding the group's members from every
    matching pattern.  Shared and cached: do not mutate.  ``plan``: what delivery made of it
    (rillet.server.delivery.Plan), kept with it and dropped with it.
    """

    __slots__ = ("psubs", "qsubs", "plan")

    def __init__(self, psubs: list[Any], qsubs: list[list[Any]]) -> None:
        self.psubs = psubs
        self.qsubs = qsubs
        self.plan: Any = None

    def __repr__(self) -> str:
        return "SublistResult(psubs=%r, qsubs=%r)" % (self.psubs, self.qsubs)


# The shared result for "nobody is interested".
_EMPTY = SublistResult([], [])


class _Node:
    __slots__ = ("next", "psubs", "qsubs")

    def __init__(self) -> None:
        self.next: _Level | None = None
        # id(sub) -> sub, insertion ordered.
        self.psubs: dict[int, Any] = {}
        # queue name -> {id(sub): sub}; None until the first queue sub.
        self.qsubs: dict[str, dict[int, Any]] | None = None

    def is_empty(self) -> bool:
        if self.psubs or self.qsubs:
            return False
        nxt = self.next
        return nxt is None or nxt.is_empty()


class _Level:
    __slots__ = ("nodes", "pwc", "fwc")

    def __init__(self) -> None:
        self.nodes: dict[str, _Node] = {}
        self.pwc: _Node | None = None
        self.fwc: _Node | None = None

    def is_empty(self) -> bool:
        return not self.nodes and self.pwc is None and self.fwc is None


def _add_node(node: _Node, psubs: list[Any], qmap: dict[str, list[Any]]) -> None:
    # Append a node's subscriptions to a result being built.
    if node.psubs:
        psubs.extend(node.psubs.values())
    qsubs = node.qsubs
    if qsubs is not None:
        for name, members in qsubs.items():
            group = qmap.get(name)
            if group is None:
                qmap[name] = list(members.values())
            else:
                group.extend(members.values())


def _match_level(
    level: _Level, toks: list[str], i: int, last: int, psubs: list[Any], qmap: dict[str, list[Any]],
    tails: list[_Level] | None = None,
) -> None:
    # Collect every node under ``level`` whose pattern matches toks[i:].
    # (The plain-subs-only case of _add_node is inlined: it is the common one.)
    # ``tails``: where the levels reached at the last token are added.
    while True:
        node = level.fwc
        if node is not None:
            if node.qsubs is None:
                psubs.extend(node.psubs.values())
            else:
                _add_node(node, psubs, qmap)
        pwc = level.pwc
        if i == last:
            if tails is not None:
                tails.append(level)
            if pwc is not None:
                if pwc.qsubs is None:
                    psubs.extend(pwc.psubs.values())
                else:
                    _add_node(pwc, psubs, qmap)
            node = level.nodes.get(toks[i])
            if node is not None:
                if node.qsubs is None:
                    psubs.extend(node.psubs.values())
                else:
                    _add_node(node, psubs, qmap)
            return
        if pwc is not None:
            nxt = pwc.next
            if nxt is not None:
                _match_level(nxt, toks, i + 1, last, psubs, qmap, tails)
        node = level.nodes.get(toks[i])
        if node is None:
            return
        nxt = node.next
        if nxt is None:
            return
        level = nxt
        i += 1


def _collect(root: _Level, toks: list[str], tails: list[_Level] | None = None) -> SublistResult:
    psubs: list[Any] = []
    qmap: dict[str, list[Any]] = {}
    _match_level(root, toks, 0, len(toks) - 1, psubs, qmap, tails)
    if qmap:
        return SublistResult(psubs, list(qmap.values()))
    if psubs:
        return SublistResult(psubs, [])
    return _EMPTY


def _node_has_subs(node: _Node) -> bool:
    return bool(node.psubs) or bool(node.qsubs)


def _any_level(level: _Level, toks: list[str], i: int, last: int) -> bool:
    # Like _match_level but stops at the first interested node.
    while True:
        node = level.fwc
        if node is not None and _node_has_subs(node):
            return True
        pwc = level.pwc
        if i == last:
            if pwc is not None and _node_has_subs(pwc):
                return True
            node = level.nodes.get(toks[i])
            return node is not None and _node_has_subs(node)
        if pwc is not None:
            nxt = pwc.next
            if nxt is not None and _any_level(nxt, toks, i + 1, last):
                return True
        node = level.nodes.get(toks[i])
        if node is None:
            return False
        nxt = node.next
        if nxt is None:
            return False
        level = nxt
        i += 1


def _node_subs(node: _Node, out: list[Any]) -> None:
    if node.psubs:
        out.extend(node.psubs.values())
    qsubs = node.qsubs
    if qsubs:
        for members in qsubs.values():
            out.extend(members.values())


def _collect_all(level: _Level, out: list[Any]) -> None:
    for node in level.nodes.values():
        _node_subs(node, out)
        if node.next is not None:
            _collect_all(node.next, out)
    node2 = level.pwc
    if node2 is not None:
        _node_subs(node2, out)
        if node2.next is not None:
            _collect_all(node2.next, out)
    node2 = level.fwc
    if node2 is not None:
        _node_subs(node2, out)


def _descend(node: _Node, toks: list[str], i: int, last: int, out: list[Any],
             walk: Callable[[_Level, list[str], int, int, list[Any]], None]) -> None:
    # The subscriptions of ``node`` when toks[i] was the last token, else ``walk`` one level down.
    if i == last:
        _node_subs(node, out)
    elif node.next is not None:
        walk(node.next, toks, i + 1, last, out)


def _collide_level(level: _Level, ptoks: list[str], i: int, last: int, out: list[Any]) -> None:
    # Subscriptions under ``level`` whose pattern shares at least one literal
    # subject with the pattern ptoks[i:].
    t = ptoks[i]
    if t == FWC:
        _collect_all(level, out)
        return
    fwc = level.fwc
    if fwc is not None:
        _node_subs(fwc, out)
    if t == PWC:
        for node in level.nodes.values():
            _descend(node, ptoks, i, last, out, _collide_level)
    else:
        node = level.nodes.get(t)
        if node is not None:
            _descend(node, ptoks, i, last, out, _collide_level)
    if level.pwc is not None:
        _descend(level.pwc, ptoks, i, last, out, _collide_level)


def _subset_level(level: _Level, ftoks: list[str], i: int, last: int, out: list[Any]) -> None:
    # Subscriptions under ``level`` whose pattern is a subset of ftoks[i:].
    t = ftoks[i]
    if t == FWC:
        _collect_all(level, out)
        return
    if t == PWC:
        for node in level.nodes.values():
            _descend(node, ftoks, i, last, out, _subset_level)
        if level.pwc is not None:
            _descend(level.pwc, ftoks, i, last, out, _subset_level)
        return
    node = level.nodes.get(t)
    if node is not None:
        _descend(node, ftoks, i, last, out, _subset_level)


def _literal_prefix(toks: list[str]) -> str:
    # "a.b." for a.b.*.c : every subject the pattern matches starts with it.
    n = 0
    for t in toks:
        if t == PWC or t == FWC:
            break
        n += 1
    if n == 0:
        return ""
    return TSEP.join(toks[:n]) + TSEP


def _with_sub(r: SublistResult, sub: Any, queue: str | None) -> SublistResult:
    # A new result: ``r`` plus ``sub``.  Unchanged inner lists are shared,
    # which is safe because cached lists are never mutated.
    if not queue:
        return SublistResult(r.psubs + [sub], r.qsubs)
    qsubs = list(r.qsubs)
    for idx in range(len(qsubs)):
        group = qsubs[idx]
        if group and group[0].queue == queue:
            qsubs[idx] = group + [sub]
            return SublistResult(r.psubs, qsubs)
    qsubs.append([sub])
    return SublistResult(r.psubs, qsubs)


class Sublist:
    """Subscription index with a match cache (``cache=False`` disables it)."""

    __slots__ = ("_root", "_cache", "_caching", "_count", "_inserts", "_removes", "_hits", "_misses", "_acks",
                 "_tails")

    def __init__(self, cache: bool = True) -> None:
        self._root = _Level()
        # Always a dict (so the hot path needs no None check); with the cache
        # disabled it simply stays empty.
        self._cache: dict[str, SublistResult] = {}
        self._caching = cache
        self._count = 0
        self._inserts = 0
        self._removes = 0
        self._hits = 0
        self._misses = 0
        # JetStream ack subjects ($JS.ACK.<stream>.<consumer>.<five numbers>), one per message: the result
        # shared by every subject with the same stream, consumer and token count, when no subscription names
        # any of the varying tokens (``_ack_result``); emptied by every change to the subscriptions
        self._acks: dict[tuple[str, str, int], SublistResult] = {}
        # subject prefix (up to the last dot) -> (the result of every subject ``prefix.<t>`` whose ``t`` names
        # no literal node in these levels, the levels the walk reached at the last token), or False for a prefix
        # seen once; see the module's text. Emptied by every change to the subscriptions; never filled with the
        # cache disabled
        self._tails: dict[str, tuple[SublistResult, tuple[_Level, ...]] | bool] = {}

    # ------------------------------------------------------------------ match

    def match(self, subject: str) -> SublistResult:
        """Everyone interested in a publish on ``subject``.

        ``subject`` is taken literally (a ``*`` token is not a wildcard
        here).  A subject with an empty token matches nothing.
        """
        # dict.get, not try/except KeyError: the latter saves ~8ns on a hit
        # but costs ~250ns on a miss, and unique reply subjects make misses
        # common in request/reply traffic.
        r = self._cache.get(subject)
        if r is None:
            return self._match_miss(subject)
        self._hits += 1
        return r

    def _match_miss(self, subject: str) -> SublistResult:
        self._misses += 1
        ack = subject.startswith("$JS.ACK.")  # (unique per message, shared their own way: _ack_result)
        tail = None
        if ack:
            prefix = t = ""
        else:
            prefix, _, t = subject.rpartition(TSEP)
            if prefix:
                tail = self._tails.get(prefix)
                if tail and t:
                    for level in tail[1]:
                        if t in level.nodes:
                            break
                    else:
                        return tail[0]
        toks = subject.split(TSEP)
        if "" in toks:
            return _EMPTY
        if ack and len(toks) > 6:
            return self._ack_result(toks)
        if not self._caching:
            return _collect(self._root, toks)
        if tail is False:  # (the prefix's second subject: kept from now on if it can be)
            levels: list[_Level] = []
            result = _collect(self._root, toks, levels)
            self._keep_tail(prefix, t, result, levels)
        else:
            result = _collect(self._root, toks)
            if prefix and tail is None:
                # a prefix seen once: its first subject costs a walk as any other (one whose prefix never comes
                # again costs only this mark more)
                tails = self._tails
                if len(tails) >= TAILS_MAX:
                    tails.clear()
                tails[prefix] = False
        cache = self._cache
        cache[subject] = result
        if len(cache) > CACHE_MAX:
            self._sweep()
        return result

    def _keep_tail(self, prefix: str, t: str, result: SublistResult, levels: list[_Level]) -> None:
        """At the second subject of a prefix: keep ``result`` for the subjects ``prefix.<any token>`` when the walk
        that made it (for the last token ``t``) took no literal node at the last token: it reached ``levels``
        there. Else the prefix stays as seen (False)."""
        for level in levels:
            if t in level.nodes:
                return
        self._tails[prefix] = (result, tuple(levels))

    def _ack_result(self, toks: list[str]) -> SublistResult:
        """The result of a JetStream ack subject (a miss: each is unique), not put in the cache. Its tokens
        after the stream and consumer (the v1 form has 9 tokens; the v2 one puts a domain and an account hash
        before them) vary per message; when every subscription that could match a subject of this length with
        the same fixed tokens has only wildcards in the varying ones, they all have one result, kept in
        ``_acks`` (with the delivery plan made for it) until the subscriptions change."""
        n = len(toks)
        k = 4 if n == 9 else 6
        key = (toks[k - 2], toks[k - 1], n)
        r = self._acks.get(key)
        if r is not None:
            return r
        r = _collect(self._root, toks)
        if not (r.psubs or r.qsubs):
            return r
        for sub in self.reverse_match(TSEP.join(toks[:k]) + ".*" * (n - k)):
            for t in sub.subject.split(TSEP)[k:]:
                if t != PWC and t != FWC:
                    return r
        acks = self._acks
        if len(acks) >= ACKS_MAX:
            acks.clear()
        acks[key] = r
        return r

    def _sweep(self) -> None:
        cache = self._cache
        drop = len(cache) - CACHE_SWEEP
        if drop > 0:
            # dict order is insertion order: keep the newest entries.
            self._cache = dict(islice(cache.items(), drop, None))

    def has_interest(self, subject: str) -> bool:
        """True if a publish on ``subject`` would reach anyone.

        Uses the cache when the subject is there, otherwise walks the trie
        without filling the cache.  Not counted in ``stats()``.
        """
        r = self._cache.get(subject)
        if r is not None:
            return bool(r.psubs) or bool(r.qsubs)
        toks = subject.split(TSEP)
        if "" in toks:
            return False
        return _any_level(self._root, toks, 0, len(toks) - 1)

    def num_interest(self, subject: str) -> tuple[int, int]:
        """(plain subs, queue subs) a publish on ``subject`` would match."""
        r = self._cache.get(subject)
        if r is None:
            toks = subject.split(TSEP)
            if "" in toks:
                return 0, 0
            r = _collect(self._root, toks)
        nq = 0
        for group in r.qsubs:
            nq += len(group)
        return len(r.psubs), nq

    # ---------------------------------------------------------------- changes

    def insert(self, sub: Any) -> bool:
        """Index ``sub``.  Returns False if this very object is already in.

        Raises ``InvalidSubjectError`` for a subject with an empty token or a
        token after ``>`` (the server answers ``-ERR 'Invalid Subject'``).
        """
        subject: str = sub.subject
        queue: str | None = sub.queue
        toks = subject.split(TSEP)
        last = len(toks) - 1
        # Validate before touching the trie so a bad subject leaves no trace.
        if "" in toks or (FWC in toks and toks.index(FWC) != last):
            raise InvalidSubjectError("invalid subject %r" % subject)
        level = self._root
        node: _Node | None = None
        wildcard = False
        i = 0
        for t in toks:
            if t == PWC:
                wildcard = True
                node = level.pwc
                if node is None:
                    node = _Node()
                    level.pwc = node
            elif t == FWC:
                wildcard = True
                node = level.fwc
                if node is None:
                    node = _Node()
                    level.fwc = node
            else:
                node = level.nodes.get(t)
                if node is None:
                    node = _Node()
                    level.nodes[t] = node
            if i < last:
                nxt = node.next
                if nxt is None:
                    nxt = _Level()
                    node.next = nxt
                level = nxt
            i += 1
        assert node is not None
        key = id(sub)
        if not queue:
            if key in node.psubs:
                return False
            node.psubs[key] = sub
        else:
            qsubs = node.qsubs
            if qsubs is None:
                qsubs = {}
                node.qsubs = qsubs
            members = qsubs.get(queue)
            if members is None:
                members = {}
                qsubs[queue] = members
            elif key in members:
                return False
            members[key] = sub
        self._count += 1
        self._inserts += 1
        if self._acks:
            self._acks.clear()
        if self._tails:
            self._tails.clear()
        cache = self._cache
        if cache:
            if not wildcard:
                r = cache.get(subject)
                if r is not None:
                    cache[subject] = _with_sub(r, sub, queue)
            else:
                for k in self._cached_keys_matching(cache, toks):
                    cache[k] = _with_sub(cache[k], sub, queue)
        return True

    def remove(self, sub: Any) -> bool:
        """Unindex ``sub``; False if it was not in (or its subject is invalid)."""
        if not self._remove(sub):
            return False
        if self._acks:
            self._acks.clear()
        if self._tails:
            self._tails.clear()
        cache = self._cache
        if cache:
            self._invalidate(cache, sub.subject)
        return True

    def remove_batch(self, subs: Any) -> int:
        """Remove many subscriptions (e.g. a closing connection's).

        Returns how many were removed.  Cache invalidation is done once for
        the whole batch.
        """
        literals: list[str] = []
        patterns: list[list[str]] = []
        removed = 0
        for sub in subs:
            if self._remove(sub):
                removed += 1
                subject: str = sub.subject
                toks = subject.split(TSEP)
                if PWC in toks or FWC in toks:
                    patterns.append(toks)
                else:
                    literals.append(subject)
        if removed and self._acks:
            self._acks.clear()
        if removed and self._tails:
            self._tails.clear()
        cache = self._cache
        if removed and cache:
            if len(patterns) > _BATCH_SCAN_MAX:
                cache.clear()
                return removed
            for subject in literals:
                cache.pop(subject, None)
            if patterns:
                doomed: list[str] = []
                for k in cache:
                    ktoks = k.split(TSEP)
                    for p in patterns:
                        if tokens_match_literal(ktoks, p):
                            doomed.append(k)
                            break
                for k in doomed:
                    del cache[k]
        return removed

    def _remove(self, sub: Any) -> bool:
        # Trie part of a removal, with pruning; no cache work.
        subject: str = sub.subject
        queue: str | None = sub.queue
        toks = subject.split(TSEP)
        level: _Level | None = self._root
        node: _Node | None = None
        path: list[tuple[_Level, _Node, str]] = []
        seen_fwc = False
        for t in toks:
            if not t or seen_fwc or level is None:
                return False
            if t == PWC:
                node = level.pwc
            elif t == FWC:
                seen_fwc = True
                node = level.fwc
            else:
                node = level.nodes.get(t)
            if node is None:
                return False
            path.append((level, node, t))
            level = node.next
        if node is None:
            return False
        key = id(sub)
        if not queue:
            if key not in node.psubs:
                return False
            del node.psubs[key]
        else:
            qsubs = node.qsubs
            if qsubs is None:
                return False
            members = qsubs.get(queue)
            if members is None or key not in members:
                return False
            del members[key]
            if not members:
                del qsubs[queue]
                if not qsubs:
                    node.qsubs = None
        self._count -= 1
        self._removes += 1
        # Prune now-empty nodes bottom up.
        for idx in range(len(path) - 1, -1, -1):
            lvl, n, t = path[idx]
            if not n.is_empty():
                break
            n.next = None
            if n is lvl.fwc:
                lvl.fwc = None
            elif n is lvl.pwc:
                lvl.pwc = None
            else:
                del lvl.nodes[t]
        return True

    def _invalidate(self, cache: dict[str, SublistResult], subject: str) -> None:
        toks = subject.split(TSEP)
        if PWC not in toks and FWC not in toks:
            cache.pop(subject, None)
            return
        for k in self._cached_keys_matching(cache, toks):
            del cache[k]

    @staticmethod
    def _cached_keys_matching(cache: dict[str, SublistResult], ptoks: list[str]) -> list[str]:
        prefix = _literal_prefix(ptoks)
        keys: list[str] = []
        for k in cache:
            if prefix and not k.startswith(prefix):
                continue
            if tokens_match_literal(k.split(TSEP), ptoks):
                keys.append(k)
        return keys

    # ------------------------------------------------------------- inspection

    def count(self) -> int:
        """Number of subscriptions."""
        return self._count

    def __len__(self) -> int:
        return self._count

    def cache_count(self) -> int:
        """Number of cached result sets."""
        return len(self._cache)

    def cache_enabled(self) -> bool:
        return self._caching

    def forget_plans(self) -> None:
        """Drop the delivery plans of the cached results (what they mean for delivery changed: a queue
        weight of remote interest)."""
        for r in self._cache.values():
            r.plan = None
        for r in self._acks.values():
            r.plan = None
        for tail in self._tails.values():
            if tail:
                tail[0].plan = None

    def clear_cache(self) -> None:
        """Drop every cached result (e.g. after changing sub weights)."""
        self._cache.clear()
        self._acks.clear()
        self._tails.clear()

    def all(self) -> list[Any]:
        """Every subscription (order unspecified)."""
        out: list[Any] = []
        _collect_all(self._root, out)
        return out

    def reverse_match(self, pattern: str) -> list[Any]:
        """Subscriptions whose subject could match a common subject with
        ``pattern`` (``subjects_collide(sub.subject, pattern)``).

        With a literal ``pattern`` this is the same set as ``match`` (as a
        flat list).  Invalid patterns match nothing.
        """
        toks = pattern.split(TSEP)
        if "" in toks:
            return []
        out: list[Any] = []
        _collide_level(self._root, toks, 0, len(toks) - 1, out)
        return out

    def subs_matching_filter(self, filter: str) -> list[Any]:
        """Subscriptions whose subject is a subset of ``filter``
        (``subject_is_subset_match(sub.subject, filter)``)."""
        toks = filter.split(TSEP)
        if "" in toks:
            return []
        out: list[Any] = []
        _subset_level(self._root, toks, 0, len(toks) - 1, out)
        return out

    def stats(self) -> dict[str, Any]:
        """The ``/subsz`` statistics block, with nats-server's field names.

        ``num_matches`` counts ``match`` calls and ``cache_hit_rate`` is the
        share of them answered from the cache.  Fan-out of a cached result is
        ``len(psubs) + len(qsubs)`` (a queue group counts once);
        ``max_fanout``/``avg_fanout`` are over the results now cached (0 with
        the cache off).
        """
        return aggregate_stats((self,))

    def _fanout(self) -> tuple[int, int, int]:
        # (cached results, total fan-out, max fan-out)
        tot = 0
        mx = 0
        clen = 0
        for r in self._cache.values():
            clen += 1
            f = len(r.psubs) + len(r.qsubs)
            tot += f
            if f > mx:
                mx = f
        return clen, tot, mx


def aggregate_stats(sublists: Any) -> dict[str, Any]:
    """One ``/subsz`` statistics block for several sublists (one per
    account), combined the way nats-server sums its accounts: counts add
    up, the hit rate and average fan-out are recomputed from the totals and
    max fan-out is the maximum.
    """
    subs = cache_n = inserts = removes = matches = hits = tot = mx = 0
    for sl in sublists:
        subs += sl._count
        inserts += sl._inserts
        removes += sl._removes
        matches += sl._hits + sl._misses
        hits += sl._hits
        clen, stot, smx = sl._fanout()
        cache_n += clen
        tot += stot
        if smx > mx:
            mx = smx
    return {
        "num_subscriptions": subs,
        "num_cache": cache_n,
        "num_inserts": inserts,
        "num_removes": removes,
        "num_matches": matches,
        "cache_hit_rate": (hits / matches) if matches else 0.0,
        "max_fanout": mx,
        "avg_fanout": (tot / cache_n) if tot else 0.0,
    }
