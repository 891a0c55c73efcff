"""Leading a Go cluster's stream group from Rillet: nats-server's stream leader, for ``GoStreamReplica``.

``StreamLeading`` is the leader half of rillet.jetstream.cluster.gostream.GoStreamReplica (a mixin: the replica's
store, RAFT peer and apply path are the replica's). While the replica's ``GoRaftPeer`` leads the group:

* publishes to the stream's subjects (in its account; the Go replicas stay silent for another leader, as for a
  Go one) are checked as nats-server's stream leader checks them before proposing (``_check_publish``: sealed,
  sizes, ``Nats-Expected-Stream``, TTLs and the source header where the stream does not allow them, the
  ``Nats-Msg-Id`` duplicate window -- applied, in flight, or left in the log by the previous leader --, the
  expected last message id, last sequence and last subject sequence, rollups, and discard-new limits counted
  over the store plus what is in flight), proposed as stream message entries in nats-server's encoding
  (``lseq`` the last sequence proposed, counting failed proposals) and acknowledged only once committed and
  stored; the subject delete markers the store asks for as it expires messages are proposed too;
* ``$JSC.SYNC`` catch-ups are served from the store; ``STREAM.INFO`` (cluster info naming this server leader and
  the Go replicas), ``STREAM.MSG.GET`` (from the store), ``STREAM.MSG.DELETE`` and ``STREAM.PURGE`` (proposed in
  nats-server's entries, answered once applied) and ``STREAM.LEADER.STEPDOWN`` (to the preferred peer, else a
  current Go peer first) are answered; a ``STREAM.UPDATE`` (the meta leader proposes the updated assignment) is
  applied (the store's limits on every replica, the subjects taken) and answered by the leader (``reassigned``);
* losing the leadership (a higher term seen, a transfer, no quorum for 10 s) stops all of it at once: what was
  proposed and commits under the next leader is acknowledged by that leader, as nats-server's.

How the replica comes to lead: a leadership transfer naming it (``STREAM.LEADER.STEPDOWN`` with a preferred
server), always; and, with ``feature_flags { rillet_go_meta_lead: true }`` (``stand_in_group``), as
nats-server's members do: it stands when it heard no leader for an election timeout (4-9 s; never with an empty
log or while its store is catching up), appends its peer state first once elected, and steps down without a
quorum. A change of the group's peers (a server removed or replaced, a group short of replicas) is carried
out by the leader as nats-server 2.15's does (rillet.jetstream.cluster.gomigrate.GroupMigration).

Not here: publishes with counters (``Nats-Incr``), schedules and atomic or fast batches are refused with an error
that says so; account limits are not checked before proposing; leading a consumer group.
(Direct gets are answered by every current replica, leader or not: rillet.jetstream.cluster.godirect.)
"""
from __future__ import annotations

import json
import random
import time
from typing import Any, Optional

from rillet.gocompat.gotime import format_time
from rillet.jetstream import headers as H
from rillet.jetstream.cluster import gowire as ge
from rillet.jetstream.cluster.golead import (LEADER, account_request, answer_json, cluster_info, request_info,
                                            stepdown_target, with_dynamic_metadata)
from rillet.jetstream.cluster.gometa import ELECTION_TIMEOUT
from rillet.jetstream.cluster.gomigrate import STREAM_RECONCILE, GroupMigration, reconcile_doc
from rillet.jetstream.errors import ApiError
from rillet.jetstream.store.base import file_msg_size, mem_msg_size
from rillet.subjects.validate import is_valid_subject, subject_matches_filter
from rillet.raft import gowire as gw

__all__ = ["StreamLeading"]

_UNSUPPORTED = ("Nats-Batch-Id", "Nats-Schedule", "Nats-Schedule-Next", "Nats-Scheduler")



def store_state_doc(store: Any) -> dict[str, Any]:
    """A replica store's state in nats-server's StreamState JSON, in its field order (the counts of subjects and
    deleted sequences only when there are some), without ``consumer_count``: what the stream leader's info and
    every replica's state answer (gostream) carry."""
    st = store.state()
    first = 0 if st.last_seq == 0 and st.msgs == 0 and st.first_seq <= 1 else st.first_seq
    doc: dict[str, Any] = {"messages": st.msgs, "bytes": st.bytes, "first_seq": first,
                           "first_ts": format_time(st.first_ts), "last_seq": st.last_seq,
                           "last_ts": format_time(st.last_ts)}
    if st.num_subjects:
        doc["num_subjects"] = st.num_subjects
    if st.num_deleted:
        doc["num_deleted"] = st.num_deleted
    return doc

class StreamLeading(GroupMigration):
    """The stream leader's duties of a ``GoStreamReplica`` (see the module docstring)."""

    create_reply = ""  # a new group's create, answered by its first leader (host_streams sets it)
    _pub_subs: list = []  # while leading: (client, subscription) of the stream's subjects (in _lead_subs too)

    # -- standing for the group's leadership (``rillet_go_meta_lead``) ----------------------------------------
    def stand_in_group(self) -> None:
        """Take part in the group's elections as nats-server's stream replicas do (call before ``start``): stand
        after an election timeout without a leader, at once when a transfer names this server; once elected,
        append our peer state first (nats-server's new leader does: it commits what earlier terms left in the
        log) and step down when no quorum answered for 10 s. Unlike the meta group's leader, a stream group's
        does not add peers that answer it: its membership is the meta layer's."""
        self.standing = True
        self.raft.lead_on_transfer = True
        self.raft.announce_peers = True
        self.raft.add_unknown_peers = False

    def _on_elect_timer(self) -> None:
        if self.standing and (self._snap is not None or self.raft.catchup is not None):
            # (a store or log still catching up does not stand: it would lead without what it has not got)
            self._elect_timer = None
            self._touch(random.uniform(*ELECTION_TIMEOUT))
            return
        super()._on_elect_timer()

    def _on_proposal(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
        if subject.startswith(b"$NRG.P."):
            return  # (only the meta group's followers forward entries; a stream message must come with its checks)
        super()._on_proposal(sub, c, subject, reply, hdr, msg)

    # -- leading the stream group (``may_lead``, see host_streams) ---------------------------------------------
    def _send(self, outs: list) -> None:
        super()._send(outs)
        leading = self.raft.role == LEADER and self.ic is not None and bool(self._subs)
        if leading and self._lead_subs is None:
            self._start_leading()
        elif not leading and self._lead_subs is not None:
            self._stop_leading()

    def reassigned(self, assignment: dict) -> None:
        """The meta group updated this stream's assignment: its config (a ``STREAM.UPDATE``: every replica
        applies the new limits to its store, a leader takes the new subjects and answers the update, as
        nats-server's processClusterUpdateStream), or its group (peers removed, added or desired: a leader
        carries a change of peers out, gomigrate.GroupMigration)."""
        old = self.assignment.get("stream") or {}
        self.assignment = assignment
        new = assignment.get("stream") or {}
        if new != old:
            self._config_updated(old, new)
        self._migration_check()
        self._answer_update(assignment)

    def _config_updated(self, old: dict, new: dict) -> None:
        """A new configuration, as a nats-server replica's update applies it: the store's limits (messages past
        a lowered limit go at once, on every replica alike) and, while leading, the subjects taken."""
        from rillet.jetstream.cluster.gostream import _store_config
        self.store.update_config(_store_config(new, self.store.cfg.storage))
        self._arm_expiry()  # (max_age or TTLs changed)
        direct = getattr(self, "direct", None)
        if direct is not None:
            direct.check()  # (allow_direct turned on or off: before the leader answers, as nats-server's)
        subjects = new.get("subjects") or [self.name]
        if self._lead_subs is None or subjects == (old.get("subjects") or [self.name]):
            return
        for client, sub in self._pub_subs:
            client.remove_sub(sub)
        gone = {id(s) for _c, s in self._pub_subs}
        self._pub_subs = [(self.aic, self.aic.subscribe(subj, self._on_publish)) for subj in subjects]
        self._lead_subs = [(c, s) for c, s in self._lead_subs if id(s) not in gone] + self._pub_subs

    def _answer_update(self, assignment: dict) -> None:
        """The leader answers the update the assignment carries (its reply), once, with the stream's info (the
        config as updated, the state after it, the cluster), as nats-server's stream leader; not while the meta
        log is being caught up (an update of the past)."""
        reply = str(assignment.get("reply") or "")
        if not reply or not self._mig_leading():
            return
        member = self.member
        if member is not None and member.raft.catchup is not None:
            return
        doc = self._info_doc()
        for k in ("total", "offset", "limit"):
            doc.pop(k, None)
        doc["type"] = "io.nats.jetstream.api.v1.stream_update_response"
        self.ic.publish(reply.encode(), None, json.dumps(doc, separators=(",", ":")).encode())

    # -- a change of the group's peers (gomigrate: nats-server 2.15's desired-state steps) --------------------
    def _mig_replicas(self) -> int:
        return int((self.assignment.get("stream") or {}).get("num_replicas") or 1)

    def _mig_subject(self) -> str:
        return STREAM_RECONCILE

    def _mig_reconcile_doc(self, upd: dict) -> dict:
        return reconcile_doc(upd, account=self.account, stream=self.name)

    def _mig_leading(self) -> bool:
        return self._lead_subs is not None and self.raft.role == LEADER

    def _mig_blocked_by(self) -> str:
        """A consumer of the stream still on a peer the stream leaves (the stream's old peers stay until its
        consumers moved, as nats-server's leader waits for them)."""
        desired = ((self.assignment.get("group") or {}).get("desired") or {}).get("peers") or []
        meta = getattr(self.member, "state", None)
        for name, ca in sorted(((meta.consumers.get((self.account, self.name)) or {}) if meta else {}).items()):
            if any(p not in desired for p in (ca.get("group") or {}).get("peers") or []):
                return name
        return ""

    def _start_leading(self) -> None:
        """As nats-server's stream leader: take the stream's subjects in its account (publishes are proposed
        as stream message entries and acknowledged once committed and stored), serve ``$JSC.SYNC`` catch-ups
        and the stream's leader step-down request."""
        acc = self.server.accounts.get(self.account)
        if acc is None:
            self._warn_once("noacc", f"JetStream stream '{self.account} > {self.name}': no such account here; "
                                     "not leading")
            self.transfer_away()
            return
        self.aic = self.server.internal_client(acc, f"go stream leader {self.name}")
        # the last sequence proposed so far: what is stored, and any stream message still in the log above it
        self.clseq = self.store.state().last_seq + self.clfs
        self._inflight_ids.clear()
        self._inflight_subj.clear()
        for _t, es in self.raft._log[max(self.raft.applied - self.raft.base_index, 0):]:
            for e in es:
                if e.type == gw.ENTRY_NORMAL and e.data and e.data[0] in (ge.OP_STREAM_MSG,
                                                                          ge.OP_COMPRESSED_STREAM_MSG):
                    x = ge.decode_entry(e.data)
                    x = x.msg if isinstance(x, ge.CompressedStreamMsg) else x
                    self.clseq = max(self.clseq, x.lseq + 1)
                    # (a message id of the previous leader's, not applied yet, is a duplicate already)
                    mid = H.get_header(bytes(x.hdr), H.MSG_ID) if x.hdr else None
                    if mid:
                        self._inflight_ids[mid] = x.lseq + 1 - self.clfs
                    self._inflight_add(x.subject, self._msg_size(x.subject, bytes(x.hdr), bytes(x.msg)))
        subjects = self.assignment["stream"].get("subjects") or [self.name]
        self._pub_subs = [(self.aic, self.aic.subscribe(subj, self._on_publish)) for subj in subjects]
        self._lead_subs = list(self._pub_subs)
        sync = str(self.assignment.get("sync") or "")
        if sync:
            self._lead_subs.append((self.ic, self.ic.subscribe(sync, self._on_sync)))
        self._lead_subs.append((self.ic, self.ic.subscribe(f"$JS.API.STREAM.INFO.{self.name}", self._on_info)))
        self._lead_subs.append((self.ic, self.ic.subscribe(f"$JS.API.STREAM.MSG.DELETE.{self.name}",
                                                           self._on_msg_delete)))
        self._lead_subs.append((self.ic, self.ic.subscribe(f"$JS.API.STREAM.MSG.GET.{self.name}", self._on_msg_get)))
        self._lead_subs.append((self.ic, self.ic.subscribe(f"$JS.API.STREAM.PURGE.{self.name}", self._on_purge)))
        self._lead_subs.append((self.ic, self.ic.subscribe(f"$JS.API.STREAM.LEADER.STEPDOWN.{self.name}",
                                                           self._on_stepdown)))
        self.log.notice(f"JetStream: leading stream '{self.account} > {self.name}' [{self.group}] "
                        f"(term {self.raft.term})")
        reply = self.create_reply
        if reply:
            # (a new group led here from its start: the create is answered by its first leader, as nats-server's)
            self.create_reply = ""
            doc = self._info_doc()
            for k in ("total", "offset", "limit"):
                doc.pop(k, None)
            doc["type"] = "io.nats.jetstream.api.v1.stream_create_response"
            doc["did_create"] = True
            self.ic.publish(reply.encode(), None, json.dumps(doc, separators=(",", ":")).encode())
        self._migration_check()

    def _stop_leading(self) -> None:
        for client, sub in self._lead_subs or ():
            client.remove_sub(sub)
        self._lead_subs = None
        self._pub_subs = []
        self._inflight_subj.clear()
        self.log.notice(f"JetStream: no longer leading stream '{self.account} > {self.name}' [{self.group}]")

    def _go_peers(self) -> set[str]:
        """The peers of the group that are Go servers (not Rillet ones: see GoMetaMember.rillet_peers)."""
        rillet = self.member.rillet_peers if self.member is not None else set()
        return {p for p in self.raft.peers if p != self.peer and p not in rillet}

    def _pass_target(self) -> Optional[str]:
        """A hand-over goes to a Go peer holding our whole log (a Rillet peer would lead with the same limits)."""
        return next((p for p in sorted(self._go_peers()) if self.raft.current(p)), None)

    def transfer_away(self, preferred: str = "") -> bool:
        """Hand the leadership to ``preferred`` (a peer id) or to the peer that acknowledged the most of our log
        in this term (under load none holds all of it at any instant: as nats-server, a peer that answers
        is chosen, and it campaigns once the transfer entry reaches it); False if no peer answered. A peer
        silent for the last few heartbeats (down since it answered) is not chosen unless no other answered."""
        answered = {p: i for p, i in self.raft.match.items() if p != self.peer}
        now = time.monotonic()
        recent = {p: i for p, i in answered.items() if now - self.raft.last_seen.get(p, 0.0) < 3.0}
        if not preferred and recent:
            answered = recent
        if preferred:
            peer = preferred if preferred in answered else None
        else:
            go = {p: i for p, i in answered.items() if p in self._go_peers()}  # (a Go peer first)
            pick = go or answered
            peer = max(sorted(pick), key=lambda p: pick[p], default=None)
        if peer is None:
            return False
        self.passed += 1
        self._send(self.raft.transfer(peer, force=True))
        return True

    def _pub_ack(self, seq: int, duplicate: bool = False) -> bytes:
        # (nats-server's bytes: its template names the JetStream domain of the server when one is set; its error
        # answers do not)
        domain = str(getattr(getattr(getattr(self.server, "opts", None), "jetstream", None), "domain", "") or "")
        return b'{"stream":%s,%s"seq":%d%s}' % (
            json.dumps(self.name).encode(), b'"domain":%s,' % json.dumps(domain).encode() if domain else b"", seq,
            b',"duplicate": true' if duplicate else b"")

    def _pub_error(self, reply: bytes, e: ApiError) -> None:
        if reply:
            self.aic.publish(reply, None, json.dumps({"error": e.to_dict(), "stream": self.name, "seq": 0},
                                                      separators=(",", ":")).encode())

    def _dedup(self, mid: str) -> Optional[int]:
        window = int(self.assignment["stream"].get("duplicate_window") or 120_000_000_000)
        if mid in self._inflight_ids:
            return self._inflight_ids[mid]
        hit = self.ddmap.get(mid)
        if hit is None:
            return None
        if time.time_ns() - hit[1] > window:
            del self.ddmap[mid]
            return None
        return hit[0]

    def _msg_size(self, subj: str, h: bytes, data: bytes) -> int:
        """The bytes a message counts for in the stream's limits (nats-server's accounting, by storage)."""
        size = file_msg_size if self.assignment["stream"].get("storage", "file") == "file" else mem_msg_size
        return size(subj, h, data)

    def _inflight_add(self, subj: str, size: int, sign: int = 1) -> None:
        """What is proposed and not yet applied, by subject (ops, bytes): the discard-new and last subject
        sequence checks count it, as nats-server's leader counts its in-flight map."""
        have = self._inflight_subj.get(subj)
        if have is None:
            if sign > 0:
                self._inflight_subj[subj] = [1, size]
            return
        have[0] += sign
        have[1] += sign * size
        if have[0] <= 0:
            del self._inflight_subj[subj]

    def _check_publish(self, subj: str, h: bytes, data: bytes) -> tuple[str, Optional[int]]:
        """nats-server's stream leader's checks before it proposes a publish (processClusteredInboundMsg and the
        pre-proposal header checks, in their order). Returns the message id and, for a duplicate, the sequence
        it was stored at; raises ApiError when the publish is refused."""
        cfg = self.assignment["stream"]
        if cfg.get("sealed"):
            raise ApiError.make("STREAM_SEALED")
        mms = int(cfg.get("max_msg_size") or -1)
        if mms > 0 and len(h) + len(data) > mms:
            raise ApiError.make("STREAM_MESSAGE_EXCEEDS_MAXIMUM")
        mid = ""
        incr = H.get_header(h, "Nats-Incr") if h else None
        if h:
            if len(h) > 0xFFFF:
                raise ApiError.make("STREAM_HEADER_EXCEEDS_MAXIMUM")
            if incr is not None:
                if not cfg.get("allow_msg_counter"):
                    raise ApiError.make("MESSAGE_INCR_DISABLED")
                raise ApiError.make("STREAM_STORE_FAILED", err="Nats-Incr is not supported by a Rillet leader "
                                                               "of a Go stream group yet")
            exp = H.get_header(h, H.EXPECTED_STREAM)
            if exp and exp != self.name:
                raise ApiError.make("STREAM_NOT_MATCH")
            ttl = H.get_header(h, H.TTL)
            if ttl is not None and ttl.strip():
                from rillet.jetstream.stream import parse_ttl
                try:
                    bad = parse_ttl(ttl) == 0
                except ValueError:
                    bad = True
                if not cfg.get("allow_msg_ttl"):
                    raise ApiError.make("MESSAGE_TTL_DISABLED")
                if bad:
                    raise ApiError.make("MESSAGE_TTL_INVALID")
            mid = H.get_header(h, H.MSG_ID) or ""
            if mid:
                dup = self._dedup(mid)
                if dup is not None:
                    return mid, dup
            v = H.get_header(h, H.EXPECTED_LAST_MSG_ID)
            if v:
                # (checked here, before proposing: nats-server 2.15.1's replicas check it only as they apply
                # the message, and a mismatch there stops the stream on the Go replicas with a write error)
                last_id = self._proposed_lmsgid if self._inflight_subj else self.lmsgid
                if v != last_id:
                    raise ApiError.make("STREAM_WRONG_LAST_MSG_ID", id=last_id)
            if H.get_header(h, "Nats-Stream-Source") is not None:
                raise ApiError.make("MESSAGE_SOURCE_HDR_NOT_ALLOWED")
            last = self.clseq - self.clfs
            v = H.get_header(h, H.EXPECTED_LAST_SEQ)
            if v is not None and (not v.isdigit() or int(v) != last):
                raise ApiError.make("STREAM_WRONG_LAST_SEQUENCE", seq=last)
            v = H.get_header(h, H.EXPECTED_LAST_SUBJ_SEQ)
            if v:
                check = H.get_header(h, H.EXPECTED_LAST_SUBJ_SEQ_SUBJ) or subj
                if check in self._inflight_subj or any(subject_matches_filter(s, check) for s in self._inflight_subj):
                    # (a message on that subject is proposed and not yet stored: as nats-server, refused)
                    raise ApiError.make("STREAM_WRONG_LAST_SEQUENCE_CONSTANT")
                lm = self.store.load_last_msg(check)
                have = lm.seq if lm is not None else 0
                if not v.isdigit() or int(v) != have:
                    raise ApiError.make("STREAM_WRONG_LAST_SEQUENCE", seq=have)
            elif H.get_header(h, H.EXPECTED_LAST_SUBJ_SEQ_SUBJ):
                raise ApiError.make("STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_INVALID")
            for unsupported in _UNSUPPORTED:
                if H.get_header(h, unsupported) is not None:
                    raise ApiError.make("STREAM_STORE_FAILED",
                                        err=f"{unsupported} is not supported by a Rillet leader of a Go stream "
                                            "group yet")
            v = H.get_header(h, H.ROLLUP)
            if v is not None:
                if not cfg.get("allow_rollup_hdrs") or cfg.get("deny_purge"):
                    raise ApiError.make("STREAM_ROLLUP_FAILED", err="rollup not permitted")
                if v not in ("sub", "all"):
                    raise ApiError.make("STREAM_ROLLUP_FAILED", err=f"rollup value invalid: {json.dumps(v)}")
        if incr is None and cfg.get("allow_msg_counter"):
            raise ApiError.make("MESSAGE_INCR_MISSING")
        if cfg.get("discard") == "new":
            self._check_discard_new(cfg, subj, h, data)
        return mid, None

    def _check_discard_new(self, cfg: dict, subj: str, h: bytes, data: bytes) -> None:
        """Discard-new limits over the store plus what is in flight and this message: refused here, before a
        proposal, so that every replica stores what is proposed (as nats-server's leader)."""
        max_msgs, max_bytes = int(cfg.get("max_msgs") or -1), int(cfg.get("max_bytes") or -1)
        if max_msgs > 0 or max_bytes > 0:
            st = self.store.state()
            msgs = st.msgs + 1 + sum(i[0] for i in self._inflight_subj.values())
            size = st.bytes + self._msg_size(subj, h, data) + sum(i[1] for i in self._inflight_subj.values())
            if max_msgs > 0 and msgs > max_msgs:
                raise ApiError.make("STREAM_STORE_FAILED", err="maximum messages exceeded")
            if max_bytes > 0 and size > max_bytes:
                raise ApiError.make("STREAM_STORE_FAILED", err="maximum bytes exceeded")
        per = int(cfg.get("max_msgs_per_subject") or -1)
        if cfg.get("discard_new_per_subject") and per > 0 and not (h and H.get_header(h, H.ROLLUP)):
            n = self.store.subjects_totals(subj).get(subj, 0) + 1 + (self._inflight_subj.get(subj) or (0,))[0]
            if n > per:
                raise ApiError.make("STREAM_STORE_FAILED", err="maximum messages per subject exceeded")

    def _on_publish(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
        if self._lead_subs is None or self.raft.role != LEADER:
            return
        h = bytes(msg[:hdr]) if hdr > 0 else b""
        data = bytes(msg[hdr:]) if hdr > 0 else bytes(msg)
        subj = subject.decode("utf-8", "surrogateescape")
        try:
            mid, dup = self._check_publish(subj, h, data)
        except ApiError as e:
            self._pub_error(reply, e)
            return
        if dup is not None:
            if reply:
                self.aic.publish(reply, None, self._pub_ack(dup, duplicate=True))
            return
        self._propose_msg(subj, reply.decode("utf-8", "surrogateescape") if reply else "", h, data, mid)

    def _propose_msg(self, subj: str, reply: str, h: bytes, data: bytes, mid: str = "") -> None:
        """A stream message entry at the next sequence (nats-server's encoding, compressed when it pays)."""
        sm = ge.StreamMsg(self.clseq, time.time_ns(), subj, reply, h, data)
        self.clseq += 1
        self._proposed_lmsgid = mid
        if mid:
            self._inflight_ids[mid] = self.clseq - self.clfs
        self._inflight_add(subj, self._msg_size(subj, h, data))
        self.published += 1
        self.propose([gw.Entry(gw.ENTRY_NORMAL, sm.encode_maybe_compressed())])

    def _on_sync(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
        """A replica's catch-up request: the stored messages of the range (gaps as delete ranges), each with a
        ``$JSC.ACK`` reply, then an empty message."""
        if not reply or self._lead_subs is None:
            return
        try:
            req = json.loads(bytes(msg[hdr:]) if hdr > 0 else bytes(msg))
            first, last = int(req["first_seq"]), int(req["last_seq"])
        except (ValueError, KeyError, TypeError) as e:
            self._warn_once(f"sync:{e}", f"JetStream stream '{self.account} > {self.name}': bad catch-up request: {e}")
            return
        first = max(first, self.store.state().first_seq)
        last = min(last, self.store.state().last_seq)
        gap = 0
        ack = f"$JSC.ACK.{gw.random_token(8)}".encode()
        for seq in range(first, last + 1):
            sm = self.store.load_msg(seq)
            if sm is None:
                gap += 1
                continue
            if gap:
                self.ic.publish(reply, None, ge.encode_json_entry(ge.OP_DELETE_RANGE, {"first": seq - gap, "num": gap}))
                gap = 0
            body = ge.StreamMsg(seq, sm.ts, sm.subject, "", bytes(sm.hdr or b""), bytes(sm.data)).encode_maybe_compressed()
            self.ic.publish(reply, ack + b".%d" % len(body), body)
        if gap:
            self.ic.publish(reply, None, ge.encode_json_entry(ge.OP_DELETE_RANGE, {"first": last + 1 - gap, "num": gap}))
        self.ic.publish(reply, None, b"")

    def _peer_names(self) -> dict[str, str]:
        """Peer id -> server name, for the servers this one has routes to (and itself)."""
        # (servers seen over a route earlier, kept by gometa.attach_to_routes: a server down is named too, as
        # nats-server names it from what it learnt)
        names = dict(getattr(self.server, "go_peer_names", None) or {})
        names[self.peer] = self.server.name
        cl = getattr(self.server, "cluster", None)
        for rc in (getattr(cl, "routes", None) or {}).values():
            n = getattr(rc, "remote_name", "")
            if n:
                names[gw.peer_id(n)] = n
        return names

    def _on_info(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
        """``$JS.API.STREAM.INFO.<stream>``: as nats-server, the stream leader answers (config, state, cluster)."""
        if self._lead_subs is None or hdr <= 0 or not reply:
            return
        ci = request_info(bytes(msg[:hdr]))
        if ci is None or ci.get("acc") != self.account:
            return
        self.ic.publish(reply, None, json.dumps(self._info_doc(), separators=(",", ":")).encode())

    def _info_doc(self) -> dict[str, Any]:
        """The stream's info as its leader gives it (``STREAM.INFO``)."""
        state = store_state_doc(self.store)
        meta = getattr(self.member, "state", None)
        state["consumer_count"] = len(meta.consumers.get((self.account, self.name)) or {}) if meta is not None else 0
        return {"type": "io.nats.jetstream.api.v1.stream_info_response", "total": 0, "offset": 0, "limit": 0,
                "config": with_dynamic_metadata(self.assignment["stream"]),
                "created": self.assignment.get("created") or "",
                "state": state,
                "cluster": cluster_info(self.server, self.assignment, self.raft, self.peer, self._peer_names()),
                "ts": format_time(time.time_ns())}

    def _on_msg_delete(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int,
                       msg: bytes) -> None:
        """``$JS.API.STREAM.MSG.DELETE.<stream>``: proposed (Go's delete entry, with the request's client, subject
        and reply); answered once applied (``_apply``)."""
        if self._lead_subs is None or hdr <= 0:
            return
        ci = request_info(bytes(msg[:hdr]))
        if ci is None or ci.get("acc") != self.account:
            return
        try:
            req = json.loads(bytes(msg[hdr:]) or b"{}")
            if not isinstance(req, dict) or not isinstance(req.get("seq", 0), int):
                raise ValueError("not a delete request")
        except ValueError as e:
            if reply:
                self.ic.publish(reply, None, json.dumps(
                    {"type": "io.nats.jetstream.api.v1.stream_msg_delete_response",
                     "error": ApiError.make("INVALID_JSON", err=str(e)).to_dict()}, separators=(",", ":")).encode())
            return
        doc: dict[str, Any] = {"client": {k: v for k, v in ci.items() if k not in ("jwt", "issuer_key")},
                               "stream": self.name, "seq": int(req.get("seq") or 0)}
        if req.get("no_erase"):
            doc["no_erase"] = True
        doc["subject"] = subject.decode("utf-8", "surrogateescape")
        doc["reply"] = reply.decode("utf-8", "surrogateescape") if reply else ""
        self.propose([gw.Entry(gw.ENTRY_NORMAL, ge.encode_json_entry(ge.OP_DELETE_MSG, doc))])

    def _api_request(self, reply: Optional[bytes], hdr: int, msg: bytes) -> Optional[tuple[dict, bytes]]:
        """(client info, body) of a stream API request this leader answers: one of the stream's account, with
        the requester's info (``Nats-Request-Info``) and somewhere to answer; None otherwise."""
        return None if self._lead_subs is None else account_request(self.account, reply, hdr, msg)

    def _answer(self, reply: bytes, doc: dict) -> None:
        answer_json(self.ic, reply, doc)

    def _on_msg_get(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
        """``$JS.API.STREAM.MSG.GET.<stream>``: as nats-server's stream leader, from the store (by sequence, last
        or next for a subject, or from a start time; the same checks and answers as Rillet's own JetStream)."""
        got = self._api_request(reply, hdr, msg)
        if got is None:
            return
        from rillet.jetstream.api import codec as apijson
        from rillet.jetstream.api import types as A
        from rillet.jetstream.api.direct import DirectApi, stored_message_json
        typ = "io.nats.jetstream.api.v1.stream_msg_get_response"
        body = got[1]
        try:
            if not body.strip() or body.strip() == b"{}":
                raise ApiError.make("BAD_REQUEST")
            req = apijson.go_decode(body, A.JSApiMsgGetRequest, strict=False)
            DirectApi._check_get(req)
            m = DirectApi._get(None, self, req)  # (reads self.store only)
            if m is None:
                raise ApiError.make("NO_MESSAGE_FOUND")
        except ApiError as e:
            self._answer(reply, {"type": typ, "error": e.to_dict()})
            return
        self._answer(reply, {"type": typ, "message": stored_message_json(m, req.no_hdr)})

    def _on_purge(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
        """``$JS.API.STREAM.PURGE.<stream>``: proposed as nats-server proposes it (its purge entry: client, stream,
        the last sequence now, subject, reply and the request when there is one); answered once applied."""
        got = self._api_request(reply, hdr, msg)
        if got is None:
            return
        ci, body = got
        typ = "io.nats.jetstream.api.v1.stream_purge_response"
        cfg = self.assignment["stream"]
        request: Optional[dict] = None
        try:
            if body.strip()[:1] == b"{":
                from rillet.jetstream.api import codec as apijson
                from rillet.jetstream.api import types as A
                pr = apijson.go_decode(body, A.JSApiStreamPurgeRequest, strict=False)
                if pr.seq and pr.keep:
                    raise ApiError.make("BAD_REQUEST")  # (nats-server: sequence and keep exclude each other)
                request = {k: v for k, v in (("seq", pr.seq), ("filter", pr.filter), ("keep", pr.keep)) if v}
                if pr.filter and not is_valid_subject(pr.filter):
                    raise ApiError.make("STREAM_PURGE_FAILED", err="invalid subject")
            if cfg.get("sealed"):
                raise ApiError.make("STREAM_SEALED")
            if cfg.get("deny_purge"):
                raise ApiError.make("STREAM_PURGE_FAILED", err="stream purge not permitted")
        except ApiError as e:
            self._answer(reply, {"type": typ, "error": e.to_dict()})
            return
        doc: dict[str, Any] = {"client": {k: v for k, v in ci.items() if k not in ("jwt", "issuer_key")},
                               "stream": self.name, "last_seq": self.store.state().last_seq,
                               "subject": subject.decode("utf-8", "surrogateescape"),
                               "reply": reply.decode("utf-8", "surrogateescape")}
        if request is not None:
            doc["request"] = request
        self.propose([gw.Entry(gw.ENTRY_NORMAL, ge.encode_json_entry(ge.OP_PURGE_STREAM, doc))])

    def _on_stepdown(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
        if self._lead_subs is None or hdr <= 0:
            return
        ci = request_info(bytes(msg[:hdr]))
        if ci is None or ci.get("acc") != self.account:
            return
        preferred, err = stepdown_target(bytes(msg[hdr:]), self.peer, self.raft.peers)
        doc: dict[str, Any] = {"type": "io.nats.jetstream.api.v1.stream_leader_stepdown_response"}
        if err is not None:
            doc["error"] = err.to_dict()
        else:
            if not self.transfer_away(preferred):
                # (as nats-server: no current peer to name, the leader steps down all the same)
                self.raft.role, self.raft.leader = "follower", ""
                self._send([])
            doc["success"] = True
        if reply:
            self.ic.publish(reply, None, json.dumps(doc, separators=(",", ":")).encode())

