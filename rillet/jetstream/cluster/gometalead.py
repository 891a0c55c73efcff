"""The JetStream API of a Rillet server leading a Go cluster's meta group (``rillet_go_meta_lead``).

When the Rillet member (gometa.GoMetaMember, standing for election with ``stand()``) leads the meta group, the Go
servers stay silent on the requests only a meta leader answers, as they would for a Go leader. ``MetaLeaderApi``
answers them while this server leads (it is subscribed in the system account, where the JetStream-enabled
accounts' imports bring their clients' requests with the requester's info, ``Nats-Request-Info``):

* ``STREAM.CREATE``: the configuration checked as nats-server checks it (rillet.jetstream.streamconfig: names,
  limits, mirrors and sources, subjects overlapping another stream of the account, an existing stream of the
  same name), the replicas placed as nats-server places them (gometaplace: tags, ``unique_tag``, the servers'
  storage from their statsz; a server that has not answered the leader lately is offline), the first a Go
  server when one is online (it is the group's preferred leader: a Rillet member of a new group with Go
  peers does not campaign at once); with no Go server online, Rillet servers only, the preferred one
  campaigning at once (gostream.host_streams); a one-replica stream may go to any server, a Rillet one runs
  it itself), and the
  assignment proposed in Go's layout (golead.stream_assignment). The server that leads the new group answers the
  client, as under a Go meta leader. A create of an existing stream with the same settings proposes it again.
* ``STREAM.UPDATE``: nats-server's update rules, the new configuration proposed with the stream's group; its
  leader answers. A change of the replica count or placement (scaling, moving) sets the group's desired
  state as nats-server 2.15 does (gometaplace), the group's leader carrying it out.
* ``STREAM.PEER.REMOVE``, ``STREAM.PEER.EVACUATE``, ``SERVER.EVACUATE``, ``ACCOUNT.STREAM.MOVE``,
  ``ACCOUNT.STREAM.CANCEL_MOVE`` and ``STREAM.CANCEL_MOVE``: gometaplace.
* ``STREAM.DELETE``: the removal proposed; the stream's leader answers.
* ``CONSUMER.CREATE`` / ``CONSUMER.DURABLE.CREATE``: nats-server's checks (rillet.jetstream.consumerconfig), the
  consumer's assignment on its stream's peers (as many as nats-server gives it: one for an ephemeral of a
  limits stream), a Go server preferred when one is online; with none, a one-replica consumer goes to an online
  Rillet peer, which leads it at once (goconsumerlead), and a replicated one to the stream's Rillet peers, the
  preferred one campaigning at once; an existing
  consumer's assignment again with its new configuration (an update). Its leader answers.
* ``CONSUMER.DELETE``: the removal proposed; the consumer's leader answers.
* ``STREAM.NAMES`` and ``CONSUMER.NAMES``: from the assignments. ``STREAM.LIST`` and ``CONSUMER.LIST``: each
  stream's or consumer's info asked of its leader (``$JSC.SI``/``$JSC.CI``), those that do not answer within
  4 s listed as ``missing``, as nats-server's meta leader gathers them.
* ``INFO`` (account info): streams and consumers counted from the assignments, the bytes stored summed from
  every server's latest ``$JSC.ARU`` usage update and this server's own replicas (a replicated stream counts once
  per replica, as nats-server counts it), the streams' ``max_bytes`` reserved, the account's limits from its
  configuration; the API counts are
  those the Go servers report plus the requests this leader answered.
* ``META.LEADER.STEPDOWN`` (system account only): leadership handed to the preferred server, or else to a Go
  server holding the whole log.

* ``SERVER.REMOVE`` (system account): the peer's removal proposed and answered once committed; then every stream
  and consumer it held proposed again in nats-server 2.15's desired-state layout (gomigrate), the groups' leaders
  carrying the change out and reporting on ``$SYS.JSC.*.ASSIGNMENT.RECONCILE`` (answered here); groups short of
  replicas or holding a peer that left are placed again every 2 s and when a server joins (``_heal``).

What only a Go meta leader carries out -- ``ACCOUNT.PURGE`` and stream restores -- is delegated: the
leadership goes to a current Go server and, once it leads, the request is sent to it as it came,
so the Go leader answers the requester (``_delegate``). With no Go server current, it is refused or unanswered.

Anything else a Go meta leader answers is not here: see docs/mixed-clusters.md.
"""
from __future__ import annotations

import datetime
import json
import random
from typing import Any, Optional

from rillet.jetstream.cluster import gowire as ge
from rillet.jetstream.cluster.golead import LEADER, request_info, stream_assignment
from rillet.jetstream.cluster.golimits import check_stream_limits
from rillet.jetstream.cluster.gometaplace import PeerChanges, attach_registry
from rillet.jetstream.cluster.gomigrate import (CONSUMER_RECONCILE, STREAM_RECONCILE, consumer_replicas,
                                               missing_peers, order_group, reconcile_group, remap_consumers)
from rillet.jetstream.cluster.placement import PlacementError
from rillet.raft import gowire as gw

__all__ = ["MetaLeaderApi", "ONLINE", "consumer_assignment"]

ONLINE = 10.0  # seconds: a peer that answered the leader this lately is a placement candidate
GATHER_TIMEOUT = 4.0  # seconds a list waits for the stream or consumer leaders' infos (nats-server's)
NAMES_LIMIT, LIST_LIMIT = 1024, 256
_SEP = (",", ":")

_CONSUMER_DEFAULTS = (("deliver_policy", "all"), ("replay_policy", "instant"), ("max_deliver", -1))


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _err(kind: str, name: str, **values: Any) -> dict:
    """An error answer of nats-server's catalog (rillet.jetstream.errors), ``values`` filling its template."""
    from rillet.jetstream.errors import api_error
    return {"type": f"io.nats.jetstream.api.v1.{kind}", "error": api_error(name, **values).to_dict()}


def consumer_assignment(client: dict, stream: str, name: str, cfg: dict, peers: list[str], preferred: str,
                        storage: str, cluster: str, subject: str, reply: str, created: str = "",
                        group: Optional[str] = None) -> dict:
    """A consumer assignment in the Go meta leader's JSON layout (field order included)."""
    cfg = dict(cfg)
    for k, v in _CONSUMER_DEFAULTS:
        cfg.setdefault(k, v)
    if cfg.get("ack_policy", "none") != "none":
        if not cfg.get("ack_wait"):
            cfg["ack_wait"] = 30_000_000_000
        if not cfg.get("max_ack_pending"):
            cfg["max_ack_pending"] = 1000
    if not cfg.get("deliver_subject") and not cfg.get("max_waiting"):
        cfg["max_waiting"] = 512
    cfg.setdefault("num_replicas", 0)
    client = {k: v for k, v in client.items() if k not in ("jwt", "issuer_key")}
    doc = {"client": client, "created": created or _now(), "name": name, "stream": stream, "consumer": cfg,
           "group": {"name": group or gw.group_name("C", len(peers), storage), "peers": peers, "store": storage,
                     "cluster": cluster, "preferred": preferred}}
    if subject:
        doc["subject"] = subject
    if reply:
        doc["reply"] = reply
    return doc


class MetaLeaderApi(PeerChanges):
    """The meta leader's part of the JetStream API on a standing Rillet member (see the module docstring).
    Subscribed for the member's life; every handler does nothing unless the member leads."""

    def __init__(self, member: Any, rng: Optional[random.Random] = None) -> None:
        self.member = member
        self.rng = rng or random.Random()
        self.answered = 0
        self.proposed = 0
        self.registry = attach_registry(member.server)  # (the servers' tags, limits and usage: gometaplace)
        handlers = {
            "$JS.API.STREAM.CREATE.*": self._stream_create,
            "$JS.API.STREAM.UPDATE.*": self._stream_update,
            "$JS.API.STREAM.DELETE.*": self._stream_delete,
            "$JS.API.STREAM.NAMES": self._stream_names,
            "$JS.API.STREAM.LIST": self._stream_list,
            "$JS.API.CONSUMER.LIST.*": self._consumer_list,
            "$JS.API.CONSUMER.CREATE.*": self._consumer_create,
            "$JS.API.CONSUMER.CREATE.*.>": self._consumer_create,
            "$JS.API.CONSUMER.DURABLE.CREATE.*.*": self._consumer_create,
            "$JS.API.CONSUMER.DELETE.*.*": self._consumer_delete,
            "$JS.API.CONSUMER.NAMES.*": self._consumer_names,
            "$JS.API.META.LEADER.STEPDOWN": self._stepdown,
            "$JS.API.INFO": self._account_info,
            "$JS.API.SERVER.REMOVE": self._server_remove_request,
            "$JS.API.STREAM.PEER.REMOVE.*": self._stream_peer_remove,
            "$JS.API.STREAM.PEER.EVACUATE.*": self._stream_peer_evacuate,
            "$JS.API.SERVER.EVACUATE": self._server_evacuate,
            "$JS.API.ACCOUNT.PURGE.*": self._server_remove,
            "$JS.API.ACCOUNT.STREAM.MOVE.*.*": self._account_stream_move,
            "$JS.API.ACCOUNT.STREAM.CANCEL_MOVE.*.*": self._account_stream_cancel_move,
            "$JS.API.STREAM.CANCEL_MOVE.*": self._stream_cancel_move,
            "$JS.API.STREAM.RESTORE.*": self._server_remove,
        }
        self.subs = [member.ic.subscribe(s, self._guard(h)) for s, h in handlers.items()]
        # every server's usage of each account, kept whether or not we lead (a new leader needs it at once)
        self.usage: dict[tuple[str, str], ge.UsageUpdate] = {}
        self.api_counts: dict[str, list[int]] = {}  # account: [requests taken here, errors answered among them]
        self._acc = ""  # the account of the request being handled
        self._raw: tuple = (b"", b"", 0, b"")  # the request being handled, as it came (for _delegate)
        self.delegated = 0
        self.subs.append(member.ic.subscribe("$JSC.ARU.*.*", self._on_usage))
        # peers leaving and joining (gomigrate: nats-server 2.15's desired state)
        self.peer_removals: dict[str, tuple[str, bytes]] = {}  # peer: (reply, request) of a SERVER.REMOVE
        self.reassigned = 0
        self._inflight: dict[tuple, int] = {}  # (account, stream[, consumer]): meta log index of our last proposal
        self.subs.append(member.ic.subscribe(STREAM_RECONCILE, self._on_stream_reconcile))
        self.subs.append(member.ic.subscribe(CONSUMER_RECONCILE, self._on_consumer_reconcile))
        for hooks, fn in ((getattr(member, "on_peer_removed", None), self._peer_removed),
                          (getattr(member, "on_peer_added", None), self._peer_added),
                          (getattr(member, "on_leader_change", None), self._leading)):
            if hooks is not None:
                hooks.append(fn)
        self._heal_timer: Any = None

    def close(self) -> None:
        for s in self.subs:
            self.member.ic.remove_sub(s)
        self.subs = []
        if self._heal_timer is not None:
            self._heal_timer.cancel()
            self._heal_timer = None
        services = getattr(getattr(self.member.server, "sysacc", None), "services", None)
        if self.registry is not None and services is not None and self.registry.event in services.remote_listeners:
            services.remote_listeners.remove(self.registry.event)
        self.registry = None

    # -- plumbing -----------------------------------------------------------------------------------------
    def _guard(self, handler: Any) -> Any:
        def on_msg(sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
            if self.member.raft.role != LEADER or not reply:
                return  # (as a Go server that is not the meta leader: silent)
            ci = request_info(bytes(msg[:hdr])) if hdr > 0 else None
            body = bytes(msg[hdr:]) if hdr > 0 else bytes(msg)
            self._raw = (subject, reply, hdr, bytes(msg))
            self._acc = str(ci.get("acc") or "") if ci is not None else ""
            if self._acc:
                self.api_counts.setdefault(self._acc, [0, 0])[0] += 1
            subj, rep = subject.decode(), reply.decode()
            try:
                handler(subj, rep, ci, body)
            except (ValueError, TypeError) as e:  # (a request whose fields have the wrong types)
                self.member.log.warn(f"JetStream: meta leader request on {subj} refused: {e!r}")
                kind = {"INFO": "account_info"}.get(subj.split(".")[2], subj.split(".")[2].lower())
                self._answer(rep, _err(f"{kind}_response", "BAD_REQUEST"))
        return on_msg

    def _answer(self, reply: str, doc: dict) -> None:
        self.answered += 1
        if self._acc and "error" in doc:
            self.api_counts.setdefault(self._acc, [0, 0])[1] += 1
        self.member.ic.publish(reply.encode(), None, json.dumps(doc, separators=_SEP).encode())

    def _on_usage(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
        """``$JSC.ARU.<account>.<peer>``: a server's usage of an account (the latest one kept)."""
        subj = subject.decode("utf-8", "surrogateescape")
        try:
            x = ge.decode_jsc(subj, bytes(msg[hdr:]) if hdr > 0 else bytes(msg))
        except gw.GoWireError as e:
            self.member.refused += 1
            self.member._warn_once(f"aru:{e}", f"JetStream: refused a usage update on {subj}: {e}")
            return
        _kind, (acc, peer) = ge.parse_jsc_subject(subj)
        if peer != self.member.peer:
            self.usage[(acc, peer)] = x

    def _local_usage(self, acc: str) -> tuple[int, int]:
        """(memory, file) bytes this server's replicas and one-replica streams of ``acc`` store."""
        mem = sto = 0
        for r in list(self.member.replicas.values()):
            store = getattr(r, "store", None)
            if store is None or getattr(r, "account", None) != acc:
                continue
            cfg = (getattr(r, "assignment", None) or {}).get("stream") or {}
            if cfg.get("storage") == "memory":
                mem += store.state().bytes
            else:
                sto += store.state().bytes
        solo = getattr(self.member, "solo", None)
        jsa = solo.js.accounts.get(acc) if solo is not None else None
        for st in (jsa.streams.values() if jsa is not None else ()):
            if st.cfg.storage == "memory":
                mem += st.store.state().bytes
            else:
                sto += st.store.state().bytes
        return mem, sto

    def _propose(self, op: int, doc: dict) -> None:
        self.proposed += 1
        self.member.propose([gw.Entry(gw.ENTRY_NORMAL, ge.encode_json_entry(op, doc))])

    @staticmethod
    def _json(body: bytes) -> Optional[dict]:
        if not body.strip():
            return {}
        try:
            doc = json.loads(body)
        except ValueError:
            return None
        return doc if isinstance(doc, dict) else None

    def _online(self) -> list[str]:
        """The peers that answered this leader within ONLINE seconds, this server included."""
        import time
        r = self.member.raft
        now = time.monotonic()
        return sorted(p for p in r.peers if p == r.me or now - r.last_seen.get(p, -1e9) <= ONLINE)

    def _is_go(self, peer: str) -> bool:
        return peer != self.member.peer and peer not in self.member.rillet_peers

    def _delegate(self) -> bool:
        """For a request only a Go meta leader carries out: hand the group to a current Go server and, once it
        leads, send it the request as it came (headers, reply subject: the Go leader answers the requester).
        False when no Go server is current (the caller answers instead)."""
        m = self.member
        r = m.raft
        go = [p for p in sorted(r.peers) if self._is_go(p) and r.current(p)]
        if not go:
            return False
        peer, (subject, reply, hdr, msg) = go[0], self._raw
        self.delegated += 1
        m.log.notice(f"JetStream: handing the Go meta group to peer {peer} for {subject.decode()}, which a Rillet "
                     "meta leader does not carry out")
        m.transfer(peer)
        loop = m.server.loop
        deadline = loop.time() + 10.0

        def resend() -> None:
            if m.ic is None:
                return
            if r.leader == peer:
                m.ic.publish(subject, reply, msg, hdr if hdr > 0 else -1)
            elif loop.time() < deadline:
                loop.call_later(0.05, resend)
            else:
                m.log.warn(f"JetStream: peer {peer} did not take the Go meta group; {subject.decode()} unanswered")
        loop.call_later(0.05, resend)
        return True

    def _server_remove(self, subject: str, reply: str, ci: Optional[dict], body: bytes) -> None:
        """``ACCOUNT.PURGE`` and stream restores: carried out by a Go meta leader (``_delegate``); unanswered when
        no Go server is current."""
        if not self._delegate():
            self.member._warn_once(f"delegate:{subject}", f"JetStream: {subject} not answered: a Rillet meta "
                                   "leader does not carry it out and no Go server is current")

    # -- peers leaving and joining: nats-server 2.15's desired state (gomigrate) -------------------------------
    def _server_remove_request(self, subject: str, reply: str, ci: Optional[dict], body: bytes) -> None:
        """``SERVER.REMOVE`` (system account only): the peer named by ``peer`` (a server name) or ``peer_id``
        removed from the meta group by an ``EntryRemovePeer``, answered once committed; its stream and consumer
        replicas are then placed elsewhere (``_peer_removed``), as nats-server's meta leader does."""
        kind = "meta_server_remove_response"
        m = self.member
        sys_name = getattr(m.server.system_account, "name", "")
        if ci is not None and ci.get("acc") not in (None, sys_name):
            return  # (nats-server: only the system account may ask)
        req = self._request_doc(reply, f"io.nats.jetstream.api.v1.{kind}", body)
        if req is None:
            return
        if self.peer_removals:
            self._answer(reply, _err(kind, "CLUSTER_SERVER_MEMBER_CHANGE_INFLIGHT"))
            return
        r = m.raft
        want = str(req.get("peer_id") or "") or (gw.peer_id(str(req["peer"])) if req.get("peer") else "")
        if not want or want not in (r.peers | {r.me}):
            self._answer(reply, _err(kind, "CLUSTER_SERVER_NOT_MEMBER"))
            return
        if len(r.peers | {r.me}) <= 1 or want == r.me:
            # (nats-server's leader removing itself steps down first; a last member is not removed)
            self._answer(reply, _err(kind, "RAFT_GENERAL", err="can not remove the meta leader itself"
                                     if want == r.me else "can not remove the last peer"))
            return
        self.peer_removals[want] = (reply, body)
        m.log.notice(f"JetStream: removing peer {want} from the Go meta group (SERVER.REMOVE)")
        m.propose([gw.Entry(gw.ENTRY_REMOVE_PEER, want.encode("latin-1"))])

    def _peer_removed(self, peer: str) -> None:
        """A committed peer removal: answer its SERVER.REMOVE and, leading, re-place every stream and consumer
        replica it held (nats-server's processRemovePeer)."""
        if self.member.raft.role != LEADER:
            self.peer_removals.pop(peer, None)
            return
        pending = self.peer_removals.pop(peer, None)
        if pending is not None:
            self._acc = ""
            self._answer(pending[0], {"type": "io.nats.jetstream.api.v1.meta_server_remove_response",
                                      "success": True})
        state = self.member.state
        for key, sa in sorted(state.streams.items()):
            g = sa.get("group") or {}
            if peer in (g.get("peers") or []) or peer in ((g.get("desired") or {}).get("peers") or []):
                self._reassign(key, sa, [peer], remove=True, min_replicas=0)

    def _remap_consumers(self, key: tuple[str, str], sa: dict) -> bool:
        """The stream's consumers onto its target peers (proposed); whether all had converged already."""
        updated, deleted, done = remap_consumers(sa, self.member.state.consumers.get(key) or {}, self.rng)
        for ca in updated:
            ca["group"] = order_group(ca["group"])
            self._propose(ge.OP_ASSIGN_CONSUMER, ca)
            self._inflight[key + (ca["name"],)] = self.member.raft.pindex
        for ca in deleted:
            self._propose(ge.OP_REMOVE_CONSUMER, ca)
        return done

    def _busy(self, key: tuple) -> bool:
        """Our last proposal for ``key`` is not applied yet (the state would be stale)."""
        return self.member.raft.applied < self._inflight.get(key, 0)

    def _peer_added(self, peer: str) -> None:
        if self.member.raft.role == LEADER:
            self._schedule_heal(0.5)

    def _leading(self, now: bool) -> None:
        if now:
            self._schedule_heal(1.0)

    def _schedule_heal(self, delay: float) -> None:
        loop = getattr(self.member.server, "loop", None)
        if loop is None or self._heal_timer is not None:
            return
        self._heal_timer = loop.call_later(delay, self._heal)

    def _heal(self) -> None:
        """(leading, every 2 s) nats-server's reconcilePeerAssignments: a stream whose group holds peers that
        left the meta group, or is short of replicas, is re-placed on online servers; its consumers follow."""
        self._heal_timer = None
        m = self.member
        if m.raft.role != LEADER or m.ic is None:
            return
        self._schedule_heal(2.0)
        meta = m.raft.peers | {m.raft.me}
        for key, sa in sorted(m.state.streams.items()):
            if self._busy(key):
                continue
            g = sa.get("group") or {}
            stale = [p for p in (g.get("peers") or []) if p not in meta]
            if stale or missing_peers(sa):
                cfg = sa.get("stream") or {}
                if int(cfg.get("num_replicas") or 1) <= 1 and not stale:
                    continue
                if self._reassign(key, sa, stale, remove=True, min_replicas=int(cfg.get("num_replicas") or 1)):
                    continue
            if not any(self._busy(key + (c,)) for c in m.state.consumers.get(key) or {}):
                self._remap_consumers(key, sa)

    def _reconcile_request(self, msg: bytes, hdr: int, fields: tuple[str, ...]) -> Optional[dict]:
        if self.member.raft.role != LEADER:
            return None
        doc = self._json(bytes(msg[hdr:]) if hdr > 0 else bytes(msg))
        # ("members": the group's RAFT members, which nats-server 2.15.1's group leaders send beside meta_peers)
        allowed = set(fields) | {"id", "term", "scale_down_peers", "meta_peers", "match", "members"}
        if not doc or set(doc) - allowed or any(not isinstance(doc.get(f), str) for f in fields):
            return None  # (nats-server decodes it strictly and drops what does not fit)
        if not isinstance(doc.get("term"), int) or isinstance(doc["term"], bool) or doc["term"] <= 0:
            return None
        if not isinstance(doc.get("id", ""), str) or not isinstance(doc.get("match", False), bool):
            return None
        for k in ("scale_down_peers", "meta_peers", "members"):
            v = doc.get(k)
            if v is not None and (not isinstance(v, list) or not all(isinstance(p, str) for p in v)):
                return None
        return doc

    def _on_stream_reconcile(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int,
                             msg: bytes) -> None:
        """``$SYS.JSC.STREAM.ASSIGNMENT.RECONCILE``: a stream leader's step of its migration (gomigrate); the
        stream's consumers are remapped first, the updated assignment proposed."""
        upd = self._reconcile_request(msg, hdr, ("account", "stream"))
        if upd is None:
            return
        key = (upd["account"], upd["stream"])
        sa = self.member.state.streams.get(key)
        if sa is None or not sa.get("group") or self._busy(key):
            return
        g = sa["group"]
        done = False
        if g.get("desired") and not g["desired"].get("scale_down"):
            if any(self._busy(key + (c,)) for c in self.member.state.consumers.get(key) or {}):
                return
            done = self._remap_consumers(key, sa)
        ng = reconcile_group(g, upd, int((sa.get("stream") or {}).get("num_replicas") or 1), done)
        if ng is None:
            return
        if not ng.get("desired") and len(ng.get("peers") or []) == 1:
            ng["name"] = gw.group_name("S", 1, str(ng.get("store") or "file"))
        nsa = dict(sa, group=order_group(ng))
        self._propose(ge.OP_UPDATE_STREAM, nsa)
        self._inflight[key] = self.member.raft.pindex

    def _on_consumer_reconcile(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int,
                               msg: bytes) -> None:
        """``$SYS.JSC.CONSUMER.ASSIGNMENT.RECONCILE``: a consumer leader's step of its migration."""
        upd = self._reconcile_request(msg, hdr, ("account", "stream", "consumer"))
        if upd is None:
            return
        key = (upd["account"], upd["stream"])
        sa = self.member.state.streams.get(key)
        ca = (self.member.state.consumers.get(key) or {}).get(upd["consumer"])
        if sa is None or ca is None or not ca.get("group") or self._busy(key + (upd["consumer"],)):
            return
        speers = (sa.get("group") or {}).get("peers") or []
        cpeers = ca["group"].get("peers") or []
        if any(p not in cpeers and p not in speers for p in upd.get("meta_peers") or []):
            return  # (not onto a server its stream is not on yet)
        ng = reconcile_group(ca["group"], upd, consumer_replicas(ca.get("consumer") or {}, sa.get("stream") or {}),
                             True)
        if ng is None:
            return
        if not ng.get("desired") and len(ng.get("peers") or []) == 1:
            ng["name"] = gw.group_name("C", 1, str(ng.get("store") or "file"))
        nca = {k: v for k, v in ca.items() if k not in ("subject", "reply")}
        nca["group"] = order_group(ng)
        self._propose(ge.OP_ASSIGN_CONSUMER, nca)
        self._inflight[key + (upd["consumer"],)] = self.member.raft.pindex

    # -- streams --------------------------------------------------------------------------------------------
    def _cfg(self, acc: str, name: str) -> Any:
        """A stream's configuration from its assignment (a StreamConfig), None when there is none."""
        from rillet.jetstream import configtypes as C
        from rillet.jetstream.api.codec import from_dict
        sa = self.member.state.streams.get((acc, name))
        return from_dict(sa.get("stream") or {}, C.StreamConfig) if sa is not None else None

    def _checks(self, acc: str, name: str) -> dict:
        """nats-server's configuration checks' context: the account's other streams (mirror and source checks,
        subjects overlapping) and its limits."""
        from rillet.jetstream.manager import account_js_config
        from rillet.subjects.overlap import any_collision
        state = self.member.state
        others = [s for (a, n), sa in state.streams.items() if a == acc and n != name
                  for s in ((sa.get("stream") or {}).get("subjects") or [])]
        return {"subject_name": name, "clustered": True, "strict": False,
                "lookup_stream": lambda other: self._cfg(acc, other),
                "subjects_overlap": lambda subjects: any_collision(others, subjects),
                "account_limits": account_js_config(self.member.server.opts.accounts or {}).get(acc)}

    def _stream_create(self, subject: str, reply: str, ci: Optional[dict], body: bytes) -> None:
        kind = "stream_create_response"
        if ci is None or not ci.get("acc"):
            return
        from rillet.jetstream.api.codec import to_go
        from rillet.jetstream.errors import ApiError
        from rillet.jetstream.streamconfig import normalize_stream_config
        acc, name = ci["acc"], subject.rsplit(".", 1)[-1]
        old = self.member.state.streams.get((acc, name))
        existing = self._cfg(acc, name)
        try:
            checks = self._checks(acc, name)
            cfg = normalize_stream_config(body or b"{}", is_create=True, existing=existing, **checks)
            check_stream_limits(self.member.state.streams, acc, cfg, checks["account_limits"])  # (golimits)
        except ApiError as e:
            self._answer(reply, {"type": f"io.nats.jetstream.api.v1.{kind}", "error": e.to_dict()})
            return
        client = {k: v for k, v in ci.items() if k not in ("jwt", "issuer_key")}
        if old is not None and cfg is existing:  # (the same settings: proposed again, its leader answers)
            self._propose(ge.OP_ASSIGN_STREAM, dict(old, client=client, subject=subject, reply=reply))
            return
        cluster = self.member.server.opts.cluster.name
        if self.registry is not None:  # (nats-server's placement: tags, unique_tag, storage: gometaplace)
            try:
                placed, cluster = self._new_group(to_go(cfg), ci)
            except PlacementError as e:
                self._answer(reply, {"type": f"io.nats.jetstream.api.v1.{kind}", "error": e.api_error().to_dict()})
                return
            peers: Optional[list[str]] = self._lead_first(placed)
        else:
            why = self._placement_refused(cfg)
            if why:
                self._answer(reply, _err(kind, "CLUSTER_NO_PEERS", err=why))
                return
            peers = self._place(cfg.num_replicas or 1)
        if peers is None:
            self._answer(reply, _err(kind, "CLUSTER_NO_PEERS", err="no suitable peers for placement"))
            return
        doc = stream_assignment(client, to_go(cfg), peers, cluster, subject, reply)
        self._propose(ge.OP_ASSIGN_STREAM, doc)

    def _stream_update(self, subject: str, reply: str, ci: Optional[dict], body: bytes) -> None:
        """``STREAM.UPDATE``: nats-server's update rules (rillet.jetstream.streamconfig); the new configuration
        proposed with the stream's group, whose leader applies it and answers; scaling and moves set its desired
        state (gometaplace)."""
        kind = "stream_update_response"
        if ci is None or not ci.get("acc"):
            return
        from rillet.jetstream import configtypes as C
        from rillet.jetstream.api.codec import from_dict, to_go
        from rillet.jetstream.errors import ApiError
        from rillet.jetstream.streamconfig import normalize_stream_update
        acc, name = ci["acc"], subject.rsplit(".", 1)[-1]
        old = self.member.state.streams.get((acc, name))
        old_cfg = self._cfg(acc, name)
        consumers = [(n, from_dict(ca.get("consumer") or {}, C.ConsumerConfig))
                     for n, ca in (self.member.state.consumers.get((acc, name)) or {}).items()]
        kw = self._checks(acc, name)
        kw.pop("account_limits")
        try:
            cfg = normalize_stream_update(old_cfg, body or b"{}", consumers=consumers, **kw)
        except ApiError as e:
            self._answer(reply, {"type": f"io.nats.jetstream.api.v1.{kind}", "error": e.to_dict()})
            return
        new = to_go(cfg)
        try:  # (scaling and moves: nats-server's desired state, gometaplace)
            group = self._changed_group(old, new, ci)
        except ApiError as e:
            self._answer(reply, {"type": f"io.nats.jetstream.api.v1.{kind}", "error": e.to_dict()})
            return
        except PlacementError as e:
            self._answer(reply, {"type": f"io.nats.jetstream.api.v1.{kind}", "error": e.api_error().to_dict()})
            return
        if group is None:  # (any other update: no preferred peer; no scale up flag once the group is stable)
            og = old.get("group") or {}
            group = {k: v for k, v in og.items() if k != "preferred" and (k != "scale_up" or og.get("desired"))}
        client = {k: v for k, v in ci.items() if k not in ("jwt", "issuer_key")}
        doc = {"client": client, "created": old.get("created", ""), "stream": new, "group": group,
               "sync": old.get("sync", ""), "subject": subject, "reply": reply}
        self._propose(ge.OP_UPDATE_STREAM, doc)

    def _stream_delete(self, subject: str, reply: str, ci: Optional[dict], body: bytes) -> None:
        if ci is None or not ci.get("acc"):
            return
        name = subject.rsplit(".", 1)[-1]
        sa = self.member.state.streams.get((ci["acc"], name))
        if sa is None:
            self._answer(reply, _err("stream_delete_response", "STREAM_NOT_FOUND"))
            return
        client = {k: v for k, v in ci.items() if k not in ("jwt", "issuer_key")}
        doc = {"client": client, "created": sa.get("created", ""), "stream": sa["stream"], "group": sa["group"],
               "sync": "", "subject": subject, "reply": reply}
        self._propose(ge.OP_REMOVE_STREAM, doc)

    def _stream_names(self, subject: str, reply: str, ci: Optional[dict], body: bytes) -> None:
        if ci is None or not ci.get("acc"):
            return
        names, total, offset = self._selected_streams(ci["acc"], self._json(body) or {})
        self._answer(reply, {"type": "io.nats.jetstream.api.v1.stream_names_response", "total": total,
                             "offset": offset, "limit": NAMES_LIMIT, "streams": names[offset:offset + NAMES_LIMIT]})

    def _selected_streams(self, acc: str, req: dict) -> tuple[list[str], int, int]:
        """The account's stream names a names/list request selects (its ``subject`` filter: a stream without
        subjects matches by its name), sorted, with the total and the offset."""
        from rillet.subjects.overlap import any_collision
        filt = req.get("subject") or ""
        names = []
        for (a, n), sa in sorted(self.member.state.streams.items()):
            if a != acc:
                continue
            if filt and not any_collision(((sa.get("stream") or {}).get("subjects") or [n]), [filt]):
                continue
            names.append(n)
        offset = min(max(int(req.get("offset") or 0), 0), len(names))
        return names, len(names), offset

    def _gather(self, requests: list[tuple[str, str]], done: Any) -> None:
        """Ask each ``(key, subject)`` of the stream or consumer leaders (``$JSC.SI``/``$JSC.CI``, answered on one
        inbox), then ``done(infos by key, missing keys)`` once all answered or after GATHER_TIMEOUT."""
        m = self.member
        inbox = "_INBOX." + gw.random_token(22)
        want = {k for k, _ in requests}
        got: dict[str, dict] = {}
        state: dict[str, Any] = {}

        def finish() -> None:
            if state.get("done"):
                return
            state["done"] = True
            m.ic.remove_sub(sub)
            t = state.get("timer")
            if t is not None:
                t.cancel()
            done(got, sorted(want - set(got)))

        def on_info(s: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
            doc = self._json(bytes(msg[hdr:]) if hdr > 0 else bytes(msg))
            if not doc:
                return
            key = (doc.get("config") or {}).get("name") if "stream_name" not in doc else doc.get("name")
            if key in want and key not in got:
                got[key] = doc
                if len(got) == len(want):
                    finish()

        sub = m.ic.subscribe(inbox, on_info)
        state["timer"] = m.server.loop.call_later(GATHER_TIMEOUT, finish)
        for _key, subject in requests:
            m.ic.publish(subject.encode(), inbox.encode(), b"")

    def _stream_list(self, subject: str, reply: str, ci: Optional[dict], body: bytes) -> None:
        """``STREAM.LIST``: each selected stream's info from its leader (``$JSC.SI``), as nats-server's meta leader
        gathers them; those that did not answer in time are listed as ``missing``."""
        if ci is None or not ci.get("acc"):
            return
        acc = ci["acc"]
        names, total, offset = self._selected_streams(acc, self._json(body) or {})
        page = names[offset:offset + LIST_LIMIT]
        head = {"type": "io.nats.jetstream.api.v1.stream_list_response", "total": total, "offset": offset,
                "limit": LIST_LIMIT}
        consumers = {n: len(self.member.state.consumers.get((acc, n)) or {}) for n in page}
        acc_now = self._acc

        def done(got: dict[str, dict], missing: list[str]) -> None:
            infos, offline = [], {}
            for n in sorted(got):
                si = got[n]
                if si.get("offline_reason"):
                    offline[n] = si["offline_reason"]
                    missing.append(n)
                    continue
                si.pop("offline_reason", None)
                if consumers.get(n) and isinstance(si.get("state"), dict):
                    si["state"]["consumer_count"] = consumers[n]
                infos.append(si)
            doc = dict(head, streams=infos, missing=sorted(missing) or None)
            if offline:
                doc["offline"] = offline
            if doc["missing"] is None:
                doc.pop("missing")
            self._acc = acc_now
            self._answer(reply, doc)

        if not page:
            self._answer(reply, dict(head, streams=[]))
            return
        self._gather([(n, f"$JSC.SI.{acc}.{n}") for n in page], done)

    def _consumer_list(self, subject: str, reply: str, ci: Optional[dict], body: bytes) -> None:
        """``CONSUMER.LIST.<stream>``: each consumer's info from its leader (``$JSC.CI``), gathered as above."""
        kind = "consumer_list_response"
        if ci is None or not ci.get("acc"):
            return
        acc, stream = ci["acc"], subject.rsplit(".", 1)[-1]
        if (acc, stream) not in self.member.state.streams:
            self._answer(reply, _err(kind, "STREAM_NOT_FOUND"))
            return
        req = self._json(body) or {}
        names = sorted(self.member.state.consumers.get((acc, stream)) or {})
        offset = min(max(int(req.get("offset") or 0), 0), len(names))
        page = names[offset:offset + LIST_LIMIT]
        head = {"type": f"io.nats.jetstream.api.v1.{kind}", "total": len(names), "offset": offset,
                "limit": LIST_LIMIT}
        acc_now = self._acc

        def done(got: dict[str, dict], missing: list[str]) -> None:
            infos, offline = [], {}
            for n in sorted(got):
                info = got[n]
                if info.get("offline_reason"):
                    offline[n] = info["offline_reason"]
                    missing.append(n)
                    continue
                info.pop("offline_reason", None)
                infos.append(info)
            doc = dict(head, consumers=infos)
            if missing:
                doc["missing"] = sorted(missing)
            if offline:
                doc["offline"] = offline
            self._acc = acc_now
            self._answer(reply, doc)

        if not page:
            self._answer(reply, dict(head, consumers=[]))
            return
        self._gather([(n, f"$JSC.CI.{acc}.{stream}.{n}") for n in page], done)

    # -- consumers ------------------------------------------------------------------------------------------
    def _consumer_create(self, subject: str, reply: str, ci: Optional[dict], body: bytes) -> None:
        """nats-server's request and configuration checks (rillet.jetstream.consumerconfig), then the assignment
        (a new one, or an existing consumer's with its new configuration: an update); its leader answers."""
        kind = "consumer_create_response"
        if ci is None or not ci.get("acc"):
            return
        from rillet.jetstream import configtypes as C
        from rillet.jetstream.api.codec import from_dict, to_go
        from rillet.jetstream.consumerconfig import prepare_consumer_create
        from rillet.jetstream.errors import ApiError
        from rillet.jetstream.manager import account_js_config
        acc = ci["acc"]
        state = self.member.state

        def consumers(stream: str) -> dict:
            return {n: from_dict(ca.get("consumer") or {}, C.ConsumerConfig)
                    for n, ca in (state.consumers.get((acc, stream)) or {}).items()}
        try:
            cc = prepare_consumer_create(subject.split(".")[3:], body or b"{}",
                                         lookup_stream=lambda n: self._cfg(acc, n), consumers=consumers,
                                         account_limits=account_js_config(
                                             self.member.server.opts.accounts or {}).get(acc), clustered=True)
        except ApiError as e:
            self._answer(reply, {"type": f"io.nats.jetstream.api.v1.{kind}", "error": e.to_dict()})
            return
        stream = cc.stream
        sa = state.streams[(acc, stream)]
        name = cc.name
        if not name:
            while not name or name in (state.consumers.get((acc, stream)) or {}):
                name = gw.random_token(8)
        cfg = to_go(cc.config)
        cfg["name"] = name
        client = {k: v for k, v in ci.items() if k not in ("jwt", "issuer_key")}
        if cc.existing:
            old = state.consumers[(acc, stream)][name]
            self._propose(ge.OP_ASSIGN_CONSUMER, dict(old, client=client, consumer=cfg, subject=subject, reply=reply))
            return
        sgroup = sa.get("group") or {}
        speers = list(sgroup.get("peers") or [])
        storage = "memory" if cfg.get("mem_storage") else str(sgroup.get("store") or "file")
        # nats-server's replica count: the stream's, but 1 for an ephemeral of a limits stream without one
        # asked, and a count below the stream's picks that many of its peers
        r = int(cfg.get("num_replicas") or 0)
        scfg = sa.get("stream") or {}
        if r == 0 or r > len(speers):
            durable = bool(cfg.get("durable_name"))
            r = 1 if (not durable and r == 0 and scfg.get("retention", "limits") == "limits") else len(speers)
        online = set(self._online())
        go = [p for p in speers if self._is_go(p) and p in online]
        if len(speers) == 1:
            peers = speers  # (an R1 stream's consumer is where the stream is: a Rillet server leads it there)
        elif not go and r == 1 and any(p in online for p in speers):
            # (a one-replica consumer has no group: the Rillet server it goes to leads it at once)
            peers = [self.rng.choice([p for p in speers if p in online])]
        else:
            # a Go server preferred when one of the stream's is online; else a Rillet one, which campaigns at once
            live = [p for p in speers if p in online]
            if not live:
                self._answer(reply, _err(kind, "INSUFFICIENT_RESOURCES"))
                return
            # (nats-server: a quorum of the stream's peers online; all of them when the counts are the same)
            first = self.rng.choice(go or live)
            rest = [p for p in speers if p != first and p in online]
            if len(live) < r // 2 + 1 or (r < len(speers) and len(rest) < r - 1):
                self._answer(reply, _err(kind, "INSUFFICIENT_RESOURCES"))
                return
            peers = [first, *self.rng.sample(rest, r - 1)] if r < len(speers) else \
                [first, *[p for p in speers if p != first]]
        doc = consumer_assignment(client, stream, name, cfg, peers, peers[0], storage,
                                  str(sgroup.get("cluster") or self.member.server.opts.cluster.name), subject, reply)
        self._propose(ge.OP_ASSIGN_CONSUMER, doc)

    def _consumer_delete(self, subject: str, reply: str, ci: Optional[dict], body: bytes) -> None:
        if ci is None or not ci.get("acc"):
            return
        toks = subject.split(".")
        stream, name = toks[4], toks[5]
        acc = ci["acc"]
        if (acc, stream) not in self.member.state.streams:
            self._answer(reply, _err("consumer_delete_response", "STREAM_NOT_FOUND"))
            return
        ca = (self.member.state.consumers.get((acc, stream)) or {}).get(name)
        if ca is None:
            self._answer(reply, _err("consumer_delete_response", "CONSUMER_NOT_FOUND"))
            return
        client = {k: v for k, v in ci.items() if k not in ("jwt", "issuer_key")}
        self._propose(ge.OP_REMOVE_CONSUMER, dict(ca, client=client, subject=subject, reply=reply))

    def _consumer_names(self, subject: str, reply: str, ci: Optional[dict], body: bytes) -> None:
        if ci is None or not ci.get("acc"):
            return
        stream = subject.rsplit(".", 1)[-1]
        acc = ci["acc"]
        if (acc, stream) not in self.member.state.streams:
            self._answer(reply, _err("consumer_names_response", "STREAM_NOT_FOUND"))
            return
        req = self._json(body) or {}
        offset = max(int(req.get("offset") or 0), 0)
        names = sorted(self.member.state.consumers.get((acc, stream)) or {})
        self._answer(reply, {"type": "io.nats.jetstream.api.v1.consumer_names_response", "total": len(names),
                             "offset": offset, "limit": NAMES_LIMIT,
                             "consumers": names[offset:offset + NAMES_LIMIT]})

    def _account_info(self, subject: str, reply: str, ci: Optional[dict], body: bytes) -> None:
        if ci is None or not ci.get("acc"):
            return
        acc = ci["acc"]
        from rillet.jetstream.api.codec import to_go
        from rillet.jetstream.api.common import API_LEVEL
        from rillet.jetstream.manager import account_js_config
        limits = account_js_config(self.member.server.opts.accounts or {}).get(acc)
        if limits is None:
            self._answer(reply, _err("account_info_response", "NOT_ENABLED_FOR_ACCOUNT"))
            return
        mem, sto = self._local_usage(acc)
        api, errors = self.api_counts.get(acc, (0, 0))
        for (a, _peer), u in self.usage.items():
            if a == acc:
                mem += sum(t[1] for t in u.tiers)
                sto += sum(t[2] for t in u.tiers)
                api += u.api
                errors += u.errors
        streams = [k for k in self.member.state.streams if k[0] == acc]
        reserved = {"memory": 0, "file": 0}  # (the streams' max_bytes, as nats-server reserves in a cluster)
        for k in streams:
            cfg = self.member.state.streams[k].get("stream") or {}
            mb = cfg.get("max_bytes")
            if isinstance(mb, int) and mb > 0 and cfg.get("storage", "file") in reserved:
                reserved[cfg.get("storage", "file")] += mb
        d: dict[str, Any] = {"type": "io.nats.jetstream.api.v1.account_info_response", "memory": mem, "storage": sto,
                             "reserved_memory": reserved["memory"], "reserved_storage": reserved["file"],
                             "streams": len(streams),
                             "consumers": sum(len(self.member.state.consumers.get(k) or {}) for k in streams),
                             "limits": to_go(limits)}
        domain = self.member.server.opts.jetstream.domain
        if domain:
            d["domain"] = domain
        d["api"] = {"level": API_LEVEL, "total": api, "errors": errors}
        self._answer(reply, d)

    # -- the meta group -------------------------------------------------------------------------------------
    def _stepdown(self, subject: str, reply: str, ci: Optional[dict], body: bytes) -> None:
        kind = "meta_leader_stepdown_response"
        m = self.member
        sys_name = getattr(m.server.system_account, "name", "")
        if ci is not None and ci.get("acc") not in (None, sys_name):
            return  # (nats-server: only the system account may ask)
        req = self._json(body)
        if req is None:
            self._answer(reply, _err(kind, "INVALID_JSON", err="the request is not a JSON object"))
            return
        r = m.raft
        pref = ((req.get("placement") or {}).get("preferred") or "") if isinstance(req.get("placement"), dict) else ""
        if pref:
            peer = gw.peer_id(pref)
            if peer == r.me:
                self._answer(reply, _err(kind, "CLUSTER_NO_PEERS", err=f'preferred server "{pref}" is already leader'))
                return
            if peer not in r.peers:
                self._answer(reply, _err(kind, "CLUSTER_NO_PEERS", err=f'preferred server "{pref}" not known'))
                return
            if not r.current(peer):
                self._answer(reply, _err(kind, "CLUSTER_NO_PEERS", err=f'preferred server "{pref}" is not current'))
                return
        else:
            current = [p for p in sorted(r.peers) if p != r.me and r.current(p)]
            go = [p for p in current if self._is_go(p)]
            if not current:
                self._answer(reply, _err(kind, "RAFT_GENERAL", err="no current peer to hand the leadership to"))
                return
            peer = (go or current)[0]
        m.transfer(peer)
        self._answer(reply, {"type": f"io.nats.jetstream.api.v1.{kind}", "success": True})
