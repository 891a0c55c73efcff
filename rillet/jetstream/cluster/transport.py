"""RAFT group messages between the servers of a cluster, over the routes, in the system account.

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
with an internal client of the system account; the subscriptions are announced to the routes like any
other, so a message crosses each route at most once and only to servers that are members. Messages are
at most once: no interest (a peer down, a route not up yet) drops them, as RAFT expects of its network.
The payload is the RAFT core's message, opaque here.
"""
from __future__ import annotations

from typing import Any, Callable

from rillet.jetstream.cluster.peers import DIGITS, PEER_ID_LEN, peer_id

PREFIX = "$RNRG"
OnMessage = Callable[[str, str, bytes], None]


def valid_group(group: str) -> bool:
    return bool(group) and not any(ch in ".*> \t\r\n" for ch in group) and group.isprintable()


def valid_peer(peer: str) -> bool:
    return len(peer) == PEER_ID_LEN and not peer.strip(DIGITS)  # (every character one of DIGITS)


def direct_subject(group: str, to: str, frm: str) -> str:
    return f"{PREFIX}.D.{group}.{to}.{frm}"


def broadcast_subject(group: str, frm: str) -> str:
    return f"{PREFIX}.B.{group}.{frm}"


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
        self._groups: dict[str, tuple[list[Any], OnMessage | None]] = {}
        self._subjects: dict[tuple[str, str], bytes] = {}  # (group, peer or "") -> checked subject bytes
        self._senders: dict[bytes, tuple[str, str]] = {}  # received subject -> (group, sending peer), checked
        self.sent = self.received = self.bad = 0

    @property
    def groups(self) -> list[str]:
        return sorted(self._groups)

    def join(self, group: str, on_message: OnMessage | None = None) -> None:
        """Receive the messages of ``group`` (idempotent; a new handler replaces the old one)."""
        if not valid_group(group):
            raise ValueError(f"invalid RAFT group name {group!r}")
        old = self._groups.get(group)
        if old is not None:
            self._groups[group] = (old[0], on_message)
            return
        subs = [self.ic.subscribe(f"{PREFIX}.D.{group}.{self.peer}.*", self._deliver),
                self.ic.subscribe(f"{PREFIX}.B.{group}.*", self._deliver)]
        self._groups[group] = (subs, on_message)

    def leave(self, group: str) -> None:
        g = self._groups.pop(group, None)
        if self._subjects:
            self._subjects = {k: v for k, v in self._subjects.items() if k[0] != group}
        if self._senders:
            self._senders = {k: v for k, v in self._senders.items() if v[0] != group}
        if g is not None:
            for sub in g[0]:
                self.ic.remove_sub(sub)

    def close(self) -> None:
        for group in list(self._groups):
            self.leave(group)

    def send(self, group: str, peer: str, data: bytes) -> None:
        """``data`` to the member ``peer`` of ``group`` (dropped when it does not listen)."""
        subj = self._subjects.get((group, peer))
        if subj is None:
            if not valid_group(group):
                raise ValueError(f"invalid RAFT group name {group!r}")
            if not valid_peer(peer):
                raise ValueError(f"invalid peer id {peer!r}")
            subj = self._subjects[(group, peer)] = direct_subject(group, peer, self.peer).encode()
        self.sent += 1
        self.ic.publish(subj, None, data)

    def broadcast(self, group: str, data: bytes) -> None:
        """``data`` to every other member of ``group`` that listens."""
        subj = self._subjects.get((group, ""))
        if subj is None:
            if not valid_group(group):
                raise ValueError(f"invalid RAFT group name {group!r}")
            subj = self._subjects[(group, "")] = broadcast_subject(group, self.peer).encode()
        self.sent += 1
        self.ic.publish(subj, None, data)

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
        if g is None:
            self.bad += 1
            return
        data = bytes(msg[hdr:]) if hdr > 0 else bytes(msg)
        self.received += 1
        cb = g[1] or self.on_message
        if cb is None:
            return
        try:
            cb(group, frm, data)
        except Exception as e:  # a failing handler must not break delivery to the others
            self.server.log.error(f"RAFT group {group!r}: message handler failed: {e!r}")
