"""Replicated streams and consumers on one server: ``ClusteredStreams(server, js)``.

The meta layer (meta.py) calls ``stream_assigned``/``stream_removed``/``consumer_assigned``/
``consumer_removed`` as it applies assignments. For a stream assignment naming this server, a replica is
built: a ``Stream`` whose log is a ``RaftLog`` (log.py) over a ``RaftGroup`` (group.py) named by the
assignment. Every replica applies the committed entries to its own store; only the stream leader has the
stream's subscriptions (its subjects, direct gets, the catch-up subject) and sends PubAcks, after the
entry is committed and applied.

On disk: the stream's store under ``<store_dir>/jetstream/<account>/streams/<stream>/store`` (as a
single server, but no ``meta.json``: the assignment is the stream's config, so a restarted server does
not recover it as a single-server stream) and the group's WAL under ``<store_dir>/jetstream/_raft/
<group>/`` (nats-server: ``$SYS/_js_/<group>/``).

Consumers (v1, documented choice): a consumer's entries (C_START, C_DELIVERED, C_ACK, ...) go through its
*stream's* group, tagged with the consumer name (``RaftLog.sublog``), so the consumer leader is the stream
leader and ``CONSUMER.LEADER.STEPDOWN`` moves the stream's leadership too. Every replica holds the
consumer's replicated state (a ``Consumer`` object that is not started); the leader runs the delivery
engine: on gaining leadership a fresh engine takes over the replicated state and starts (pending messages
are redelivered once their ack wait runs out: at least once); on losing it the engine stops and a
follower object keeps the state.

Recovery: the group re-applies the entries in its WAL after a restart; a file store already holds what
they stored. ``_filter`` skips what the store already has: MSG/BATCH/MIRROR entries at or below the
store's last sequence, and any other stream entry while the store is ahead of the messages the replayed
entries stored so far (it was applied before the store got those later messages).

Snapshots (RAFT compaction, every ``COMPACT_EVERY`` applied entries): msgpack ``{first, last, deleted,
consumers}`` (the store's first/last sequences and the deleted sequences between, as nats-server's stream
snapshot, plus each consumer's replicated state). A replica given a snapshot whose ``last`` is beyond its
store holds the group's applies (``RaftLog.hold``) and fetches the missing messages from the stream
leader in chunks: a request on the stream's sync subject (``$JSC.SYNC.<x>`` of the assignment; only the
leader subscribes) with JSON ``{"from": seq, "to": seq}`` is answered with msgpack ``[first, [[seq,
subject, hdr, data, ts], ...]]`` (at most ``SYNC_MSGS`` messages / ``SYNC_BYTES`` bytes; ``first`` the
leader's first sequence: what lies below it is gone). Gaps are skipped sequences (deleted). Once at
``last``, the snapshot's first and deletes are applied and the held entries follow.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from typing import Any

import msgspec

from rillet.jetstream.cluster import monitor
from rillet.jetstream.cluster.log import RaftLog
from rillet.jetstream.cluster.peers import peer_id
from rillet.jetstream.errors import ApiError
from rillet.jetstream.log import Entry, NotLeader

COMPACT_EVERY = 8192  # applied entries between snapshots
SYNC_MSGS = 256  # messages per catch-up answer
SYNC_BYTES = 1 << 20
SYNC_TIMEOUT = 2.0  # seconds before a catch-up request is sent again

T = "io.nats.jetstream.api.v1."
STREAM_KEYS = frozenset(("STREAM.INFO", "STREAM.MSG.GET", "STREAM.MSG.DELETE", "STREAM.PURGE",
                         "STREAM.LEADER.STEPDOWN", "STREAM.SNAPSHOT"))
CONSUMER_KEYS = frozenset(("CONSUMER.INFO", "CONSUMER.LEADER.STEPDOWN", "CONSUMER.PAUSE", "CONSUMER.UNPIN"))

_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder()


class StreamReplica:
    """One stream's replica on this server: the Stream, its RaftLog and RaftGroup, its consumers."""

    def __init__(self, cs: "ClusteredStreams", sa: Any, jsa: Any) -> None:
        from rillet.jetstream.api import stream_config_from_dict
        from rillet.jetstream.cluster.group import RaftGroup
        from rillet.jetstream.store.filestore import make_dirs_durable
        from rillet.jetstream.storeopen import open_store
        from rillet.jetstream.stream import Stream
        from rillet.gotime import format_time
        self.cs = cs
        self.sa = sa
        self.jsa = jsa
        js = cs.js
        cfg = stream_config_from_dict(sa.config)
        sdir = jsa.stream_dir(cfg.name)
        make_dirs_durable(sdir)
        store = open_store(cfg, sdir, js)
        self.stream = st = Stream(jsa, cfg, format_time(sa.created or time.time_ns()), store)
        self.log = RaftLog(self._apply, sa.group.name, js.log)
        self.log.on_leader_change = self._leader_changed
        self.log.filter = self._filter
        st.log = self.log
        st.cluster_info = self.cluster_info  # STREAM.INFO's cluster block (api.stream_info_dict)
        self.sync_subject = sa.sync or f"$JSC.SYNC.{sa.group.name}"
        self.group = RaftGroup(cs.server, sa.group.name, list(sa.group.peers), js.store_dir,
                               apply=self.log.group_apply, on_leader_change=self.log.group_leader_change,
                               snapshot=self.snapshot, restore=self.restore, sync=js.sync_interval)
        self.log.bind(self.group)
        self.replay_seq = 0  # the last sequence the applied (or skipped) entries stored
        self.applied_since_snap = 0
        self.consumers: dict[str, Any] = {}  # name -> Consumer (engine on the leader, else not started)
        self._snap_consumers: dict[str, Any] = {}  # consumer states from a snapshot, for consumers not yet here
        self._sync_sub: Any = None
        self._catchup: asyncio.Task | None = None
        self.leader = False
        self.closed = False
        self.catchups = 0
        self.replay_skipped = 0  # entries the store already held when the group replayed its WAL
        jsa.streams[cfg.name] = st
        self._start_task = js.loop.create_task(self._start())

    @property
    def name(self) -> str:
        return self.stream.name

    async def _start(self) -> None:
        try:
            await self.group.start()
        except Exception as e:
            self.cs.js.log.error(f"JetStream cluster: stream '{self.jsa.account.name} > {self.name}': "
                                 f"RAFT group {self.group.name} failed to start: {e!r}")
            return
        if self.sa.group.preferred == self.group.id or len(self.group.peers) == 1:
            self.group.campaign_soon()

    # ---- apply filter (recovery) ------------------------------------------------------------------

    def _filter(self, index: int, target: str, entry: Entry) -> bool:
        self.applied_since_snap += 1
        if self.applied_since_snap >= COMPACT_EVERY:
            self.applied_since_snap = 0
            self.group.compact()  # (inside the group's apply: done after the current Ready)
        if target:
            return True
        store = self.stream.store
        op = entry.op
        last = store.last_seq
        if op == Entry.MSG:
            seq = entry.args[6]
        elif op == Entry.BATCH:
            seq = entry.args[1] + len(entry.args[0]) - 1
        elif op == Entry.MIRROR:
            seq = entry.args[0]
        else:
            # the store is past this point of the log: applied before the restart
            if last > self.replay_seq:
                self.replay_skipped += 1
                return False
            return True
        if seq <= last:
            self.replay_seq = seq
            self.replay_skipped += 1
            return False
        self.replay_seq = seq
        return True

    def _apply(self, entry: Entry) -> Any:
        try:
            return self.stream._apply(entry)
        finally:  # (markers an entry stored count as where the log is)
            self.replay_seq = self.stream.store.last_seq

    # ---- leadership ---------------------------------------------------------------------------------

    def _leader_changed(self, leader: bool) -> None:
        if self.closed:
            return
        st = self.stream
        self.leader = leader
        self.replay_seq = max(self.replay_seq, st.store.last_seq)
        if leader:
            st.start()  # subjects, direct gets, expiry timer, schedules
            self._sync_sub = self.jsa.ic.subscribe(self.sync_subject, self._on_sync)
            for name in list(self.consumers):
                self._promote(name)
            self._advisory(True)
        else:
            for sub in st._subs:
                self.jsa.ic.remove_sub(sub)
            st._subs = []
            from rillet.jetstream import schedules
            schedules.stop(st)
            st._leader_changed(False)
            if self._sync_sub is not None:
                self.jsa.ic.remove_sub(self._sync_sub)
                self._sync_sub = None
            for name in list(self.consumers):
                self._demote(name)

    def _advisory(self, leader: bool) -> None:
        if not leader:
            return
        srv = self.cs.server
        reps = self._peer_states()
        subj, body = monitor.stream_leader_elected_advisory(self.jsa.account.name, self.name, srv.name, reps,
                                                            time.time_ns())
        sysacc = getattr(srv, "sysacc", None)
        pub = getattr(sysacc, "publish", None) if sysacc is not None else None
        if pub is not None:
            try:
                pub(subj, body)
            except Exception as e:
                self.cs.js.log.warn(f"JetStream cluster: leader advisory for '{self.name}' not sent: {e!r}")

    # ---- consumers ----------------------------------------------------------------------------------

    def add_consumer(self, ca: Any) -> None:
        from rillet.jetstream.api_consumer import config_from_dict
        name = ca.name
        if name in self.consumers:
            old = self.consumers[name]
            cfg = config_from_dict(ca.config)
            if self.leader and cfg != old.cfg:
                old.update_config(cfg)
            return
        cfg = config_from_dict(ca.config)
        c = self._new_consumer(name, cfg, ca.created or time.time_ns())
        snap = self._snap_consumers.pop(name, None)
        if snap is not None:
            _set_state(c, snap)
        self.consumers[name] = c
        self.stream.consumers[name] = c
        if self.leader:
            self._promote(name)

    def _new_consumer(self, name: str, cfg: Any, created: int) -> Any:
        from rillet.jetstream.consumer import Consumer
        c = Consumer(self.stream, cfg, name, created)
        c.started_by_log = False
        sub = self.log.sublog(name, lambda e, c=c: self._consumer_apply(c, e))
        c.clog = sub
        return c

    def _consumer_apply(self, c: Any, entry: Entry) -> Any:
        cur = self.consumers.get(c.name, c)
        if entry.op == Entry.C_START:
            cur.started_by_log = True
        return cur.apply_entry(entry)

    def _promote(self, name: str) -> None:
        """This server leads: a fresh engine over the replicated state starts delivering."""
        old = self.consumers[name]
        c = self._new_consumer(name, old.cfg, old.created)
        _copy_state(old, c)
        c.started_by_log = old.started_by_log
        self.consumers[name] = c
        self.stream.consumers[name] = c
        if not c.started_by_log:
            c.select_start()
        else:
            c.sseq = (max(c.dsseq, c.asflr) if c.has_state else c.asflr) + 1
            if c.pending:
                c.sseq = max(c.sseq, max(c.pending) + 1)
            c.npc_dirty = True
        c.start()

    def _demote(self, name: str) -> None:
        old = self.consumers[name]
        if not old.closed and old._subs:
            old.stop(delete=False, advisory=False)
        c = self._new_consumer(name, old.cfg, old.created)
        _copy_state(old, c)
        c.started_by_log = old.started_by_log
        self.consumers[name] = c
        self.stream.consumers[name] = c

    def remove_consumer(self, name: str) -> None:
        c = self.consumers.pop(name, None)
        if c is None:
            return
        self.log.drop_sublog(name)
        c.stop(delete=True, advisory=self.leader)

    # ---- snapshots and catch-up ---------------------------------------------------------------------

    def snapshot(self) -> bytes:
        st = self.stream.store.state()
        cons = {n: _get_state(c) for n, c in self.consumers.items()}
        return _enc.encode({"first": st.first_seq, "last": st.last_seq, "deleted": list(st.deleted),
                            "consumers": cons})

    def restore(self, data: bytes) -> None:
        snap = _dec.decode(data)
        for name, cst in (snap.get("consumers") or {}).items():
            c = self.consumers.get(name)
            if c is not None:
                _set_state(c, cst)
            else:
                self._snap_consumers[name] = cst
        store = self.stream.store
        if store.last_seq < snap["last"]:
            self.log.hold()
            if self._catchup is None or self._catchup.done():
                self._catchup = self.cs.js.loop.create_task(self._catch_up(snap))
            else:
                self._pending_snap = snap
            return
        self._finish_snapshot(snap)

    def _finish_snapshot(self, snap: dict) -> None:
        store = self.stream.store
        first, last = snap["first"], snap["last"]
        if store.last_seq < last:
            store.skip_msgs(store.last_seq + 1, last - store.last_seq)
        if first > store.state().first_seq:
            store.compact(first)
        for seq in snap.get("deleted") or ():
            if seq <= last:
                store.remove_msg(seq, False)  # (False when it is gone already)
        self.replay_seq = max(store.last_seq, last)
        self.stream._dd_loaded = False  # the dedup table is rebuilt from the stored headers

    async def _catch_up(self, snap: dict) -> None:
        """Fetch the messages up to the snapshot's last sequence from the stream leader, in chunks."""
        from rillet.jetstream.stream import parse_ttl
        from rillet.jetstream import headers as H
        store = self.stream.store
        ic = self.jsa.ic
        loop = self.cs.js.loop
        inbox = f"_INBOX.JSC.{os.urandom(8).hex()}"
        q: asyncio.Queue = asyncio.Queue()
        sub = ic.subscribe(inbox, lambda s, c, subj, rep, hdr, msg: q.put_nowait(bytes(msg)))
        self.catchups += 1
        try:
            while not self.closed:
                target = snap["last"]
                if store.last_seq >= target:
                    break
                req = json.dumps({"from": store.last_seq + 1, "to": target}).encode()
                ic.publish(self.sync_subject.encode(), inbox.encode(), req)
                try:
                    ans = await asyncio.wait_for(q.get(), SYNC_TIMEOUT)
                except asyncio.TimeoutError:
                    continue  # no leader yet, or it changed: ask again
                try:
                    first, msgs = _dec.decode(ans)
                except (msgspec.DecodeError, ValueError, TypeError) as e:
                    self.cs.js.log.warn(f"JetStream cluster: '{self.name}': bad catch-up answer: {e}")
                    await asyncio.sleep(0.1)
                    continue
                nxt = store.last_seq + 1
                if first > nxt:
                    n = min(first, target + 1) - nxt
                    store.skip_msgs(nxt, n)
                for seq, subj, hdr, data, ts in msgs:
                    if seq <= store.last_seq or seq > target:
                        continue
                    ttl = 0
                    if hdr:
                        v = H.get_header(hdr, H.TTL)
                        if v:
                            try:
                                ttl = max(parse_ttl(v), 0)
                            except ValueError:
                                ttl = 0
                    store.store_raw(seq, subj, hdr, data, ts, ttl)
                if not msgs and first <= nxt:
                    await asyncio.sleep(0.1)  # the answering leader is behind: ask again
            if not self.closed:
                self._finish_snapshot(snap)
                nsnap = getattr(self, "_pending_snap", None)
                if nsnap is not None:
                    self._pending_snap = None
                    if store.last_seq < nsnap["last"]:
                        self._catchup = loop.create_task(self._catch_up(nsnap))
                        return
                    self._finish_snapshot(nsnap)
                self.log.release()
        except Exception as e:
            self.cs.js.log.error(f"JetStream cluster: '{self.jsa.account.name} > {self.name}': catch-up "
                                 f"failed: {e!r}")
        finally:
            ic.remove_sub(sub)

    def _on_sync(self, sub: Any, client: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        """The leader's side of a catch-up: the messages from ``from`` on (up to ``to``), in one chunk."""
        if not reply or not self.leader:
            return
        try:
            req = json.loads(msg[hdr:] if hdr >= 0 else msg)
            seq, to = int(req["from"]), int(req["to"])
        except (ValueError, KeyError, TypeError):
            return
        store = self.stream.store
        first = store.state().first_seq
        out = []
        size = 0
        seq = max(seq, first)
        while seq <= to and len(out) < SYNC_MSGS and size < SYNC_BYTES:
            m = store.load_next_msg(">", seq, True)
            if m is None or m.seq > to:
                break
            out.append((m.seq, m.subject, m.hdr, m.data, m.ts))
            size += len(m.subject) + len(m.hdr) + len(m.data)
            seq = m.seq + 1
        self.jsa.ic.publish(reply, None, _enc.encode((first, out)))

    # ---- info ---------------------------------------------------------------------------------------

    def _peer_states(self) -> list[monitor.PeerState]:
        g = self.group
        st = g.status()
        out = []
        me = g.id
        pst = st.get("peers") or {}
        for p in g.peers:
            if p == me:
                continue
            ps = pst.get(p)
            if ps is not None:
                out.append(monitor.PeerState(self.cs.peer_name(p), p, current=bool(ps["current"]),
                                             active_ns=int(ps["active_ns"]), lag=int(ps["lag"])))
            else:
                out.append(monitor.PeerState(self.cs.peer_name(p), p))
        return out

    def cluster_info(self) -> dict:
        g = self.group
        leader = g.leader
        lname = self.cs.peer_name(leader) if leader else ""
        cluster = getattr(getattr(self.cs.server.opts, "cluster", None), "name", "") or ""
        return monitor.cluster_info(cluster, g.name, lname, g.leader_since_ns if g.is_leader else 0,
                                    self._peer_states())

    async def stop(self, delete: bool = False) -> None:
        if self.closed:
            return
        if self._leader_announced():
            self._leader_changed(False)
        self.closed = True
        if self._catchup is not None:
            self._catchup.cancel()
        await self.group.stop(delete=delete)
        if self.jsa.streams.get(self.name) is self.stream:
            del self.jsa.streams[self.name]
        self.stream.stop(delete=delete)
        if delete:
            shutil.rmtree(self.jsa.stream_dir(self.name), ignore_errors=True)

    def _leader_announced(self) -> bool:
        return self.leader


def _get_state(c: Any) -> list:
    return [c.dseq, c.dsseq, c.adflr, c.asflr, [[s, p[0], p[1]] for s, p in c.pending.items()],
            [[s, n] for s, n in c.rdc.items()], c.has_state, c.ldt, c.lat, bool(getattr(c, "started_by_log", 1))]


def _set_state(c: Any, s: list) -> None:
    (c.dseq, c.dsseq, c.adflr, c.asflr, pend, rdc, c.has_state, c.ldt, c.lat, started) = s
    c.pending = {int(a): [int(b), int(t)] for a, b, t in pend}
    c.rdc = {int(a): int(n) for a, n in rdc}
    c.started_by_log = bool(started)


def _copy_state(src: Any, dst: Any) -> None:
    _set_state(dst, _get_state(src))


class ClusteredStreams:
    """This server's stream and consumer replicas, driven by the meta layer's assignments."""

    def __init__(self, server: Any, js: Any) -> None:
        self.server = server
        self.js = js
        self.peer = peer_id(server.name)
        self.replicas: dict[tuple[str, str], StreamReplica] = {}
        self._names: dict[str, str] = {self.peer: server.name}
        gates = getattr(js, "api_gates", None)
        if gates is None:
            gates = js.api_gates = []
        gates.insert(0, self.api_gate)

    def peer_name(self, peer: str) -> str:
        n = self._names.get(peer)
        if n:
            return n
        reg = getattr(self.js, "peer_registry", None) or getattr(self.server, "peer_registry", None)
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

    # ---- the meta layer's hooks ---------------------------------------------------------------------

    def stream_assigned(self, sa: Any) -> None:
        key = (sa.account or "$G", sa.name)
        rep = self.replicas.get(key)
        if self.peer not in sa.group.peers:
            if rep is not None:
                self.js.loop.create_task(self._remove(key, delete=True))
            return
        if rep is None:
            rep = StreamReplica(self, sa, self._jsa(sa.account))
            self.replicas[key] = rep
            for ca in sa.consumers.values():
                self.consumer_assigned(ca)
            return
        rep.sa = sa
        from rillet.jetstream.api import stream_config_from_dict
        cfg = stream_config_from_dict(sa.config)
        if rep.leader and cfg != rep.stream.cfg:
            old = rep.stream.cfg

            def done(_: Any, err: BaseException | None) -> None:
                if err is not None:
                    if not isinstance(err, NotLeader):
                        self.js.log.error(f"JetStream cluster: updating stream '{sa.name}' failed: {err}")
                    return
                if old.subjects != cfg.subjects and rep.leader:
                    rep.stream._subscribe()
            rep.stream.update_config(cfg, done)

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
        rep.add_consumer(ca)

    def consumer_removed(self, ca: Any) -> None:
        rep = self.replicas.get((ca.account or "$G", ca.stream))
        if rep is not None:
            rep.remove_consumer(ca.name)

    def stream_info(self, account: str, name: str) -> dict | None:
        rep = self.replicas.get((account or "$G", name))
        if rep is None:
            return None
        from rillet.jetstream.api import stream_info_dict
        return stream_info_dict(rep.stream, with_cluster=True)

    def replica(self, account: str, name: str) -> StreamReplica | None:
        return self.replicas.get((account or "$G", name))

    async def stop(self) -> None:
        for key in list(self.replicas):
            await self._remove(key, delete=False)

    # ---- $JS.API: the stream / consumer leader answers ----------------------------------------------

    def api_gate(self, router: Any, key: str, args: list[str], reply: bytes | None, hdr: bytes,
                 body: bytes) -> bool | None:
        """True: answer here; False: stay silent (or answered here); None: not a stream-level request for a
        stream this server holds (the meta layer decides)."""
        if key not in STREAM_KEYS and key not in CONSUMER_KEYS:
            return None
        if not args:
            return None
        rep = self.replicas.get((router.jsa.account.name, args[0]))
        if rep is None:
            return None
        if not rep.leader:
            return False
        if key == "STREAM.LEADER.STEPDOWN" or key == "CONSUMER.LEADER.STEPDOWN":
            typ = T + ("stream_leader_stepdown_response" if key[0] == "S" else "consumer_leader_stepdown_response")
            if key[0] == "C" and (len(args) < 2 or args[1] not in rep.consumers):
                router.respond_error(reply, typ, ApiError.make("CONSUMER_NOT_FOUND"))
                return False
            try:
                rep.group.stepdown()
            except (NotLeader, ValueError) as e:
                router.respond_error(reply, typ, ApiError.make("STREAM_GENERAL_ERROR", err=str(e) or "no peer"))
                return False
            router.respond(reply, {"type": typ, "success": True})
            return False
        return True
