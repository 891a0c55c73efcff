"""The monitoring JSON of clustered JetStream, in nats-server's field names and order.

Pure builders over plain state objects (the RAFT core and the wiring fill them):

* ``peer_info`` — one replica (``name``, ``current``, ``offline``, ``active`` ns, ``lag``, ``peer``, ``pending``);
* ``cluster_info`` — stream/consumer info ``cluster`` (``name``, ``raft_group``, ``leader``,
  ``leader_since``, ``system_account``, ``traffic_account``, ``replicas``);
* ``meta_cluster_info`` — ``/jsz`` ``meta_cluster`` (and statsz ``jetstream.meta``);
* ``raftz_group`` / ``raftz`` — ``/raftz`` per account and group;
* ``*_advisory`` — leader elected / quorum lost advisories (subject, body);
* ``clustered_healthz`` — ``/healthz`` past the JetStream-enabled checks, for a clustered server
  (``js-meta-only``, account/stream/consumer filters, members only), the body nats-server answers.

The field lists were checked against a live 3-server nats-server 2.15 cluster (tests/test_jscluster_monitor.py).
Replicas lists never include the leader itself (the leader's view), except in the leader-elected
advisories, which list every peer.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from rillet.gocompat.gotime import format_duration, format_time

DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _event_id() -> str:
    return "".join(DIGITS[b % 62] for b in os.urandom(22))


@dataclass
class PeerState:
    """One replica of a group, as its leader (or, for the meta group, this server) sees it."""
    name: str  # server name ("" when not known: nats-server prints the peer id then)
    peer: str  # peer id
    current: bool = False
    active_ns: int = 0  # since the peer was last heard from
    lag: int = 0
    offline: bool = False
    pending: bool = False  # in the assignment, not (yet) a peer of the RAFT group


def peer_info(p: PeerState) -> dict:
    d: dict[str, Any] = {"name": p.name or p.peer, "current": p.current}
    if p.offline:
        d["offline"] = True
    d["active"] = p.active_ns
    if p.lag:
        d["lag"] = p.lag
    d["peer"] = p.peer
    if p.pending:
        d["pending"] = True
    return d


def cluster_info(cluster: str, raft_group: str = "", leader: str = "", leader_since_ns: int = 0,
                 replicas: Iterable[PeerState] = (), *, system_account: bool = True,
                 traffic_account: str = "SYS", desired: dict | None = None) -> dict:
    """Stream or consumer info ``cluster``. ``leader``: the leader's server name (empty: no leader);
    ``replicas``: the other peers. ``system_account``/``traffic_account``: where the group's RAFT
    traffic flows (the system account for Rillet's groups)."""
    d: dict[str, Any] = {}
    if cluster:
        d["name"] = cluster
    if raft_group:
        d["raft_group"] = raft_group
    if leader:
        d["leader"] = leader
        if leader_since_ns:
            d["leader_since"] = format_time(leader_since_ns)
    if system_account:
        d["system_account"] = True
    if traffic_account:
        d["traffic_account"] = traffic_account
    reps = [peer_info(p) for p in replicas]
    if reps:
        d["replicas"] = reps
    if desired:
        d["desired"] = desired
    return d


def desired_info(desired: Mapping[str, Any] | None, peer_name: Any, status: Mapping[str, str] | None = None) -> dict | None:
    """nats-server 2.15's ``cluster.desired`` block from a group's ``desired`` state (assignments.RaftGroup):
    ``created``, ``name`` (the target cluster), ``replicas`` (``{name, peer}`` of each desired peer; left out
    for a scale down, as Go), ``origin`` (``replicas``, ``placement``), ``status`` when the driver gives one
    (``{description, type}``). ``peer_name``: peer id -> server name."""
    if not desired:
        return None
    d: dict[str, Any] = {}
    if desired.get("created"):
        d["created"] = desired["created"]
    if desired.get("cluster"):
        d["name"] = desired["cluster"]
    if not desired.get("scale_down"):
        reps = [{"name": peer_name(p) or p, "peer": p} for p in desired.get("peers") or ()]
        if reps:
            d["replicas"] = reps
    o = desired.get("origin")
    if isinstance(o, Mapping):
        od: dict[str, Any] = {"replicas": int(o.get("replicas") or 0)}
        if o.get("placement"):
            od["placement"] = o["placement"]
        if o.get("retention"):
            od["retention"] = o["retention"]
        d["origin"] = od
    if status:
        d["status"] = dict(status)
    return d


def desired_status(desired: Mapping[str, Any], assigned: Iterable[str], members: Iterable[str],
                   current: Iterable[str], peer_name: Any, blocking: str = "") -> dict:
    """The ``status`` (``{description, type}``, ADR-62's types) of a group in a desired state, as its leader
    sees it: ``assigned`` the assignment's peers, ``members`` the RAFT group's, ``current`` the members
    caught up; ``blocking``: a consumer of the stream still moving. Rillet's meta leader drives the steps
    (one assigned peer at a time), so this tells which step the group is at rather than what a group
    leader is doing (nats-server's reconciling reports its own action)."""
    assigned, members, current = list(assigned), list(members), set(current)
    want = list(desired.get("peers") or ())

    def name(p: str) -> str:
        return peer_name(p) or p
    if desired.get("scale_down"):
        return {"description": "selecting peers to scale down to", "type": "meta"}
    adding = [p for p in assigned if p not in members]
    if adding:
        return {"description": f"adding peer {name(adding[0])}", "type": "membership"}
    removing = [p for p in members if p not in assigned]
    if removing:
        return {"description": f"removing peer {name(removing[0])}", "type": "membership"}
    if any(p not in current for p in members):
        return {"description": "waiting for peers to catch up", "type": "catchup"}
    if blocking:
        return {"description": f"waiting for consumer '{blocking}' to migrate", "type": "blocked"}
    if any(p not in assigned for p in want):
        return {"description": "expanding assignment with desired peers", "type": "meta"}
    return {"description": "waiting for peer set to settle", "type": "meta"}


@dataclass
class MetaSnapshotStats:
    pending_entries: int = 0
    pending_size: int = 0
    last_time_ns: int = 0
    last_duration_ns: int = 0

    def to_json(self) -> dict:
        d: dict[str, Any] = {"pending_entries": self.pending_entries, "pending_size": self.pending_size,
                             "last_time": format_time(self.last_time_ns)}
        if self.last_duration_ns:
            d["last_duration"] = self.last_duration_ns
        return d


@dataclass
class MetaView:
    """The meta group as one server sees it."""
    cluster: str  # cluster name (the statsz form names the group, "_meta_", instead)
    leader: str = ""  # leader's server name
    leader_peer: str = ""
    replicas: list[PeerState] = field(default_factory=list)  # every peer but this server
    cluster_size: int = 0
    quorum_needed: int = 0
    pending: int = 0
    pending_requests: int = 0
    pending_infos: int = 0
    snapshot: MetaSnapshotStats = field(default_factory=MetaSnapshotStats)
    # healthz inputs
    running: bool = True
    current: bool = True
    recovering: bool = False
    write_error: str = ""
    apply_error: str = ""
    rescue: bool = False  # an unsafe quorum rescue (META.RESCUE) lowers quorum_needed now


def meta_cluster_info(m: MetaView, *, name: str | None = None, with_replicas: bool = True) -> dict:
    """``/jsz`` ``meta_cluster``. statsz ``jetstream.meta`` is the same with ``name="_meta_"`` and
    ``with_replicas=False``."""
    d: dict[str, Any] = {}
    nm = m.cluster if name is None else name
    if nm:
        d["name"] = nm
    if m.leader:
        d["leader"] = m.leader
    if m.leader_peer:
        d["peer"] = m.leader_peer
    if with_replicas and m.replicas:
        d["replicas"] = [peer_info(p) for p in m.replicas]
    d["cluster_size"] = m.cluster_size
    d["quorum_needed"] = m.quorum_needed
    if m.rescue:
        d["rescue"] = True
    d["pending"] = m.pending
    d["pending_requests"] = m.pending_requests
    d["pending_infos"] = m.pending_infos
    d["snapshot"] = m.snapshot.to_json()
    return d


# ---- /raftz -------------------------------------------------------------------------------------------------

@dataclass
class RaftPeerView:
    name: str
    known: bool = True
    last_replicated_index: int = 0
    last_seen_ns: int = -1  # -1: never


@dataclass
class RaftGroupView:
    id: str  # our peer id
    state: str  # "FOLLOWER" | "LEADER" | "CANDIDATE" | "CLOSED"
    size: int
    quorum_needed: int
    committed: int = 0
    applied: int = 0
    leader: str = ""  # leader's peer id
    leader_since_ns: int = 0
    ever_had_leader: bool = False
    term: int = 0
    voted_for: str = ""
    pterm: int = 0
    pindex: int = 0
    observer: bool = False
    paused: bool = False
    catching_up: bool = False
    system_account: bool = True
    traffic_account: str = "SYS"
    ipq_proposal_len: int = 0
    ipq_entry_len: int = 0
    ipq_resp_len: int = 0
    ipq_apply_len: int = 0
    wal: dict = field(default_factory=dict)  # the log's stream state (messages, bytes, first_seq, ...)
    wal_error: str = ""
    peers: dict[str, RaftPeerView] = field(default_factory=dict)  # by peer id, without ourselves


def raftz_group(g: RaftGroupView) -> dict:
    d: dict[str, Any] = {"id": g.id, "state": g.state, "size": g.size, "quorum_needed": g.quorum_needed}
    if g.observer:
        d["observer"] = True
    if g.paused:
        d["paused"] = True
    d["committed"] = g.committed
    d["applied"] = g.applied
    if g.catching_up:
        d["catching_up"] = True
    if g.leader:
        d["leader"] = g.leader
    if g.leader_since_ns:
        d["leader_since"] = format_time(g.leader_since_ns)
    d["ever_had_leader"] = g.ever_had_leader
    d["term"] = g.term
    if g.voted_for:
        d["voted_for"] = g.voted_for
    d["pterm"] = g.pterm
    d["pindex"] = g.pindex
    d["system_account"] = g.system_account
    d["traffic_account"] = g.traffic_account
    d["ipq_proposal_len"] = g.ipq_proposal_len
    d["ipq_entry_len"] = g.ipq_entry_len
    d["ipq_resp_len"] = g.ipq_resp_len
    d["ipq_apply_len"] = g.ipq_apply_len
    d["wal"] = g.wal
    if g.wal_error:
        d["wal_error"] = g.wal_error
    peers: dict[str, Any] = {}
    for pid in sorted(g.peers):
        p = g.peers[pid]
        pd: dict[str, Any] = {"name": p.name, "known": p.known}
        if p.last_replicated_index:
            pd["last_replicated_index"] = p.last_replicated_index
        if p.last_seen_ns >= 0:
            pd["last_seen"] = format_duration(p.last_seen_ns)
        peers[pid] = pd
    d["peers"] = peers
    return d


def raftz(groups: Mapping[str, Mapping[str, RaftGroupView]]) -> dict:
    """``/raftz``: account -> group name -> group (nats-server puts every group under the account its
    traffic flows in: the system account's name for Rillet's groups)."""
    return {acc: {name: raftz_group(g) for name, g in sorted(gs.items())} for acc, gs in sorted(groups.items())}


# ---- advisories ---------------------------------------------------------------------------------------------

ADV = "$JS.EVENT.ADVISORY"


def _adv(typ: str, now_ns: int, account: str, domain: str, fields: dict) -> dict:
    """An advisory's body: type, id, timestamp, the account (when given), ``fields``, the domain (when set)."""
    d: dict[str, Any] = {"type": f"io.nats.jetstream.advisory.v1.{typ}", "id": _event_id(),
                         "timestamp": format_time(now_ns)}
    if account:
        d["account"] = account
    d.update(fields)
    if domain:
        d["domain"] = domain
    return d


def stream_leader_elected_advisory(account: str, stream: str, leader: str, replicas: Iterable[PeerState],
                                   now_ns: int, domain: str = "") -> tuple[str, dict]:
    """(subject, body): published in the stream's account; ``replicas``: every peer, the leader too."""
    d = _adv("stream_leader_elected", now_ns, account, domain,
             {"stream": stream, "leader": leader, "replicas": [peer_info(p) for p in replicas]})
    return f"{ADV}.STREAM.LEADER_ELECTED.{stream}", d


def stream_quorum_lost_advisory(account: str, stream: str, replicas: Iterable[PeerState], now_ns: int,
                                domain: str = "") -> tuple[str, dict]:
    d = _adv("stream_quorum_lost", now_ns, account, domain,
             {"stream": stream, "replicas": [peer_info(p) for p in replicas]})
    return f"{ADV}.STREAM.QUORUM_LOST.{stream}", d


def consumer_leader_elected_advisory(account: str, stream: str, consumer: str, leader: str,
                                     replicas: Iterable[PeerState], now_ns: int,
                                     domain: str = "") -> tuple[str, dict]:
    d = _adv("consumer_leader_elected", now_ns, account, domain,
             {"stream": stream, "consumer": consumer, "leader": leader,
              "replicas": [peer_info(p) for p in replicas]})
    return f"{ADV}.CONSUMER.LEADER_ELECTED.{stream}.{consumer}", d


def consumer_quorum_lost_advisory(account: str, stream: str, consumer: str, replicas: Iterable[PeerState],
                                  now_ns: int, domain: str = "") -> tuple[str, dict]:
    d = _adv("consumer_quorum_lost", now_ns, account, domain,
             {"stream": stream, "consumer": consumer, "replicas": [peer_info(p) for p in replicas]})
    return f"{ADV}.CONSUMER.QUORUM_LOST.{stream}.{consumer}", d


def meta_leader_elected_advisory(leader_peer: str, replicas: Iterable[PeerState], cluster: str, now_ns: int,
                                 domain: str = "") -> tuple[str, dict]:
    """The meta leader's advisory (``domain_leader_elected``, in the system account): ``leader`` is the
    new leader's *peer id* there, as nats-server sends it."""
    d = _adv("domain_leader_elected", now_ns, "", domain,
             {"leader": leader_peer, "replicas": [peer_info(p) for p in replicas], "cluster": cluster})
    return f"{ADV}.DOMAIN.LEADER_ELECTED", d


# ---- /healthz (clustered part) -------------------------------------------------------------------------------

def clustered_healthz(o: Mapping[str, Any], meta: MetaView | None, state: Any, our_peer: str,
                      stream_error: Callable[[str, Any], str], consumer_error: Callable[[str, Any, Any], str],
                      account_error: Callable[[str], str] | None = None) -> dict:
    """nats-server's health check of a clustered JetStream server, after the checks
    ``rillet.monitor.endpoints.healthz`` does itself (bad request, readiness, ``js-server-only``,
    JetStream enabled, ``js-enabled-only``). Returns its HealthStatus (``status``, ``status_code`` when
    not 200, ``error`` or, with ``details``, ``errors``).

    ``o``: the healthz options (``details``, ``js-meta-only``, ``account``, ``stream``, ``consumer``);
    ``meta``: the meta group (None: not running); ``state``: the ``MetaState``; ``stream_error(account,
    sa)`` / ``consumer_error(account, sa, ca)``: why this server's replica is not healthy ("" when it is);
    ``account_error(account)``: why the account cannot be used ("" when it can)."""
    details = bool(o.get("details"))
    errors: list[dict] = []
    out: dict[str, Any] = {"status": "ok"}

    def fail(kind: str, msg: str, code: int = 503, **where: str) -> dict:
        if details:
            errors.append({"type": kind, **{k: v for k, v in where.items() if v}, "error": msg})
        else:
            out["status"] = "unavailable"
            out["error"] = msg
        if code != 503:
            out["status_code"] = code
        return finish()

    def finish() -> dict:
        if details:
            out["status"] = "error" if errors else "ok"
            if errors:
                out["errors"] = errors
        if "status_code" not in out and (out.get("error") or errors):
            out["status_code"] = 503
        return out

    desc = ""
    if meta is None or not meta.leader:
        desc = "JetStream has not established contact with a meta leader"
    if meta is not None:
        if meta.write_error:
            desc = f"JetStream meta layer write error: {meta.write_error}"
        elif meta.apply_error:
            desc = f"JetStream meta layer apply error: {meta.apply_error}"
        elif not meta.running:
            desc = "JetStream meta layer is not running"
        elif meta.recovering:
            desc = "JetStream is still recovering meta layer"
        elif not desc and not meta.current:
            desc = "JetStream is not current with the meta leader"
    if desc:
        errors.clear()
        return fail("JETSTREAM", desc)
    if o.get("js-meta-only"):
        return finish()

    acc_f, stream_f, cons_f = o.get("account") or "", o.get("stream") or "", o.get("consumer") or ""
    # (account -> [(stream assignment, [consumer assignments])]) of which this server is a member
    todo: dict[str, list[tuple[Any, list[Any]]]] = {}
    for acc in sorted(state.streams):
        if acc_f and acc != acc_f:
            continue
        for name in sorted(state.streams[acc]):
            sa = state.streams[acc][name]
            if stream_f and name != stream_f:
                continue
            if not sa.group.is_member(our_peer) or sa.restore is not None:
                continue
            cas = [sa.consumers[c] for c in sorted(sa.consumers)
                   if sa.consumers[c].group.is_member(our_peer) and (not cons_f or c == cons_f)]
            todo.setdefault(acc, []).append((sa, cas))
    if acc_f and acc_f not in state.streams:
        return fail("ACCOUNT", f'JetStream account "{acc_f}" not found', 404, account=acc_f)
    if stream_f and not todo.get(acc_f):
        return fail("STREAM", f'JetStream stream "{stream_f}" not found on account "{acc_f}"', 404,
                    account=acc_f, stream=stream_f)
    if cons_f and not todo[acc_f][0][1]:
        return fail("CONSUMER", f'JetStream consumer "{cons_f}" not found for stream "{stream_f}" on account '
                                f'"{acc_f}"', 404, account=acc_f, stream=stream_f, consumer=cons_f)
    for acc, items in todo.items():
        if account_error is not None:
            err = account_error(acc)
            if err and items:
                msg = f'JetStream can not lookup account "{acc}": {err}'
                if not details:
                    return fail("ACCOUNT", msg, account=acc)
                fail("ACCOUNT", msg, account=acc)
                continue
        for sa, cas in items:
            err = stream_error(acc, sa)
            if err:
                msg = f"JetStream stream '{acc} > {sa.name}' is not current: {err}"
                if not details:
                    return fail("STREAM", msg, account=acc, stream=sa.name)
                fail("STREAM", msg, account=acc, stream=sa.name)
                continue
            for ca in cas:
                err = consumer_error(acc, sa, ca)
                if err:
                    msg = f"JetStream consumer '{acc} > {sa.name} > {ca.name}' is not current: {err}"
                    if not details:
                        return fail("CONSUMER", msg, account=acc, stream=sa.name, consumer=ca.name)
                    fail("CONSUMER", msg, account=acc, stream=sa.name, consumer=ca.name)
    return finish()
