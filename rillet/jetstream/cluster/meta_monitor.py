"""What the monitoring endpoints show of a JetStream cluster: /jsz's meta_cluster and details, /raftz, the clustered
/healthz checks, and the views rillet.jetstream.cluster.monitor renders."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from rillet.jetstream.cluster import lossreport
from rillet.jetstream.cluster import monitor as MON
from rillet.jetstream.cluster.group import RaftGroup

if TYPE_CHECKING:
    from rillet.jetstream.cluster.meta import JetStreamCluster



class MetaMonitor:
    """The part of ``JetStreamCluster`` moved here; ``self.cl`` is the JetStreamCluster."""

    def __init__(self, cl: "JetStreamCluster") -> None:
        self.cl = cl

    def meta_view(self) -> MON.MetaView:
        g = self.cl.group
        if g is None or g.node is None:
            return MON.MetaView(self.cl.name, running=False, current=False)
        st = g.status()
        leader = st["leader"] or ""
        reps = []
        for p in st["voters"]:
            if p == self.cl.peer:
                continue
            ps = st["peers"].get(p)
            ni = self.cl.registry.get(p)
            if ps is not None:
                reps.append(MON.PeerState(self.cl.registry.name_of(p), p, ps["current"], ps["active_ns"], ps["lag"],
                                          offline=ni is not None and ni.offline))
            else:
                reps.append(MON.PeerState(self.cl.registry.name_of(p), p, current=bool(leader),
                                          offline=ni is not None and ni.offline))
        n = g.node
        return MON.MetaView(self.cl.name, leader=self.cl.registry.name_of(leader) if leader else "", leader_peer=leader,
                            replicas=reps, cluster_size=len(st["voters"]), quorum_needed=st["quorum_needed"],
                            rescue=n.rescued_quorum is not None, pending=n.last_index() - n.applied,
                            snapshot=MON.MetaSnapshotStats(pending_entries=n.last_index() - n.offset),
                            running=g.running, current=bool(leader) and g.current() and n.applied >= n.commit,
                            write_error=g.write_error, apply_error=self.cl.apply_error or g.apply_error)

    def jsz_meta(self) -> dict:
        return MON.meta_cluster_info(self.meta_view())

    def jsz_details(self, d: dict, opts: dict) -> None:
        """``/jsz`` of a clustered server, as nats-server's: ``streams_leader`` (streams led here),
        ``ha_assets`` (the meta group and the replicated groups here), and each account's ``stream_detail``
        for the replicas held here: name, created, cluster, config (``config=true``), state,
        ``consumer_detail`` (``consumers=true``; config only with ``config=true``), ``stream_raft_group``
        and ``consumer_raft_groups`` (``raft=true``); ``stream-leader-only`` keeps the streams led here."""
        st = self.cl.streams
        reps = list(st.replicas.items()) if st is not None else []
        led = sum(1 for _, r in reps if r.leader)
        ha = self.cl.ha_assets()
        out: dict[str, Any] = {}
        for k, v in d.items():
            out[k] = v
            if k == "streams" and led:
                out["streams_leader"] = led
        out["ha_assets"] = ha
        d.clear()
        d.update(out)
        if not (opts.get("streams") or opts.get("consumers")):
            return
        from rillet.jetstream.api.common import stream_info_dict
        for ad in d.get("account_details") or ():
            details = []
            for (acc, name), r in sorted(reps, key=lambda kv: kv[0]):
                if acc != ad.get("name"):
                    continue
                if opts.get("stream_leader_only") and not r.leader:
                    continue
                info = stream_info_dict(r.stream, include_config=bool(opts.get("config")))
                sd: dict[str, Any] = {"name": name, "created": info["created"], "cluster": r.cluster_info()}
                if "config" in info:
                    sd["config"] = info["config"]
                sd["state"] = info["state"]
                cons, groups = [], []
                if opts.get("consumers"):
                    sa = self.cl.state.stream(acc, name)
                    for cn in sorted(r.consumers):
                        try:
                            ci = r.consumers[cn].info()
                        except Exception as e:
                            self.cl.log.warn(f"JetStream cluster: /jsz consumer info of '{acc} > {name} > {cn}': {e!r}")
                            continue
                        if not opts.get("config"):
                            ci = {k: v for k, v in ci.items() if k != "config"}
                        cons.append(ci)
                        ca = sa.consumers.get(cn) if sa is not None else None
                        if ca is not None:
                            groups.append({"name": cn, "raft_group": ca.group.name})
                if cons:
                    sd["consumer_detail"] = cons
                for k in ("mirror", "sources"):
                    if k in info:
                        sd[k] = info[k]
                if opts.get("raft"):
                    sd["stream_raft_group"] = r.group.name
                    if groups:
                        sd["consumer_raft_groups"] = groups
                details.append(sd)
            ad["stream_detail"] = details

    def raftz(self, group: str = "", acc: str = "") -> Optional[dict]:
        """``/raftz``: this server's RAFT groups under the account each belongs to, as nats-server (the meta group
        under the system account, a stream's or consumer's group under the asset's account, whatever account its
        traffic travels in), only those of account ``acc`` (default: the system account's) and, with ``group``, that
        group only; None when no group runs here at all (nats-server's 404)."""
        sys_name = self.cl.server.system_account.name
        groups: list[tuple[str, RaftGroup]] = []
        if self.cl.group is not None and self.cl.group.node is not None:
            groups.append((sys_name, self.cl.group))
        reps = list(self.cl.streams.replicas.values()) if self.cl.streams is not None else []
        for rep in reps:
            owner = rep.jsa.account.name
            for g in [rep.group] + [cr.group for cr in list(rep.creps.values())]:
                if g is not None and g.node is not None and len(g.peers) > 1:  # (nats-server: no node for R1)
                    groups.append((owner, g))
        if not groups:
            return None
        want = acc or sys_name
        views = {g.name: self.raftz_view(g) for owner, g in groups if owner == want and (not group or g.name == group)}
        return MON.raftz({want: views}) if views else {}

    def healthz(self, o: dict) -> dict:
        """nats-server's health checks of a clustered JetStream server (past the enabled checks)."""
        meta = self.meta_view() if self.cl.group is not None and not self.cl.isolated else None
        st = self.cl.streams

        def stream_error(acc: str, sa: Any) -> str:
            rep = st.replica(acc, sa.name) if st is not None else None
            if rep is None:
                return "stream not found"
            g = rep.group
            lost = rep.data_lost
            if lost:
                return f"stream {lossreport.describe(lost)}"
            if g.leader is None:
                return "no leader"
            if len(g.peers) > 1:
                if rep.catching_up():
                    return "stream catching up"  # (the messages of a snapshot, fetched from the leader)
                if not g.current():
                    return "group node unhealthy"
            return ""

        def consumer_error(acc: str, sa: Any, ca: Any) -> str:
            rep = st.replica(acc, sa.name) if st is not None else None
            if rep is None or ca.name not in rep.creps:
                return "consumer not found"
            cr = rep.creps[ca.name]
            if cr.data_lost:
                return (f"consumer lost committed entries {cr.data_lost['raft_first']}.."
                        f"{cr.data_lost['raft_last']}")
            cg = cr.group
            if cg is not None and len(cg.peers) > 1 and not cg.current():
                return "group node unhealthy"
            return ""
        return MON.clustered_healthz(o, meta, self.cl.state, self.cl.peer, stream_error, consumer_error)

    def raftz_view(self, g: Optional[RaftGroup] = None) -> MON.RaftGroupView:
        g = g or self.cl.group
        st = g.status()
        peers = {p: MON.RaftPeerView(self.cl.registry.name_of(p) or p, True,
                                     st["peers"].get(p, {}).get("match", 0),
                                     st["peers"].get(p, {}).get("active_ns", -1))
                 for p in st["voters"] if p != self.cl.peer}
        sys_name = self.cl.server.system_account.name
        traffic = g.traffic_account() or sys_name  # (cluster_traffic: traffic.py)
        return MON.RaftGroupView(id=self.cl.peer, state=st["state"], size=st["size"], quorum_needed=st["quorum_needed"],
                                 system_account=traffic == sys_name, traffic_account=traffic,
                                 committed=st["committed"], applied=st["applied"], leader=st["leader"] or "",
                                 leader_since_ns=st["leader_since_ns"], ever_had_leader=st["ever_had_leader"],
                                 term=st["term"], voted_for=st["vote"] or "", pterm=st["last_term"],
                                 pindex=st["last_index"], wal={"messages": st["last_index"] - st["snapshot_index"]},
                                 wal_error=st["write_error"], peers=peers)
