"""The clustered streams of one server: ``ClusteredStreams`` creates, updates and removes the stream replicas
(rillet.jetstream.cluster.streams.StreamReplica) that the meta group's assignments place on this server, answers
the per-stream JetStream API requests a replica must answer (info, leader step-down, direct consumers), and
keeps each group's membership in step with its assignment (``reconcile_group``)."""
from __future__ import annotations

import asyncio
import random
from typing import Any

from rillet.jetstream.api import codec as apijson
from rillet.jetstream.cluster import appliedcfg, resume
from rillet.jetstream.cluster.catchup import make_budget
from rillet.jetstream.cluster.peers import peer_id
from rillet.jetstream.cluster.streams import RECONCILE_EVERY, T, StreamReplica
from rillet.jetstream.errors import ApiError
from rillet.jetstream.log import NotLeader
from rillet.jetstream.store.base import StoreError
from rillet.raft.node import ProposalDropped, RaftError
from rillet.handles import cancelled

# seconds a member may be without a leader before it calls its group leaderless: long enough for an election
# (a step-down's leadership transfer is over in milliseconds, a lost leader is replaced within the election
# timeout); without it a member that voted in a transfer's election answered a STREAM.LEADER.STEPDOWN sent
# right after it 503 (10008) while the transfer was completing
ELECTION_GRACE = 2.0
LOST_QUORUM = 10.0  # seconds (nats-server's lost quorum interval): a group without a leader that long is offline
LEAVE_WITHIN = 10.0  # seconds a removed leader keeps its replica to hand the group over
DIRECT_CHECK_EVERY = 0.25  # seconds between checks of whether followers are current (their direct gets)
DIRECT_DELETED_TTL = 5.0  # seconds a stream leader remembers a direct consumer it deleted (see direct_consumer_known)
STREAM_KEYS = frozenset(("STREAM.INFO", "STREAM.MSG.GET", "STREAM.MSG.DELETE", "STREAM.PURGE",
                         "STREAM.LEADER.STEPDOWN", "STREAM.SNAPSHOT"))
CONSUMER_KEYS = frozenset(("CONSUMER.INFO", "CONSUMER.LEADER.STEPDOWN", "CONSUMER.PAUSE", "CONSUMER.UNPIN"))


def reconcile_group(g: Any, desired: list[str], log: Any, what: str) -> bool:
    """One membership step of group ``g`` (this server leads it) towards the ``desired`` peers: add a
    missing peer, else remove another extra one, else remove itself (it steps down once that commits).
    True when a change was proposed or is due later (a change in flight)."""
    if not g.running or not g.is_leader:
        return False
    cur = g.peers
    add = [p for p in desired if p not in cur]
    rm = [p for p in cur if p not in desired and p != g.id]
    try:
        if add:
            g.add_peer(add[0])
            log.notice(f"JetStream cluster: {what}: adding peer {add[0]}")
        elif rm:
            g.remove_peer(rm[0])
            log.notice(f"JetStream cluster: {what}: removing peer {rm[0]}")
        elif g.id not in desired and len(cur) > 1:
            g.remove_peer(g.id)
            log.notice(f"JetStream cluster: {what}: removing this server (the leader) from the group")
        else:
            return False
    except (NotLeader, ProposalDropped):
        return True  # (a change in flight, or the term's first entry is not committed yet: later)
    except RaftError as e:
        log.warn(f"JetStream cluster: {what}: membership change refused: {e}")
        return False
    return True


def _replicated(assigned: Any, group: Any) -> bool:
    """A replica's group nats-server runs a RAFT node for: more than one peer assigned, a scale or move in
    progress, or other members still in the running group."""
    return len(assigned.peers) > 1 or assigned.desired is not None or (group is not None and len(group.peers) > 1)


class ClusteredStreams:
    """This server's stream and consumer replicas, driven by the meta layer's assignments."""

    def __init__(self, server: Any, js: Any) -> None:
        self.server = server
        self.js = js
        self.peer = peer_id(server.name)
        self.replicas: dict[tuple[str, str], StreamReplica] = {}
        self._names: dict[str, str] = {self.peer: server.name}
        self.started_at = js.loop.time()
        self._timer: asyncio.TimerHandle | None = None
        self._soon = False
        self.running = True
        # (account, stream, consumer or "") -> [(deadline, callback)]: when_leader asks that came first
        self._early_waiters: dict[tuple[str, str, str], list[tuple[float, Any]]] = {}
        self._direct_timer: asyncio.TimerHandle | None = js.loop.call_later(DIRECT_CHECK_EVERY, self._direct_sweep)
        # the bytes of catch-up answers this server's stream leaders have in flight (max_outstanding_catchup)
        self.catchup = make_budget(server, js.loop, js.log)

    def _direct_sweep(self) -> None:
        """Followers with direct gets: answer them while current, not while behind (as nats-server's direct
        access monitoring, which subscribes a follower once it is current)."""
        self._direct_timer = None
        if not self.running:
            return
        for rep in list(self.replicas.values()):
            cfg = rep.stream.cfg
            if (cfg.allow_direct or cfg.mirror_direct or rep._direct_subs) and not rep.closed:
                try:
                    rep.direct_check()
                except Exception as e:  # (one replica's trouble must not stop the others' checks)
                    self.js.log.error(f"JetStream cluster: direct get check of '{rep.jsa.account.name} > "
                                      f"{rep.name}' failed: {e!r}")
        self._direct_timer = self.js.loop.call_later(DIRECT_CHECK_EVERY, self._direct_sweep)

    def peer_name(self, peer: str) -> str:
        n = self._names.get(peer)
        if n:
            return n
        reg = self.js.peer_registry
        if reg is not None:
            n = reg.name_of(peer)
            if n:
                self._names[peer] = n
                return n
        routes = getattr(getattr(self.server, "cluster", None), "routes", None)
        if isinstance(routes, dict):
            for rc in list(routes.values()):
                name = getattr(rc, "remote_name", "") or ""
                if name and peer_id(name) == peer:
                    self._names[peer] = name
                    return name
        return ""

    def _jsa(self, account: str) -> Any:
        jsa = self.js.accounts.get(account or "$G")
        if jsa is None:
            jsa = self.js.enable_account(self.server.lookup_account(account or "$G"))
        return jsa

    def group_leaderless(self, g: Any, created_at: float) -> bool:
        """nats-server's isGroupLeaderless for a group this server is a member of: no leader, and either
        one was known before (and JetStream has run for the lost quorum interval) or the group is older
        than that interval."""
        if g.leader is not None or not g.running:
            return False
        now = self.js.loop.time()
        since = getattr(g, "no_leader_since", None)
        if since is not None and now - since < ELECTION_GRACE:
            return False  # (an election under way: a step-down's transfer, a lost leader being replaced)
        if g.ever_had_leader and now - self.started_at > LOST_QUORUM:
            return True
        return now - created_at > LOST_QUORUM

    # ---- the meta layer's hooks ---------------------------------------------------------------------

    def stream_assigned(self, sa: Any) -> None:
        key = (sa.account or "$G", sa.name)
        rep = self.replicas.get(key)
        if self.peer not in sa.group.peers:
            if rep is not None:
                rep.sa = sa
                self._leave(key, rep)
            return
        if rep is None:
            rep = StreamReplica(self, sa, self._jsa(sa.account))
            self.replicas[key] = rep
            if self._early_waiters:
                self._take_early_waiters((key[0], key[1], ""), rep.group)
            if sa.restore is not None and sa.reply and (sa.group.preferred or sa.group.peers[0]) == self.peer:
                rep.restore_reply = sa.reply  # (not on a replay: the meta layer clears replies then)
            for ca in sa.consumers.values():
                self.consumer_assigned(ca)
            return
        old_peers = list(rep.sa.group.peers)
        prev_cfg = rep.sa.config
        rep.sa = sa
        rep.leaving_since = 0.0
        if list(sa.group.peers) != old_peers or sorted(rep.group.peers) != sorted(sa.group.peers):
            self.reconcile_soon()
        from rillet.jetstream.api.common import stream_config_from_dict
        cfg = stream_config_from_dict(sa.config)
        if prev_cfg != sa.config:
            # (a configuration update, which this replica's log has not applied: its leader proposes it, now or,
            # committed while the group had no leader, once one is elected: config_due. Not an assignment's other
            # changes, whose configuration may be older than what the log applied, the meta layer lagging)
            rep.cfg_wanted = cfg if cfg != rep.stream.cfg else None
        if rep.leader and cfg != rep.stream.cfg:
            self._propose_config(rep, cfg)
        elif not rep.leader and (cfg.allow_direct != rep.stream.cfg.allow_direct
                                 or cfg.mirror_direct != rep.stream.cfg.mirror_direct):
            self.js.loop.call_later(0.5, lambda: rep._direct(False) if not rep.closed else None)
            # (once the update applied: resubscribed by the direct sweep with the new config)

    def config_due(self, rep: StreamReplica) -> None:
        """(a stream replica became leader) An assignment's configuration that came while the group had no
        leader (or another one that lost its lead before proposing it) is proposed now. Only one that came after
        the last UPDATE this replica applied (``cfg_wanted``, cleared by that UPDATE: appliedcfg), so that a
        replica whose meta layer lags its log never proposes an older configuration back."""
        cfg = getattr(rep, "cfg_wanted", None)
        if cfg is not None and cfg != rep.stream.cfg and not rep.closed:
            self.js.log.notice(f"JetStream cluster stream '{rep.jsa.account.name} > {rep.name}': applying the "
                               f"configuration update committed while the stream had no leader")
            self._propose_config(rep, cfg)

    def _propose_config(self, rep: StreamReplica, cfg: Any) -> None:
        """(the stream leader) The assignment's new configuration proposed through the group (an UPDATE)."""
        sa = rep.sa
        old = rep.stream.cfg

        def done(_: Any, err: BaseException | None) -> None:
            if err is not None:
                if not isinstance(err, NotLeader):
                    self.js.log.error(f"JetStream cluster: updating stream '{sa.name}' failed: {err}")
                return
            if rep.log.solo and not rep.closed:  # (applied without the group's log: StreamReplica._apply's part)
                try:
                    appliedcfg.applied(rep, 0)
                except (OSError, StoreError) as e:
                    self.js.log.error(f"JetStream cluster: keeping stream '{sa.name}''s configuration failed: {e}")
            if old.subjects != cfg.subjects and rep.leader:
                rep.stream.subscribe()
            if old.allow_direct != cfg.allow_direct and rep.leader:
                rep.stream.subscribe()
            if (old.mirror != cfg.mirror or old.sources != cfg.sources) and rep.leader:
                st = rep.stream
                if cfg.mirror is not None or cfg.sources:
                    from rillet.jetstream.sources import attach_sources
                    attach_sources(st)
                elif st.sources is not None:
                    st.sources.stop()
                    st.sources = None
        rep.stream.update_config(cfg, done)

    def _leave(self, key: tuple[str, str], rep: StreamReplica) -> None:
        """This server is no longer among the stream's peers: a follower goes now (the leader removes it from
        the group), the leader first adds the new peers and removes itself (reconcile), then goes."""
        if rep.group.is_leader and len(rep.group.peers) > 1:
            if not rep.leaving_since:
                rep.leaving_since = self.js.loop.time()
            self.reconcile_soon()
            return
        if self.replicas.get(key) is rep:
            self.js.loop.create_task(self._remove(key, delete=True))

    def stream_removed(self, sa: Any) -> None:
        key = (sa.account or "$G", sa.name)
        if key in self.replicas:
            self.js.loop.create_task(self._remove(key, delete=True))

    async def _remove(self, key: tuple[str, str], delete: bool) -> None:
        rep = self.replicas.pop(key, None)
        if rep is not None:
            await rep.stop(delete=delete)

    def consumer_assigned(self, ca: Any) -> None:
        rep = self.replicas.get((ca.account or "$G", ca.stream))
        if rep is None:
            return
        if self.peer not in ca.group.peers:
            cr = rep.creps.get(ca.name)
            if cr is not None:
                cr.ca = ca
                if cr.group.is_leader and len(cr.group.peers) > 1:
                    self.reconcile_soon()  # (hands over first, then goes: see reconcile)
                else:
                    self.js.loop.create_task(rep.remove_consumer(ca.name))
            return
        rep.add_consumer(ca)

    def consumer_removed(self, ca: Any) -> None:
        rep = self.replicas.get((ca.account or "$G", ca.stream))
        if rep is not None and ca.name in rep.creps:
            self.js.loop.create_task(rep.remove_consumer(ca.name))

    def stream_info(self, account: str, name: str) -> dict | None:
        rep = self.replicas.get((account or "$G", name))
        if rep is None:
            return None
        from rillet.jetstream.api.common import stream_info_dict
        return stream_info_dict(rep.stream, with_cluster=True)

    def consumer_info(self, account: str, stream: str, name: str, initial: bool = False) -> dict | None:
        """The consumer's info when this server leads the consumer's group (else None); ``initial``: for a
        create's answer (ConsumerReplica.take_initial_info)."""
        rep = self.replicas.get((account or "$G", stream))
        cr = rep.creps.get(name) if rep is not None else None
        if cr is None or not cr.leader:
            return None
        return cr.take_initial_info() if initial else cr.c.info()

    def replica(self, account: str, name: str) -> StreamReplica | None:
        return self.replicas.get((account or "$G", name))

    def when_leader(self, account: str, stream: str, consumer: str, cb: Any, within: float) -> bool:
        """Call ``cb`` when this server becomes the leader of the stream's (``consumer``: the consumer's)
        group within ``within`` seconds, while its group has no leader yet (a new group electing: the meta
        leader's info request for a create's answer is answered at once then, not at its next ask)."""
        rep = self.replicas.get((account or "$G", stream))
        cr = rep.creps.get(consumer) if rep is not None and consumer else None
        if rep is None or (consumer and cr is None):
            # (the request came before this server applied the assignment: kept for the replica to come;
            # not when the meta layer here knows the stream/consumer already and this server has no replica)
            sa = self.assignment(account, stream)
            if sa is not None and (not consumer or consumer in sa.consumers):
                return False
            now = self.js.loop.time()
            early = self._early_waiters
            if len(early) > 64:
                for k in [k for k, ws in early.items() if all(w[0] < now for w in ws)]:
                    del early[k]
            early.setdefault((account or "$G", stream, consumer), []).append((now + within, cb))
            return True
        if rep.closed:
            return False
        return (cr if cr is not None else rep.group).when_leader(cb, within)  # (cr: ConsumerReplica.when_leader)

    def _take_early_waiters(self, key: tuple[str, str, str], g: Any) -> None:
        ws = self._early_waiters.pop(key, None)
        if ws:
            now = self.js.loop.time()
            for deadline, cb in ws:
                if deadline > now:
                    g.when_leader(cb, deadline - now)

    def raft_groups(self) -> list[Any]:
        """The RAFT groups of this server's stream and consumer replicas (those it leads hand over at shutdown)."""
        out = []
        for rep in self.replicas.values():
            if rep.group is not None:
                out.append(rep.group)
            out.extend(cr.group for cr in rep.creps.values() if cr.group is not None)
        return out

    def ha_groups(self) -> int:
        """How many RAFT nodes nats-server would run here for the stream and consumer replicas (its statsz
        ``ha_assets`` less the meta group): the replicated groups only, as nats-server runs no RAFT node for a
        one-peer group (Rillet's runs solo); a group in a scale (``desired``) or still with other members
        counts too."""
        n = 0
        for rep in self.replicas.values():
            if rep.closed:
                continue
            n += _replicated(rep.sa.group, rep.group)
            n += sum(_replicated(cr.ca.group, cr.group) for cr in rep.creps.values() if not cr.closed)
        return n

    async def stop(self) -> None:
        self.running = False
        self._timer = cancelled(self._timer)
        self._direct_timer = cancelled(self._direct_timer)
        for key in list(self.replicas):
            await self._remove(key, delete=False)
        self.catchup.close()

    # ---- membership -----------------------------------------------------------------------------------

    def reconcile_soon(self) -> None:
        if not self._soon and self.running:
            self._soon = True
            self.js.loop.call_soon(self._reconcile)

    def _reconcile(self) -> None:
        """Walk the groups this server leads whose members differ from their assignment's peers, one
        change each; again every RECONCILE_EVERY seconds while any is not done."""
        self._soon = False
        self._timer = cancelled(self._timer)
        if not self.running:
            return
        log = self.js.log
        more = False
        now = self.js.loop.time()
        for key, rep in list(self.replicas.items()):
            if rep.closed:
                continue
            desired = list(rep.sa.group.peers)
            if rep.leaving_since:
                if not rep.group.is_leader or now - rep.leaving_since > LEAVE_WITHIN:
                    self.js.loop.create_task(self._remove(key, delete=True))
                    continue
                more = True
            if sorted(rep.group.peers) != sorted(desired):
                if rep.group.is_leader:
                    rep.mark_synced()  # (no longer solo; the store's state in the log before a new member)
                more = reconcile_group(rep.group, desired, log, f"stream '{key[0]} > {key[1]}'") or more
            elif rep.leader and not rep.log.solo:
                rep.solo_check()  # (back to one member: solo again once nothing is in flight)
            for name, cr in list(rep.creps.items()):
                cdesired = list(cr.ca.group.peers)
                if self.peer not in cdesired and not cr.group.is_leader:
                    self.js.loop.create_task(rep.remove_consumer(name))
                    continue
                if sorted(cr.group.peers) != sorted(cdesired):
                    if cr.group.is_leader:
                        cr.mark_synced()  # (no longer solo; the consumer's state in the log before a new member)
                    more = reconcile_group(cr.group, cdesired, log,
                                           f"consumer '{key[0]} > {key[1]} > {name}'") or more
                elif cr.leader and not cr.log.solo:
                    cr.solo_check()  # (back to one member: solo again once nothing is in flight)
        if more or self._any_pending():
            self._timer = self.js.loop.call_later(RECONCILE_EVERY, self._reconcile)

    def _any_pending(self) -> bool:
        """A group whose members differ from its assignment (its leader may be elsewhere, or not elected
        yet): keep checking."""
        for rep in self.replicas.values():
            if rep.leaving_since or sorted(rep.group.peers) != sorted(rep.sa.group.peers):
                return True
            for cr in rep.creps.values():
                if sorted(cr.group.peers) != sorted(cr.ca.group.peers):
                    return True
        return False

    # ---- $JS.API: the stream / consumer leader answers ----------------------------------------------

    def direct_consumer(self, router: Any, args: list[str], body: bytes) -> bool | None:
        """A consumer create with ``direct`` set (a mirror's or source's consumer, as nats-server): not
        replicated, created by the stream leader alone. None: not such a request; False: answer here
        (the single-server handler creates it); True: another server's (silence)."""
        if b'"direct"' not in body or not args:
            return None
        try:
            req = apijson.parse_json(body)  # (Go's syntax and depth rules: never a Python exception)
            direct = bool((req.get("config") or {}).get("direct"))
        except (ApiError, AttributeError):
            return None
        if not direct:
            return None
        rep = self.replicas.get((router.jsa.account.name, args[0]))
        if rep is None:
            return True  # (the meta layer's not-found is not given for direct consumers: the origin's leader answers)
        return not rep.leader

    def direct_consumer_delete(self, router: Any, args: list[str]) -> bool | None:
        """CONSUMER.DELETE of a ``direct`` consumer (a mirror's or source's, not in the meta layer's
        assignments: the stream leader created it; sources.py deletes the one it gives up): False on the
        stream leader holding it (the single-server handler deletes it and answers), None otherwise."""
        if len(args) != 2:
            return None
        rep = self.replicas.get((router.jsa.account.name, args[0]))
        if rep is None or not rep.leader or args[1] in rep.creps or args[1] not in rep.stream.consumers:
            return None
        now = self.js.loop.time()
        gone = rep.direct_deleted
        for k in [k for k, t in gone.items() if now - t > DIRECT_DELETED_TTL]:
            del gone[k]
        gone[args[1]] = now
        return False

    def direct_consumer_known(self, account: str, stream: str, name: str) -> bool:
        """This server leads the stream and holds (or has just deleted, within DIRECT_DELETED_TTL) the
        direct consumer ``name``: the meta leader leaves the answer to a delete of it to this server."""
        rep = self.replicas.get((account or "$G", stream))
        if rep is None or not rep.leader or name in rep.creps:
            return False
        if name in rep.stream.consumers:
            return True
        t = rep.direct_deleted.get(name)
        return t is not None and self.js.loop.time() - t <= DIRECT_DELETED_TTL

    def _offline(self, router: Any, key: str, reply: bytes | None) -> None:
        from rillet.jetstream.api.common import _type_for
        h = router.handlers.get(key)
        router.respond_error(reply, _type_for(h) if h is not None else T + "error_response",
                             ApiError.make("CLUSTER_NOT_AVAIL"))

    def assignment(self, account: str, stream: str) -> Any:
        """The meta layer's assignment of a stream (None: unknown, or no meta layer)."""
        cl = self.js.cluster
        return cl.state.stream(account, stream) if cl is not None else None

    def _known_consumer(self, account: str, stream: str, name: str) -> bool:
        sa = self.assignment(account, stream)
        return sa is not None and name in sa.consumers

    def api_gate(self, router: Any, key: str, args: list[str], reply: bytes | None, hdr: bytes,
                 body: bytes) -> bool | None:
        """True: answer here; False: stay silent (or answered here); None: not a stream-level request for a
        stream this server holds (the meta layer decides)."""
        if key not in STREAM_KEYS and key not in CONSUMER_KEYS:
            return None
        if not args:
            return None
        acc = router.jsa.account.name
        rep = self.replicas.get((acc, args[0]))
        if rep is None:
            return None
        if key in CONSUMER_KEYS:
            cr = rep.creps.get(args[1]) if len(args) > 1 else None
            if cr is None:
                if len(args) > 1 and self._known_consumer(acc, args[0], args[1]):
                    return False  # (its replicas are on other servers)
                return True if rep.leader else False  # not found: the stream leader says so
            return self._gate_replica(router, key, reply, body, cr, "consumer")
        return self._gate_replica(router, key, reply, body, rep, "stream")

    def _gate_replica(self, router: Any, key: str, reply: bytes | None, body: bytes, r: Any, what: str) -> bool:
        """(api_gate) A request for a stream or consumer (``what``) that has replica ``r`` here: the leader
        answers (a LEADER.STEPDOWN it carries out and stays silent), another member is silent; a member of
        a leaderless group says so (CLUSTER_NOT_AVAIL), but answers STREAM.INFO with what it has. A
        LEADER.STEPDOWN on a member of a group that lost a majority of its logs accepts the loss (resume.py)."""
        if not r.leader:
            if key == f"{what.upper()}.LEADER.STEPDOWN" and resume.lost_here(r.group):
                resume.resume(self, router, reply, r, what)  # (the operator accepts the loss: resume.py)
                return False
            if r.leaderless() and reply:
                if key == "STREAM.INFO":
                    return True  # (as nats-server)
                self._offline(router, key, reply)
            return False
        if key == f"{what.upper()}.LEADER.STEPDOWN":
            self._stepdown(router, reply, r.group, f"{T}{what}_leader_stepdown_response", body)
            return False
        return True

    def _stepdown(self, router: Any, reply: bytes | None, g: Any, typ: str, body: bytes) -> None:
        """STREAM/CONSUMER.LEADER.STEPDOWN on the group's leader, as nats-server: leadership goes to another
        member, chosen at random among those heard from lately (with a ``placement`` in the body, 2.11+:
        the ``preferred`` server, or one in ``cluster`` carrying every tag in ``tags``); 10005 when there is
        none. A request another member already carried out (routed here after the transfer) is ignored."""
        if reply and g.stepdown_seen(reply):
            return
        to = None
        b = body.strip() if body else b""
        if b[:1] in (b"{", b"["):
            try:
                req = apijson.parse_json(b)  # (Go's syntax errors and depth limit)
                if not isinstance(req, dict):
                    raise ApiError.make("INVALID_JSON", err="not a JSON object")
                pl = req.get("placement")
                if pl is not None and not isinstance(pl, dict):
                    raise ApiError.make("INVALID_JSON", err="placement is not a JSON object")
            except ApiError as e:
                router.respond_error(reply, typ, e)
                return
            try:
                to = self._stepdown_target(g, pl or {})
            except ApiError as e:
                router.respond_error(reply, typ, e)
                return
        if to is None:
            cands = g.eligible_peers()
            if not cands:
                router.respond_error(reply, typ, ApiError.make("CLUSTER_NO_PEERS", err="no replacement peer connected"))
                return
            to = random.choice(cands)
        try:
            g.stepdown(to, note=reply)
        except (NotLeader, ValueError) as e:
            router.respond_error(reply, typ, ApiError.make("RAFT_GENERAL", err=str(e) or "not leader"))
            return

        def answer() -> None:
            router.respond(reply, {"type": typ, "success": True})
            self.server.schedule_flush()
        # (answered once the new leader has taken over, not when the transfer starts as nats-server does: a
        # client that pulls or publishes right after the answer finds the new leader's subscriptions)
        g.after_handover(answer, g.election_ticks * g.tick_interval)

    def _stepdown_target(self, g: Any, pl: dict) -> str | None:
        """The member a stepdown ``placement`` names (nats-server's getStepDownPreferredPlacement): the
        ``preferred`` server when it is a member other than this one (else 10005 "already leader" / "not
        known"; an unhealthy one falls back to any healthy member), else a random online member in
        ``cluster`` with every tag in ``tags``; None without placement."""
        pref = str(pl.get("preferred") or "")
        if pref:
            to = next((p for p in g.peers if self.peer_name(p) == pref), None)
            if to == g.id:
                raise ApiError.make("CLUSTER_NO_PEERS", err=f'preferred server "{pref}" is already leader')
            if to is None:
                raise ApiError.make("CLUSTER_NO_PEERS", err=f'preferred server "{pref}" not known')
            return to if to in g.eligible_peers() else None
        cluster, tags = str(pl.get("cluster") or ""), [str(t).strip().lower() for t in pl.get("tags") or ()]
        if not cluster and not tags:
            return None
        reg = self.js.peer_registry
        nodes = reg.nodes if reg is not None else {}
        cands = [p for p in g.peers if p != g.id and p in nodes and not nodes[p].offline
                 and (not cluster or nodes[p].cluster == cluster) and all(t in nodes[p].tags for t in tags)]
        if not cands:
            raise ApiError.make("CLUSTER_NO_PEERS", err="no replacement peer connected")
        return random.choice(cands)
