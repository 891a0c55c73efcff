"""Mirrors and sources: a stream fed from other streams through consumers on them, as nats-server does.

Each origin gets an ephemeral push consumer (flow control and heartbeats on) created through the origin's
``$JS.API`` (the local one, or an ``external.api`` prefix), delivering to a private inbox (under
``external.deliver`` when given, so an account import can carry it). Messages arrive with ``$JS.ACK``
reply subjects that carry the origin sequence:

- a mirror stores each message at the origin's sequence (gaps become deleted sequences), so it can resume
  from its own last sequence;
- a source stores each message as a new message with a ``Nats-Stream-Source`` header (origin, sequence,
  filter, destination), and resumes from the highest origin sequence found in those headers.

A source or mirror with ``consumer: {name, deliver_subject}`` (ADR-60, nats-server 2.14+) uses that durable
consumer on the origin instead: each attempt resets it to its ack floor (``CONSUMER.RESET``, empty body), checks
that its ack policy is ``flow_control`` (else the source's error is 10217, a mirror's 10214, and it retries),
then listens on its deliver subject (a push consumer delivers only while that has interest); what it delivers
again that we have is skipped by sequence. Our flow control replies carry ``Nats-Last-Consumer`` and
``Nats-Last-Stream`` (as nats-server), which acknowledge the durable consumer up to there, so a work-queue or
interest origin drains. The durable consumer is never created nor deleted here. (Differs: in a cluster the
reply is sent by the stream leader once the message is proposed, not through the log as nats-server does.)

Retry policy (bounded; see README "Mirrors and sources: retry policy"). An origin can be missing (deleted,
not created yet), unreachable (its cluster down, the gateway or leaf link cut, its server restarting, its
domain out of reach through ``external``) or stalled. Each origin keeps one timer and a count of consecutive
failed attempts:

- an attempt sends a consumer create and subscribes its inbox; without a good answer, the next attempt
  follows after ``retry_delay(fails)``: 0.25 s, 0.5 s, 1 s, then every 2 s (``RETRY_CAP``) for as long as the
  origin stays away, with +-10 % jitter so many streams do not retry in step. An answer that comes late
  (slow link) still counts if no newer attempt was made;
- a consumer that answered is watched through its idle heartbeat (1 s): nothing at all (no message, no
  heartbeat) for ``STALL`` (2.5 s) means the origin is lost, and the attempts start again at 0.25 s;
- a heartbeat naming a consumer sequence we did not get (a lost message) or a delivery that skips one
  restarts the consumer from our position (at once the first time, then with the back-off); a heartbeat
  saying the consumer is stalled on flow control (``Nats-Consumer-Stalled``) is answered, so a lost
  flow-control reply does not stop delivery;
- the count of failures goes back to 0 once the consumer delivers (a message or a heartbeat).

Every attempt starts at the last origin sequence received + 1 (for a mirror: its store's last sequence
+ 1; for a source: the highest origin sequence stored), so catching up leaves no gap and no duplicate.
A replicated mirror or source runs this on its stream leader only; a new leader starts from the
replicated store (rillet.jetstream.cluster.streams, ``attach_sources``). With a missing origin the wait
after a heal is at most ``RETRY_CAP`` (plus the time the link itself needs to come back); nats-server
backs off to 2 minutes instead (5 s x 2 x failures) and took 40-50 s in our measurements.
"""
from __future__ import annotations

import json
import os
import random
from typing import TYPE_CHECKING, Any

from rillet.cipher import CipherError
from rillet.jetstream import headers as H
from rillet.jetstream.log import Entry
from rillet.jetstream.stream import now_ns
from rillet.subjects.validate import subject_matches_filter

if TYPE_CHECKING:
    from rillet.jetstream.configtypes import StreamSource
    from rillet.jetstream.stream import Stream

SOURCE_HDR = "Nats-Stream-Source"
IDENTITY_HDR = "Nats-Stream-Identity"
API_LEVEL_HDR = "Nats-Required-Api-Level"
SOURCE_API_LEVEL = 5  # asked of the origin with the expected identity (an older origin refuses: asked again without)
HEARTBEAT_NS = 1_000_000_000  # idle heartbeat asked of the origin's consumer
STALL = 2.5  # seconds with neither a message nor a heartbeat: the origin is lost
RETRY_FIRST = 0.25  # seconds before the first retry
RETRY_CAP = 2.0  # seconds between retries while the origin stays away
RETRY_JITTER = 0.1  # +- this fraction of each delay
DIRECT_CAUGHT_UP = 10  # a mirror_direct mirror answers for its origin with fewer messages than this pending
SCAN_LIMIT = 100_000  # messages read back at start for the sources' positions (Nats-Stream-Source headers)
INDEX_FILE = "sources.json"  # the source index, beside a file stream's store
INDEX_EVERY = 1.0  # seconds between writes of the source index at most


def retry_delay(fails: int, rnd: float = 0.5) -> float:
    """Seconds to wait before the next attempt after ``fails`` (>= 1) consecutive failed ones: doubling from
    ``RETRY_FIRST`` up to ``RETRY_CAP``; ``rnd`` in [0, 1) spreads it by +-``RETRY_JITTER`` (0.5: none)."""
    base = min(RETRY_FIRST * (1 << min(max(fails, 1) - 1, 16)), RETRY_CAP)
    return base * (1.0 + RETRY_JITTER * (2.0 * rnd - 1.0))


def name_hash(text: str) -> str:
    """nats-server's getHash: 8 characters of ``0-9A-Za-z`` from the SHA-256 of ``text``."""
    import hashlib
    d = hashlib.sha256(text.encode("utf-8", "surrogateescape")).digest()
    return "".join(_DIGITS[b % 62] for b in d[:8])


def stream_identity(stream: "Stream") -> str:
    """A stream's identity (nats-server 2.15): the hash of its creation time (RFC 3339, UTC, as in its info),
    so a stream deleted and made again under the same name has another."""
    return name_hash(str(stream.created))


_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def parse_source_header(v: str) -> tuple[str, int, str] | None:
    """(origin name, origin sequence, origin identity or "") of a ``Nats-Stream-Source`` value
    ``<origin> <seq> <filters> <destinations> <subject> [<identity>]`` (the shorter forms of older
    servers too); None when it is not one."""
    parts = v.split(" ")
    if len(parts) < 2 or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1]), (parts[5] if len(parts) >= 6 else "")


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

    def __init__(self, owner: "SourceSet", cfg: StreamSource, mirror: bool) -> None:
        self.owner = owner
        self.cfg = cfg
        self.mirror = mirror
        self.name: str = cfg.name
        ext = cfg.external
        self.api = (ext.api if ext is not None and ext.api else "$JS.API")
        self.filters: list[str] = []
        self.transforms: list[tuple[str, str]] = []
        trs = cfg.subject_transforms or []
        for tr in trs:
            self.transforms.append((tr.src or ">", tr.dest or ""))
            self.filters.append(tr.src or ">")
        if not self.filters and cfg.filter_subject:
            self.filters.append(cfg.filter_subject)
        self.sseq = 0  # last origin sequence processed
        self.cseq = 0  # last consumer sequence seen
        self.lag = 0
        self.last_active = 0
        self.inbox = b""
        self.sub: Any = None
        self.error: dict[str, Any] | None = None
        self.header_tag = self._header_tag()
        # what Rillet wrote before as an external origin's first field (the API prefix's hex SHA-256): still
        # read back at start, so streams sourced then resume where they were
        # (and a durable consumer source's, which had no ":C=" part)
        self.legacy_tag = ""
        if cfg.external is not None and cfg.external.api:
            import hashlib
            self.legacy_tag = cfg.name + ":" + hashlib.sha256(cfg.external.api.encode()).hexdigest()[:8]
        elif cfg.consumer is not None:
            self.legacy_tag = cfg.name
        self.failed_seq = 0  # a mirrored message the store refused (logged once)
        self.rsub: Any = None  # the reply subscription of the pending consumer create
        self.timer: Any = None  # the retry timer, or the stall check once the consumer answered
        self.cname = ""  # the origin consumer's name (from its create answer)
        self.from_seq = 0
        self.answered = False  # the current attempt's consumer exists
        self.fails = 0  # consecutive failed attempts (back to 0 once the consumer delivers)
        self.attempts = 0  # consumer creates sent (all time)
        self.stalls = 0  # consumers given up for silence (all time)
        dur = cfg.consumer
        # a durable consumer on the origin (ADR-60, nats-server 2.14+): not created nor deleted here, reset
        # to its ack floor at each attempt, acknowledged by our flow control replies (ack policy flow_control)
        self.durable: tuple[str, str] | None = (dur.name, dur.deliver_subject) if dur is not None else None
        # nats-server 2.15: the origin's identity (from its answers, kept in our Nats-Stream-Source headers): an
        # origin deleted and made again answers with another, and is then sourced again from its start
        self.ident = ""
        self.rc = False  # the origin refused our identity: the next answer is from a recreated origin
        self.api_level = 0 if mirror else SOURCE_API_LEVEL  # 0: an older origin refused level 5; no headers

    def _request_headers(self) -> bytes:
        if not self.api_level:
            return b""
        return H.make_headers([(API_LEVEL_HDR, str(self.api_level)), (IDENTITY_HDR, self.ident)])

    def _header_tag(self) -> tuple[str, str, str]:
        """The source's index name in nats-server's form (the first field of our Nats-Stream-Source values):
        the origin, ``:<hash of external.api>`` for an external origin, ``:C=<hash of its name>`` for a durable
        consumer (hashes as nats-server's getHash); then its filters and destinations."""
        iname = self.name
        ext = self.cfg.external
        if ext is not None:
            iname += ":" + name_hash(ext.api or "")
        if self.cfg.consumer is not None:
            iname += ":C=" + name_hash(self.cfg.consumer.name)
        if self.transforms:
            src = "\f".join(s for s, _ in self.transforms)
            dst = "\f".join(d or ">" for _, d in self.transforms)
        else:
            src = self.cfg.filter_subject or ">"
            dst = ">"
        return iname, src, dst

    # ---- consumer management (see the retry policy in the module docstring) ---------------------

    def start(self, from_seq: int) -> None:
        """An attempt: a new inbox and a consumer create asking for the origin's messages from
        ``from_seq`` (0: as configured). Without a good answer the next attempt is scheduled."""
        self.cancel()
        stream = self.owner.stream
        ic = stream.jsa.ic
        if self.durable is not None:
            self._start_durable(from_seq)
            return
        rnd = os.urandom(6).hex()
        ext = self.cfg.external
        deliver = (ext.deliver or "") if ext is not None else ""
        self.inbox = (f"{deliver}.S.{stream.name}.{rnd}" if deliver else f"$JS.S.{stream.name}.{rnd}").encode()
        self.sub = ic.subscribe(self.inbox.decode(), self._on_msg)
        self.cseq = 0
        self.from_seq = from_seq
        self.attempts += 1
        self.answered = False
        cfg: dict[str, Any] = {"deliver_subject": self.inbox.decode(), "ack_policy": "none",
                               "max_deliver": 1, "flow_control": True, "idle_heartbeat": HEARTBEAT_NS,
                               "inactive_threshold": 10 * HEARTBEAT_NS, "num_replicas": 1, "mem_storage": True,
                               "direct": True}
        start_time = self.cfg.opt_start_time
        if from_seq > 0:
            cfg["deliver_policy"] = "by_start_sequence"
            cfg["opt_start_seq"] = from_seq
        elif self.cfg.opt_start_seq:
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
        from rillet.jetstream import apireply  # (the reply's form: feature flag js_api_reply_v2)
        cname = apireply.consumer_name(stream, self.mirror, self.cfg) if apireply.v2(stream) else ""
        if cname:  # (with v2 the reply names the consumer: named here, not by the origin)
            cfg["name"] = cname
        req = json.dumps({"stream_name": self.name, "config": cfg, "action": "create"}).encode()
        reply = apireply.reply_subject(stream, ext.api if ext is not None else None, self.name, cname)
        self.rsub = ic.subscribe(reply, self._on_create_reply)
        # the retry is armed first: a synchronous answer (a local origin) re-arms it as a stall check
        self._arm(retry_delay(self.fails + 1, random.random()), self._no_answer)
        h = self._request_headers()
        ic.publish(f"{self.api}.CONSUMER.CREATE.{self.name}".encode(), reply.encode(), h + req,
                   len(h) if h else -1)

    def _start_durable(self, from_seq: int) -> None:
        """An attempt with the origin's durable consumer: listen on its deliver subject and reset it to its
        ack floor (CONSUMER.RESET, empty body); what it delivers again that we have is skipped by sequence."""
        stream = self.owner.stream
        ic = stream.jsa.ic
        name, deliver = self.durable  # type: ignore[misc]
        self.inbox = deliver.encode()  # (subscribed once the reset is answered: a push consumer delivers
        self.cseq = 0                  # only while its deliver subject has interest, as nats-server)
        self.from_seq = from_seq
        self.attempts += 1
        self.answered = False
        from rillet.jetstream import apireply
        ext = self.cfg.external
        reply = apireply.reply_subject(stream, ext.api if ext is not None else None, self.name, name)
        self.rsub = ic.subscribe(reply, self._on_create_reply)
        self._arm(retry_delay(self.fails + 1, random.random()), self._no_answer)
        h = self._request_headers()
        ic.publish(f"{self.api}.CONSUMER.RESET.{self.name}.{name}".encode(), reply.encode(), h, len(h) if h else -1)

    def _on_create_reply(self, sub: Any, client: Any, subject: bytes, reply: bytes | None, hdr: int,
                         msg: bytes) -> None:
        if sub is not self.rsub:
            return  # an answer to an attempt given up
        self.owner.stream.jsa.ic.remove_sub(sub)
        self.rsub = None
        body = msg[hdr:] if hdr >= 0 else msg
        if hdr >= 0 and not body.strip():
            return  # a status (503 no responders): no consumer; the retry timer stays armed
        try:
            resp = json.loads(body)
        except ValueError:
            resp = {}
        if not isinstance(resp, dict):
            resp = {}
        self.error = resp.get("error")
        if self.error is not None:
            code = self.error.get("err_code") if isinstance(self.error, dict) else None
            if code == 10225 and not self.mirror:
                # the origin is not the stream we sourced from (deleted and made again): from its start
                self.error = None
                self.sseq, self.ident, self.rc = 0, "", True
                self._arm(0, self.retry)
            elif code == 10185 and self.api_level:
                # an origin older than API level 5 (nats-server 2.14): asked again as before, no identity
                self.error = None
                self.api_level = 0
                self._arm(0, self.retry)
            return  # (the retry timer is armed)
        if not self.mirror:
            got = (H.get_header(msg[:hdr], IDENTITY_HDR) if hdr >= 0 else None) or ""
            if self.rc or (got and self.ident and got != self.ident):
                s = self.owner.stream
                s.js.log.warn(f"JetStream source stream \"{self.name}\" for stream '{s.jsa.account.name} > "
                              f"{s.name}' was recreated, resetting source state")
                self.sseq = 0
            self.ident, self.rc = got, False
        if self.durable is not None:
            if (resp.get("config") or {}).get("ack_policy") != "flow_control":
                # (as nats-server: the durable consumer must be acknowledged through flow control)
                from rillet.jetstream.errors import ApiError
                self.error = ApiError.make("MIRROR_CONSUMER_REQUIRES_ACK_FC" if self.mirror
                                           else "SOURCE_CONSUMER_REQUIRES_ACK_FC").to_dict()
                return
            self.answered = True
            self.last_active = now_ns()
            self.sub = self.owner.stream.jsa.ic.subscribe(self.durable[1], self._on_msg)
            self._arm(STALL, self._check_stall)
            return  # (cname stays empty: the durable consumer is never deleted by us)
        self.answered = True
        self.cname = str(resp.get("name") or "")
        self.last_active = now_ns()
        self._arm(STALL, self._check_stall)
        stream = self.owner.stream
        if self.mirror and resp.get("num_pending") == 0 and stream.cfg.mirror_direct and \
                not stream.mirror_direct_ready:
            # nothing to fetch (an idle origin): the mirror can answer for it now (see _on_msg otherwise)
            stream.set_mirror_direct(True)

    def _no_answer(self) -> None:
        """The attempt got no good answer in time: count it and try again."""
        self.timer = None
        if self.owner.stopped or self.owner.stream.closed:
            return
        if not self.answered and self.error is None and self.api == "$JS.API":
            self.error = {"code": 503, "err_code": 10058, "description": "stream not found"}
        self.fails += 1
        self.retry()

    def _check_stall(self) -> None:
        self.timer = None
        if self.owner.stopped or self.owner.stream.closed:
            return
        idle = (now_ns() - self.last_active) / 1e9
        if idle < STALL:
            self._arm(STALL - idle, self._check_stall)
            return
        self.stalls += 1
        self.lost()

    def lost(self, gap: bool = False) -> None:
        """The consumer stopped feeding us (stalled, or a message we could not take): cancel it and retry
        after the back-off. ``gap``: it skipped messages (the origin is there): the first retry is at once."""
        self.cancel()
        self.fails += 1
        if gap and self.fails == 1:
            self.retry()
            return
        self._arm(retry_delay(self.fails, random.random()), self.retry)

    def retry(self) -> None:
        """A new attempt from where we are: the last origin sequence received + 1."""
        self.timer = None
        if self.owner.stopped or self.owner.stream.closed:
            return
        if self.mirror:
            self.sseq = self.owner.stream.store.state().last_seq
        self.start(self.sseq + 1 if self.sseq else 0)

    def _arm(self, delay: float, fn: Any) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.owner.stream.js.loop.call_later(delay, fn)

    def cancel(self) -> None:
        ic = self.owner.stream.jsa.ic
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.rsub is not None:
            ic.remove_sub(self.rsub)
            self.rsub = None
        if self.sub is not None:
            ic.remove_sub(self.sub)
            self.sub = None
        if self.cname:
            # the consumer we give up: deleted now rather than left to its inactive threshold (sent from the
            # loop, not from inside a delivery of that consumer; lost with the link when the origin is away)
            from rillet.jetstream import apireply  # (a reply as nats-server's, js_api_reply_v2; nobody waits)
            ext = self.cfg.external
            rep = apireply.reply_subject(self.owner.stream, ext.api if ext is not None else None, self.name, self.cname)
            subj = f"{self.api}.CONSUMER.DELETE.{self.name}.{self.cname}".encode()
            self.cname = ""
            self.owner.stream.js.loop.call_soon(ic.publish, subj, rep.encode(), b"")

    # ---- inbound ------------------------------------------------------------------------------

    def _on_msg(self, sub: Any, client: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        if sub is not self.sub:
            return
        stream = self.owner.stream
        hdr_b, data = (msg[:hdr], msg[hdr:]) if hdr >= 0 else (b"", msg)
        self.last_active = now_ns()
        if not reply or not reply.startswith(b"$JS.ACK."):
            self.fails = 0  # the consumer is there and talking
            # control messages: flow control requests want an (empty) answer; heartbeats carry the
            # consumer's last sequence (a mismatch means we missed something: restart from our position)
            # and, when the consumer waits for a flow control answer that got lost, where to send it
            # a flow control reply names the last consumer and origin sequences we have (as nats-server:
            # with ack policy flow_control, that acknowledges them)
            fc_hdr = H.make_headers([("Nats-Last-Consumer", str(self.cseq)), ("Nats-Last-Stream", str(self.sseq))]) \
                if self.sseq > 0 else None
            if reply:
                stream.jsa.ic.publish(reply, None, fc_hdr or b"", len(fc_hdr) if fc_hdr else -1)
            elif hdr_b:
                fc = H.get_header(hdr_b, "Nats-Consumer-Stalled")
                if fc:
                    stream.jsa.ic.publish(fc.encode(), None, fc_hdr or b"", len(fc_hdr) if fc_hdr else -1)
                last = H.get_header(hdr_b, "Nats-Last-Consumer")
                if last and last.isdigit() and int(last) != self.cseq:
                    self.lost(gap=True)
            return
        info = _ack_info(reply)
        if info is None:
            return
        sseq, cseq, dc, pending, ts = info
        if dc > 1:
            return
        if cseq != self.cseq + 1:
            # a skipped delivery, also the first one of a new consumer (which must be consumer sequence 1):
            # across a gateway the first messages can be dropped while the new inbox's interest is still on
            # its way, and taking the next one would skip them for good (as nats-server: restart from here)
            self.lost(gap=True)
            return
        self.cseq = cseq
        if sseq <= self.sseq:
            return  # already have it
        self.lag = max(pending, 0)
        subj = subject.decode("utf-8", "surrogateescape")
        if hdr_b:
            # batching is not carried over by sourcing or mirroring (as nats-server); a mirror keeps the
            # origin's Nats-Stream-Source (a mirror of a sourcing stream, as nats-server), a source sets its own
            drop = {"Nats-Batch-Id", "Nats-Batch-Sequence", "Nats-Batch-Commit"}
            hdr_b = H.remove_headers(hdr_b, drop if self.mirror else drop | {SOURCE_HDR})
        if self.mirror:
            # the mirror's subject transforms, then the stream's own (as nats-server)
            subj = stream.input_subject(self._transform(subj))
            if not self._store_mirror(subj, hdr_b, data, sseq, ts):
                return
            if self.lag < DIRECT_CAUGHT_UP and not stream.mirror_direct_ready and stream.cfg.mirror_direct:
                # nearly caught up: answer the origin's direct gets too (as nats-server, which does not wait
                # for a lag of 0: an origin taking publishes may keep it a little behind)
                stream.set_mirror_direct(True)
        else:
            orig = subj
            # the source's subject transforms, then the stream's own (as nats-server: a stream without
            # subjects that sources "foo.west.>" with subject_transform foo.*.> -> foo.> stores foo.x)
            subj = stream.input_subject(self._transform(subj))
            if hdr_b:
                # the origin's expectations were checked by the origin (as nats-server, not checked again)
                hdr_b = H.remove_header_prefixes(hdr_b, ("Nats-Expected-", "Nats-Batch-"))
            tag = self.header_tag
            # "<origin> <origin seq> <filters> <destinations> <origin subject>" as nats-server 2.12+ (the
            # origin subject lets a counter stream keep a total per origin subject, rillet.jetstream.counters)
            # (nats-server 2.15 adds the origin's identity: a restart then knows which origin these came from)
            val = f"{tag[0]} {sseq} {tag[1]} {tag[2]} {orig}"
            hdr_b = H.set_headers(hdr_b, [(SOURCE_HDR, f"{val} {self.ident}" if self.ident else val)])
            stream.process(subj, None, hdr_b, data, sourced=True)
        self.sseq = sseq
        self.fails = 0
        if not self.mirror:
            self.owner.index_changed()

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
            # logged once per sequence (retried every few seconds); like nats-server the
            # mirror info shows no error, the mirror stays at the message it cannot store
            if self.failed_seq != sseq:
                self.failed_seq = sseq
                stream.js.log.error(f"Stream '{stream.jsa.account.name} > {stream.name}': storing mirrored "
                                    f"message {sseq} failed: {err}")
            self.lost()  # retried (with the back-off) from our last sequence

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

    def info(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "lag": self.lag,
                             "active": (now_ns() - self.last_active) if self.last_active else -1}
        if self.cfg.filter_subject:
            d["filter_subject"] = self.cfg.filter_subject
        if self.transforms:
            d["subject_transforms"] = [{"src": s, "dest": t} for s, t in self.transforms]
        ext = self.cfg.external
        if ext is not None:
            d["external"] = {"api": ext.api, "deliver": ext.deliver}
        if self.error:
            d["error"] = self.error
        return d


class SourceSet:
    def __init__(self, stream: "Stream") -> None:
        self.stream = stream
        cfg = stream.cfg
        self.mirror: Origin | None = Origin(self, cfg.mirror, True) if cfg.mirror is not None else None
        self.origins: list[Origin] = [Origin(self, s, False) for s in (cfg.sources or [])]
        self.stopped = False
        # the source index (nats-server 2.15): each source's last origin sequence and identity, kept beside a
        # file stream's store, so that a stream purged (or emptied by its limits) does not source its origins
        # again from their start after a restart; written at most every INDEX_EVERY seconds and at stop
        sdir = getattr(stream.store, "dir", "") if cfg.storage != "memory" else ""
        self.index_path = os.path.join(os.path.dirname(sdir), INDEX_FILE) if sdir and self.origins else ""
        self._index_timer: Any = None
        self._index_dirty = False

    def start(self) -> None:
        st = self.stream.store.state()
        if self.mirror is not None:
            self.mirror.sseq = st.last_seq
            self.mirror.start(st.last_seq + 1 if st.last_seq else 0)
        if self.origins:
            self._recover_source_positions()
            for o in self.origins:
                o.start(o.sseq + 1 if o.sseq else 0)

    def _recover_source_positions(self) -> None:
        """The last origin sequence of each source, from the newest Nats-Stream-Source headers."""
        store = self.stream.store
        st = store.state()
        wanted = {o.header_tag[0]: o for o in self.origins}
        alias = {o.legacy_tag: o.header_tag[0] for o in self.origins if o.legacy_tag}
        # what this replica applied (or a snapshot brought: js_snapshot_sources), Stream.source_pos kept by
        # rillet.jetstream.sourcestate: the newest, with the origin's identity, also when those messages were
        # removed since (it comes first: an origin recreated since has a lower sequence than before)
        from rillet.jetstream import sourcestate
        live: set[str] = set()
        for og in self.origins:
            pos = sourcestate.position(self.stream, og.header_tag[0])
            if pos is None and og.legacy_tag:
                pos = sourcestate.position(self.stream, og.legacy_tag)
            if pos is not None:
                og.sseq, og.ident = pos
                live.add(og.header_tag[0])
                wanted.pop(og.header_tag[0], None)
        seq = st.last_seq
        scanned = 0
        found: dict[str, int] = {}  # origin -> the store sequence of its newest header
        while seq >= st.first_seq and wanted and scanned < SCAN_LIMIT:
            m = store.load_msg(seq)
            seq -= 1
            scanned += 1
            if m is None or not m.hdr:
                continue
            v = H.get_header(m.hdr, SOURCE_HDR)
            if not v:
                continue
            hp = parse_source_header(v)
            if hp is None:
                continue
            key = alias.get(hp[0], hp[0])
            hit = wanted.pop(key, None)
            if hit is not None:
                hit.sseq, hit.ident = hp[1], hp[2]
                found[key] = seq + 1
        # the source index (after a restart: what was applied before it, when its messages are gone)
        for name, (iseq, ident, stamp) in self._read_index().items():
            og2 = self._origin(name)
            if og2 is None or name in live:
                continue
            if name in wanted or found.get(name, 0) <= stamp:
                # no message from it left (purged, expired) or none newer than the index: the index says
                og2.sseq, og2.ident = iseq, ident
                wanted.pop(name, None)
        if wanted and seq >= st.first_seq:
            # (nats-server scans to the first message; a scan of millions of messages would hold the loop)
            s = self.stream
            s.js.log.warn(f"Stream '{s.jsa.account.name} > {s.name}': no message from source(s) "
                          f"{', '.join(sorted(wanted))} among the last {SCAN_LIMIT} messages: sourcing them "
                          f"from their configured start (messages stored before may come again)")

    def _origin(self, name: str) -> Origin | None:
        return next((o for o in self.origins if o.header_tag[0] == name), None)

    def stop(self) -> None:
        self.stopped = True
        for o in ([self.mirror] if self.mirror else []) + self.origins:
            o.cancel()
        if self._index_timer is not None:
            self._index_timer.cancel()
            self._index_timer = None
        if self._index_dirty:
            self._index_dirty = False
            self._write_index(self._index_doc())

    # ---- the source index ---------------------------------------------------------------------

    def index_changed(self) -> None:
        """A sourced message was stored: the index is written within INDEX_EVERY seconds."""
        if not self.index_path or self.stopped:
            return
        self._index_dirty = True
        if self._index_timer is None:
            self._index_timer = self.stream.js.loop.call_later(INDEX_EVERY, self._index_due)

    def _index_due(self) -> None:
        self._index_timer = None
        if self.stopped or not self._index_dirty:
            return
        self._index_dirty = False
        doc = self._index_doc()
        self.stream.js.loop.run_in_executor(None, self._write_index, doc)

    def _index_doc(self) -> bytes:
        stamp = self.stream.store.state().last_seq
        src = {o.header_tag[0]: {"seq": o.sseq, "ident": o.ident} for o in self.origins if o.sseq}
        return json.dumps({"v": 1, "stamp": stamp, "sources": src}, separators=(",", ":")).encode()

    def _keys(self) -> tuple[Any, str]:
        from rillet.jetstream import metafile
        s = self.stream
        return metafile.stream_keys(s.js, s.jsa.account.name), metafile.stream_context(s.name)

    def _write_index(self, doc: bytes) -> None:
        from rillet.jetstream import metafile
        if not os.path.isdir(os.path.dirname(self.index_path)):
            return  # (the stream was deleted meanwhile)
        keys, ctx = self._keys()
        try:
            metafile.write(self.index_path, doc, keys, ctx)
        except (OSError, CipherError) as e:  # (logged, in the worker thread too: the index is a hint)
            self.stream.js.log.warn(f"Stream '{self.stream.jsa.account.name} > {self.stream.name}': "
                                    f"writing the source index failed: {e}")

    def _read_index(self) -> dict[str, tuple[int, str, int]]:
        """{origin: (sequence, identity, the stream's last sequence when written)}; {} without one."""
        if not self.index_path or not os.path.exists(self.index_path):
            return {}
        from rillet.jetstream import metafile
        keys, ctx = self._keys()
        try:
            doc = json.loads(metafile.read(self.index_path, keys, ctx))
            stamp = int(doc["stamp"])
            return {str(k): (int(v["seq"]), str(v.get("ident") or ""), stamp)
                    for k, v in doc["sources"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError, CipherError) as e:
            self.stream.js.log.warn(f"Stream '{self.stream.jsa.account.name} > {self.stream.name}': the source "
                                    f"index cannot be read ({e}): positions from the messages only")
            return {}

    def info_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {}
        if self.mirror is not None:
            d["mirror"] = self.mirror.info()
        if self.origins:
            d["sources"] = [o.info() for o in self.origins]
        return d

