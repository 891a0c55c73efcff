"""The meta leader's reconciliation, a part of rillet.jetstream.cluster.meta.JetStreamCluster (a mixin): scale,
move and replaced peers. Every group whose assignment has a ``desired`` state (nats-server 2.15's desired
state) is driven one step at a time on the meta leader's timer, its consumers kept on their target peers, and
groups short of replicas given a new peer."""
from __future__ import annotations

import time
from typing import Any, Callable, Optional

from rillet.gocompat.gotime import format_time
from rillet.jetstream.cluster import assignments as A
from rillet.jetstream.cluster.group import RaftGroup
from rillet.jetstream.cluster.peers import peer_id
from rillet.jetstream.cluster.placement import (PlacementConfig, PlacementError, consumer_replicas,
                                                select_peer_group)
from rillet.jetstream.log import NotLeader

RECONCILE_EVERY = 2.0  # seconds between looks for groups short of replicas (meta leader)


class MetaReconcile:
    """(JetStreamCluster's state, leader and proposals are its own: see meta.py.)"""

    state: Any
    server: Any
    loop: Any
    peer: str
    group: Optional[RaftGroup]
    _filled_at: float
    _reconciling: set[tuple[str, str]]

    # ---- reconciliation: scale, move, replaced peers (meta leader) -----------------------------------

    def _reconcile_tick(self, now: float) -> None:
        """On the meta leader's timer: drive every group with a ``desired`` state one step on (one task per
        stream at a time), and every RECONCILE_EVERY seconds give groups short of replicas a new peer."""
        fill = now - self._filled_at >= RECONCILE_EVERY
        if fill:
            self._filled_at = now
        for sa in list(self.state.iter_streams()):
            key = (sa.account, sa.name)
            if key in self._reconciling:
                continue
            if sa.group.desired is not None or self._consumers_off_target(sa, sa.group.peers):
                self._reconciling.add(key)
                self.loop.create_task(self._reconcile_one(key, (sa.group.desired or {}).get("id")))
            elif fill and len(sa.group.peers) < int(sa.config.get("num_replicas") or 1):
                self._fill_missing(sa)

    @staticmethod
    def _consumer_target(sa: A.StreamAssignment, ca: A.ConsumerAssignment, final: list[str]) -> list[str]:
        """The peers a consumer's group should have when its stream's are ``final``: its replica count
        (nats-server's rule: 0 or more than the stream's = the stream's; an interest or work-queue stream's
        consumers as many as the stream), its current peers kept first."""
        n = consumer_replicas(ca.config, sa.config)
        if sa.config.get("retention", "limits") != "limits":
            n = int(sa.config.get("num_replicas") or 1)
        cd = ca.group.desired
        if cd is not None and not cd.get("scale_down"):
            chosen = list(cd.get("peers") or ())
            if len(chosen) == n and all(p in final for p in chosen):
                return chosen  # (the peers chosen for it, its leader first: _consumer_step)
        keep = [p for p in ca.group.peers if p in final]
        return (keep + [p for p in final if p not in keep])[:n]

    def consumer_desired(self, sa: A.StreamAssignment, ca: A.ConsumerAssignment, target: list[str],
                         final: list[str]) -> dict:
        """A consumer's desired state towards ``target`` (its stream's peers being ``final``): the peers, or,
        when it only loses peers and may keep more than one choice, the peers it may keep with ``scale_down``
        (its leader picks them: ``_consumer_step``), as nats-server 2.15."""
        d: dict[str, Any] = {"id": A._random_token(A.PEER_ID_LEN), "created": format_time(time.time_ns()),
                             "peers": list(target), "cluster": (sa.group.desired or {}).get("cluster")
                             or sa.group.cluster or self.name}
        pool = [p for p in ca.group.peers if p in final]
        if all(p in pool for p in target) and len(target) < len(pool):
            d["peers"] = pool
            d["scale_down"] = True
        return d

    @staticmethod
    def _consumer_config(sa: A.StreamAssignment, ca: A.ConsumerAssignment) -> Optional[dict]:
        """The consumer's config with ``num_replicas`` brought to its stream's (as nats-server 2.15 rewrites
        it when the stream scales or changes retention): an explicit count above the stream's, or another
        than the stream's on an interest or work-queue stream; None when it stands."""
        want = int(ca.config.get("num_replicas") or 0)
        srep = int(sa.config.get("num_replicas") or 1)
        if want and (want > srep or (sa.config.get("retention", "limits") != "limits" and want != srep)):
            return dict(ca.config, num_replicas=srep)
        return None

    def _consumers_off_target(self, sa: A.StreamAssignment, final: list[str]) -> list[A.ConsumerAssignment]:
        """The consumers still to move: their peers are not their target's, their config's replica count is
        to be brought to the stream's, or their desired state is still to be cleared."""
        out = []
        for cn in sorted(sa.consumers):
            ca = sa.consumers[cn]
            if set(self._consumer_target(sa, ca, final)) != set(ca.group.peers) or ca.group.desired is not None \
                    or self._consumer_config(sa, ca) is not None:
                out.append(ca)
        return out

    def _propose_consumer(self, sa: A.StreamAssignment, ca: A.ConsumerAssignment, group: A.RaftGroup,
                          config: Optional[dict] = None) -> None:
        nca = A.ConsumerAssignment(name=ca.name, stream=ca.stream, config=config or ca.config, group=group,
                                   client=ca.client, created=ca.created)
        self._propose(A.encode_assign_consumer(nca), lambda res, err: None)

    def _mark_consumers(self, sa: A.StreamAssignment, off: list[A.ConsumerAssignment], final: list[str]) -> bool:
        """Record a desired state (the target peers) on each consumer about to move that has none for this
        target yet, with its replica count brought to the stream's (nats-server 2.15's meta leader updates
        the consumers' assignments when their stream's desired state changes). True when any was proposed."""
        proposed = False
        for ca in off:
            target = self._consumer_target(sa, ca, final)
            cfg = self._consumer_config(sa, ca)
            cd = ca.group.desired
            if set(target) == set(ca.group.peers) and cfg is None:
                continue  # (there already: its desired state is cleared by _consumer_step)
            if cd is not None and cfg is None and (list(cd.get("peers") or ()) == target or (
                    cd.get("scale_down") and len(target) < len(cd.get("peers") or ())
                    and set(target) <= set(cd.get("peers") or ()) <= set(final))):
                continue  # (marked for this target already; a scale down's peers are chosen by _consumer_step)
            cg = ca.group.copy()
            cg.desired = self.consumer_desired(sa, ca, target, final)
            self._propose_consumer(sa, ca, cg, cfg)
            proposed = True
        return proposed

    @staticmethod
    def _members(info: Optional[dict], leader: str) -> tuple[set, set]:
        """(members, current members) from a stream or consumer info's ``cluster``."""
        members, current = {leader}, {leader}
        for r in ((info or {}).get("cluster") or {}).get("replicas") or ():
            p = r.get("peer") or peer_id(r.get("name") or "")
            members.add(p)
            if r.get("current"):
                current.add(p)
        return members, current

    async def _consumer_step(self, sa: A.StreamAssignment, ca: A.ConsumerAssignment, target: list[str]) -> None:
        """One member change of a consumer's group towards ``target`` (add one, else drop one: followers
        first), once its leader's voters are its assignment's peers and the target members are current;
        there already: its desired state cleared."""
        info = await self.info.consumer_info(sa.account, sa.name, ca.name)
        if info is None:
            return
        leader = self._leader_peer(info)
        cd = ca.group.desired
        if cd is not None and cd.get("scale_down"):
            # the peers kept: its leader first, then the others it had
            pool = list(cd.get("peers") or ())
            chosen = [leader] if leader in pool else []
            chosen += [p for p in pool if p not in chosen][:len(target) - len(chosen)]
            cur = self.state.consumer(sa.account, sa.name, ca.name)
            if cur is None or cur.group.desired != cd:
                return
            cg = ca.group.copy()
            cg.desired = dict({k: v for k, v in cd.items() if k != "scale_down"}, peers=chosen)
            self._propose_consumer(sa, ca, cg)
            return
        members, current = self._members(info, leader)
        peers = list(ca.group.peers)
        if members != set(peers) or not all(p in current for p in target if p in peers):
            return
        missing = [p for p in target if p not in peers]
        extra = [p for p in peers if p not in target]
        if missing:
            peers.append(missing[0])
        elif extra:
            peers.remove(next((p for p in extra if p != leader), extra[0]))
        elif ca.group.desired is None:
            return
        cur = self.state.consumer(sa.account, sa.name, ca.name)
        if cur is None or cur.group.peers != ca.group.peers or cur.group.desired != ca.group.desired:
            return  # (changed meanwhile: the next tick looks again)
        cg = ca.group.copy()
        cg.peers = peers
        if cg.preferred not in peers:
            cg.preferred = ""
        if set(peers) == set(target):
            cg.desired = None
        self.log.notice(f"JetStream cluster: consumer '{sa.account} > {sa.name} > {ca.name}' peers "
                        f"{[self.registry.name_of(p) or p for p in peers]}")
        self._propose_consumer(sa, ca, cg)

    def _leader_peer(self, info: Optional[dict]) -> str:
        name = ((info or {}).get("cluster") or {}).get("leader") or ""
        return peer_id(name) if name else ""

    async def _reconcile_one(self, key: tuple[str, str], did: Any) -> None:
        """One step towards a stream's desired peers and its consumers' targets. Each step waits until the
        group leader's voters are the assignment's peers (its previous step is applied) and its members
        among the target are current. Order: add the stream's missing peers, one at a time; then move the
        consumers' groups onto the stream's final peers, one member of one consumer at a time (a consumer
        runs over its server's stream replica); then drop the stream's extra peers (followers first, the
        leader last: it hands over); then clear the desired state. One member per step, so a new member
        with an empty log is never a majority on its own and the members left always make a quorum."""
        try:
            sa = self.state.stream(*key)
            if sa is None:
                return
            ds = sa.group.desired
            peers = list(sa.group.peers)
            final = peers
            leader = ""
            if ds is not None:
                want = [p for p in ds.get("peers") or ()]
                info = await self.info.stream_info(*key)
                if info is None:
                    return
                leader = self._leader_peer(info)
                members, current = self._members(info, leader)
                if members != set(peers) or not all(p in current for p in want if p in peers):
                    return  # (the previous step is not applied yet, or a new peer is catching up: next tick)
                if ds.get("scale_down"):
                    # the peers to keep: the leader, the other members, then (a scale down of a scale up
                    # still under way) desired peers not added yet; recorded as the desired peers (nats-server
                    # shows them in ``cluster.desired.replicas`` from then on)
                    replicas = int(sa.config.get("num_replicas") or 1)
                    pool = [p for p in want if p in peers]
                    final = [leader] if leader in pool else []
                    final += [p for p in pool if p not in final][:replicas - len(final)]
                    final += [p for p in want if p not in final][:replicas - len(final)]
                    nd = {k: v for k, v in ds.items() if k != "scale_down"}
                    nd["peers"] = final
                    self._propose_group(key, did, desired=nd)
                    return
                final = want
                missing = [p for p in final if p not in peers]
                if missing:
                    self._propose_group(key, did, peers=peers + missing[:1], scale_up=True)
                    return
            off = self._consumers_off_target(sa, final)
            if off:
                if not self._mark_consumers(sa, off, final):
                    await self._consumer_step(sa, off[0], self._consumer_target(sa, off[0], final))
                return
            if ds is None:
                return
            extra = [p for p in peers if p not in final]
            if extra:
                peers.remove(next((p for p in extra if p != leader), extra[0]))
            if set(peers) != set(final):
                self._propose_group(key, did, peers=peers)
                return
            order = ([leader] if leader in final else []) + [p for p in final if p != leader]
            done: dict[str, Any] = {}
            if sa.group.excluded and len(order) >= int(sa.config.get("num_replicas") or 1):
                done["excluded"] = []  # (evacuated peers may come back once the group is whole again)
            self._propose_group(key, did, peers=order, desired=None, scale_up=False,
                                cluster=ds.get("cluster") or sa.group.cluster,
                                preferred=leader if leader in final else order[0], **done)
        except NotLeader:
            pass  # (the next meta leader carries on)
        except Exception as e:
            self.log.error(f"JetStream cluster: reconciling stream '{key[0]} > {key[1]}': {e!r}")
        finally:
            self._reconciling.discard(key)

    def _propose_group(self, key: tuple[str, str], did: Any, **changes: Any) -> None:
        """Propose the stream's assignment with its group changed (only while its desired state is still
        the one ``did`` names: a newer update wins)."""
        sa = self.state.stream(*key)
        if sa is None or (sa.group.desired or {}).get("id") != did:
            return
        g = sa.group.copy()
        for k, v in changes.items():
            setattr(g, k, v)
        self._propose_stream_group(sa, g)

    def _propose_stream_group(self, sa: A.StreamAssignment, g: A.RaftGroup,
                              done: Optional[Callable[[Any, Optional[BaseException]], None]] = None) -> None:
        if g.peers != sa.group.peers or g.desired != sa.group.desired:
            self.log.notice(f"JetStream cluster: stream '{sa.account} > {sa.name}' peers "
                            f"{[self.registry.name_of(p) or p for p in g.peers]}"
                            + (" (reconfiguring)" if g.desired else ""))
        nsa = A.StreamAssignment(config=sa.config, group=g, sync=sa.sync, client=sa.client, created=sa.created)
        self._propose(A.encode_update_stream(nsa), done or (lambda res, err: None))

    def _fill_missing(self, sa: A.StreamAssignment) -> None:
        """A group short of replicas (a peer removed with no replacement then): a selectable peer now."""
        try:
            peers = select_peer_group(int(sa.config.get("num_replicas") or 1), sa.group.cluster or self.name,
                                      PlacementConfig.from_stream_config(sa.config), self.registry.nodes,
                                      self.group.peers, existing=sa.group.peers, ignore=sa.group.excluded,
                                      **self.api._place_kw())
        except PlacementError:
            return
        g = sa.group.copy()
        g.peers = peers
        g.scale_up = True
        if len(peers) >= int(sa.config.get("num_replicas") or 1):
            g.excluded = []
        self._propose_stream_group(sa, g)

    def _replace_peer(self, sa: A.StreamAssignment, peer: str,
                      done: Optional[Callable[[Any, Optional[BaseException]], None]] = None,
                      require: bool = False) -> bool:
        """``peer`` leaves the stream's group: one UPDATE with a replacement chosen as nats-server does (the
        same replica count, the removed peer ignored), or without one when none can be placed (``require``,
        STREAM.PEER.REMOVE: then nothing is proposed and False is returned)."""
        rest = [p for p in sa.group.peers if p != peer]
        try:
            self._refresh_local()
            peers = select_peer_group(len(sa.group.peers), sa.group.cluster or self.name,
                                      PlacementConfig.from_stream_config(sa.config), self.registry.nodes,
                                      [p for p in self.group.peers if p != peer], existing=rest,
                                      ignore=[peer, *sa.group.excluded], **self.api._place_kw())
        except PlacementError:
            if require:
                self.log.warn(f"JetStream cluster rejected peer removal, no replacement available for stream "
                              f"'{sa.account} > {sa.name}'")
                return False
            self.log.warn(f"JetStream cluster could not replace peer for stream '{sa.account} > {sa.name}'")
            peers = rest  # no replacement available: the group shrinks (filled later)
        g = sa.group.copy()
        g.peers = peers
        if g.preferred == peer:
            g.preferred = ""
        if g.desired is not None:
            g.desired = dict(g.desired, peers=[p for p in g.desired.get("peers") or () if p != peer])
            if not g.desired["peers"]:
                g.desired = None
        self._propose_stream_group(sa, g, done)
        return True
