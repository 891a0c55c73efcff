"""Sublist: insert/remove/match, queue grouping, cache behaviour and stats."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    rule,
)

import rillet.subjects.sublist as sublist_mod
from rillet.subjects import (
    CACHE_MAX,
    InvalidSubjectError,
    Sublist,
    SublistResult,
    aggregate_stats,
    match_literal,
    subject_is_subset_match,
    subjects_collide,
)


class Sub:
    """A stand-in for the server's subscription object."""

    __slots__ = ("subject", "queue", "name")

    def __init__(self, subject: str, queue: str | None = None, name: str = "") -> None:
        self.subject = subject
        self.queue = queue
        self.name = name

    def __repr__(self) -> str:
        return "Sub(%r, %r)" % (self.subject, self.queue)


class EqSub(Sub):
    """Subscriptions that compare equal and are unhashable: the sublist must
    go by identity only."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sub) and other.subject == self.subject

    __hash__ = None  # type: ignore[assignment]


def ids(subs: list[Any]) -> list[int]:
    return sorted(id(s) for s in subs)


def qgroups(r: SublistResult) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for group in r.qsubs:
        assert group, "empty queue group in result"
        name = group[0].queue
        assert all(s.queue == name for s in group), "mixed queue group"
        assert name not in out, "queue group split in two"
        out[name] = ids(group)
    return out


@pytest.fixture(params=[True, False], ids=["cache", "nocache"])
def sl(request: pytest.FixtureRequest) -> Sublist:
    return Sublist(cache=request.param)


# ------------------------------------------------------------------- basics


def test_empty(sl: Sublist) -> None:
    r = sl.match("foo")
    assert r.psubs == [] and r.qsubs == []
    assert sl.count() == 0
    assert not sl.has_interest("foo")


def test_literal(sl: Sublist) -> None:
    s = Sub("foo.bar")
    assert sl.insert(s)
    assert sl.count() == 1
    assert sl.match("foo.bar").psubs == [s]
    assert sl.match("foo.bar").psubs == [s]
    assert sl.match("foo").psubs == []
    assert sl.match("foo.bar.baz").psubs == []
    assert sl.match("foo.baz").psubs == []


def test_single_token_sub_vs_two_token_pub(sl: Sublist) -> None:
    s = Sub("foo")
    sl.insert(s)
    assert sl.match("foo").psubs == [s]
    assert sl.match("foo.bar").psubs == []


def test_partial_wildcard(sl: Sublist) -> None:
    lit, p1, p2, p3 = Sub("a.b.c"), Sub("a.*.c"), Sub("*.b.*"), Sub("a.b.*")
    for s in (lit, p1, p2, p3):
        sl.insert(s)
    assert ids(sl.match("a.b.c").psubs) == ids([lit, p1, p2, p3])
    assert ids(sl.match("a.x.c").psubs) == ids([p1])
    assert ids(sl.match("x.b.y").psubs) == ids([p2])
    assert sl.match("a.b").psubs == []
    assert sl.match("a.b.c.d").psubs == []


def test_full_wildcard(sl: Sublist) -> None:
    lit, fwc, top = Sub("a.b.c"), Sub("a.>"), Sub(">")
    for s in (lit, fwc, top):
        sl.insert(s)
    assert ids(sl.match("a.b.c").psubs) == ids([lit, fwc, top])
    assert ids(sl.match("a.b").psubs) == ids([fwc, top])
    # '>' needs at least one token.
    assert ids(sl.match("a").psubs) == ids([top])
    assert ids(sl.match("b").psubs) == ids([top])


def test_wildcard_chars_inside_tokens_are_literal(sl: Sublist) -> None:
    a, b = Sub("foo.*-"), Sub("foo.>-")
    sl.insert(a)
    sl.insert(b)
    assert sl.match("foo.bar").psubs == []
    assert sl.match("foo.*-").psubs == [a]
    assert sl.match("foo.>-").psubs == [b]
    assert sl.remove(a) and sl.remove(b)
    assert sl.count() == 0


def test_publish_subject_tokens_are_literal(sl: Sublist) -> None:
    # A publish on "foo.*" is not a wildcard publish: it only reaches
    # patterns that match the literal token "*".
    lit, pwc, fwc = Sub("foo.bar"), Sub("foo.*"), Sub("foo.>")
    for s in (lit, pwc, fwc):
        sl.insert(s)
    assert ids(sl.match("foo.*").psubs) == ids([pwc, fwc])
    assert ids(sl.match("foo.>").psubs) == ids([pwc, fwc])


@pytest.mark.parametrize("subject", [".foo", "..foo", "foo..", "foo.", "foo..bar", "foo...bar", ""])
def test_match_with_empty_tokens_matches_nothing(sl: Sublist, subject: str) -> None:
    sl.insert(Sub(">"))
    sl.insert(Sub(">", "q"))
    r = sl.match(subject)
    assert r.psubs == [] and r.qsubs == []
    assert not sl.has_interest(subject)
    assert subject not in sl._cache


@pytest.mark.parametrize("subject", ["", ".", "foo.", ".foo", "foo..bar", "foo.>.bar", ">.foo", ">.>"])
def test_insert_invalid(sl: Sublist, subject: str) -> None:
    with pytest.raises(InvalidSubjectError):
        sl.insert(Sub(subject))
    with pytest.raises(ValueError):
        sl.insert(Sub(subject, "q"))
    assert sl.count() == 0
    assert sl.all() == []
    # Nothing half-built was left behind.
    assert sl._root.is_empty()


def test_remove(sl: Sublist) -> None:
    s = Sub("a.b.c")
    sl.insert(s)
    assert sl.match("a.b.c").psubs == [s]
    assert sl.remove(s)
    assert sl.count() == 0
    assert sl.match("a.b.c").psubs == []
    assert not sl.remove(s)
    assert sl._root.is_empty()


def test_remove_nonexistent(sl: Sublist) -> None:
    present = Sub("a.b")
    sl.insert(present)
    assert not sl.remove(Sub("a.b"))  # same subject, different object
    assert not sl.remove(Sub("a.b", "q"))
    assert not sl.remove(Sub("a.c"))
    assert not sl.remove(Sub("a.b.c"))
    assert not sl.remove(Sub("a"))
    assert not sl.remove(Sub("a.*"))
    assert not sl.remove(Sub("a..b"))  # invalid subject
    assert not sl.remove(Sub("a.>.b"))
    assert sl.count() == 1
    assert sl.match("a.b").psubs == [present]
    st_ = sl.stats()
    assert st_["num_removes"] == 0


def test_remove_wildcards_and_cleanup(sl: Sublist) -> None:
    subs = [Sub("a.*.c"), Sub("a.>"), Sub("*.b.c"), Sub(">"), Sub("a.b.c"), Sub("a.b.*", "q")]
    for s in subs:
        sl.insert(s)
    assert len(sl.match("a.b.c").psubs) == 5
    for s in subs:
        assert sl.remove(s)
    assert sl.count() == 0
    assert sl._root.is_empty()
    r = sl.match("a.b.c")
    assert r.psubs == [] and r.qsubs == []


def test_prune_keeps_siblings(sl: Sublist) -> None:
    deep, shallow = Sub("a.b.c.d"), Sub("a.b")
    sl.insert(deep)
    sl.insert(shallow)
    assert sl.remove(deep)
    assert sl.match("a.b").psubs == [shallow]
    sl.insert(deep)
    assert sl.remove(shallow)
    assert sl.match("a.b.c.d").psubs == [deep]
    assert sl.match("a.b").psubs == []


def test_duplicate_subject_distinct_objects(sl: Sublist) -> None:
    s1, s2 = Sub("foo"), Sub("foo")
    assert sl.insert(s1) and sl.insert(s2)
    assert sl.count() == 2
    assert ids(sl.match("foo").psubs) == ids([s1, s2])
    assert sl.remove(s1)
    r = sl.match("foo")
    assert r.psubs == [s2] and r.psubs[0] is s2
    assert sl.remove(s2)
    assert sl.match("foo").psubs == []


def test_same_object_inserted_twice(sl: Sublist) -> None:
    s = Sub("foo")
    q = Sub("foo", "g")
    assert sl.insert(s) and sl.insert(q)
    sl.match("foo")
    assert not sl.insert(s)
    assert not sl.insert(q)
    assert sl.count() == 2
    r = sl.match("foo")
    assert r.psubs == [s]
    assert qgroups(r) == {"g": [id(q)]}
    assert sl.stats()["num_inserts"] == 2


def test_identity_not_equality(sl: Sublist) -> None:
    a, b = EqSub("x.y"), EqSub("x.y")
    assert a == b
    sl.insert(a)
    sl.insert(b)
    assert sl.count() == 2
    assert sl.remove(b)
    assert sl.match("x.y").psubs[0] is a
    assert not sl.remove(b)


def test_queue_results_grouped(sl: Sublist) -> None:
    plain = Sub("foo.bar")
    b1, b2, b3 = Sub("foo.bar", "bar"), Sub("foo.*", "bar"), Sub(">", "bar")
    z1, z2 = Sub("foo.bar", "baz"), Sub("foo.>", "baz")
    for s in (plain, b1, z1, b2, z2, b3):
        sl.insert(s)
    r = sl.match("foo.bar")
    assert r.psubs == [plain]
    assert qgroups(r) == {"bar": ids([b1, b2, b3]), "baz": ids([z1, z2])}
    assert sl.num_interest("foo.bar") == (1, 5)
    r = sl.match("foo.x")
    assert r.psubs == []
    assert qgroups(r) == {"bar": ids([b2, b3]), "baz": ids([z2])}
    assert sl.remove(b1) and sl.remove(b2)
    assert qgroups(sl.match("foo.bar")) == {"bar": ids([b3]), "baz": ids([z1, z2])}
    assert sl.remove(b3)
    assert qgroups(sl.match("foo.bar")) == {"baz": ids([z1, z2])}
    assert sl.remove(z1) and sl.remove(z2)
    assert sl.match("foo.bar").qsubs == []
    assert sl.match("foo.bar").psubs == [plain]


def test_empty_queue_name_is_plain(sl: Sublist) -> None:
    s = Sub("foo", "")
    sl.insert(s)
    r = sl.match("foo")
    assert r.psubs == [s] and r.qsubs == []
    assert sl.remove(s)


def test_queue_insert_updates_cached_result(sl: Sublist) -> None:
    q1 = Sub("a.b", "g")
    sl.insert(q1)
    sl.match("a.b")
    q2, q3, h = Sub("a.*", "g"), Sub("a.b", "h"), Sub(">", "h")
    sl.insert(q2)
    sl.insert(q3)
    sl.insert(h)
    assert qgroups(sl.match("a.b")) == {"g": ids([q1, q2]), "h": ids([q3, h])}


def test_has_interest(sl: Sublist) -> None:
    sl.insert(Sub("a.*.c"))
    sl.insert(Sub("x.>", "q"))
    for subject, expected in [
        ("a.b.c", True),
        ("a.b", False),
        ("a.b.c.d", False),
        ("x.y", True),
        ("x.y.z", True),
        ("x", False),
        ("y", False),
    ]:
        assert sl.has_interest(subject) is expected
        sl.match(subject)  # now from the cache, when enabled
        assert sl.has_interest(subject) is expected


def test_all_and_count(sl: Sublist) -> None:
    subs = [Sub("a"), Sub("a.b"), Sub("a.*"), Sub("a.>"), Sub("*"), Sub(">"), Sub("a", "q"), Sub("a", "r")]
    for s in subs:
        sl.insert(s)
    assert sl.count() == len(subs) == len(sl)
    assert ids(sl.all()) == ids(subs)
    sl.remove_batch(subs[:3])
    assert ids(sl.all()) == ids(subs[3:])


def test_remove_batch(sl: Sublist) -> None:
    keep = Sub("a.b")
    sl.insert(keep)
    batch = [Sub("a.b"), Sub("a.*"), Sub("a.>", "q"), Sub("c.d")]
    for s in batch:
        sl.insert(s)
    sl.match("a.b")
    sl.match("c.d")
    sl.match("a.z")
    ghost = Sub("a.b")
    assert sl.remove_batch(batch + [ghost]) == len(batch)
    assert sl.count() == 1
    assert sl.match("a.b").psubs == [keep]
    assert sl.match("a.z").psubs == [] and sl.match("a.z").qsubs == []
    assert sl.match("c.d").psubs == []
    assert sl.remove_batch([]) == 0


def test_remove_batch_many_wildcards_clears_cache() -> None:
    sl = Sublist()
    keep = Sub("k")
    sl.insert(keep)
    subs = [Sub("w%d.*" % i) for i in range(40)]
    for s in subs:
        sl.insert(s)
    for i in range(40):
        assert len(sl.match("w%d.x" % i).psubs) == 1
    sl.match("k")
    assert sl.remove_batch(subs) == 40
    for i in range(40):
        assert sl.match("w%d.x" % i).psubs == []
    assert sl.match("k").psubs == [keep]


def test_reverse_match(sl: Sublist) -> None:
    subjects = ["foo.bar", "foo.baz", "foo.bar.baz", "foo.*", "foo.>", "*.bar", ">", "bar", "*.*.baz"]
    subs = [Sub(s) for s in subjects]
    for s in subs:
        sl.insert(s)
    for pattern in ["foo.*", "foo.>", "foo.bar", "*", ">", "*.*", "bar.*", "foo.bar.baz", "x"]:
        expected = [s for s in subs if subjects_collide(s.subject, pattern)]
        assert ids(sl.reverse_match(pattern)) == ids(expected), pattern
        expected = [s for s in subs if subject_is_subset_match(s.subject, pattern)]
        assert ids(sl.subs_matching_filter(pattern)) == ids(expected), pattern
    assert sl.reverse_match("foo..bar") == []
    assert sl.subs_matching_filter("") == []


# -------------------------------------------------------------------- cache


def test_cache_hit_returns_same_object() -> None:
    sl = Sublist()
    sl.insert(Sub("foo"))
    r1 = sl.match("foo")
    assert sl.match("foo") is r1
    assert sl.cache_count() == 1
    st_ = sl.stats()
    assert st_["num_matches"] == 2
    assert st_["cache_hit_rate"] == 0.5


def test_cache_disabled() -> None:
    sl = Sublist(cache=False)
    assert not sl.cache_enabled()
    sl.insert(Sub("foo"))
    sl.match("foo")
    sl.match("foo")
    st_ = sl.stats()
    assert st_["num_cache"] == 0
    assert st_["num_matches"] == 2
    assert st_["cache_hit_rate"] == 0.0
    assert st_["max_fanout"] == 0 and st_["avg_fanout"] == 0.0


def test_insert_does_not_mutate_handed_out_result() -> None:
    sl = Sublist()
    a = Sub("foo.bar")
    sl.insert(a)
    r = sl.match("foo.bar")
    psubs_before = list(r.psubs)
    sl.insert(Sub("foo.bar"))
    sl.insert(Sub("foo.*"))
    sl.insert(Sub("foo.>", "q"))
    assert r.psubs == psubs_before and r.qsubs == []
    r2 = sl.match("foo.bar")
    assert r2 is not r
    assert len(r2.psubs) == 3 and len(r2.qsubs) == 1
    # Same for an existing queue group growing.
    g_before = [list(g) for g in r2.qsubs]
    sl.insert(Sub("*.bar", "q"))
    sl.insert(Sub("foo.bar", "q2"))
    assert [list(g) for g in r2.qsubs] == g_before
    r3 = sl.match("foo.bar")
    assert qgroups(r3)["q"] != qgroups(r2)["q"]
    assert len(r3.qsubs) == 2 and len(r2.qsubs) == 1


def test_cache_updates_on_wildcard_insert() -> None:
    sl = Sublist()
    sl.insert(Sub("foo.*"))
    sl.insert(Sub("foo.bar"))
    assert len(sl.match("foo.baz").psubs) == 1
    assert len(sl.match("foo.bar").psubs) == 2
    sl.insert(Sub("foo.>"))
    assert len(sl.match("foo.bar").psubs) == 3
    assert len(sl.match("foo.baz").psubs) == 2
    sl.insert(Sub("*.bar"))
    assert len(sl.match("foo.bar").psubs) == 4
    assert len(sl.match("foo.baz").psubs) == 2


def test_cache_invalidation_is_targeted() -> None:
    sl = Sublist()
    sl.insert(Sub("other.x"))
    sl.match("other.x")
    sl.match("a.b")
    s = Sub("a.*")
    sl.insert(s)
    assert sl.cache_count() == 2
    r_other = sl.match("other.x")
    assert sl.remove(s)
    # The unrelated entry survives; the affected one was dropped.
    assert sl.match("other.x") is r_other
    assert sl.match("a.b").psubs == []


def test_cache_bounded_and_correct_after_sweeps() -> None:
    sl = Sublist()
    wc, lit = Sub("load.*"), Sub("load.7")
    sl.insert(wc)
    sl.insert(lit)
    for i in range(3 * CACHE_MAX):
        r = sl.match("load.%d" % i)
        assert sl.cache_count() <= CACHE_MAX
        expected = [wc, lit] if i == 7 else [wc]
        assert ids(r.psubs) == ids(expected)
    assert sl.stats()["num_cache"] <= CACHE_MAX
    # Recently added entries survive a sweep; they are still served.
    last = "load.%d" % (3 * CACHE_MAX - 1)
    assert sl.match(last) is sl.match(last)
    # Old entries were evicted but still answer correctly.
    assert ids(sl.match("load.7").psubs) == ids([wc, lit])
    assert sl.remove(wc)
    assert ids(sl.match("load.7").psubs) == ids([lit])
    assert sl.match(last).psubs == []


def test_stats_fields() -> None:
    sl = Sublist()
    subs = [Sub("a"), Sub("a"), Sub("*"), Sub("a", "q"), Sub("a", "q"), Sub("b")]
    for s in subs:
        sl.insert(s)
    sl.remove(subs[-1])
    sl.match("a")  # fan-out 3 psubs + 1 group = 4
    sl.match("a")
    sl.match("z")  # fan-out 1
    st_ = sl.stats()
    assert list(st_) == [
        "num_subscriptions",
        "num_cache",
        "num_inserts",
        "num_removes",
        "num_matches",
        "cache_hit_rate",
        "max_fanout",
        "avg_fanout",
    ]
    assert st_["num_subscriptions"] == 5
    assert st_["num_cache"] == 2
    assert st_["num_inserts"] == 6
    assert st_["num_removes"] == 1
    assert st_["num_matches"] == 3
    assert st_["cache_hit_rate"] == pytest.approx(1 / 3)
    assert st_["max_fanout"] == 4
    assert st_["avg_fanout"] == pytest.approx(2.5)
    assert isinstance(st_["cache_hit_rate"], float)
    assert isinstance(st_["avg_fanout"], float)


def test_aggregate_stats() -> None:
    a, b = Sublist(), Sublist()
    a.insert(Sub("x"))
    a.insert(Sub("x"))
    b.insert(Sub("y"))
    a.match("x")
    a.match("x")
    b.match("y")
    b.match("nope")
    agg = aggregate_stats([a, b])
    assert agg["num_subscriptions"] == 3
    assert agg["num_cache"] == 3
    assert agg["num_matches"] == 4
    assert agg["cache_hit_rate"] == pytest.approx(1 / 4)
    assert agg["max_fanout"] == 2
    assert agg["avg_fanout"] == pytest.approx(3 / 3)
    assert aggregate_stats([])["cache_hit_rate"] == 0.0


# ------------------------------------------------------- model-based testing
#
# Random insert/remove/match sequences over a small alphabet, checked after
# every step against a brute-force model: a list of live subscriptions
# filtered with match_literal.  Publish subjects include "*"/">" tokens,
# which are matched literally, to exercise those cache keys too.

LITERAL_TOKENS = ["a", "b", "c"]
# Depth 1-4, biased to short subjects so that patterns and subjects overlap often.
DEPTHS = st.sampled_from([1, 1, 2, 2, 2, 3, 3, 4])
PATTERN_TOKENS = ["a", "b", "c", "*", ">"]


@st.composite
def patterns(draw: st.DrawFn) -> str:
    n = draw(DEPTHS)
    toks = [draw(st.sampled_from(PATTERN_TOKENS[:4])) for _ in range(n - 1)]
    toks.append(draw(st.sampled_from(PATTERN_TOKENS)))
    return ".".join(toks)




@st.composite
def _subjects(draw: st.DrawFn, tokens: list[str]) -> str:
    return ".".join(draw(st.sampled_from(tokens)) for _ in range(draw(DEPTHS)))


publish_subjects = _subjects(LITERAL_TOKENS + ["*", ">"])
literal_subjects = _subjects(LITERAL_TOKENS)
queues = st.sampled_from([None, "", "q1", "q2"])
ALL_LITERALS = [".".join(p) for n in range(1, 5) for p in itertools.product(LITERAL_TOKENS, repeat=n)]


class SublistMachine(RuleBasedStateMachine):
    cache = True

    subs = Bundle("subs")

    def __init__(self) -> None:
        super().__init__()
        self.sl = Sublist(cache=self.cache)
        self.live: dict[int, Sub] = {}
        self.held: list[tuple[str, SublistResult, list[int], dict[str, list[int]]]] = []

    def expected(self, subject: str) -> tuple[list[int], dict[str, list[int]]]:
        p: list[Sub] = []
        q: dict[str, list[Sub]] = {}
        for s in self.live.values():
            if match_literal(subject, s.subject):
                if s.queue:
                    q.setdefault(s.queue, []).append(s)
                else:
                    p.append(s)
        return ids(p), {k: ids(v) for k, v in q.items()}

    def check(self, subject: str) -> SublistResult:
        r = self.sl.match(subject)
        want_p, want_q = self.expected(subject)
        assert ids(r.psubs) == want_p, subject
        assert qgroups(r) == want_q, subject
        # Remember recent results: they must never change afterwards.
        self.held.append((subject, r, want_p, want_q))
        if len(self.held) > 16:
            del self.held[0]
        return r

    @rule(target=subs, pattern=patterns(), queue=queues)
    def insert(self, pattern: str, queue: str | None) -> Sub:
        s = Sub(pattern, queue)
        assert self.sl.insert(s)
        self.live[id(s)] = s
        return s

    @rule(sub=subs)
    def insert_again(self, sub: Sub) -> None:
        # Same object again: a no-op whether or not it is currently in.
        was_in = id(sub) in self.live
        assert self.sl.insert(sub) is (not was_in)
        self.live[id(sub)] = sub

    @rule(sub=consumes(subs))
    def remove(self, sub: Sub) -> None:
        was_in = id(sub) in self.live
        assert self.sl.remove(sub) is was_in
        self.live.pop(id(sub), None)
        assert not self.sl.remove(sub)

    @rule(pattern=patterns(), queue=queues)
    def remove_stranger(self, pattern: str, queue: str | None) -> None:
        assert not self.sl.remove(Sub(pattern, queue))

    @rule(batch=st.lists(consumes(subs), max_size=4))
    def remove_batch(self, batch: list[Sub]) -> None:
        batch = list({id(s): s for s in batch}.values())
        n = sum(1 for s in batch if id(s) in self.live)
        assert self.sl.remove_batch(batch) == n
        for s in batch:
            self.live.pop(id(s), None)

    @rule(subject=publish_subjects)
    def match(self, subject: str) -> None:
        self.check(subject)
        # A second call comes from the cache and must agree.
        self.check(subject)

    @rule(subject=publish_subjects)
    def has_interest(self, subject: str) -> None:
        want_p, want_q = self.expected(subject)
        assert self.sl.has_interest(subject) is bool(want_p or want_q)
        n_q = sum(len(v) for v in want_q.values())
        assert self.sl.num_interest(subject) == (len(want_p), n_q)

    @rule(subject=literal_subjects)
    def match_literal_subject(self, subject: str) -> None:
        self.check(subject)

    @rule(pattern=patterns())
    def reverse_lookups(self, pattern: str) -> None:
        live = list(self.live.values())
        want = ids([s for s in live if subjects_collide(s.subject, pattern)])
        assert ids(self.sl.reverse_match(pattern)) == want
        want = ids([s for s in live if subject_is_subset_match(s.subject, pattern)])
        assert ids(self.sl.subs_matching_filter(pattern)) == want

    @invariant()
    def counts(self) -> None:
        assert self.sl.count() == len(self.live)
        assert self.sl.cache_count() <= sublist_mod.CACHE_MAX

    @invariant()
    def cache_never_stale(self) -> None:
        cache = self.sl._cache
        if cache:
            for subject, r in list(cache.items()):
                want_p, want_q = self.expected(subject)
                assert ids(r.psubs) == want_p, subject
                assert qgroups(r) == want_q, subject

    @invariant()
    def held_results_untouched(self) -> None:
        # Results handed out earlier are never mutated afterwards.
        for _subject, r, p, q in self.held:
            assert ids(r.psubs) == p
            assert qgroups(r) == q

    def teardown(self) -> None:
        # Everything still matches the model, for every literal subject.
        for subject in ALL_LITERALS[:: 7 if len(self.live) > 10 else 1]:
            self.check(subject)
        assert ids(self.sl.all()) == ids(list(self.live.values()))
        self.sl.remove_batch(list(self.live.values()))
        assert self.sl.count() == 0
        assert self.sl._root.is_empty()


SublistMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_sublist_model_cached = SublistMachine.TestCase


class NoCacheMachine(SublistMachine):
    cache = False


NoCacheMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
test_sublist_model_nocache = NoCacheMachine.TestCase


class TinyCacheMachine(SublistMachine):
    """The same model with a cache of 6 entries swept to 2, so sweeps
    happen all the time."""

    def __init__(self) -> None:
        self._saved = (sublist_mod.CACHE_MAX, sublist_mod.CACHE_SWEEP)
        sublist_mod.CACHE_MAX, sublist_mod.CACHE_SWEEP = 6, 2
        super().__init__()

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            sublist_mod.CACHE_MAX, sublist_mod.CACHE_SWEEP = self._saved


TinyCacheMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
test_sublist_model_tiny_cache = TinyCacheMachine.TestCase


# ---- JetStream ack subjects: one result per stream, consumer and length while it is the same for all ----------

_ACK_PATTERNS = [
    "$JS.ACK.S.C.*.*.*.*.*", "$JS.ACK.S.C.>", "$JS.ACK.S.*.*.*.*.*.*", "$JS.ACK.S.C.*.*.1.*.*", "$JS.ACK.S.C.1.>",
    "$JS.>", ">", "$JS.ACK.*.C.*.*.*.*.>", "$JS.ACK.S.C.*.*.*.*.*.*", "$JS.ACK.T.C.*.*.*.*.*", "$JS.ACK.d.h.S.C.>",
    "$JS.ACK.d.h.S.C.*.*.*.*.*.*", "$JS.ACK.d.h.S.C.1.*.*.*.*.*", "$JS.ACK.S.C.*.*.*.*.2",
]
_ACK_SUBJECTS = st.builds(
    lambda pre, nums: pre + "." + ".".join(nums),
    st.sampled_from(["$JS.ACK.S.C", "$JS.ACK.T.C", "$JS.ACK.S.D", "$JS.ACK.d.h.S.C.x.y"]),
    st.lists(st.sampled_from(["1", "2", "3", "*"]), min_size=1, max_size=6),
)
_ACK_OPS = st.lists(st.one_of(
    st.tuples(st.just("sub"), st.sampled_from(_ACK_PATTERNS), st.sampled_from([None, None, "q"])),
    st.tuples(st.just("unsub"), st.integers(0, 20)),
    st.tuples(st.just("pub"), _ACK_SUBJECTS),
    st.tuples(st.just("clear"),),
), max_size=40)


@pytest.mark.parametrize("cache", [True, False])
def test_ack_subject_results_match_the_model(cache: bool) -> None:
    @settings(max_examples=300, deadline=None)
    @given(_ACK_OPS)
    def run(ops: list[tuple]) -> None:
        sl = Sublist(cache=cache)
        live: list[Sub] = []
        for op in ops:
            if op[0] == "sub":
                s = Sub(op[1], op[2])
                sl.insert(s)
                live.append(s)
            elif op[0] == "unsub" and live:
                s = live.pop(op[1] % len(live))
                assert sl.remove(s)
            elif op[0] == "clear":
                sl.clear_cache()
            elif op[0] == "pub":
                subject = op[1]
                r = sl.match(subject)
                want = [s for s in live if match_literal(subject, s.subject)]
                assert ids(r.psubs) == ids([s for s in want if not s.queue]), subject
                assert sorted(ids(g) for g in r.qsubs) == sorted(
                    [ids([s for s in want if s.queue])] if any(s.queue for s in want) else []), subject
        assert len(sl._acks) <= sublist_mod.ACKS_MAX

    run()


def test_ack_subject_result_shared_until_subscriptions_change() -> None:
    sl = Sublist()
    sub = Sub("$JS.ACK.S.C.*.*.*.*.*")
    sl.insert(sub)
    r1 = sl.match("$JS.ACK.S.C.1.2.3.4.5")
    r2 = sl.match("$JS.ACK.S.C.1.3.4.5.6")
    assert r1 is r2 and ids(r1.psubs) == ids([sub])
    assert "$JS.ACK.S.C.1.3.4.5.6" not in sl._cache  # unique subjects stay out of the cache
    other = Sub("$JS.ACK.S.C.*.*.*.*.9")  # names a varying token: each subject on its own again
    sl.insert(other)
    r3 = sl.match("$JS.ACK.S.C.1.2.3.4.9")
    r4 = sl.match("$JS.ACK.S.C.1.2.3.4.5")
    assert ids(r3.psubs) == ids([sub, other]) and ids(r4.psubs) == ids([sub]) and r4 is not r1
    sl.remove(other)
    r5 = sl.match("$JS.ACK.S.C.1.2.3.4.9")
    assert ids(r5.psubs) == ids([sub]) and sl.match("$JS.ACK.S.C.7.2.3.4.9") is r5
