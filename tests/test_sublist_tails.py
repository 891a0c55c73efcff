"""Sublist: subjects that differ only in their last token (a reply subject ``_INBOX.<id>.<n>``, new at each
request) share one result per prefix (``Sublist._tails``) while their last token names no literal subscription:
no trie walk, nothing put in the match cache, the same result object (so the same delivery plan); emptied by
every change to the subscriptions."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

import rillet.subjects.sublist as sublist_mod
from rillet.subjects import Sublist

from test_sublist import Sub, ids


def test_reply_subjects_share_the_first_result_and_stay_out_of_the_cache() -> None:
    sl = Sublist()
    inbox = Sub("_INBOX.abc.*")
    sl.insert(inbox)
    sl.insert(Sub("other.>"))
    r0 = sl.match("_INBOX.abc.0")
    assert "_INBOX.abc.0" in sl._cache and sl._tails == {"_INBOX.abc": False}  # (the first: cached, prefix seen)
    r1 = sl.match("_INBOX.abc.1")
    assert "_INBOX.abc.1" in sl._cache and r1 is not r0  # (the second: cached, its result kept for the prefix)
    r2 = sl.match("_INBOX.abc.2")
    r3 = sl.match("_INBOX.abc.3")
    assert r2 is r1 and r3 is r1 and r1.psubs == [inbox]
    assert sl.cache_count() == 2 and list(sl._tails) == ["_INBOX.abc"]
    st_ = sl.stats()
    assert st_["num_matches"] == 4 and st_["cache_hit_rate"] == 0.0  # (each one a miss, as nats-server counts)
    assert sl.match("_INBOX.abc.") is sublist_mod._EMPTY  # (an empty last token matches nothing)
    assert sl.match("_INBOX.abd.1").psubs == [] and sl.match("_INBOX.abd.2").psubs == []
    # JetStream ack subjects are not kept by prefix (unique per message: Sublist._ack_result)
    sl.insert(Sub("$JS.ACK.S.C.*.*.*.*.*"))
    sl.match("$JS.ACK.S.C.1.2.3.4.5")
    sl.match("$JS.ACK.S.C.1.2.3.4.6")
    assert not sl._tails


def test_a_literal_last_token_has_its_own_result() -> None:
    sl = Sublist()
    wc, lit, deep, two = Sub("_INBOX.x.*"), Sub("_INBOX.x.7"), Sub("_INBOX.*.*", "q"), Sub("_INBOX.>")
    for s in (wc, lit, deep, two):
        sl.insert(s)
    sl.match("_INBOX.x.0")
    r1 = sl.match("_INBOX.x.1")
    assert ids(r1.psubs) == ids([wc, two]) and [list(g) for g in r1.qsubs] == [[deep]]
    r7 = sl.match("_INBOX.x.7")
    assert r7 is not r1 and ids(r7.psubs) == ids([wc, lit, two])
    assert sl.match("_INBOX.x.8") is r1
    # the literal starts the prefix: the first subject's result is not kept for the others
    sl2 = Sublist()
    for s in (wc, lit):
        sl2.insert(s)
    sl2.match("_INBOX.x.0")
    assert ids(sl2.match("_INBOX.x.7").psubs) == ids([wc, lit])
    assert sl2._tails["_INBOX.x"] is False
    sl2.match("_INBOX.x.9")
    r = sl2.match("_INBOX.x.8")
    assert r.psubs == [wc] and sl2.match("_INBOX.x.10") is r


def test_a_literal_node_without_subscriptions_below_the_last_level_counts() -> None:
    # "_INBOX.x.7.deep" makes a literal node "7" at the last level of "_INBOX.x.<t>" with no subscription of its
    # own: "_INBOX.x.7" then has the wildcard's result, made by its own walk
    sl = Sublist()
    wc, deep = Sub("_INBOX.x.*"), Sub("_INBOX.x.7.deep")
    sl.insert(wc)
    sl.insert(deep)
    sl.match("_INBOX.x.0")
    r1 = sl.match("_INBOX.x.1")
    r7 = sl.match("_INBOX.x.7")
    assert r7.psubs == [wc] and r7 is not r1 and sl.match("_INBOX.x.2") is r1


def test_every_change_to_the_subscriptions_empties_it() -> None:
    sl = Sublist()
    wc = Sub("_INBOX.x.*")
    sl.insert(wc)
    sl.match("_INBOX.x.0")
    r1 = sl.match("_INBOX.x.1")
    r1.plan = "a plan"
    sl.forget_plans()
    assert r1.plan is None and sl.match("_INBOX.x.2") is r1
    lit = Sub("_INBOX.x.5")
    sl.insert(lit)
    assert not sl._tails
    assert ids(sl.match("_INBOX.x.5").psubs) == ids([wc, lit])
    sl.match("_INBOX.x.1")
    r2 = sl.match("_INBOX.x.2")
    assert r2 is not r1 and r2.psubs == [wc] and sl.match("_INBOX.x.3") is r2
    assert sl.remove(lit) and not sl._tails
    sl.match("_INBOX.x.11")  # (a subject not in the cache: a miss, the prefix seen)
    r3 = sl.match("_INBOX.x.4")
    assert sl.match("_INBOX.x.6") is r3
    assert sl.remove_batch([wc]) == 1 and not sl._tails
    assert sl.match("_INBOX.x.6").psubs == []
    sl.insert(wc)
    sl.match("_INBOX.x.1")
    assert sl._tails
    sl.clear_cache()
    assert not sl._tails


def test_not_kept_without_the_cache_and_bounded() -> None:
    sl = Sublist(cache=False)
    sl.insert(Sub("_INBOX.*.*"))
    sl.match("_INBOX.a.1")
    assert not sl._tails and sl.match("_INBOX.a.2") is not sl.match("_INBOX.a.3")
    sl = Sublist()
    sl.insert(Sub("_INBOX.*.*"))
    for i in range(sublist_mod.TAILS_MAX + 10):
        sl.match("_INBOX.c%d.1" % i)
        assert len(sl._tails) <= sublist_mod.TAILS_MAX


# few prefixes and tokens, so that subscriptions name the subjects published often and at every level
PATTERN = st.sampled_from(["a.*", "a.7", "a.x.*", "a.x.7", "a.>", "*.*", "*.7", "a.*.7", "a.7.x", ">", "*.x.*",
                           "a.x", "a.*.*", "x.y"])
TOKENS = ["7", "x", "y", "1", "*"]
SUBJECT = st.tuples(st.sampled_from(["a", "a.x", "x", "a.7"]), st.sampled_from(TOKENS)).map(".".join)
_PUB = st.tuples(st.just("pub"), SUBJECT)
OPS = st.lists(st.one_of(  # (mostly messages: a prefix is kept from its second subject on)
    st.tuples(st.just("sub"), PATTERN, st.sampled_from([None, "q"])),
    st.tuples(st.just("unsub"), st.integers(0, 20)),
    _PUB, _PUB, _PUB,
    st.tuples(st.just("clear"),),
), max_size=50)


@settings(max_examples=400, deadline=None)
@given(OPS)
@example([("sub", "a.7", None), ("sub", "a.*", None), ("pub", "a.x"), ("pub", "a.7"), ("pub", "a.y")])
def test_results_are_a_fresh_walks_in_order(ops: list[tuple]) -> None:
    """Every match (through the cache, the kept prefixes, or a walk) gives the subscriptions a sublist without
    a cache, holding the same subscriptions inserted in the same order, gives, in the same order; and every kept
    prefix's result is that of each subject under it whose last token names no literal node there."""
    sl = Sublist()
    live: list[Sub] = []

    def fresh(subject: str) -> tuple[list[int], list[list[int]]]:
        ref = Sublist(cache=False)
        for s in live:
            ref.insert(s)
        r = ref.match(subject)
        return [id(s) for s in r.psubs], [[id(s) for s in g] for g in r.qsubs]

    for op in ops:
        if op[0] == "sub":
            s = Sub(op[1], op[2])
            sl.insert(s)
            live.append(s)
        elif op[0] == "unsub" and live:
            assert sl.remove(live.pop(op[1] % len(live)))
        elif op[0] == "clear":
            sl.clear_cache()
        elif op[0] == "pub":
            r = sl.match(op[1])
            assert ([id(s) for s in r.psubs], [[id(s) for s in g] for g in r.qsubs]) == fresh(op[1]), op[1]
        for prefix, tail in sl._tails.items():
            if tail is False:
                continue
            r, levels = tail
            for t in TOKENS:
                if not any(t in level.nodes for level in levels):
                    want = fresh(prefix + "." + t)
                    assert ([id(s) for s in r.psubs], [[id(s) for s in g] for g in r.qsubs]) == want
