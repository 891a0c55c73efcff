"""Overlap checks over many subjects at once, in a token tree instead of every pair.

``subjects_collide(a, b)`` answers for one pair; a stream config with 10,000 subjects asks it 50 million
times when each subject is checked against the others (a minute on one event loop). ``SubjectTree`` holds
patterns by token, so that "which stored patterns collide with this one" walks the tree: a literal token
follows at most three branches (the same token, ``*`` and ``>``), a ``*`` follows the branches that can
still hold a pattern of the right length. The answers are exactly ``subjects_collide``'s, including its
treatment of empty tokens (an empty token on either side ends the comparison as "no collision").
"""
from __future__ import annotations

from typing import Iterable

_NONE = 1 << 62


class _Node:
    __slots__ = ("children", "term", "min_sub", "lens", "fwc_below")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.term = _NONE  # smallest index of a pattern that ends here
        self.min_sub = _NONE  # smallest index of any pattern at or below this node
        self.lens: set[int] = set()  # remaining token counts of the patterns below (after this node)
        self.fwc_below = False  # a pattern below has a '>' (it matches any longer query)


class SubjectTree:
    """Patterns (with an index each) by token; ``first_collision`` finds the smallest colliding index."""

    def __init__(self) -> None:
        self.root = _Node()

    def insert(self, subject: str, index: int) -> None:
        toks = subject.split(".")
        n = len(toks)
        fwc = ">" in toks
        node = self.root
        for depth, t in enumerate(toks):
            if index < node.min_sub:
                node.min_sub = index
            node.lens.add(n - depth)
            if fwc:
                node.fwc_below = True
            child = node.children.get(t)
            if child is None:
                child = node.children[t] = _Node()
            node = child
        if index < node.min_sub:
            node.min_sub = index
        node.lens.add(0)
        if index < node.term:
            node.term = index

    def first_collision(self, subject: str) -> int:
        """The smallest index of a stored pattern that collides with ``subject`` (-1 if none)."""
        toks = subject.split(".")
        best = _search(self.root, toks, 0, len(toks), ">" in toks, _NONE)
        return -1 if best == _NONE else best

    def collides(self, subject: str) -> bool:
        return self.first_collision(subject) >= 0


def _search(node: _Node, toks: list[str], i: int, n: int, qfwc: bool, best: int) -> int:
    """Smallest index (below ``best``) of a pattern under ``node`` colliding with ``toks[i:]``."""
    if node.min_sub >= best:
        return best
    if i == n:
        return node.term if node.term < best else best  # the query ended: same length only
    t = toks[i]
    if not t:
        return best  # an empty token never collides (subjects_collide)
    ch = node.children
    # a stored '>' here collides with whatever the query has from here on (at least this token)
    c = ch.get(">")
    if c is not None and c.min_sub < best:
        best = c.min_sub
    if t == ">":
        # the query's '>' swallows every stored pattern with a non-empty token here
        for tok, c in ch.items():
            if tok and c.min_sub < best:
                best = c.min_sub
        return best
    rest = n - i - 1
    if t == "*":
        for tok, c in ch.items():
            if not tok or tok == ">" or c.min_sub >= best:
                continue
            if not qfwc and not c.fwc_below and rest not in c.lens:
                continue  # nothing below has the query's length
            best = _search(c, toks, i + 1, n, qfwc, best)
        return best
    c = ch.get(t)
    if c is not None:
        best = _search(c, toks, i + 1, n, qfwc, best)
    c = ch.get("*")
    if c is not None:
        best = _search(c, toks, i + 1, n, qfwc, best)
    return best


def first_overlaps(subjects: list[str]) -> list[int]:
    """For each subject, the index of the first later subject it collides with (-1 if none): the pair
    ``for j in range(i + 1, n): if subjects_collide(subjects[j], subjects[i])`` finds, in linear time for
    ordinary configs."""
    tree = SubjectTree()
    out = [-1] * len(subjects)
    for i in range(len(subjects) - 1, -1, -1):
        out[i] = tree.first_collision(subjects[i])
        tree.insert(subjects[i], i)
    return out


def any_collision(stored: Iterable[str], subjects: Iterable[str]) -> bool:
    """Whether any of ``subjects`` collides with any of ``stored``."""
    tree = SubjectTree()
    for i, s in enumerate(stored):
        tree.insert(s, i)
    return any(tree.collides(s) for s in subjects)
