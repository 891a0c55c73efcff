"""Route interest bookkeeping, sans-IO: what this server tells its routes, and what they told it.

``LocalInterest`` counts this server's own subscriptions per account, subject, queue group and leaf origin
(routed and gateway subscriptions are never counted: a route never forwards interest it learnt from
another route, which is what keeps a full mesh loop-free). It answers each change with the update to send
to every route, or None:

* a plain subscription: RS+ when the count goes 0 -> 1, RS- when it goes 1 -> 0, nothing in between;
* a queue subscription: RS+ with the new count as the weight at every change, RS- when it reaches 0
  (the peer spreads queue messages by weight);
* a subscription made by a leaf node of cluster ``origin``: LS+/LS- to peers that understand them
  (``lnoc``), with the origin in LS- only for peers announcing ``lnocu``; RS+/RS- to others.

``frame_for`` writes an update for one route (account left out on a pinned route); ``snapshot`` lists the
entries to send to a route that has just connected.

``RemoteInterest`` is the other side: the interest one route connection announced, fed from the parser's
``proto_rs_sub``/``proto_rs_unsub``/``proto_ls_sub``/``proto_ls_unsub`` calls. Each call returns the
change for the sublist (a new remote subscription, a new queue weight, a removal, or None), and ``clear``
returns everything to remove when the route goes away. The server keeps these remote subscriptions in the
account's sublist beside the local ones, so a publish pays one match.
"""
from __future__ import annotations

from typing import Iterator, NamedTuple

from rillet.cluster import protocol as cp

__all__ = ["Update", "LocalInterest", "frame_for", "Change", "RemoteInterest"]


class Update(NamedTuple):
    """Interest to announce: weight > 0 is RS+/LS+ (weight used for queues), 0 is RS-/LS-."""
    account: bytes
    subject: bytes
    queue: bytes | None
    origin: bytes | None
    weight: int


# key within an account: (subject, queue or None, leaf origin or None)
_Key = tuple


class LocalInterest:
    __slots__ = ("_accounts",)

    def __init__(self) -> None:
        self._accounts: dict[bytes, dict[_Key, int]] = {}

    def add(self, account: bytes, subject: bytes, queue: bytes | None = None, origin: bytes | None = None,
            n: int = 1) -> Update | None:
        """``n`` more local subscriptions (n > 0) on the key; the update to send to routes, if any."""
        if n <= 0:
            raise ValueError("add needs a positive count")
        m = self._accounts.get(account)
        if m is None:
            m = self._accounts[account] = {}
        key = (subject, queue or None, origin or None)
        old = m.get(key, 0)
        m[key] = old + n
        if queue or old == 0:
            return Update(account, subject, queue or None, origin or None, old + n)
        return None

    def remove(self, account: bytes, subject: bytes, queue: bytes | None = None, origin: bytes | None = None,
               n: int = 1) -> Update | None:
        """``n`` fewer local subscriptions; removing what was never added is ignored (None)."""
        m = self._accounts.get(account)
        key = (subject, queue or None, origin or None)
        if m is None or key not in m or n <= 0:
            return None
        left = m[key] - n
        if left <= 0:
            del m[key]
            if not m:
                del self._accounts[account]
            return Update(account, subject, queue or None, origin or None, 0)
        m[key] = left
        if queue:
            return Update(account, subject, queue, origin or None, left)
        return None

    def count(self, account: bytes, subject: bytes, queue: bytes | None = None, origin: bytes | None = None) -> int:
        m = self._accounts.get(account)
        return 0 if m is None else m.get((subject, queue or None, origin or None), 0)

    def accounts(self) -> list[bytes]:
        return list(self._accounts)

    def snapshot(self, account: bytes | None = None) -> Iterator[Update]:
        """Every entry (of one account, or all) as an RS+/LS+ update: what a newly connected route receives."""
        items = [(account, self._accounts.get(account, {}))] if account is not None else self._accounts.items()
        for acc, m in items:
            for (subject, queue, origin), n in m.items():
                yield Update(acc, subject, queue, origin, n)


def frame_for(u: Update, *, pinned: bool = False, lnoc: bool = True, lnocu: bool = True) -> bytes:
    """The protocol line announcing ``u`` to one route, given what that route supports."""
    acc = None if pinned else u.account
    if u.origin is not None and lnoc:
        if u.weight > 0:
            return cp.ls_sub(u.origin, acc, u.subject, u.queue, u.weight)
        return cp.ls_unsub(u.origin if lnocu else None, acc, u.subject, u.queue)
    if u.weight > 0:
        return cp.rs_sub(acc, u.subject, u.queue, u.weight)
    return cp.rs_unsub(acc, u.subject, u.queue)


class Change(NamedTuple):
    """A change to apply to the sublist for one remote subscription.

    ``kind``: "add" (new remote subscription; ``weight`` for a queue), "weight" (a queue subscription's
    weight changed to ``weight``), "remove"."""
    kind: str
    account: bytes
    subject: bytes
    queue: bytes | None
    origin: bytes | None
    weight: int


class RemoteInterest:
    """The interest one route connection announced (its RS+/LS+ not yet withdrawn)."""

    __slots__ = ("_subs", "lnocu")

    def __init__(self, lnocu: bool = True) -> None:
        # (account, subject, queue, origin or None) -> weight (0 for plain subscriptions)
        self._subs: dict[tuple, int] = {}
        # a peer without lnocu sends LS- without the origin: its leaf subscriptions are then keyed
        # without the origin too (as nats-server does for old peers), so LS- finds them
        self.lnocu = lnocu

    def __len__(self) -> int:
        return len(self._subs)

    def _key(self, account, subject, queue, origin):
        return (bytes(account), bytes(subject), bytes(queue) if queue else None,
                bytes(origin) if origin is not None and self.lnocu else None)

    def rs_sub(self, account, subject, queue, weight) -> Change | None:
        return self._sub(self._key(account, subject, queue, None), weight, None)

    def ls_sub(self, origin, account, subject, queue, weight) -> Change | None:
        return self._sub(self._key(account, subject, queue, origin), weight, bytes(origin))

    def rs_unsub(self, account, subject, queue) -> Change | None:
        return self._unsub(self._key(account, subject, queue, None), None)

    def ls_unsub(self, origin, account, subject, queue) -> Change | None:
        key = self._key(account, subject, queue, origin)
        return self._unsub(key, key[3])

    def _sub(self, key, weight: int, origin) -> Change | None:
        queue = key[2]
        w = max(weight, 1) if queue else 0  # a bad or zero weight counts as 1 (nats-server's delta for it)
        old = self._subs.get(key)
        if old is None:
            self._subs[key] = w
            return Change("add", key[0], key[1], queue, origin, w)
        if queue and old != w:
            self._subs[key] = w
            return Change("weight", key[0], key[1], queue, origin, w)
        return None

    def _unsub(self, key, origin) -> Change | None:
        if self._subs.pop(key, None) is None:
            return None
        return Change("remove", key[0], key[1], key[2], origin, 0)

    def weight(self, account: bytes, subject: bytes, queue: bytes | None = None,
               origin: bytes | None = None) -> int | None:
        """The announced weight (0 for a plain subscription), or None when not announced."""
        return self._subs.get(self._key(account, subject, queue, origin))

    def drop_account(self, account: bytes) -> list[Change]:
        """Every remote subscription of ``account``, forgotten and returned as removals (the account moved to
        a dedicated route: its interest comes again over that one)."""
        keys = [k for k in self._subs if k[0] == account]
        for k in keys:
            del self._subs[k]
        return [Change("remove", a, s, q, o, 0) for (a, s, q, o) in keys]

    def clear(self) -> list[Change]:
        """The route is gone: every remote subscription it announced, as removals."""
        out = [Change("remove", a, s, q, o, 0) for (a, s, q, o) in self._subs]
        self._subs.clear()
        return out
