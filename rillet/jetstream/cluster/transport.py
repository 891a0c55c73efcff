"""RAFT group messages between the servers of a cluster, over the routes: in the system account, or in the
account that owns the group's asset (``cluster_traffic: owner``).

nats-server's RAFT groups talk on ``$NRG.`` subjects of the system account (``$NRG.V.<group>`` votes,
``$NRG.AE.<group>`` append entries, ``$NRG.P.<group>`` proposals, ``$NRG.RP.<group>`` peer removal,
replies on ``$NRG.R.<random>``) with Go's binary encodings. Rillet's RAFT messages have their own
encoding, so they travel under another prefix, ``$RNRG.``: a Go server in the same cluster never
subscribes to it (no interest is announced to Rillet, so nothing is ever sent to it) and never tries to
decode Rillet's bytes as its own RAFT traffic. The consequence: Rillet and Go servers cannot be members
of the same RAFT group (see README.md).

Subjects (every token a plain token: group names and 8-character peer ids have no dots)::

    $RNRG.D.<group>.<to>.<from>     one peer of the group (``send``)
    $RNRG.B.<group>.<from>          every member of the group but the sender (``broadcast``)

A server that joins a group subscribes to ``$RNRG.D.<group>.<own peer>.*`` and ``$RNRG.B.<group>.*``
with an internal client of the group's traffic account; the subscriptions are announced to the routes like
any other, so a message crosses each route at most once and only to servers that are members. Messages are
at most once: no interest (a peer down, a route not up yet, a peer whose traffic is still in the other
account) drops them, as RAFT expects of its network. The payload is the RAFT core's message, opaque here.

The traffic account (traffic.py decides it, as nats-server's ``recreateInternalSubs``): the system account,
unless the group was joined with an ``owner`` account whose configuration says ``cluster_traffic: owner`` and
every peer of the group claims the capability; ``retarget`` moves a group's subscriptions (and its sends)
when that answer changes.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from rillet.jetstream.cluster.peers import DIGITS, PEER_ID_LEN, peer_id

PREFIX = "$RNRG"
OnMessage = Callable[[str, str, bytes], None]
# (owner account name, the group's peers) -> the account its traffic goes in (None: the system account)
TrafficChoice = Callable[[str, Callable[[], list]], Any]


def valid_group(group: str) -> bool:
    return bool(group) and not any(ch in ".*> \t\r\n" for ch in group) and group.isprintable()


def valid_peer(peer: str) -> bool:
    return len(peer) == PEER_ID_LEN and not peer.strip(DIGITS)  # (every character one of DIGITS)


def direct_subject(group: str, to: str, frm: str) -> str:
    return f"{PREFIX}.D.{group}.{to}.{frm}"


def broadcast_subject(group: str, frm: str) -> str:
    return f"{PREFIX}.B.{group}.{frm}"


class _Joined:
    """One joined group: its subscriptions, handler, the internal client of its traffic account, its owner."""
    __slots__ = ("subs", "cb", "ic", "owner", "peers")

    def __init__(self, cb: Optional[OnMessage], owner: str, peers: Callable[[], list]) -> None:
        self.subs: list[Any] = []
        self.cb = cb
        self.ic: Any = None
        self.owner = owner
        self.peers = peers


class RaftTransport:
    """Sends and receives RAFT group messages for one server.

    ``on_message(group, from_peer, data)`` is called for every message to a joined group (unless the
    group was joined with its own handler). The server must have a system account.
    """

    def __init__(self, server: Any, on_message: OnMessage | None = None) -> None:
        acc = getattr(server, "system_account", None)
        if acc is None:
            raise ValueError("clustered JetStream needs the system account (no_system_account is set)")
        self.server = server
        self.peer = peer_id(server.name)
        self.on_message = on_message
        self.ic = server.internal_client(acc, "raft transport")
        self._clients: dict[str, Any] = {}  # traffic account name -> its internal client (not the system's)
        self._groups: dict[str, _Joined] = {}
        self._subjects: dict[tuple[str, str], tuple[bytes, Any]] = {}  # (group, peer or "") -> (subject, client)
        self._senders: dict[bytes, tuple[str, str]] = {}  # received subject -> (group, sending peer), checked
        self.sent = self.received = self.bad = 0
        self.moves = 0  # groups moved from one traffic account to another (retarget)
        self.choose: Optional[TrafficChoice] = None  # traffic.py's decision (None: the system account always)

    @property
    def groups(self) -> list[str]:
        return sorted(self._groups)

    def accounts(self) -> set[str]:
        """The names of the accounts the joined groups' traffic travels in."""
        return {g.ic.account.name for g in self._groups.values() if g.ic is not None}

    def traffic_account(self, group: str) -> Any:
        """The account ``group``'s messages travel in here (None when not joined)."""
        g = self._groups.get(group)
        return g.ic.account if g is not None and g.ic is not None else None

    def join(self, group: str, on_message: OnMessage | None = None, owner: str = "",
             peers: Optional[Callable[[], list]] = None) -> None:
        """Receive the messages of ``group`` (idempotent; a new handler replaces the old one). ``owner``: the
        account of the group's asset (a stream's or consumer's; "" for the meta group), ``peers()`` its members
        now: with ``cluster_traffic: owner`` its traffic goes in that account (``choose``)."""
        if not valid_group(group):
            raise ValueError(f"invalid RAFT group name {group!r}")
        old = self._groups.get(group)
        if old is not None:
            old.cb = on_message
            if owner != old.owner or peers is not None:
                old.owner, old.peers = owner, peers or old.peers
                self.retarget(group)
            return
        g = self._groups[group] = _Joined(on_message, owner, peers or list)
        self._subscribe(group, g, self._target(g))

    def _target(self, g: _Joined) -> Any:
        sys_ic = self.ic
        if not g.owner or self.choose is None:
            return sys_ic
        acc = self.choose(g.owner, g.peers)
        if acc is None or acc is sys_ic.account:
            return sys_ic
        ic = self._clients.get(acc.name)
        if ic is None or ic.account is not acc:  # (an account dropped by a reload and made again: a new client)
            ic = self._clients[acc.name] = self.server.internal_client(acc, "raft transport")
        return ic

    def _subscribe(self, group: str, g: _Joined, ic: Any) -> None:
        g.ic = ic
        g.subs = [ic.subscribe(f"{PREFIX}.D.{group}.{self.peer}.*", self._deliver),
                  ic.subscribe(f"{PREFIX}.B.{group}.*", self._deliver)]

    def _unsubscribe(self, group: str, g: _Joined) -> None:
        if self._subjects:
            self._subjects = {k: v for k, v in self._subjects.items() if k[0] != group}
        for sub in g.subs:
            g.ic.remove_sub(sub)
        g.subs = []

    def retarget(self, group: Optional[str] = None) -> list[tuple[str, str, str]]:
        """Ask again where the traffic of ``group`` (None: of every joined group) goes, and move the groups whose
        answer changed: their subscriptions leave the old account and are made in the new one, their sends
        follow. Returns the moves as (group, old account name, new account name)."""
        moved = []
        for name in ([group] if group is not None else list(self._groups)):
            g = self._groups.get(name)
            if g is None:
                continue
            ic = self._target(g)
            if ic is g.ic:
                continue
            old = g.ic.account.name
            self._unsubscribe(name, g)
            self._subscribe(name, g, ic)
            self.moves += 1
            moved.append((name, old, ic.account.name))
        return moved

    def leave(self, group: str) -> None:
        g = self._groups.pop(group, None)
        if self._senders:
            self._senders = {k: v for k, v in self._senders.items() if v[0] != group}
        if g is not None:
            self._unsubscribe(group, g)
        elif self._subjects:
            self._subjects = {k: v for k, v in self._subjects.items() if k[0] != group}

    def close(self) -> None:
        for group in list(self._groups):
            self.leave(group)

    def _sender(self, group: str, peer: str) -> tuple[bytes, Any]:
        if not valid_group(group):
            raise ValueError(f"invalid RAFT group name {group!r}")
        if peer and not valid_peer(peer):
            raise ValueError(f"invalid peer id {peer!r}")
        g = self._groups.get(group)
        ic = g.ic if g is not None and g.ic is not None else self.ic  # (not joined: the system account)
        subj = (direct_subject(group, peer, self.peer) if peer else broadcast_subject(group, self.peer)).encode()
        if g is None:
            return subj, ic  # (not cached: nothing would clear it)
        s = self._subjects[(group, peer)] = (subj, ic)
        return s

    def send(self, group: str, peer: str, data: bytes) -> None:
        """``data`` to the member ``peer`` of ``group`` (dropped when it does not listen)."""
        s = self._subjects.get((group, peer))
        if s is None:
            if not peer:
                raise ValueError("invalid peer id ''")
            s = self._sender(group, peer)
        self.sent += 1
        s[1].publish(s[0], None, data)

    def broadcast(self, group: str, data: bytes) -> None:
        """``data`` to every other member of ``group`` that listens."""
        s = self._subjects.get((group, ""))
        if s is None:
            s = self._sender(group, "")
        self.sent += 1
        s[1].publish(s[0], None, data)

    def _deliver(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        known = self._senders.get(subject)
        if known is None:
            toks = subject.decode("utf-8", "surrogateescape").split(".")
            if len(toks) == 5 and toks[1] == "D":
                group, frm = toks[2], toks[4]
            elif len(toks) == 4 and toks[1] == "B":
                group, frm = toks[2], toks[3]
                if frm == self.peer:
                    return  # our own broadcast
            else:
                self.bad += 1
                return
            if group not in self._groups or not valid_peer(frm):
                self.bad += 1
                return
            if len(self._senders) >= 4096:
                self._senders.clear()
            self._senders[bytes(subject)] = (group, frm)  # (the same few subjects come again and again)
        else:
            group, frm = known
        g = self._groups.get(group)
        if g is None or sub.client is not g.ic:
            self.bad += 1  # (not joined, or a subscription of the account the group just left)
            return
        data = bytes(msg[hdr:]) if hdr > 0 else bytes(msg)
        self.received += 1
        cb = g.cb or self.on_message
        if cb is None:
            return
        try:
            cb(group, frm, data)
        except Exception as e:  # a failing handler must not break delivery to the others
            self.server.log.error(f"RAFT group {group!r}: message handler failed: {e!r}")
