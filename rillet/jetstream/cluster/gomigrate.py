"""Changing the peers of a Go cluster's stream and consumer groups from Rillet: nats-server 2.15's desired state.

nats-server 2.15 moves a replicated stream or consumer in steps, driven by two parties (our own code, written
from reading its behaviour; the JSON is its layout):

* the **meta leader** writes the target peer set into the assignment's group as ``desired`` (``{"id", "term",
  "peers", "cluster", "preferred", "scale_down", "move", "removed", "origin"}``) and proposes it. After
  ``SERVER.REMOVE`` the removed peer leaves ``group.peers`` at once and is listed under ``desired.removed``;
  a replacement, when a server is free, is in ``desired.peers``. When a server joins later, a group short of
  replicas gets one the same way. Functions here: ``reassign_stream_peers``, ``remap_consumers`` and, for the
  group leader's requests, ``reconcile_group``.
* the group's **leader** carries it out, one step at a time (``migration_step``): it first has the meta leader
  record its term in the desired state; removes from its RAFT group peers that left the assignment or the
  meta group; asks the meta leader to put the desired peers into ``group.peers``; adds them to its RAFT group
  one by one (``EntryAddPeer``); removes the old ones once a quorum is current (itself last, handing the
  leadership to a desired peer first); and finally reports the peer set reached, which the meta leader
  records as the stable assignment (``desired`` gone). Its requests go to ``$SYS.JSC.STREAM.ASSIGNMENT.
  RECONCILE`` and ``$SYS.JSC.CONSUMER.ASSIGNMENT.RECONCILE`` as JSON (``account``, ``stream``[, ``consumer``],
  ``id``, ``term``, ``scale_down_peers``, ``meta_peers``, ``members``, ``match``), so a Go meta leader takes
  them too (``members``, nats-server 2.15.1's: the leader and the peers caught up, beside ``meta_peers``).

``GroupMigration`` is the leader's half for ``GoStreamReplica`` and ``GoConsumerReplica`` (a mixin: their RAFT peer
and meta member), run every half second while their group is migrating.
"""
from __future__ import annotations

import copy
import json
import random
import time
from typing import Any, Iterable, Optional

from rillet.gocompat.gotime import format_time
from rillet.raft import gowire as gw

__all__ = ["STREAM_RECONCILE", "CONSUMER_RECONCILE", "target_peers", "missing_peers", "consumer_replicas",
           "reassign_stream_peers", "remap_consumers", "reconcile_group", "migrating", "migration_step",
           "GroupMigration"]

STREAM_RECONCILE = "$SYS.JSC.STREAM.ASSIGNMENT.RECONCILE"
CONSUMER_RECONCILE = "$SYS.JSC.CONSUMER.ASSIGNMENT.RECONCILE"
CHECK_EVERY = 0.5  # seconds between a migrating group leader's steps (nats-server's fallback interval)
HEARD = 3.0  # seconds: a peer heard from this lately is online (three heartbeats)


def _new_id() -> str:
    return gw.random_token(22)


def _replicas(cfg: dict) -> int:
    return max(int(cfg.get("num_replicas") or 1), 1)


# -- the meta leader's side --------------------------------------------------------------------------------------

def target_peers(sa: dict) -> list[str]:
    """The peer set a stream, and its consumers, end up on: the desired peers (unless a scale down has not
    picked them yet), else the group's (the last ``num_replicas`` of a group with more: an old-style move)."""
    g = sa.get("group") or {}
    peers = list(g.get("peers") or [])
    d = g.get("desired")
    if d:
        return peers if d.get("scale_down") else list(d.get("peers") or [])
    n = _replicas(sa.get("stream") or {})
    return peers[len(peers) - n:] if len(peers) > n else peers


def missing_peers(sa: dict) -> bool:
    return len(target_peers(sa)) < _replicas(sa.get("stream") or {})


def consumer_replicas(ccfg: dict, scfg: dict) -> int:
    """nats-server's replica count of a consumer: its own, else the stream's; one for an ephemeral of a
    limits stream that asked for none."""
    r = int(ccfg.get("num_replicas") or 0)
    sr = _replicas(scfg)
    if r == 0 or r > sr:
        if not ccfg.get("durable_name") and r == 0 and (scfg.get("retention") or "limits") == "limits":
            return 1
        return sr
    return r


def _with_desired(group: dict, target: dict) -> dict:
    """A copy of ``group`` whose desired state is ``target``'s peers (a stale preferred not carried over); an
    earlier desired state's move flag, origin and removed peers kept."""
    if len(group.get("peers") or []) == 1:
        target["preferred"] = group["peers"][0]  # (scaling up from one replica: it has the data)
    elif target.get("preferred") and target["preferred"] not in (target.get("peers") or []):
        target.pop("preferred", None)
    old = group.get("desired") or None
    term = int((target.get("desired") or {}).get("term") or 0)
    ng = copy.deepcopy(group)
    ng["name"] = target.get("name") or group.get("name")
    # (nats-server 2.15.1 stamps a desired state with the time it was first made, kept by every later one, and
    # starts its members with the group's peers of the moment; the group leader's reconcile requests update them)
    d: dict[str, Any] = {"created": (old or {}).get("created") or format_time(time.time_ns()), "id": _new_id()}
    if term:
        d["term"] = term
    d["peers"] = list(target.get("peers") or [])
    if target.get("cluster"):
        d["cluster"] = target["cluster"]
    if target.get("preferred"):
        d["preferred"] = target["preferred"]
    if old:
        if old.get("move"):
            d["move"] = True
        removed = [p for p in (old.get("removed") or []) if p not in d["peers"]]
        if removed:
            d["removed"] = removed
        if old.get("origin"):
            d["origin"] = copy.deepcopy(old["origin"])
    d["members"] = list((old or {}).get("members") or group.get("peers") or [])
    ng["desired"] = d
    return ng


def _add_removed(d: dict, peers: Iterable[str]) -> None:
    removed = list(d.get("removed") or [])
    for p in peers:
        if p not in (d.get("peers") or []) and p not in removed:
            removed.append(p)
    if removed:
        d["removed"] = removed


def _order(d: dict) -> dict:
    """A desired state's fields in nats-server's order."""
    keys = ("created", "id", "term", "peers", "cluster", "preferred", "scale_down", "move", "removed", "members",
            "origin")
    return {k: d[k] for k in keys if k in d}


def reassign_stream_peers(sa: dict, drop: list[str], remove: bool, min_replicas: int, candidates: list[str],
                          rng: random.Random) -> tuple[Optional[dict], bool]:
    """nats-server's re-placement of a stream's peers: ``drop`` replaced (from ``candidates``, the online meta
    peers) and, with ``remove``, taken out of the group at once and listed as removed; the group grown toward
    ``min_replicas``. Returns (the new assignment, every dropped peer replaced), or (None, False) when nothing
    changes."""
    g = sa.get("group") or {}
    d = g.get("desired") or None
    base = list(d.get("peers") or []) if d else list(g.get("peers") or [])
    cluster = (d.get("cluster") if d else None) or g.get("cluster") or ""
    retain = [p for p in base if p not in drop]
    target = max(len(base), min_replicas)
    free = [p for p in candidates if p not in retain and p not in drop]
    rng.shuffle(free)
    new_peers = retain + free[:max(target - len(retain), 0)]
    replaced = len(new_peers) >= target
    csa = copy.deepcopy(sa)
    tgt = {"name": g.get("name"), "peers": new_peers, "cluster": cluster, "preferred": g.get("preferred") or "",
           "desired": d}
    ng = _with_desired(g, tgt)
    ng["cluster"] = cluster
    if d and d.get("scale_down"):
        ng["desired"]["scale_down"] = True
    if remove:
        ng["peers"] = [p for p in ng.get("peers") or [] if p not in drop]
        ng["desired"]["peers"] = [p for p in ng["desired"]["peers"] if p not in drop]
        _add_removed(ng["desired"], drop)
    members = set(ng.get("peers") or []) | set(ng["desired"]["peers"])
    if ng.get("preferred") and ng["preferred"] not in members:
        ng.pop("preferred")
    if ng["desired"].get("preferred") and ng["desired"]["preferred"] not in members:
        ng["desired"].pop("preferred")
    if not ng["desired"]["peers"]:
        return None, False
    if ng.get("peers") == g.get("peers") and ng["desired"]["peers"] == base:
        return None, False
    if not ng.get("peers"):
        ng["peers"] = list(ng["desired"]["peers"])
    ng["desired"] = _order(ng["desired"])
    csa["group"] = ng
    return csa, replaced


def remap_consumers(sa: dict, consumers: dict[str, dict], rng: random.Random) -> tuple[list[dict], list[dict], bool]:
    """nats-server's remapping of a stream's consumers onto its target peers: (updated assignments, ephemeral
    ones that lost every peer, to delete; whether all had converged already)."""
    target = target_peers(sa)
    scfg = sa.get("stream") or {}
    sg = sa.get("group") or {}
    updated, deleted, done = [], [], True
    for ca in consumers.values():
        g = ca.get("group") or {}
        cd = g.get("desired") or None
        cpeers = list(cd.get("peers") or []) if cd else list(g.get("peers") or [])
        if cd:
            done = False
        ccfg = ca.get("consumer") or {}
        r = consumer_replicas(ccfg, scfg)
        if (scfg.get("retention") or "limits") != "limits":
            r = _replicas(scfg)
        kept = sum(1 for p in cpeers if p in target)
        size = min(r, max(kept, len(target))) if kept < r else (r if kept > r else kept)
        if kept == len(cpeers) and kept == size:
            sd = sg.get("desired") or {}
            removals = any(p in (sd.get("removed") or []) and (not cd or p not in (cd.get("removed") or []))
                           for p in g.get("peers") or [])
            if not removals:
                continue
        new_peers = [p for p in cpeers if p in target]
        if len(new_peers) < r:
            backfill = list(target)
            rng.shuffle(backfill)
            for p in backfill:
                if len(new_peers) >= r:
                    break
                if p not in new_peers:
                    new_peers.append(p)
        elif len(new_peers) > r:
            new_peers = new_peers[:r]
        cca = copy.deepcopy(ca)
        cg = cca["group"]
        if len(cpeers) == 1 and kept == 1 and len(new_peers) > 1:
            cg["preferred"] = cpeers[0]
        else:
            cg.pop("preferred", None)
        cg["peers"] = new_peers
        if len(g.get("peers") or []) == 1 and not cd:
            cg["name"] = gw.group_name("C", len(new_peers), str(cg.get("store") or "file"))
        if int(ccfg.get("num_replicas") or 0) != 0:
            cca["consumer"] = dict(ccfg, num_replicas=r)
        if sg.get("desired"):
            ng = _with_desired(g, dict(cg, desired=cd))
            if kept > 0 and kept != len(cpeers):
                ng["desired"]["scale_down"] = True
            dropped = [p for p in ng.get("peers") or [] if p not in (sg.get("peers") or [])]
            ng["peers"] = [p for p in ng.get("peers") or [] if p in (sg.get("peers") or [])]
            _add_removed(ng["desired"], dropped)
            ng["desired"] = _order(ng["desired"])
            cca["group"] = ng
        if not cca["group"].get("peers"):
            if not ccfg.get("durable_name"):
                deleted.append(ca)
                continue
            cca["group"]["peers"] = list((cca["group"].get("desired") or {}).get("peers") or new_peers)
        updated.append(cca)
        done = False
    return updated, deleted, done


def reconcile_group(group: dict, upd: dict, replicas: int, done: bool) -> Optional[dict]:
    """nats-server's meta leader taking a group leader's reconcile request ``upd`` (``id``, ``term``,
    ``scale_down_peers``, ``meta_peers``, ``match``): the new group, or None when nothing is to be proposed."""
    sdp, mp = upd.get("scale_down_peers"), upd.get("meta_peers")
    if sdp is not None and mp is not None:
        return None
    term = int(upd.get("term") or 0)
    d = group.get("desired") or None
    if d is None:
        if upd.get("id"):
            return None  # (about a desired state we do not have)
        peers = list(group.get("peers") or [])
        legacy = len(peers) > replicas
        tgt = dict(copy.deepcopy(group), peers=peers[len(peers) - replicas:] if legacy else peers)
        ng = _with_desired(group, tgt)
        ng["desired"]["term"] = term
        if legacy:
            ng["desired"]["move"] = True
        ng["desired"] = _order(ng["desired"])
        return ng
    if term < int(d.get("term") or 0) or not d.get("id") or d.get("id") != upd.get("id"):
        return None
    if not d.get("term") or term > int(d.get("term") or 0):
        ng = copy.deepcopy(group)
        ng["desired"]["id"] = _new_id()
        ng["desired"]["term"] = term
        ng["desired"] = _order(ng["desired"])
        return ng
    if d.get("scale_down"):
        if sdp is None or any(p not in (d.get("peers") or []) for p in sdp):
            return None
        ng = copy.deepcopy(group)
        ng["desired"]["id"] = _new_id()
        ng["desired"].pop("scale_down", None)
        ng["desired"]["peers"] = list(sdp)
        return ng
    if mp is None:
        return None  # (a nudge: the consumers are remapped by the caller)
    ng = copy.deepcopy(group)
    prev = sorted(ng.get("peers") or [])
    ng["peers"] = list(mp)
    members = upd.get("members")
    new_members = members is not None and list(members) != list(d.get("members") or [])
    if new_members:
        # (a 2.15.1 meta leader copies the leader's members into the desired state, a change of them alone
        # proposed too: seen on the wire, a consumer group's desired state re-proposed with its peers unchanged)
        ng["desired"]["members"] = list(members)
    if sorted(d.get("peers") or []) == sorted(mp) and upd.get("match") and done:
        ng["peers"] = list(d.get("peers") or [])
        if d.get("cluster"):
            ng["cluster"] = d["cluster"]
        ng.pop("preferred", None)
        ng.pop("desired", None)
        if len(ng["peers"]) >= replicas:
            ng.pop("excluded", None)
        return ng
    if sorted(mp) == prev and not new_members:
        return None
    if any(p not in prev for p in mp):
        ng["scale_up"] = True
    ng["desired"]["id"] = _new_id()
    ng["desired"] = _order(ng["desired"])
    return ng


def order_group(g: dict) -> dict:
    """A raft group's fields in nats-server's order (name, peers, store, cluster, preferred, scale_up, excluded,
    desired)."""
    keys = ("name", "peers", "store", "cluster", "preferred", "scale_up", "excluded", "desired")
    return {k: g[k] for k in keys if k in g} | {k: v for k, v in g.items() if k not in keys}


# -- the group leader's side -------------------------------------------------------------------------------------

def migrating(assignment: dict, raft_peers: Iterable[str], replicas: int) -> bool:
    """nats-server's test of whether a group's leader has a migration to drive."""
    g = assignment.get("group") or {}
    if g.get("desired"):
        return True
    peers = list(g.get("peers") or [])
    actual = set(raft_peers)
    return len(peers) > replicas or len(actual) > replicas or any(p not in actual for p in peers)


def _sort_keep(leader: str, actual: list[str], online: set[str], lag: dict[str, int], cands: list[str]) -> list[str]:
    """Candidates by how much worth keeping: the leader, online members by least lag, offline members, others."""
    def rank(p: str) -> tuple[int, int]:
        if p == leader:
            return (0, 0)
        if p not in actual:
            return (3, 0)
        return (1 if p in online else 2, lag.get(p, 0))
    return sorted(cands, key=rank)


def migration_step(me: str, term: int, assignment: dict, actual: list[str], meta_peers: set[str], online: set[str],
                   lag: dict[str, int], current: set[str], change_pending: bool, replicas: int,
                   blocked_by: str = "", stream_peers: Optional[list[str]] = None) -> tuple[str, Any]:
    """The next step of a migrating group's leader, as nats-server 2.15 takes it: ("reconcile", update) -- a
    request to the meta leader --, ("add", peer), ("remove", peer), ("stepdown", preferred peer or ""),
    ("wait", why) or ("done", None). ``actual``: the RAFT group's peers (us included); ``online``: peers heard
    from lately; ``lag``: entries each is behind; ``current``: peers holding our whole log; ``stream_peers``: for
    a consumer, its stream's assigned peers (it goes nowhere its stream is not)."""
    g = assignment.get("group") or {}
    d = g.get("desired") or None
    assigned = list(g.get("peers") or [])
    upd: dict[str, Any] = {"id": (d or {}).get("id", ""), "term": term}
    if not d or not d.get("id") or int(d.get("term") or 0) != term:
        return "reconcile", upd
    desired = list(d.get("peers") or [])
    if change_pending:
        return "wait", "waiting for membership change to commit"
    evicted = [p for p in actual if p not in assigned or p not in meta_peers]
    if evicted:
        pick = _sort_keep(me, actual, online, lag, evicted)[-1]
        if pick == me:
            keep = _sort_keep("", actual, online, lag, [p for p in actual if p != me and p in desired])
            return "stepdown", keep[0] if keep else ""
        return "remove", pick
    cands = [p for p in assigned if p not in actual and p in desired]
    if cands:
        heard = [p for p in cands if p in online]
        if heard:
            return "add", heard[0]
        live = sum(1 for p in actual if p == me or p in online)
        if live >= (len(actual) + 1) // 2 + 1:
            return "add", cands[0]
        return "wait", "waiting for quorum to add peer"
    if d.get("scale_down"):
        keep = _sort_keep(me, actual, online, lag, desired)[:replicas]
        return "reconcile", dict(upd, scale_down_peers=keep)
    if any(p not in assigned for p in desired):
        combined = list(assigned) + [p for p in desired if p not in assigned
                                     and (stream_peers is None or p in stream_peers)]
        if len(combined) == len(assigned):
            return "wait", "waiting for stream to migrate first"
        return "reconcile", dict(upd, meta_peers=combined)
    exact = sorted(assigned) == sorted(actual)
    remaining = [p for p in actual if p not in desired]
    if remaining and exact:
        if blocked_by:
            return "reconcile", upd  # (a nudge: the meta leader remaps the consumers)
        pick = _sort_keep(me, actual, online, lag, remaining)[-1]
        if stream_peers is None:
            ok = sum(1 for p in actual if p != pick and (p == me or p in current))
            if ok < (len(actual) - 1) // 2 + 1:
                return "wait", "waiting for peers to catch up"
            cur_desired = [p for p in actual if (p == me or p in current) and p in desired]
            if cur_desired and me not in desired:
                if len(cur_desired) < len(desired) // 2 + 1:
                    return "wait", "waiting for desired peers to catch up"
                keep = _sort_keep("", actual, online, lag, [p for p in cur_desired if p != me])
                return ("stepdown", keep[0]) if keep else ("wait", "waiting for a desired peer to step down to")
        if pick == me:
            return "stepdown", ""
        return "remove", pick
    return "reconcile", dict(upd, meta_peers=sorted(actual), match=exact) if exact else \
        dict(upd, meta_peers=sorted(actual))


class GroupMigration:
    """The group leader's half (see the module docstring), for a replica (``GoStreamReplica`` or
    ``GoConsumerReplica``: ``raft``, ``assignment``, ``member``, ``ic``, ``propose``, ``transfer_away``). Call
    ``_migration_check()`` when leading starts and when the assignment changes."""

    _mig_timer: Any = None
    _mig_change: int = 0  # the log index of our last membership change proposed (in progress until committed)
    migration_steps: int = 0
    migration_status: str = ""

    def _mig_replicas(self) -> int:
        raise NotImplementedError

    def _mig_reconcile_doc(self, upd: dict) -> dict:
        raise NotImplementedError

    def _mig_subject(self) -> str:
        raise NotImplementedError

    def _mig_blocked_by(self) -> str:
        return ""

    def _mig_stream_peers(self) -> Optional[list[str]]:
        return None

    def _mig_leading(self) -> bool:
        raise NotImplementedError

    def _on_elect_timer(self) -> None:
        """(no leader heard for an election timeout) First drop the peers the meta layer removed, when the group
        can not make a quorum without them (nats-server's checkEvictedPeers), then stand as before."""
        if (self.ic is not None and self._subs and self.raft.role != "leader" and self.member is not None
                and time.monotonic() >= self._elect_at):
            self._evict_removed()
        super()._on_elect_timer()

    def _evict_removed(self) -> list[str]:
        """nats-server's EvictPeers, as its replicas use it: a leaderless group, while the meta group has a leader,
        drops from its membership the peers listed as removed in the assignment's desired state (and no longer
        in its peers) -- only when the others could not make a quorum without us, so that nothing is committed
        that we would not see. Returns the peers evicted."""
        meta = self.member.raft
        if not meta.leader or meta.catchup is not None:
            return []
        g = self.assignment.get("group") or {}
        removed = set(((g.get("desired") or {}).get("removed") or []))
        r = self.raft
        if not removed or self.peer not in (g.get("peers") or []) or self.peer not in (r.peers | {self.peer}):
            return []
        voting = r.peers | {self.peer}
        evict = sorted(p for p in voting if p != self.peer and p in removed and p not in (g.get("peers") or []))
        if not evict:
            return []
        remaining = sum(1 for p in voting if p != self.peer and p not in evict)
        if remaining >= len(voting) // 2 + 1:
            return []
        for p in evict:
            if len(r.peers) <= 1:
                break
            r.peers.discard(p)
            r.mark_removed(p)
        r.cluster_size = len(r.peers | {self.peer})
        self.log.warn(f"JetStream {self.KIND} {self.group!r}: evicted peers {evict} removed by the meta group, "
                      f"cluster size is now {r.cluster_size}")
        return evict

    def lead_alone(self) -> None:
        """The meta group left this server its group's only peer with no change pending (``peers == [me]``, no
        desired state: the removed peers had no replacement, or a scale-down to R1 kept this replica).
        nats-server's replica then drops the group's RAFT node and runs the stream (or consumer) as a one-replica
        one, with everything it stored (processClusterUpdateStream, "downgraded to R1"). Here the group goes on
        as a group of one: the other peers leave its membership and this server elects itself at once (its own
        vote is the quorum), its store and state kept. Called on every assignment of that shape: idempotent."""
        r = self.raft
        others = r.peers - {self.peer}
        if others or r.cluster_size != 1:
            r.peers = {self.peer}
            for p in others:
                r.mark_removed(p)
            r.cluster_size = 1
            self.log.notice(f"JetStream {self.KIND} {self.group!r}: the meta group left this server its only "
                            f"peer; dropped {sorted(others)} from the group, which it leads alone")
        self.stand_alone = True  # (should a catch-up hold the election back: the election timer stands later)
        if r.role == "leader" or self.ic is None:
            return
        if self._alone():
            self.campaigns += 1
            self._send(r.campaign())
        else:
            self._touch()

    def _migration_check(self) -> None:
        """Start stepping (every CHECK_EVERY s while leading) when the group is migrating."""
        if self._mig_timer is not None or self.ic is None or self.server.loop is None:
            return
        if not self._mig_leading() or self.member is None:
            return
        if not migrating(self.assignment, self.raft.peers | {self.peer}, self._mig_replicas()):
            return
        self._mig_timer = self.server.loop.call_later(0.05, self._mig_tick)

    def _mig_tick(self) -> None:
        self._mig_timer = None
        if self.ic is None or not self._mig_leading() or self.member is None:
            return
        if not migrating(self.assignment, self.raft.peers | {self.peer}, self._mig_replicas()):
            self.migration_status = ""
            return
        self._mig_step()
        if self.ic is not None and self._mig_leading():
            self._mig_timer = self.server.loop.call_later(CHECK_EVERY, self._mig_tick)

    def _mig_step(self) -> None:
        r = self.raft
        now = time.monotonic()
        actual = sorted(r.peers | {self.peer})
        # (peers heard from lately, members or not: a peer to be added answers the leader before it is one)
        online = {p for p, t in r.last_seen.items() if p != self.peer and now - t <= HEARD}
        lag = {p: max(r.pindex - r.match.get(p, 0), 0) for p in actual if p != self.peer}
        current = {p for p in actual if p != self.peer and (r.current(p) or (p in r.match and lag[p] == 0))}
        kind, arg = migration_step(self.peer, r.term, self.assignment, actual, set(self.member.raft.peers), online,
                                   lag, current, r.commit < self._mig_change, self._mig_replicas(),
                                   self._mig_blocked_by(), self._mig_stream_peers())
        self.migration_steps += 1
        status = f"{kind} {arg if not isinstance(arg, dict) else json.dumps(arg, sort_keys=True)}"
        if status != self.migration_status:
            self.log.notice(f"JetStream {self.KIND} {self.group!r}: peer change step: {status}")
        self.migration_status = status
        if kind == "reconcile":
            if arg.get("meta_peers"):
                # (nats-server 2.15.1's group leader sends its members beside meta_peers: itself and the peers
                # caught up; its meta leader ends a change only once they are all the desired peers. Without
                # them, a change a Rillet leader carried out under a 2.15.1 meta leader was never ended)
                arg = dict(arg, members=[self.peer] + sorted(current))
            doc = self._mig_reconcile_doc(arg)
            self.ic.publish(self._mig_subject().encode(), None, json.dumps(doc, separators=(",", ":")).encode())
        elif kind in ("add", "remove"):
            et = gw.ENTRY_ADD_PEER if kind == "add" else gw.ENTRY_REMOVE_PEER
            if kind == "add":
                r._adding.add(arg)
            self.propose([gw.Entry(et, arg.encode("latin-1"))])
            self._mig_change = r.pindex
        elif kind == "stepdown":
            if not self.transfer_away(arg or ""):
                r.step_down()
                self._send([])


def reconcile_doc(upd: dict, **names: str) -> dict:
    """A reconcile request in nats-server's JSON (``account``, ``stream``[, ``consumer``] first; empty fields
    left out as its encoder leaves them)."""
    doc: dict[str, Any] = dict(names)
    if upd.get("id"):
        doc["id"] = upd["id"]
    doc["term"] = int(upd.get("term") or 0)
    if upd.get("scale_down_peers") is not None:
        doc["scale_down_peers"] = list(upd["scale_down_peers"])
    if upd.get("meta_peers"):
        doc["meta_peers"] = list(upd["meta_peers"])
    if upd.get("members"):
        doc["members"] = list(upd["members"])
    if upd.get("match"):
        doc["match"] = True
    return doc
