"""Mirrors and sources: a stream fed from other streams through consumers on them, as nats-server does.

Each origin gets an ephemeral push consumer (flow control and heartbeats on) created through the origin's
``$JS.API`` (the local one, or an ``external.api`` prefix), delivering to a private inbox. Messages arrive with
``$JS.ACK`` reply subjects that carry the origin sequence:

- a mirror stores each message at the origin's sequence (gaps become deleted sequences), so it can resume
  from its own last sequence;
- a source stores each message as a new message with a ``Nats-Stream-Source`` header (origin, sequence,
  filter, destination), and resumes from the highest origin sequence found in those headers.

A health timer recreates a consumer that stopped delivering (origin deleted, recreated, or restarting):
the stream catches up from where it stopped, with no gap and no duplicate.
"""
from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from rillet.jetstream import headers as H
from rillet.jetstream.log import Entry
from rillet.jetstream.stream import now_ns
from rillet.subjects.validate import subject_matches_filter

if TYPE_CHECKING:
    from rillet.jetstream.stream import Stream

SOURCE_HDR = "Nats-Stream-Source"
HEARTBEAT_NS = 1_000_000_000
RETRY = 2.0  # seconds between health checks / retries


def attach_sources(stream: "Stream") -> None:
    if stream.sources is not None:
        stream.sources.stop()
    stream.sources = SourceSet(stream)
    stream.sources.start()


def _ack_info(reply: bytes) -> tuple[int, int, int, int, int] | None:
    """(stream seq, consumer seq, delivered count, pending, timestamp ns) from a $JS.ACK reply subject."""
    toks = reply.split(b".")
    if len(toks) < 9 or toks[0] != b"$JS" or toks[1] != b"ACK":
        return None
    # v1: $JS.ACK.<stream>.<consumer>.<dc>.<sseq>.<cseq>.<ts>.<pending>
    # v2: $JS.ACK.<domain>.<acchash>.<stream>.<consumer>.<dc>.<sseq>.<cseq>.<ts>.<pending>[.<token>]
    base = 2 if len(toks) == 9 else 4
    try:
        dc = int(toks[base + 2])
        sseq = int(toks[base + 3])
        cseq = int(toks[base + 4])
        ts = int(toks[base + 5])
        pending = int(toks[base + 6])
    except (ValueError, IndexError):
        return None
    return sseq, cseq, dc, pending, ts


class Origin:
    """One mirror or source origin and the consumer that feeds from it."""

    def __init__(self, owner: "SourceSet", cfg: Any, mirror: bool) -> None:
        self.owner = owner
        self.cfg = cfg
        self.mirror = mirror
        self.name: str = cfg.name
        ext = getattr(cfg, "external", None)
        self.api = (ext.api if ext is not None and ext.api else "$JS.API")
        self.filters: list[str] = []
        self.transforms: list[tuple[str, str]] = []
        trs = getattr(cfg, "subject_transforms", None) or []
        for tr in trs:
            self.transforms.append((tr.src or ">", tr.dest or ""))
            self.filters.append(tr.src or ">")
        if not self.filters and getattr(cfg, "filter_subject", ""):
            self.filters.append(cfg.filter_subject)
        self.sseq = 0  # last origin sequence processed
        self.cseq = 0  # last consumer sequence seen
        self.lag = 0
        self.last_active = 0
        self.inbox = b""
        self.sub: Any = None
        self.error: dict | None = None
        self.header_tag = self._header_tag()
        self.failed_seq = 0  # a mirrored message the store refused (logged once)

    def _header_tag(self) -> tuple[str, str, str]:
        iname = self.name
        ext = getattr(self.cfg, "external", None)
        if ext is not None and ext.api:
            import hashlib
            iname += ":" + hashlib.sha256(ext.api.encode()).hexdigest()[:8]
        if self.transforms:
            src = "\f".join(s for s, _ in self.transforms)
            dst = "\f".join(d or ">" for _, d in self.transforms)
        else:
            src = getattr(self.cfg, "filter_subject", "") or ">"
            dst = ">"
        return iname, src, dst

    # ---- consumer management ------------------------------------------------------------------

    def start(self, from_seq: int) -> None:
        self.cancel()
        stream = self.owner.stream
        ic = stream.jsa.ic
        self.inbox = f"$JS.S.{stream.name}.{os.urandom(6).hex()}".encode()
        self.sub = ic.subscribe(self.inbox.decode(), self._on_msg)
        self.cseq = 0
        cfg: dict[str, Any] = {"deliver_subject": self.inbox.decode(), "ack_policy": "none",
                               "max_deliver": 1, "flow_control": True, "idle_heartbeat": HEARTBEAT_NS,
                               "inactive_threshold": 10 * HEARTBEAT_NS, "num_replicas": 1, "mem_storage": True,
                               "direct": True}
        start_time = getattr(self.cfg, "opt_start_time", None)
        if from_seq > 0:
            cfg["deliver_policy"] = "by_start_sequence"
            cfg["opt_start_seq"] = from_seq
        elif getattr(self.cfg, "opt_start_seq", 0):
            cfg["deliver_policy"] = "by_start_sequence"
            cfg["opt_start_seq"] = self.cfg.opt_start_seq
        elif start_time:
            cfg["deliver_policy"] = "by_start_time"
            cfg["opt_start_time"] = start_time
        else:
            cfg["deliver_policy"] = "all"
        if len(self.filters) == 1:
            cfg["filter_subject"] = self.filters[0]
        elif self.filters:
            cfg["filter_subjects"] = self.filters
        req = json.dumps({"stream_name": self.name, "config": cfg, "action": "create"}).encode()
        reply = f"$JS.S.R.{os.urandom(6).hex()}"
        holder: dict[str, Any] = {}

        def on_reply(sub: Any, client: Any, subject: bytes, rp: Any, hdr: int, msg: bytes) -> None:
            holder["resp"] = msg[hdr:] if hdr >= 0 else msg
            ic.remove_sub(sub)

        rsub = ic.subscribe(reply, on_reply)
        ic.publish(f"{self.api}.CONSUMER.CREATE.{self.name}".encode(), reply.encode(), req)
        if "resp" not in holder:
            # no answer right away (origin missing, or remote): leave the reply sub for a late answer
            self.owner.stream.js.loop.call_later(RETRY, lambda: ic.remove_sub(rsub))
            self.error = {"code": 503, "err_code": 10058, "description": "stream not found"} \
                if self.api == "$JS.API" else None
            return
        try:
            resp = json.loads(holder["resp"])
        except ValueError:
            resp = {}
        self.error = resp.get("error")
        if self.error is None:
            self.last_active = now_ns()

    def cancel(self) -> None:
        if self.sub is not None:
            self.owner.stream.jsa.ic.remove_sub(self.sub)
            self.sub = None

    # ---- inbound ------------------------------------------------------------------------------

    def _on_msg(self, sub: Any, client: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        if sub is not self.sub:
            return
        stream = self.owner.stream
        hdr_b, data = (msg[:hdr], msg[hdr:]) if hdr >= 0 else (b"", msg)
        self.last_active = now_ns()
        if not reply or not reply.startswith(b"$JS.ACK."):
            # control messages: flow control requests want an (empty) answer; heartbeats carry the
            # consumer's last sequence, a mismatch means we missed something: restart from our position
            if reply:
                stream.jsa.ic.publish(reply, None, b"")
            elif hdr_b:
                last = H.get_header(hdr_b, "Nats-Last-Consumer")
                if last and last.isdigit() and int(last) != self.cseq:
                    self.start(self.sseq + 1)
            return
        info = _ack_info(reply)
        if info is None:
            return
        sseq, cseq, dc, pending, ts = info
        if dc > 1:
            return
        if cseq != self.cseq + 1 and self.cseq != 0:
            self.start(self.sseq + 1)
            return
        self.cseq = cseq
        if sseq <= self.sseq:
            return  # already have it
        self.lag = max(pending, 0)
        subj = subject.decode("utf-8", "surrogateescape")
        if hdr_b:
            # batching is not carried over by sourcing or mirroring (as nats-server)
            hdr_b = H.remove_headers(hdr_b, {SOURCE_HDR, "Nats-Batch-Id", "Nats-Batch-Sequence", "Nats-Batch-Commit"})
        if self.mirror:
            if not self._store_mirror(subj, hdr_b, data, sseq, ts):
                return
        else:
            orig = subj
            subj = self._transform(subj)
            tag = self.header_tag
            # "<origin> <origin seq> <filters> <destinations> <origin subject>" as nats-server 2.12+ (the
            # origin subject lets a counter stream keep a total per origin subject, rillet.jetstream.counters)
            hdr_b = H.set_headers(hdr_b, [(SOURCE_HDR, f"{tag[0]} {sseq} {tag[1]} {tag[2]} {orig}")])
            stream.process(subj, None, hdr_b, data, sourced=True)
        self.sseq = sseq

    def _store_mirror(self, subject: str, hdr: bytes, data: bytes, sseq: int, ts: int) -> bool:
        """A mirrored message, at the origin's sequence and with its original timestamp (as nats-server;
        sourced messages get a new one). False when it could not be stored (retried from there)."""
        stream = self.owner.stream
        if sseq <= stream.proposed_last_seq():
            return True

        def done(res: Any, err: BaseException | None) -> None:
            if err is None:
                self.failed_seq = 0
                return
            # logged once per sequence (the health check retries every few seconds); like nats-server the
            # mirror info shows no error, the mirror stays at the message it cannot store
            if self.failed_seq != sseq:
                self.failed_seq = sseq
                stream.js.log.error(f"Stream '{stream.jsa.account.name} > {stream.name}': storing mirrored "
                                    f"message {sseq} failed: {err}")
            self.cancel()  # the health check restarts the consumer from our last sequence

        stream.propose(Entry.MIRROR, (sseq, subject, hdr, data, ts or now_ns()), done, held=True)
        return self.failed_seq != sseq  # known at once when the log commits at once

    def _transform(self, subject: str) -> str:
        if not self.transforms:
            return subject
        from rillet.jetstream.transform import transform_subject
        for src, dst in self.transforms:
            if subject_matches_filter(subject, src):
                return transform_subject(src, dst, subject) if dst else subject
        return subject

    def info(self) -> dict:
        d: dict[str, Any] = {"name": self.name, "lag": self.lag,
                             "active": (now_ns() - self.last_active) if self.last_active else -1}
        if getattr(self.cfg, "filter_subject", ""):
            d["filter_subject"] = self.cfg.filter_subject
        if self.transforms:
            d["subject_transforms"] = [{"src": s, "dest": t} for s, t in self.transforms]
        ext = getattr(self.cfg, "external", None)
        if ext is not None:
            d["external"] = {"api": ext.api, "deliver": getattr(ext, "deliver", "")}
        if self.error:
            d["error"] = self.error
        return d


class SourceSet:
    def __init__(self, stream: "Stream") -> None:
        self.stream = stream
        cfg = stream.cfg
        self.mirror: Origin | None = Origin(self, cfg.mirror, True) if cfg.mirror is not None else None
        self.origins: list[Origin] = [Origin(self, s, False) for s in (cfg.sources or [])]
        self._timer: Any = None
        self.stopped = False

    def start(self) -> None:
        st = self.stream.store.state()
        if self.mirror is not None:
            self.mirror.sseq = st.last_seq
            self.mirror.start(st.last_seq + 1 if st.last_seq else 0)
        if self.origins:
            self._recover_source_positions()
            for o in self.origins:
                o.start(o.sseq + 1 if o.sseq else 0)
        self._timer = self.stream.js.loop.call_later(RETRY, self._health)

    def _recover_source_positions(self) -> None:
        """The last origin sequence of each source, from the newest Nats-Stream-Source headers."""
        store = self.stream.store
        st = store.state()
        wanted = {o.header_tag[0]: o for o in self.origins}
        seq = st.last_seq
        scanned = 0
        while seq >= st.first_seq and wanted and scanned < 100_000:
            m = store.load_msg(seq)
            seq -= 1
            scanned += 1
            if m is None or not m.hdr:
                continue
            v = H.get_header(m.hdr, SOURCE_HDR)
            if not v:
                continue
            parts = v.split(" ")
            o = wanted.get(parts[0])
            if o is not None and len(parts) > 1 and parts[1].isdigit():
                o.sseq = int(parts[1])
                del wanted[parts[0]]

    def _health(self) -> None:
        if self.stopped or self.stream.closed:
            return
        now = now_ns()
        for o in ([self.mirror] if self.mirror else []) + self.origins:
            if o.sub is None or o.error is not None or now - o.last_active > 3 * HEARTBEAT_NS:
                if o.mirror:
                    o.sseq = self.stream.store.state().last_seq
                o.start(o.sseq + 1 if o.sseq else 0)
        self._timer = self.stream.js.loop.call_later(RETRY, self._health)

    def stop(self) -> None:
        self.stopped = True
        if self._timer is not None:
            self._timer.cancel()
        for o in ([self.mirror] if self.mirror else []) + self.origins:
            o.cancel()

    def info_dict(self) -> dict:
        d: dict[str, Any] = {}
        if self.mirror is not None:
            d["mirror"] = self.mirror.info()
        if self.origins:
            d["sources"] = [o.info() for o in self.origins]
        return d

