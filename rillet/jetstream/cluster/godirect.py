"""Direct gets answered by a Rillet replica of a Go cluster's stream (``GoStreamReplica``, behind ``rillet_go_meta``).

nats-server answers ``$JS.API.DIRECT.GET.<stream>`` and ``$JS.API.DIRECT.GET.<stream>.<subject...>`` (queue group
``_sys_``, in the stream's account) on every replica of a stream whose config has ``allow_direct``: the leader
from the moment it leads, a follower once it is current (checked every 2 s from when it follows: a known leader
heard from lately, nothing left to catch up, at least 90% of what is committed applied); a config update that
turns ``allow_direct`` off takes the subscriptions away, and so does the stream's stop. ``ReplicaDirectGets``
does the same for a ``GoStreamReplica``, and answers with Rillet's own direct get code
(rillet.jetstream.api.direct.DirectApi, through ``_ReplicaApi``: the replica's store seen as a stream), so the
answers are those of a Rillet stream, byte for byte.

Not done: ``mirror_direct`` (a Go cluster's mirror placed on a Rillet server does not answer its origin's direct
gets).
"""
from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any, Optional

from rillet.jetstream.api.direct import DirectApi
from rillet.jetstream.cluster.golead import LEADER

__all__ = ["ReplicaDirectGets", "CHECK_EVERY", "LEADER_CONTACT"]

CHECK_EVERY = 2.0  # seconds between a follower's checks of whether it is current (nats-server's ticker)
LEADER_CONTACT = 2.0  # a follower is current only if it heard its leader this lately (nats-server: 2 heartbeats)
SYNC_THRESHOLD = 0.9  # ... and applied this part of what is committed (nats-server's 90%)
DGET_GROUP = "_sys_"


class _StreamView:
    """What DirectApi reads of a stream: its name, ``cfg.allow_direct`` / ``cfg.mirror_direct`` and its store."""

    __slots__ = ("name", "cfg", "store")

    def __init__(self, name: str, store: Any) -> None:
        self.name = name
        self.cfg = SimpleNamespace(allow_direct=True, mirror_direct=False)
        self.store = store


class _ReplicaApi(DirectApi):
    """DirectApi over one replica: ``jsa.streams`` holds only the replica's view, answers go out through the
    internal client of the stream's account, and the batch byte limit is the server's ``max_pending``."""

    def __init__(self, server: Any, ic: Any, view: _StreamView) -> None:
        self.jsa = SimpleNamespace(streams={view.name: view}, ic=ic)
        self.js = SimpleNamespace(server=server)


class ReplicaDirectGets:
    """The direct get responder of one ``GoStreamReplica`` (see the module docstring). ``check()`` is called
    when the replica's role may have changed; it rearms itself every CHECK_EVERY seconds while a follower is
    not yet subscribed."""

    def __init__(self, replica: Any) -> None:
        self.r = replica
        self.view = _StreamView(replica.name, replica.store)
        self.ic: Any = None
        self.api: Optional[_ReplicaApi] = None
        self.subs: list[Any] = []
        self.served = 0  # requests answered here
        self.heard = 0.0  # monotonic time of the last append entry from the group's leader
        self._timer: Any = None
        self._stopped = False

    # -- what nats-server checks ------------------------------------------------------------------------------
    def allowed(self) -> bool:
        return bool((self.r.assignment.get("stream") or {}).get("allow_direct"))

    def current(self) -> bool:
        """Leader, or a follower that heard the leader lately, catches nothing up and applied (nearly) all
        that is committed."""
        r = self.r
        raft = r.raft
        if r._lead_subs is not None and raft.role == LEADER:
            return True
        if not raft.leader or raft.leader == r.peer or raft.catchup is not None or r._snap is not None:
            return False
        if time.monotonic() - self.heard > LEADER_CONTACT or raft.commit == 0:
            return False
        return raft.applied >= raft.commit or raft.applied >= SYNC_THRESHOLD * raft.commit

    # -- subscriptions ------------------------------------------------------------------------------------------
    def check(self) -> None:
        if self._stopped or self.r.ic is None or not self.r._subs:
            return
        if not self.allowed():
            self._unsubscribe()
            return
        if self.subs:
            return  # (as nats-server: once subscribed, a replica keeps answering until stopped or disallowed)
        if self.current():
            self._subscribe()
        else:
            self._arm()

    def _arm(self) -> None:
        loop = self.r.server.loop
        if self._timer is None and loop is not None:
            self._timer = loop.call_later(CHECK_EVERY, self._tick)

    def _tick(self) -> None:
        self._timer = None
        self.check()

    def _subscribe(self) -> None:
        r = self.r
        if self.ic is None:
            acc = r.server.accounts.get(r.account)
            if acc is None:
                r._warn_once("dgetacc", f"JetStream stream '{r.account} > {r.name}': no such account here; "
                                        "direct gets not answered")
                return
            self.ic = r.server.internal_client(acc, f"go stream direct get {r.name}")
            self.api = _ReplicaApi(r.server, self.ic, self.view)
        self.view.store = r.store
        prefixes = ["$JS.API"]
        domain = getattr(getattr(r.server, "jetstream", None), "domain", "") or ""
        if domain:
            prefixes.append(f"$JS.{domain}.API")
        for p in prefixes:
            self.subs.append(self.ic.subscribe(f"{p}.DIRECT.GET.{r.name}", self._on_request, queue=DGET_GROUP))
            self.subs.append(self.ic.subscribe(f"{p}.DIRECT.GET.{r.name}.>", self._on_request, queue=DGET_GROUP))
        r.log.notice(f"JetStream stream '{r.account} > {r.name}' [{r.group}]: answering direct gets")

    def _unsubscribe(self) -> None:
        for sub in self.subs:
            self.ic.remove_sub(sub)
        self.subs = []

    def stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._unsubscribe()

    def _on_request(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
        if self.api is None or not self.subs:
            return
        self.served += 1
        self.api.on_direct_get(self.view, sub, subject, reply, hdr, msg)
