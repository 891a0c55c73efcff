"""Leading a Go cluster's consumer group from Rillet: nats-server's consumer leader, for ``GoConsumerReplica``.

``ConsumerLeading`` is the leader half of rillet.jetstream.cluster.gostream.GoConsumerReplica (a mixin, as
gostreamlead.StreamLeading is for the stream replica: the RAFT peer, the replicated state and the apply path are
the replica's). The messages come from this server's replica of the consumer's stream (its ``GoStreamReplica``
store: what is applied here, as nats-server's consumer leader reads its own stream replica). While the replica's
``GoRaftPeer`` leads the group, as nats-server 2.15's consumer leader does:

* deliveries: pull requests (``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>``: batch, expires, no_wait,
  max_bytes, idle_heartbeat and the consumer's request limits; 404/408/409 statuses with the pending counts,
  409 Leadership Change to the requests a previous leader left; rillet.jetstream.cluster.goconsumerpull) and push
  deliveries to ``deliver_subject`` while someone listens there (idle heartbeats, flow control with nats-server's
  window); redeliveries first, then new messages from the filter(s),
  held at ``max_ack_pending``. Each delivery is proposed as nats-server's delivered update (op 7: consumer and
  stream sequence, delivery count, the message's timestamp) and, with acks, sent only once that commits (as
  2.15's ``replicateDeliveries``); the ack reply is nats-server's v1 ``$JS.ACK.<stream>.<consumer>.<dc>.<sseq>.
  <dseq>.<ts>.<pending>``. The waiting requests are proposed as they come and go (ops 12/13);
* acks (``$JS.ACK.<stream>.<consumer>.>``): ``+ACK``/empty, ``+NXT`` (ack, then a pull request),
  ``-NAK`` (with a delay as a duration or ``{"delay": ns}``), ``+WPI``, ``+TERM`` (with a reason) and
  AckSync (answered once the ack update, op 8, commits); ack policies explicit, all and none;
* ``ack_wait``/``backoff`` redeliveries (nats-server's ``checkPending``), ``max_deliver`` (the message leaves
  pending with a delivered update past the limit, as Go's leader proposes it) and the advisories for
  max deliveries, NAKs and terminations;
* ``CONSUMER.RESET`` (nats-server 2.14's: back to the ack floor or to a sequence its deliver policy allows,
  proposed as its reset entry, op 18, and answered with the consumer info once applied);
* ``CONSUMER.INFO`` and the servers' ``$JSC.CI`` requests (cluster info naming this server leader; delivered
  and ack floor from the replicated state, as Go's leader reports them), ``CONSUMER.LEADER.STEPDOWN`` (to
  the preferred server, else a current Go peer first);
* a new consumer (no state yet) starts where its deliver policy says (``last_per_subject``: the last message of
  each subject first) and proposes its start (op 10);
* a one-replica consumer placed here (an ephemeral of a replicated stream, say: nats-server runs no RAFT group
  for it) is led at once without elections (``lead_solo``): its entries apply without a group, its create and
  delete are answered as its nats-server leader answers them, its step-down answers success and changes nothing;
* losing the leadership (a higher term, a transfer, the group stopped) stops all of it at once: held
  deliveries are dropped (not delivered, so not pending anywhere) and the next leader answers the waiting
  requests with 409 Leadership Change.

The replicated state (``ConsumerReplicaState``) is applied on every replica, the leader included, as
nats-server's consumer file store applies the entries; the leader keeps its own delivery state beside it
(``sseq``, ``dseq``, pending and redelivery counts), as nats-server's ``consumer`` does, loaded from the
replicated state when it takes over. Every replica compacts the group's log into nats-server's consumer state
snapshot (``encode_consumer_state``) every ``SNAPSHOT_EVERY`` applied entries, and applies one from a leader.

Not led here (the leadership is handed to a Go peer when elected, as before): consumers of interest or work
queue streams (every replica removes acknowledged messages itself, not done by the Rillet stream replica),
ack policy ``flow_control``, priority groups, ``rate_limit_bps``, replay ``original``, a paused consumer. Not done while leading:
the ``Nats-Required-Api-Level`` header of a ``CONSUMER.RESET`` (not checked),
the ``sample_freq`` ack samples, an ephemeral's inactivity removal (nats-server's leader asks the meta leader to
remove it; here it stays), the v2 ack subjects
(``js_api_reply_v2``), and a consumer config update while leading (the leadership is handed to a Go peer).
A stream purge does not move a consumer replica's state here (nats-server's replicas each move theirs).
"""
from __future__ import annotations

import json
import random
import time
from bisect import insort
from collections import deque
from typing import Any, Optional

from rillet.gocompat.gotime import format_time, parse_go_duration
from rillet.jetstream import headers as H
from rillet.jetstream.cluster import gowire as ge
from rillet.jetstream.cluster.golead import (LEADER, account_request, answer_json, cluster_info, stepdown_target,
                                            with_dynamic_metadata)
from rillet.jetstream.cluster.gomigrate import CONSUMER_RECONCILE, GroupMigration, consumer_replicas, reconcile_doc
from rillet.jetstream.errors import ApiError
from rillet.raft import gowire as gw
from rillet.jetstream.cluster.goconsumerpull import PullRequests, _hdrs, _Request
from rillet.jetstream.cluster.goconsumerstate import decode_consumer_state, encode_consumer_state

__all__ = ["ConsumerLeading", "encode_consumer_state", "decode_consumer_state", "unsupported"]

ACK_WAIT_DEFAULT = 30_000_000_000
ACK_WAIT_DELAY = 0.001  # s: nats-server fires its pending timer this much after a deadline
LEADER_CHANGE = b"NATS/1.0 409 Leadership Change\r\n\r\n"
FC_MAX_PENDING = 32 * 1024 * 1024  # bytes: nats-server's flow control window limit


def unsupported(cfg: dict, stream_cfg: dict) -> str:
    """Why this server does not lead the consumer (handing it to a Go peer), or ""."""
    if (stream_cfg.get("retention") or "limits") != "limits":
        return f"a {stream_cfg.get('retention')} stream's consumer"
    if cfg.get("ack_policy") == "flow_control":
        return "ack policy flow_control"
    if cfg.get("priority_groups") or (cfg.get("priority_policy") or "none") != "none":
        return "priority groups"
    if cfg.get("rate_limit_bps"):
        return "a rate limit"
    if cfg.get("replay_policy") == "original":
        return "replay policy original"
    if cfg.get("pause_until"):
        return "a paused consumer"
    return ""


class ConsumerLeading(PullRequests, GroupMigration):
    """The consumer leader's duties of a ``GoConsumerReplica`` (see the module docstring)."""

    create_reply = ""  # a new group's create, answered by its first leader (host_streams sets it)

    # -- taking and losing the leadership ------------------------------------------------------------------
    def stand_in_group(self) -> None:
        """Take part in the group's elections as nats-server's consumer replicas do (see StreamLeading)."""
        self.standing = True
        self.raft.lead_on_transfer = True
        self.raft.announce_peers = True
        self.raft.add_unknown_peers = False

    def _on_proposal(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
        if subject.startswith(b"$NRG.P."):
            return  # (a consumer's entries come from its leader only)
        super()._on_proposal(sub, c, subject, reply, hdr, msg)

    def _send(self, outs: list) -> None:
        super()._send(outs)
        if not self.may_lead:
            return
        leading = self.raft.role == LEADER and self.ic is not None and bool(self._subs)
        if leading and self._lead is None and self._lead_pending is False:
            # (what earlier terms left in the log is applied first: our own first entry commits it)
            if self.raft.commit >= self.raft.pindex:
                self._start_leading()
            elif self.server.loop is not None:
                self._lead_pending = True
                self.server.loop.call_later(0.05, self._retry_start)
        elif not leading and self._lead is not None:
            self._stop_leading()

    def _retry_start(self) -> None:
        self._lead_pending = False
        if self.raft.role == LEADER and self._lead is None and self._subs:
            if self.raft.commit >= self.raft.pindex:
                self._start_leading()
            elif time.monotonic() - self.raft.led_since > 5.0:
                self._warn_once("nocommit", f"JetStream consumer {self._cname()}: the group's log does not "
                                            "commit; handing the leadership on")
                self.transfer_away()
            else:
                self._lead_pending = True
                self.server.loop.call_later(0.05, self._retry_start)

    def _cname(self) -> str:
        return f"'{self.account} > {self.stream} > {self.name}' [{self.group}]"

    def _cfg(self) -> dict:
        return self.assignment.get("consumer") or {}

    def _stream_rep(self) -> Any:
        return (self.member.replicas.get((self.account, self.stream)) if self.member is not None else None)

    def _start_leading(self) -> None:
        cfg = self._cfg()
        srep = self._stream_rep()
        acc = self.server.accounts.get(self.account)
        why = "" if srep is not None and acc is not None else "no replica of its stream here"
        why = why or unsupported(cfg, srep.assignment.get("stream") or {})
        c = self.consumer
        fresh = not c.has_state
        if why:
            self._warn_once(f"nolead:{why}", f"JetStream consumer {self._cname()}: not led here ({why}); "
                                             "handing the leadership to a Go peer")
            self.standing = False  # (no more standing for a group it would only hand on)
            if not self.transfer_away():
                self.raft.step_down()
                super()._send([])
            return
        self.mstore = srep.store
        self.srep = srep
        self.aic = self.server.internal_client(acc, f"go consumer leader {self.name}")
        self.ack_policy = cfg.get("ack_policy") or "none"
        self.maxdc = max(int(cfg.get("max_deliver") or 0), 0)
        # (-1 in a config: no limit)
        self.maxp = max(int(cfg.get("max_ack_pending") or 0), 0) if self.ack_policy != "none" else 0
        self.ack_wait_ns = int(cfg.get("ack_wait") or ACK_WAIT_DEFAULT)
        self.backoff = [int(b) for b in (cfg.get("backoff") or ())]
        self.filters = list(cfg.get("filter_subjects") or ([cfg["filter_subject"]] if cfg.get("filter_subject")
                                                           else []))
        self.deliver_subject = cfg.get("deliver_subject") or ""
        self.lss: list[int] = []  # (deliver policy last_per_subject: the last sequences to deliver first)
        self.lss_resume = 0
        # push flow control (nats-server's: a window from 1/16 of 32 MB, doubled at each answer up to it)
        self.flow_control = bool(cfg.get("flow_control")) and bool(self.deliver_subject)
        self.pblimit = FC_MAX_PENDING if self.flow_control else 0
        self.maxpb = self.pblimit // 16
        self.pbytes = self.fcsz = 0
        self.fcid = ""
        # the delivery state, from the replicated one (nats-server's applyState)
        self.sseq = c.delivered_stream + 1
        self.dseq = c.delivered_consumer + 1
        self.adflr, self.asflr = c.ack_floor_consumer, c.ack_floor_stream
        self.lpending = {s: [d, ts] for s, (d, ts) in c.pending.items()}
        self.rdc = dict(c.redelivered)
        self.rdq: list[int] = []
        self.held: dict[int, tuple[bytes, bytes, bytes, int, Optional[_Request], str]] = {}
        self.replies: dict[int, str] = {}
        self.waiting: deque[_Request] = deque()
        self.ldt = self.lat = 0
        self._timers: dict[str, Any] = {}
        self._kicked = False
        self._last_send = time.monotonic()
        sn = f"{self.stream}.{self.name}"
        self._lead = [(self.ic, self.ic.subscribe(f"$JS.API.CONSUMER.INFO.{sn}", self._on_info)),
                      (self.ic, self.ic.subscribe(f"$JSC.CI.{self.account}.{sn}", self._on_cluster_info)),
                      (self.ic, self.ic.subscribe(f"$JS.API.CONSUMER.LEADER.STEPDOWN.{sn}", self._on_stepdown))]
        if self.ack_policy != "none":
            self._lead.append((self.aic, self.aic.subscribe(f"$JS.ACK.{sn}.>", self._on_ack)))
        if not self.deliver_subject:
            self._lead.append((self.aic, self.aic.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{sn}", self._on_next)))
        if self.flow_control:
            self._lead.append((self.aic, self.aic.subscribe(f"$JS.FC.{sn}.*", self._on_fc)))
        self._lead.append((self.aic, self.aic.subscribe(f"$JS.API.CONSUMER.RESET.{sn}", self._on_reset)))
        self.rsm: set[str] = set()  # reset requests proposed, answered once applied
        srep.on_stored.append(self.kick)
        if fresh:
            self._select_start(cfg)
        self.log.notice(f"JetStream: leading consumer {self._cname()} (term {self.raft.term})")
        for reply in sorted(c.pull_requests):  # (nats-server's checkPendingRequests)
            self.aic.publish(reply.encode(), None, LEADER_CHANGE, len(LEADER_CHANGE))
        c.pull_requests.clear()
        if self.lpending:
            delay = 0.5 + random.random()
            self._arm("ack", min(delay, self.ack_wait_ns / 1e9 + ACK_WAIT_DELAY), self._check_pending)
        if self.deliver_subject and cfg.get("idle_heartbeat"):
            self._arm("hb", int(cfg["idle_heartbeat"]) / 1e9, self._on_hb)
        self.kick()
        if self.create_reply and not self.solo:
            # (a new group led here from its start: its first leader answers the create, as nats-server's)
            self.create_reply = ""
            self._answer_create()
        self._migration_check()

    def _select_start(self, cfg: dict) -> None:
        """nats-server's selectStartingSeqNo for a consumer with no state, then its start proposed (op 10)."""
        st = self.mstore.state()
        pol = cfg.get("deliver_policy") or "all"
        if pol == "new":
            seq = st.last_seq + 1
        elif pol == "last":
            if self.filters:
                seq = max((self.mstore.last_seq_for_subject(f) if "*" not in f and ">" not in f
                           else (getattr(self.mstore.load_last_msg(f), "seq", 0)) for f in self.filters), default=0)
            else:
                seq = st.last_seq
        elif pol == "last_per_subject":
            # (the last message of each subject first, then on from the stream's last: nats-server's skip list)
            self.lss = list(self.mstore.multi_last_seqs(self.filters or [">"], st.last_seq))
            self.lss_resume = st.last_seq
            seq = self.lss[0] if self.lss else st.last_seq + 1
        elif pol == "by_start_sequence":
            seq = int(cfg.get("opt_start_seq") or 0)
        elif pol == "by_start_time":
            from rillet.jetstream.consumer.common import _parse_time_ns
            seq = self.mstore.get_seq_from_time(_parse_time_ns(cfg.get("opt_start_time")))
        else:
            seq = st.first_seq
        if seq <= 0:
            seq = 1
        if st.first_seq == 0 or st.msgs == 0 and st.last_seq == 0:
            seq = max(seq, 1) if pol == "by_start_sequence" else 1
        elif seq < st.first_seq:
            seq = st.first_seq
        elif seq > st.last_seq:
            seq = st.last_seq + 1
        self.sseq, self.dseq = seq, 1
        self.adflr, self.asflr = 0, seq - 1
        self._propose(ge.UpdateSkip(seq).encode())

    def _stop_leading(self) -> None:
        if self._lead is None:
            return
        for client, sub in self._lead:
            client.remove_sub(sub)
        self._lead = None
        for t in self._timers.values():
            t.cancel()
        self._timers.clear()
        srep = getattr(self, "srep", None)
        if srep is not None and self.kick in srep.on_stored:
            srep.on_stored.remove(self.kick)
        self.held.clear()
        self.waiting.clear()
        self.replies.clear()
        self.log.notice(f"JetStream: no longer leading consumer {self._cname()}")

    def stop(self, remove: bool = False) -> None:
        if self._lead is not None:
            if self.raft.role == LEADER and not self.transfer_away():
                self.raft.step_down()
            self._stop_leading()
        super().stop()

    def reassigned(self, assignment: dict) -> None:
        """The meta group updated the consumer's assignment: a new configuration hands the group to a Go peer
        (which applies it as nats-server does); a change of its peers is carried out here
        (gomigrate.GroupMigration)."""
        cfg_changed = assignment.get("consumer") != self.assignment.get("consumer")
        changed = cfg_changed or \
            (assignment.get("group") or {}).get("peers") != (self.assignment.get("group") or {}).get("peers")
        self.assignment = assignment
        cfg = assignment.get("consumer") or {}
        self.consumer.max_deliver = int(cfg.get("max_deliver") or 0)
        if self.solo and self._lead is not None:
            if changed:  # (the new config taken at once, the update answered)
                self._stop_leading()
                self._start_leading()
            self._answer_create()
            return
        if cfg_changed and self._lead is not None and self.raft.role == LEADER:
            self.log.notice(f"JetStream consumer {self._cname()}: its configuration changed; handing the "
                            "leadership to a Go peer")
            self.transfer_away()
            return
        self._migration_check()

    # -- a change of the group's peers (gomigrate: nats-server 2.15's desired-state steps) --------------------
    def _stream_assignment(self) -> dict:
        meta = getattr(self.member, "state", None)
        return (meta.streams.get((self.account, self.stream)) if meta is not None else None) or {}

    def _mig_replicas(self) -> int:
        return consumer_replicas(self._cfg(), self._stream_assignment().get("stream") or {})

    def _mig_subject(self) -> str:
        return CONSUMER_RECONCILE

    def _mig_reconcile_doc(self, upd: dict) -> dict:
        return reconcile_doc(upd, account=self.account, stream=self.stream, consumer=self.name)

    def _mig_leading(self) -> bool:
        return self._lead is not None and self.raft.role == LEADER and not self.solo

    def _mig_stream_peers(self) -> Optional[list[str]]:
        return list((self._stream_assignment().get("group") or {}).get("peers") or [])

    def _go_peers(self) -> set[str]:
        return {p for p in self.raft.peers if p != self.peer and p not in self.rillet_peers}

    def transfer_away(self, preferred: str = "") -> bool:
        """As StreamLeading.transfer_away: to ``preferred``, else the peer (a Go one first) that acknowledged
        the most of our log and answered lately; False when none did."""
        r = self.raft
        now = time.monotonic()
        answered = {p: i for p, i in r.match.items() if p != self.peer}
        recent = {p: i for p, i in answered.items() if now - r.last_seen.get(p, 0.0) < 3.0}
        if preferred:
            peer = preferred if preferred in answered else None
        else:
            pool = recent or answered
            go = {p: i for p, i in pool.items() if p in self._go_peers()}
            pick = go or pool
            peer = max(sorted(pick), key=lambda p: pick[p], default=None)
        if peer is None or r.role != LEADER:
            return False
        self.passed += 1
        self._send(r.transfer(peer, force=True))
        return True

    # -- the replicated entries on the leader ----------------------------------------------------------------
    def _propose(self, data: bytes) -> None:
        if self.solo:  # (no group: applied at once, as nats-server's R1 consumer writes its store)
            from rillet.jetstream.cluster.gometa import Committed
            self._commit([Committed(0, gw.Entry(gw.ENTRY_NORMAL, data))])
        elif self.raft.role == LEADER:
            self.propose([gw.Entry(gw.ENTRY_NORMAL, data)])

    # -- a one-replica consumer placed here (nats-server runs no RAFT group for it) ---------------------------
    def lead_solo(self, answer: bool = True) -> None:
        """Lead at once, without elections (the group is this server alone), and answer the create (``answer``:
        not for an assignment replayed by a catch-up)."""
        r = self.raft
        r.term, r.role, r.leader, r.led_since = max(r.term, 1), LEADER, self.peer, time.monotonic()
        self._start_leading()
        if answer:
            self._answer_create()

    def _answer_create(self) -> None:
        reply = str(self.assignment.get("reply") or "")
        if reply and self._lead is not None:
            self._answer(reply.encode(), {"type": "io.nats.jetstream.api.v1.consumer_create_response",
                                          **self._info_doc()})

    def answer_removed(self, reply: str) -> None:
        """The meta group removed this one-replica consumer: its delete answered, as its nats-server leader does."""
        if reply and self.ic is not None:
            self._answer(reply.encode(), {"type": "io.nats.jetstream.api.v1.consumer_delete_response",
                                          "success": True})

    def _leader_applied(self, x: Any) -> None:
        """A committed entry, applied to the replicated state, on the leader: what waited for it goes out."""
        if isinstance(x, ge.UpdateDelivered):
            self.ldt = time.time_ns()
            held = self.held.pop(x.sseq, None)
            if held is not None:
                subj, reply, payload, hlen, wr, shown = held
                self._publish_delivery(subj, reply, payload, hlen, shown)
                self._last_send = time.monotonic()
                if wr is not None:
                    wr.held -= 1
                    if wr.held == 0 and wr.done:
                        self.aic.publish(wr.reply.encode(), None, wr.done, len(wr.done))
        elif isinstance(x, ge.ResetSeq):  # (nats-server's resetLocalStartingSeq, then the answer)
            self.lpending.clear()
            self.rdc.clear()
            self.rdq.clear()
            self.lss = []
            self.sseq, self.dseq = max(x.seq, 1), 1
            self.adflr, self.asflr = 0, self.sseq - 1
            self.ldt = self.lat = 0
            if x.reply in self.rsm:
                from rillet.jetstream.consumer.reset import TYPE
                self.rsm.discard(x.reply)
                body = json.dumps({"type": TYPE, **self._info_doc(), "reset_seq": self.sseq},
                                  separators=(",", ":")).encode()
                self.aic.publish(x.reply.encode(), None, body)
            self.kick()
        elif isinstance(x, ge.UpdateAcks):
            self.lat = time.time_ns()
            reply = self.replies.pop(x.sseq, None)
            if reply:
                self.aic.publish(reply.encode(), None, b"")

    # -- deliveries ------------------------------------------------------------------------------------------
    def kick(self) -> None:
        if self._lead is not None and not self._kicked and self.server.loop is not None:
            self._kicked = True
            self.server.loop.call_soon(self._run)

    def _arm(self, name: str, delay: float, cb: Any) -> None:
        t = self._timers.pop(name, None)
        if t is not None:
            t.cancel()
        if self.server.loop is not None:
            self._timers[name] = self.server.loop.call_later(max(delay, 0.0), cb)

    def num_pending(self) -> int:
        """What is left to deliver (the skip list of a last_per_subject start, then from there on)."""
        start = self.lss_resume + 1 if self.lss else self.sseq
        left = len(self.lss)
        if start > self.mstore.state().last_seq:
            return left
        if len(self.filters) > 1:
            return left + self.mstore.num_pending_multi(start, self.filters)[0]
        return left + self.mstore.num_pending(start, self.filters[0] if self.filters else ">")[0]

    def _delivery_count(self, seq: int) -> int:
        return self.rdc.get(seq, 0) or 1

    def _next_msg(self) -> tuple[Any, int]:
        """(stored message, delivery count), or (None, 0): nats-server's getNextMsg (redeliveries first,
        ``max_deliver``, ``max_ack_pending``, then the filters from ``sseq``)."""
        while self.rdq:
            seq = self.rdq.pop(0)
            self.rdc[seq] = self.rdc.get(seq, 0) + 1
            dc = self.rdc[seq] + 1
            if self.maxdc and dc > self.maxdc:
                if dc == self.maxdc + 1:
                    self._advisory("MAX_DELIVERIES", "io.nats.jetstream.advisory.v1.max_deliver",
                                   {"stream_seq": seq, "deliveries": dc - 1})
                p = self.lpending.pop(seq, None)
                if p is not None:
                    self._propose(ge.UpdateDelivered(p[0], seq, dc, p[1]).encode())
                    self._move_ack_floor(p[0], seq)
                continue
            sm = self.mstore.load_msg(seq)
            if sm is None:
                self.rdc[seq] -= 1
                p = self.lpending.get(seq)
                if p is not None:  # (gone from the stream meanwhile: terminated, as nats-server does)
                    self._process_ack(seq, p[0], dc - 1, "", term="Message Deleted")
                continue
            return sm, dc
        if self.maxp and len(self.lpending) >= self.maxp:
            return None, 0
        if self.lss:
            seq = self.lss.pop(0)
            if self.lss:
                self.sseq = seq
            else:
                self.sseq = self.lss_resume
                self._propose(ge.UpdateSkip(self.sseq).encode())
            sm = self.mstore.load_msg(seq)
            self.sseq += 1
            if sm is not None:
                return sm, 1
            return self._next_msg()
        if len(self.filters) > 1:
            sm = self.mstore.load_next_msg_multi(self.filters, self.sseq)
        else:
            sm = self.mstore.load_next_msg(self.filters[0] if self.filters else ">", self.sseq)
        if sm is None:
            last = self.mstore.state().last_seq
            if last >= self.sseq:
                if last > self.sseq:
                    self._propose(ge.UpdateSkip(last + 1).encode())
                self.sseq = last + 1
            return None, 0
        self.sseq = sm.seq + 1
        return sm, 1

    def _run(self) -> None:
        self._kicked = False
        if self._lead is None or self.raft.role != LEADER:
            return
        self._expire_requests()
        self._npc = self.num_pending()  # (counted down as new messages go out: the ack replies' pending count)
        budget = 1024
        while budget > 0:
            if self.deliver_subject:
                if not self.aic.account.has_interest(self.deliver_subject):
                    self._arm("interest", 1.0, self.kick)
                    break
                if self.maxpb and self.pbytes > self.maxpb:
                    break  # (stalled until the flow control request is answered)
                wr = None
            else:
                wr = self.waiting[0] if self.waiting else None
                if wr is None:
                    break
            sm, dc = self._next_msg()
            if sm is None:
                if wr is not None:
                    self._expire_requests(eos=True)
                break
            budget -= 1
            self._deliver(sm, dc, wr)
        if budget == 0:
            self.kick()
        self._arm_requests()

    def _deliver(self, sm: Any, dc: int, wr: Optional[_Request]) -> None:
        hdr, data = bytes(sm.hdr or b""), bytes(sm.data or b"")
        cfg = self._cfg()
        if cfg.get("headers_only"):
            hdr = H.append_headers(hdr, [("Nats-Msg-Size", str(len(data)))]) if hdr else \
                H.make_headers([("Nats-Msg-Size", str(len(data)))])
            data = b""
        size = len(sm.subject) + len(hdr) + len(data)
        if wr is not None and wr.b and size > wr.b and wr.n:
            # (nats-server: a message larger than what the request has left ends it with a 409; the message
            # stays next)
            if dc > 1:
                self.rdq.insert(0, sm.seq)
                self.rdc[sm.seq] -= 1
            else:
                self.sseq = sm.seq
            self._end_request(wr, _hdrs([("Nats-Pending-Messages", str(wr.n)), ("Nats-Pending-Bytes",
                                                                                 str(wr.b))],
                                        409, "Message Size Exceeds MaxBytes"))
            return
        dseq = self.dseq
        self.dseq += 1
        if dc == 1:
            self._npc = max(self._npc - 1, 0)
        pending = self._npc
        reply = f"$JS.ACK.{self.stream}.{self.name}.{dc}.{sm.seq}.{dseq}.{sm.ts}.{pending}".encode()
        target = (wr.reply if wr is not None else self.deliver_subject).encode()
        delivered = ge.UpdateDelivered(dseq, sm.seq, dc, sm.ts).encode()
        if self.ack_policy == "none" or self.flow_control:
            self._propose(delivered)
            # (sent at once: nats-server replicates deliveries first only with acks and without flow control)
            if self.ack_policy == "none":
                self.adflr, self.asflr = dseq, sm.seq
            else:
                self._track(sm.seq, dseq)
            self._publish_delivery(target, reply, hdr + data, len(hdr) if hdr else -1, sm.subject)
            self._last_send = time.monotonic()
            if self.maxpb:
                self.pbytes += size
                if not self.fcid and self.pbytes > self.maxpb // 2:
                    self._send_fc()
                elif self.fcid and self.pbytes - self.fcsz >= self.maxpb:
                    self.fcsz += size
        else:
            self._track(sm.seq, dseq)
            self.held[sm.seq] = (target, reply, hdr + data, len(hdr) if hdr else -1, wr, sm.subject)
            if wr is not None:
                wr.held += 1
            # (proposed once held: a group of one, or a consumer without a group, commits and applies it within
            # the call, and sends the delivery from there; proposed first, it stayed held, never delivered)
            self._propose(delivered)
        if wr is not None:
            wr.n -= 1
            wr.d += 1
            if wr.b:
                wr.b -= size
            if wr.n <= 0:
                self._end_request(wr, b"")

    def _publish_delivery(self, target: bytes, reply: bytes, payload: bytes, hlen: int, shown: str) -> None:
        """A delivery routed by ``target`` (the deliver subject or the request's inbox) and shown with the stored
        message's subject, as nats-server delivers (a KV watcher takes the key from it)."""
        acc = self.aic.account
        r = acc.match(target.decode("utf-8", "surrogateescape"))
        acc.deliver_result(self.aic, r, shown.encode("utf-8", "surrogateescape"), reply, hlen, payload, target)

    def _track(self, sseq: int, dseq: int) -> None:
        """nats-server's trackPending: pending since now (a redelivery keeps its first consumer sequence)."""
        now = time.time_ns()
        p = self.lpending.get(sseq)
        if p is not None:
            p[1] = now
        else:
            self.lpending[sseq] = [dseq, now]
        self._arm_ack(self.backoff[min(self.rdc.get(sseq, 0), len(self.backoff) - 1)]
                      if self.backoff else self.ack_wait_ns)

    def _send_fc(self) -> None:
        self.fcsz, self.fcid = self.pbytes, f"$JS.FC.{self.stream}.{self.name}.{gw.random_token(4)}"
        h = b"NATS/1.0 100 FlowControl Request\r\n\r\n"
        self.aic.publish(self.deliver_subject.encode(), self.fcid.encode(), h, len(h))

    def _on_fc(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
        """The answer to our latest flow control request: the window grows, what it covered is released."""
        if self._lead is None or subject.decode("utf-8", "surrogateescape") != self.fcid:
            return
        if self.maxpb < self.pblimit:
            self.maxpb = min(self.maxpb * 2, self.pblimit)
        self.pbytes = max(self.pbytes - self.fcsz, 0)
        self.fcid, self.fcsz = "", 0
        self.kick()

    def _arm_ack(self, ns: int) -> None:
        t = self._timers.get("ack")
        delay = ns / 1e9 + ACK_WAIT_DELAY
        if t is None or t.when() > self.server.loop.time() + delay:
            self._arm("ack", delay, self._check_pending)

    def _move_ack_floor(self, dseq: int, sseq: int) -> None:
        if not self.lpending:
            self.adflr, self.asflr = self.dseq - 1, self.sseq - 1
        elif dseq == self.adflr + 1:
            self.adflr, self.asflr = dseq, sseq
            for ss in range(sseq + 1, self.sseq):
                p = self.lpending.get(ss)
                if p is not None:
                    if p[0] > 0:
                        self.adflr, self.asflr = p[0] - 1, ss - 1
                    break

    def _check_pending(self) -> None:
        """nats-server's checkPending: pending past ``ack_wait`` (or their backoff) queued for redelivery."""
        self._timers.pop("ack", None)
        if self._lead is None or not self.ack_wait_ns:
            return
        now = time.time_ns()
        first = self.mstore.state().first_seq
        nxt = self.backoff[-1] if self.backoff else self.ack_wait_ns
        expired = []
        for seq, p in list(self.lpending.items()):
            if seq < first or seq <= self.asflr:
                del self.lpending[seq]
                self.rdc.pop(seq, None)
                if seq in self.rdq:
                    self.rdq.remove(seq)
                self.asflr, self.adflr = max(self.asflr, seq), max(self.adflr, p[0])
                continue
            deadline = self.ack_wait_ns
            if self.backoff:
                dc = max(self.rdc.get(seq, 0), 0)
                nbi = dc + 1
                if dc + 1 >= len(self.backoff):
                    dc = nbi = len(self.backoff) - 1
                deadline = self.backoff[dc]
                nxt = min(nxt, self.backoff[nbi])
            elapsed = now - p[1]
            if elapsed >= deadline:
                if seq not in self.rdq and not self._has_max_deliveries(seq):
                    expired.append(seq)
            elif deadline - elapsed < nxt:
                nxt = deadline - elapsed
        if expired:
            expired.sort()
            off = now - self.lpending[expired[0]][1]
            for seq in expired:
                insort(self.rdq, seq)
                if seq in self.lpending:
                    self.lpending[seq][1] += off
            self.kick()
        if self.lpending:
            self._arm("ack", nxt / 1e9 + ACK_WAIT_DELAY, self._check_pending)
        else:
            self.rdq.clear()
            self.adflr, self.asflr = self.dseq - 1, self.sseq - 1

    def _has_max_deliveries(self, seq: int) -> bool:
        if not self.maxdc:
            return False
        dc = self._delivery_count(seq)
        if dc < self.maxdc:
            return False
        if dc == self.maxdc:
            self._advisory("MAX_DELIVERIES", "io.nats.jetstream.advisory.v1.max_deliver",
                           {"stream_seq": seq, "deliveries": dc})
        p = self.lpending.pop(seq, None)
        if p is not None:
            self._propose(ge.UpdateDelivered(p[0], seq, dc + 1, p[1]).encode())
            self._move_ack_floor(p[0], seq)
        self.rdc[seq] = dc
        if self.maxp:
            self.kick()
        return True

    def _advisory(self, kind: str, typ: str, extra: dict) -> None:
        doc = {"type": typ, "id": gw.random_token(22), "timestamp": format_time(time.time_ns()),
               "stream": self.stream, "consumer": self.name}
        doc.update(extra)
        self.aic.publish(f"$JS.EVENT.ADVISORY.CONSUMER.{kind}.{self.stream}.{self.name}".encode(), None,
                         json.dumps(doc, separators=(",", ":")).encode())

    def _on_hb(self) -> None:
        """A push consumer's idle heartbeat (to the deliver subject, with the last sequences)."""
        hb = int(self._cfg().get("idle_heartbeat") or 0) / 1e9
        if self._lead is None or not hb:
            return
        idle = time.monotonic() - self._last_send
        if idle >= hb - 0.001 and self.aic.account.has_interest(self.deliver_subject):
            pairs = [("Nats-Last-Consumer", str(self.dseq - 1)), ("Nats-Last-Stream", str(self.sseq - 1))]
            if self.fcid:
                pairs.append(("Nats-Consumer-Stalled", self.fcid))
            h = _hdrs(pairs, 100, "Idle Heartbeat")
            self.aic.publish(self.deliver_subject.encode(), None, h, len(h))
            self._last_send = time.monotonic()
        self._arm("hb", max(hb - (time.monotonic() - self._last_send), 0.01), self._on_hb)

    # -- acks ------------------------------------------------------------------------------------------------
    def _on_ack(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
        if self._lead is None:
            return
        toks = subject.decode("utf-8", "surrogateescape").split(".")
        try:
            if len(toks) != 9:
                raise ValueError
            dc, sseq, dseq = int(toks[4]), int(toks[5]), int(toks[6])
        except ValueError:
            return  # (not an ack subject of ours: nats-server ignores it too)
        body = bytes(msg[hdr:]) if hdr > 0 else bytes(msg)
        rep = reply.decode("utf-8", "surrogateescape") if reply else ""
        answer = bool(rep)
        if not body or body in (b"+ACK", b"+OK"):
            answer = self._process_ack(sseq, dseq, dc, rep)
        elif body.startswith(b"+NXT"):
            self._process_ack(sseq, dseq, dc, "")
            if rep:
                self._next_request(rep, body[4:])
            answer = False
        elif body.startswith(b"-NAK"):
            self._process_nak(sseq, dseq, dc, body)
        elif body == b"+WPI":
            p = self.lpending.get(sseq)
            if p is not None:
                p[1] = time.time_ns()
                self._propose(ge.UpdateDelivered(p[0], sseq, 1, p[1]).encode())
        elif body.startswith(b"+TERM"):
            answer = self._process_ack(sseq, dseq, dc, rep, term=body[5:].strip().decode("utf-8", "replace"))
        if answer and rep:
            self.aic.publish(rep.encode(), None, b"")
        self.kick()

    def _process_ack(self, sseq: int, dseq: int, dc: int, reply: str, term: Optional[str] = None) -> bool:
        """nats-server's processAckMsg (and processTerm with ``term``): True when the ack is answered at once,
        False when not at all or once its update commits (``_leader_applied``)."""
        answered = True
        if sseq >= self.sseq:
            answered = False
        elif self.ack_policy == "explicit":
            p = self.lpending.pop(sseq, None)
            if p is not None:
                dseq = p[0]
                self._move_ack_floor(dseq, sseq)
            self.rdc.pop(sseq, None)
            if sseq in self.rdq:
                self.rdq.remove(sseq)
            self._ack_update(dseq, sseq, reply)
            answered = False
        elif self.ack_policy == "all":
            if dseq <= self.adflr or sseq <= self.asflr:
                answered = True
            else:
                self.adflr, self.asflr = dseq, sseq
                for seq in [s for s in self.lpending if s <= sseq]:
                    del self.lpending[seq]
                    self.rdc.pop(seq, None)
                    if seq in self.rdq:
                        self.rdq.remove(seq)
                self._ack_update(dseq, sseq, reply)
                answered = False
        else:
            answered = False
        if term is not None:
            self._advisory("MSG_TERMINATED", "io.nats.jetstream.advisory.v1.terminated",
                           {"consumer_seq": dseq, "stream_seq": sseq, "deliveries": dc, "reason": term})
        return answered

    def _ack_update(self, dseq: int, sseq: int, reply: str) -> None:
        if reply:
            self.replies[sseq] = reply  # (before the proposal, which a group of one applies within the call)
        self._propose(ge.UpdateAcks(dseq, sseq).encode())
        self.lat = time.time_ns()

    def _process_nak(self, sseq: int, dseq: int, dc: int, body: bytes) -> None:
        if dseq <= self.adflr or dseq > self.dseq or sseq not in self.lpending:
            return
        self._advisory("MSG_NAKED", "io.nats.jetstream.advisory.v1.nak",
                       {"consumer_seq": dseq, "stream_seq": sseq, "deliveries": dc})
        arg = body[4:].strip()
        if arg:
            delay: Optional[int] = None
            try:
                if arg[:1] == b"{":
                    d = json.loads(arg)
                    v = d.get("delay", 0) if isinstance(d, dict) else None
                    delay = v if isinstance(v, int) and not isinstance(v, bool) else None
                else:
                    delay = int(parse_go_duration(arg.decode()) * 1e9)
            except (ValueError, UnicodeDecodeError):
                delay = None
            if delay is None:
                self._warn_once(f"nak:{arg!r}", f"JetStream consumer {self._cname()}: bad NAK delay value: "
                                                f"{arg.decode('utf-8', 'replace')!r}")
            else:
                if sseq in self.rdq:
                    self.rdq.remove(sseq)
                p = self.lpending[sseq]
                p[1] = time.time_ns() - self.ack_wait_ns + delay
                self._propose(ge.UpdateDelivered(p[0], sseq, dc, p[1]).encode())
                self._arm("ack", 0.01, self._check_pending)
                return
        if sseq not in self.rdq:
            insort(self.rdq, sseq)

    # -- the consumer's API ----------------------------------------------------------------------------------
    def _info_doc(self, api: bool = True) -> dict[str, Any]:
        """The consumer's info as nats-server's leader gives it (delivered and ack floor from the replicated
        state, ack pending and redelivered from the leader's own)."""
        from rillet.jetstream.cluster.gostreamlead import StreamLeading
        c = self.consumer
        cfg = self._cfg()
        delivered: dict[str, Any] = {"consumer_seq": c.delivered_consumer, "stream_seq": c.delivered_stream}
        if self.ldt:
            delivered["last_active"] = format_time(self.ldt)
        floor: dict[str, Any] = {"consumer_seq": c.ack_floor_consumer, "stream_seq": c.ack_floor_stream}
        if self.lat:
            floor["last_active"] = format_time(self.lat)
        doc: dict[str, Any] = {
            "stream_name": self.stream, "name": self.name, "created": self.assignment.get("created") or "",
            "config": with_dynamic_metadata(cfg) if api else cfg, "delivered": delivered, "ack_floor": floor,
            "num_ack_pending": len(self.lpending),
            "num_redelivered": 0 if cfg.get("max_deliver") == 1 else len(self.rdc),
            "num_waiting": len(self.waiting), "num_pending": self.num_pending(),
            "cluster": ({"name": (self.assignment.get("group") or {}).get("cluster") or "", "leader": self.server.name}
                        if self.solo else  # (no RAFT group: nats-server names the cluster and the leader only)
                        cluster_info(self.server, self.assignment, self.raft, self.peer,
                                     StreamLeading._peer_names(self)))}
        if self.deliver_subject and self.aic.account.has_interest(self.deliver_subject):
            doc["push_bound"] = True
        doc["ts"] = format_time(time.time_ns())
        return doc

    def _api_request(self, reply: Optional[bytes], hdr: int, msg: bytes) -> Optional[tuple[dict, bytes]]:
        return None if self._lead is None else account_request(self.account, reply, hdr, msg)

    def _answer(self, reply: bytes, doc: dict) -> None:
        answer_json(self.ic, reply, doc)

    def _on_info(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
        if self._api_request(reply, hdr, msg) is None:
            return
        self._answer(reply, {"type": "io.nats.jetstream.api.v1.consumer_info_response", **self._info_doc()})

    def _on_reset(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
        """``$JS.API.CONSUMER.RESET.<stream>.<consumer>``: checked as nats-server's leader checks it, proposed."""
        if self._lead is None or not reply:
            return
        from rillet.jetstream.consumer.common import _parse_time_ns
        from rillet.jetstream.consumer.reset import TYPE, _seq
        cfg = self._cfg()
        pol = cfg.get("deliver_policy") or "all"
        try:
            seq = _seq(bytes(msg[hdr:]) if hdr > 0 else bytes(msg))
            if seq == 0:
                seq = self.asflr + 1
            elif pol == "by_start_sequence" and seq < int(cfg.get("opt_start_seq") or 0):
                raise ApiError.make("CONSUMER_INVALID_RESET", err="below start seq")
            elif pol == "by_start_time" and seq < self.mstore.get_seq_from_time(
                    _parse_time_ns(cfg.get("opt_start_time"))):
                raise ApiError.make("CONSUMER_INVALID_RESET", err="below start time")
            elif pol not in ("all", "by_start_sequence", "by_start_time"):
                raise ApiError.make("CONSUMER_INVALID_RESET", err="not allowed")
        except ApiError as e:
            body = json.dumps({"type": TYPE, "error": e.to_dict(), "reset_seq": 0}, separators=(",", ":")).encode()
            self.aic.publish(reply, None, body)
            return
        r = reply.decode("utf-8", "surrogateescape")
        self.rsm.add(r)
        self._propose(ge.ResetSeq(max(seq, 1), r).encode())

    def _on_cluster_info(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int,
                         msg: bytes) -> None:
        """``$JSC.CI.<account>.<stream>.<consumer>``: a server gathering consumer infos (CONSUMER.LIST)."""
        if self._lead is not None and reply:  # (the stored config: nats-server adds no dynamic metadata here)
            self._answer(reply, self._info_doc(api=False))

    def _on_stepdown(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
        got = self._api_request(reply, hdr, msg)
        if got is None:
            return
        doc: dict[str, Any] = {"type": "io.nats.jetstream.api.v1.consumer_leader_stepdown_response"}
        if self.solo:  # (nats-server: a consumer without a group answers success, and stays)
            self._answer(reply, {**doc, "success": True})
            return
        preferred, err = stepdown_target(got[1], self.peer, self.raft.peers)
        if err is not None:
            doc["error"] = err.to_dict()
        else:
            if not self.transfer_away(preferred):
                self.raft.step_down()
                self._send([])
            doc["success"] = True
        self._answer(reply, doc)
