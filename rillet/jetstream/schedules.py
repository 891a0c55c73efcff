"""Message schedules (nats-server 2.12): streams with ``allow_msg_schedules``.

A message carrying ``Nats-Schedule: <pattern>`` and ``Nats-Schedule-Target: <subject>`` is stored as a
schedule (one per subject: the server adds ``Nats-Rollup: sub``).  When it is due, the server publishes
the schedule's payload (or, with ``Nats-Schedule-Source``, the last message on that subject) on the target
subject into the same stream, with ``Nats-Scheduler: <schedule subject>`` and ``Nats-Schedule-Next:``
(``purge`` for a one-shot schedule, which then removes the schedule; the next fire time otherwise).

Patterns, as nats-server: ``@at <RFC3339>``, ``@every <Go duration >= 1s>``, a 6-field cron
(``sec min hour dom month dow``) with optional ``Nats-Schedule-Time-Zone``, and the cron shorthands
``@yearly @annually @monthly @weekly @daily @midnight @hourly``.  ``Nats-Schedule-TTL`` and
``Nats-Schedule-Rollup`` become the produced message's ``Nats-TTL`` / ``Nats-Rollup``.

Schedules are plain stored messages: the timer state is rebuilt from the stream on start.  Timing uses
one event loop timer per stream (never sooner than 250ms from now, as nats-server).

Hooks in stream.py: ``check`` (publish validation, may add ``Nats-Rollup: sub``), ``apply_stored`` (part of
applying a scheduler-produced message on every replica: a fired one-shot schedule is purged),
``track_stored`` (the leader's timers, after apply), ``start`` / ``stop``.  Fired schedules are published
through ``Stream.process`` like any message, so they are log entries too.
"""
from __future__ import annotations

import calendar
import datetime as _dt
import heapq
import re
import time
from typing import Any

from rillet.gocompat.gotime import format_time, zone_offset
from rillet.jetstream import headers as H
from rillet.jetstream.errors import ApiError
from rillet.subjects.validate import is_valid_publish_subject, subjects_collide

PATTERN = "Nats-Schedule"
TIME_ZONE = "Nats-Schedule-Time-Zone"
SCHED_TTL = "Nats-Schedule-TTL"
SCHED_ROLLUP = "Nats-Schedule-Rollup"
TARGET = "Nats-Schedule-Target"
SOURCE = "Nats-Schedule-Source"
SCHEDULER = "Nats-Scheduler"
NEXT = "Nats-Schedule-Next"
NEXT_PURGE = "purge"
STREAM_SOURCE = "Nats-Stream-Source"

MIN_FIRE_NS = 250_000_000  # never fire sooner than this from now
_NS = 1_000_000_000


class _Invalid(Exception):
    pass


# ---- time helpers ---------------------------------------------------------------------------------

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def parse_rfc3339(s: str) -> int:
    """Unix nanoseconds of an RFC 3339 time (fraction optional), or raise _Invalid."""
    m = _RFC3339.match(s)
    if not m:
        raise _Invalid(s)
    y, mo, d, hh, mi, ss = (int(m.group(i)) for i in range(1, 7))
    frac = m.group(7)
    try:
        _dt.datetime(y, mo, d, hh, mi, ss)
    except ValueError:
        raise _Invalid(s)
    if hh > 23 or mi > 59 or ss > 59:
        raise _Invalid(s)
    ns = int((frac[1:] + "000000000")[:9]) if frac else 0
    off = 0
    z = m.group(8)
    if z not in ("Z", "z"):
        oh, om = int(z[1:3]), int(z[4:6])
        if oh > 23 or om > 59:
            raise _Invalid(s)
        off = (oh * 3600 + om * 60) * (-1 if z[0] == "-" else 1)
    secs = calendar.timegm((y, mo, d, hh, mi, ss, 0, 0, 0)) - off
    return secs * _NS + ns


def _round_sec(ns: int) -> int:
    """Go's Time.Round(time.Second): halfway values round up."""
    q, r = divmod(ns, _NS)
    return (q + (1 if r * 2 >= _NS else 0)) * _NS


def load_location(hdr: bytes) -> Any:
    """The zone of Nats-Schedule-Time-Zone (None when absent); raises ApiError when empty or unknown."""
    tz = H.get_header(hdr, TIME_ZONE)
    if tz is None:
        return None
    if not tz:
        raise ApiError.make("MESSAGE_SCHEDULES_TIME_ZONE_INVALID")
    if tz == "UTC":
        return _dt.timezone.utc
    if tz == "Local":
        return _dt.datetime.now().astimezone().tzinfo
    try:
        from zoneinfo import ZoneInfo
        return ZoneInfo(tz)
    except Exception:
        raise ApiError.make("MESSAGE_SCHEDULES_TIME_ZONE_INVALID")


# ---- cron -----------------------------------------------------------------------------------------

_MONTHS = {n: i + 1 for i, n in enumerate(
    ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"])}
_DOWS = {n: i for i, n in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}
# (min, max, names) for sec, min, hour, day of month, month, day of week
_BOUNDS = [(0, 59, None), (0, 59, None), (0, 23, None), (1, 31, None), (1, 12, _MONTHS), (0, 6, _DOWS)]
_INT = re.compile(r"^[+-]?\d+$")
_SHORTHANDS = {
    "@yearly": "0 0 0 1 1 *", "@annually": "0 0 0 1 1 *", "@monthly": "0 0 0 1 * *",
    "@weekly": "0 0 0 * * 0", "@daily": "0 0 0 * * *", "@midnight": "0 0 0 * * *", "@hourly": "0 0 * * * *",
}


def _cron_int(s: str, names: dict[str, int] | None) -> int:
    if names is not None and s.lower() in names:
        return names[s.lower()]
    if not _INT.match(s):
        raise _Invalid(s)
    v = int(s)
    if v < 0:
        raise _Invalid(s)
    return v


def _cron_field(field: str, lo: int, hi: int, names: dict[str, int] | None) -> tuple[set[int], bool]:
    """The values a cron field allows, and whether it was an unrestricted ``*``/``?``."""
    vals: set[int] = set()
    star = False
    for expr in (p for p in field.split(",") if p):
        parts = expr.split("/")
        if len(parts) > 2:
            raise _Invalid(expr)
        rng = parts[0].split("-")
        is_star = False
        if rng[0] in ("*", "?"):
            start, end, is_star = lo, hi, True
        else:
            start = _cron_int(rng[0], names)
            if len(rng) == 1:
                end = start
            elif len(rng) == 2:
                end = _cron_int(rng[1], names)
            else:
                raise _Invalid(expr)
        step = 1
        if len(parts) == 2:
            step = _cron_int(parts[1], None)
            if len(rng) == 1:
                end = hi
            if step > 1:
                is_star = False
        if start < lo or end > hi or start > end or step == 0:
            raise _Invalid(expr)
        vals.update(range(start, end + 1, step))
        star = star or is_star
    return vals, star


def next_cron(pattern: str, tz: Any, ts: int) -> int:
    """The first time strictly after ``ts`` (rounded down to the second) that the cron pattern allows."""
    fields = pattern.split()
    if len(fields) != 6:
        raise _Invalid(pattern)
    sets = [_cron_field(f, *b) for f, b in zip(fields, _BOUNDS)]
    secs, mins, hours = sets[0][0], sets[1][0], sets[2][0]
    (doms, dom_star), months, (dows, dow_star) = sets[3], sets[4][0], sets[5]
    tz = tz or _dt.timezone.utc

    def day_ok(d: _dt.date) -> bool:
        a = d.day in doms
        b = (d.weekday() + 1) % 7 in dows
        return (a and b) if (dom_star or dow_star) else (a or b)

    start = _dt.datetime.fromtimestamp(ts // _NS + 1, tz)
    day = start.date()
    limit = day.year + 5
    first = True
    while day.year <= limit:
        if day.month not in months:
            # skip to the first of the next month
            day = _dt.date(day.year + (day.month == 12), day.month % 12 + 1, 1)
            first = False
            continue
        if day_ok(day):
            h0, m0, s0 = (start.hour, start.minute, start.second) if first else (0, 0, 0)
            for h in sorted(x for x in hours if x >= h0):
                mstart = m0 if h == h0 else 0
                for mi in sorted(x for x in mins if x >= mstart):
                    sstart = s0 if (h == h0 and mi == m0) else 0
                    for s in sorted(x for x in secs if x >= sstart):
                        local = _dt.datetime(day.year, day.month, day.day, h, mi, s, tzinfo=tz)
                        return int(local.timestamp()) * _NS
        day += _dt.timedelta(days=1)
        first = False
    raise _Invalid(pattern)


def parse_schedule(pattern: str, tz: Any, ts: int, skip: bool = True) -> tuple[int, bool]:
    """(next fire time in ns, repeating) for a pattern; (0, False) for an empty pattern; raises _Invalid.
    A repeating time already past skips ahead (fires once, not once per missed period) unless ``skip``
    is False."""
    if not pattern:
        return 0, False
    if pattern.startswith("@at "):
        if tz is not None:
            raise _Invalid(pattern)
        return parse_rfc3339(pattern[4:]), False
    if pattern.startswith("@every "):
        if tz is not None:
            raise _Invalid(pattern)
        from rillet.gocompat.gotime import parse_go_duration
        try:
            secs = parse_go_duration(pattern[7:])
        except ValueError:
            raise _Invalid(pattern)
        if secs < 1:
            raise _Invalid(pattern)
        dur = int(round(secs * _NS))
        nxt = _round_sec(ts) + dur
        now = time.time_ns()
        if skip and nxt < now:
            nxt = _round_sec(now) + dur
        return nxt, True
    pattern = _SHORTHANDS.get(pattern, pattern)
    nxt = next_cron(pattern, tz, ts)
    now = time.time_ns()
    if skip and nxt < now:
        nxt = next_cron(pattern, tz, _round_sec(now))
    return nxt, True


def next_schedule(hdr: bytes, ts: int, skip: bool = True) -> tuple[int, bool, Any]:
    """(fire time ns or 0, repeating, zone) of a message's schedule headers; raises ApiError if invalid."""
    tz = load_location(hdr)
    pattern = H.get_header(hdr, PATTERN) or ""
    try:
        nxt, rep = parse_schedule(pattern, tz, ts, skip)
    except _Invalid:
        raise ApiError.make("MESSAGE_SCHEDULES_PATTERN_INVALID")
    return nxt, rep, tz


def _ttl_ok(ttl: str) -> bool:
    from rillet.jetstream.stream import parse_ttl
    try:
        parse_ttl(ttl)
        return True
    except ValueError:
        return False


# ---- publish checks -------------------------------------------------------------------------------

def check(stream: Any, subject: str, hdr: bytes) -> bytes:
    """nats-server's schedule checks on a published message; returns the headers to store (a schedule
    gets ``Nats-Rollup: sub``).  Raises ApiError."""
    sched = stream.scheduler
    if sched is not None and sched.firing:
        return hdr  # produced by the scheduler itself: stored as is
    if H.get_header(hdr, STREAM_SOURCE) is not None:
        return hdr  # sourced: validated by the origin stream
    cfg = stream.cfg
    allowed = cfg.allow_msg_schedules
    try:
        when, _, _ = next_schedule(hdr, time.time_ns())
    except ApiError:
        if not allowed:
            raise ApiError.make("MESSAGE_SCHEDULES_DISABLED")
        raise
    if when:
        if not allowed:
            raise ApiError.make("MESSAGE_SCHEDULES_DISABLED")
        ttl = H.get_header(hdr, SCHED_TTL) or ""
        if ttl and not _ttl_ok(ttl):
            raise ApiError.make("MESSAGE_SCHEDULES_TTL_INVALID")
        rollup = H.get_header(hdr, SCHED_ROLLUP) or ""
        if rollup and rollup != "sub":
            raise ApiError.make("MESSAGE_SCHEDULES_ROLLUP_INVALID")
        if ttl and not cfg.allow_msg_ttl:
            raise ApiError.make("MESSAGE_TTL_DISABLED")
        target = H.get_header(hdr, TARGET) or ""
        if not target or not is_valid_publish_subject(target) or target == subject:
            raise ApiError.make("MESSAGE_SCHEDULES_TARGET_INVALID")
        source = H.get_header(hdr, SOURCE) or ""
        if source and (source == target or source == subject or not is_valid_publish_subject(source)):
            raise ApiError.make("MESSAGE_SCHEDULES_SOURCE_INVALID")
        subjects = cfg.subjects or [stream.name]
        if not any(subjects_collide(s, target) for s in subjects):
            raise ApiError.make("MESSAGE_SCHEDULES_TARGET_INVALID")
        if source and not any(subjects_collide(s, source) for s in subjects):
            raise ApiError.make("MESSAGE_SCHEDULES_SOURCE_INVALID")
        r = H.get_header(hdr, H.ROLLUP)
        if r is None or r == "":
            hdr = H.set_headers(hdr, [(H.ROLLUP, "sub")])
        elif r != "sub":
            raise ApiError.make("MESSAGE_SCHEDULES_ROLLUP_INVALID")
    nxt = H.get_header(hdr, NEXT)
    if nxt:
        if nxt != NEXT_PURGE:
            raise ApiError.make("MESSAGE_SCHEDULES_SCHEDULER_INVALID")
        scheduler = H.get_header(hdr, SCHEDULER) or ""
        if not scheduler or scheduler == subject or not is_valid_publish_subject(scheduler):
            raise ApiError.make("MESSAGE_SCHEDULES_SCHEDULER_INVALID")
        if not allowed:
            raise ApiError.make("MESSAGE_SCHEDULES_DISABLED")
        last = stream.store.load_last_msg(scheduler)
        if last is not None and not H.get_header(last.hdr, PATTERN):
            raise ApiError.make("MESSAGE_SCHEDULES_SCHEDULER_INVALID")
    elif H.get_header(hdr, SCHEDULER):
        raise ApiError.make("MESSAGE_SCHEDULES_SCHEDULER_INVALID")
    return hdr


# ---- timer state ----------------------------------------------------------------------------------

class Scheduler:
    """Schedules of one stream: subject -> (seq, fire time), a heap of fire times, one loop timer."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.schedules: dict[str, tuple[int, int]] = {}
        self.inflight: set[str] = set()
        self.heap: list[tuple[int, int, str]] = []
        self.timer: Any = None
        self.deadline = 0  # loop time the timer fires at
        self.running = False
        self.firing = False
        self.closed = False

    def init(self, seq: int, subj: str, ts: int) -> None:
        self.schedules[subj] = (seq, ts)
        self.inflight.discard(subj)
        heapq.heappush(self.heap, (ts, seq, subj))

    def add(self, seq: int, subj: str, ts: int) -> None:
        self.init(seq, subj, ts)
        self.reset_timer()

    def update(self, subj: str, ts: int) -> None:
        cur = self.schedules.get(subj)
        if cur is not None:
            self.init(cur[0], subj, ts)
            self.reset_timer()

    def remove_subject(self, subj: str) -> None:
        self.schedules.pop(subj, None)
        self.inflight.discard(subj)

    def _valid(self, e: tuple[int, int, str]) -> bool:
        ts, seq, subj = e
        return self.schedules.get(subj) == (seq, ts) and subj not in self.inflight

    def _next(self) -> int:
        h = self.heap
        while h and not self._valid(h[0]):
            heapq.heappop(h)
        if len(h) > 64 and len(h) > 4 * len(self.schedules):
            self.heap = [(ts, seq, s) for s, (seq, ts) in self.schedules.items() if s not in self.inflight]
            heapq.heapify(self.heap)
            h = self.heap
        return h[0][0] if h else 0

    def reset_timer(self) -> None:
        if self.running or self.closed:
            return
        nxt = self._next()
        loop = self.stream.js.loop
        if not nxt:
            if self.timer is not None:
                self.timer.cancel()
                self.timer, self.deadline = None, 0
            return
        fire_in = max(nxt - time.time_ns(), MIN_FIRE_NS) / _NS
        when = loop.time() + fire_in
        if self.timer is not None:
            if self.deadline <= when:
                return  # an earlier run is already set; it re-arms after running
            self.timer.cancel()
        self.deadline = when
        self.timer = loop.call_later(fire_in, self._run)

    def stop(self) -> None:
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _run(self) -> None:
        self.timer, self.deadline = None, 0
        stream = self.stream
        if self.closed or stream.closed:
            return
        self.running = True
        try:
            msgs = self._due(time.time_ns())
            msgs.sort(key=lambda m: m[0])
            self.firing = True
            try:
                for _, target, hdr, data in msgs:
                    stream.process(target, None, hdr, data)
            finally:
                self.firing = False
        finally:
            self.running = False
        self.reset_timer()

    def _due(self, now: int) -> list[tuple[int, str, bytes, bytes]]:
        """Messages of every due schedule; each is marked in flight until its produced message is stored
        (which moves a repeating schedule on, or purges a one-shot one)."""
        store = self.stream.store
        out = []
        h = self.heap
        while h and h[0][0] <= now:
            e = heapq.heappop(h)
            if not self._valid(e):
                continue
            ts, seq, subj = e
            m = _produce(store, seq, subj, ts)
            if m is None:
                self.remove_subject(subj)
                continue
            out.append((seq,) + m)
            self.inflight.add(subj)
        return out


def _produce(store: Any, seq: int, subj: str, ts: int) -> tuple[str, bytes, bytes] | None:
    """(target, headers, payload) of a due schedule, or None when it is gone or no longer valid."""
    sm = store.load_msg(seq)
    if sm is None or sm.subject != subj:
        return None
    hdr = sm.hdr
    pattern = H.get_header(hdr, PATTERN) or ""
    if not pattern:
        return None
    try:
        tz = load_location(hdr)
        nxt, repeat = parse_schedule(pattern, tz, ts)
    except (ApiError, _Invalid):
        return None
    ttl = H.get_header(hdr, SCHED_TTL) or ""
    if ttl and not _ttl_ok(ttl):
        return None
    target = H.get_header(hdr, TARGET) or ""
    if not target:
        return None
    rollup = H.get_header(hdr, SCHED_ROLLUP) or ""
    source = H.get_header(hdr, SOURCE) or ""
    out_hdr, data = hdr, sm.data
    if source:
        src = store.load_last_msg(source)
        if src is not None:
            out_hdr, data = src.hdr, src.data
    out_hdr = _strip(out_hdr)
    pairs = [(SCHEDULER, subj), (NEXT, format_time(nxt, zone_offset(nxt, tz)) if repeat else NEXT_PURGE)]
    if ttl:
        pairs.append((H.TTL, ttl))
    if rollup:
        pairs.append((H.ROLLUP, rollup))
    out_hdr = _append(out_hdr, pairs)
    return target, out_hdr, data


def _strip(hdr: bytes) -> bytes:
    """Drop Nats-Schedule*, Nats-Expected-*, Nats-Msg-Id, Nats-TTL and Nats-Rollup."""
    if not hdr:
        return b""
    lines = hdr.split(b"\r\n")
    kept = [lines[0]]
    for line in lines[1:]:
        if not line:
            continue
        if line.startswith((b"Nats-Schedule", b"Nats-Expected-", b"Nats-Msg-Id:", b"Nats-TTL:",
                            b"Nats-Rollup:")):
            continue
        kept.append(line)
    return b"\r\n".join(kept) + b"\r\n\r\n"


def _append(hdr: bytes, pairs: list[tuple[str, str]]) -> bytes:
    base = hdr[:-2] if len(hdr) > 2 else H.HDR_LINE
    return base + b"".join(k.encode() + b": " + v.encode() + b"\r\n" for k, v in pairs) + b"\r\n"


# ---- stream hooks ---------------------------------------------------------------------------------

def _get(stream: Any) -> Scheduler | None:
    sched: Scheduler | None = stream.scheduler
    if sched is None and stream.cfg.allow_msg_schedules and not stream.closed:
        sched = stream.scheduler = Scheduler(stream)
    return sched


def apply_stored(stream: Any, hdr: bytes) -> None:
    """Part of applying a stored message that a scheduler produced (every replica): a fired one-shot
    schedule is purged."""
    if H.get_header(hdr, NEXT) == NEXT_PURGE:
        scheduler = H.get_header(hdr, SCHEDULER)
        if scheduler:
            stream.store.purge(scheduler, 0, 0)


def track_stored(stream: Any, subject: str, hdr: bytes, seq: int, ts: int) -> None:
    """A message was stored (the leader, after apply): track schedules, move a repeating one on."""
    sched = _get(stream)
    if sched is not None:
        _track(sched, subject, hdr, seq, ts)
        sched.reset_timer()


def _track(sched: Scheduler, subject: str, hdr: bytes, seq: int, ts: int, skip: bool = True) -> None:
    """Schedule state after message ``seq``: a schedule is (re)set, any other message on a schedule's
    subject cancels it, a produced message moves its schedule on (or drops a one-shot one)."""
    has = bool(hdr) and b"Nats-Schedul" in hdr
    if not has:
        if subject in sched.schedules:
            sched.remove_subject(subject)
        return
    when = 0
    try:
        when, _, _ = next_schedule(hdr, ts, skip)
    except ApiError:
        when = 0
    scheduler = H.get_header(hdr, SCHEDULER)
    if when:
        sched.init(seq, subject, when)
    elif not scheduler and subject in sched.schedules:
        sched.remove_subject(subject)
    nxt = H.get_header(hdr, NEXT) if scheduler else None
    if scheduler and nxt:
        if nxt == NEXT_PURGE:
            sched.remove_subject(scheduler)
        elif scheduler in sched.schedules:
            try:
                sched.init(sched.schedules[scheduler][0], scheduler, parse_rfc3339(nxt))
            except _Invalid:
                pass


def start(stream: Any) -> None:
    """Rebuild the schedules by replaying the stored messages (as nats-server's saved scheduling state
    would have them: later messages cancel or move a schedule on), then arm the timer."""
    sched = _get(stream)
    if sched is None:
        return
    store = stream.store
    st = store.state()
    if st.msgs:
        seq = st.first_seq
        while True:
            m = store.load_next_msg(">", seq)
            if m is None:
                break
            seq = m.seq + 1
            if (m.hdr and b"Nats-Schedul" in m.hdr) or m.subject in sched.schedules:
                # as nats-server's saved state: the fire time computed when stored, even if now past
                _track(sched, m.subject, m.hdr, m.seq, m.ts, skip=False)
    sched.reset_timer()


def stop(stream: Any) -> None:
    sched = stream.scheduler
    if sched is not None:
        sched.stop()
