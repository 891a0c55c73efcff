"""The RAFT write-ahead log on disk.

Layout of a WAL directory:

* ``seg-<first index, 20 digits>.log``: segment files of records ``[u32 length][u32 crc32][payload]``
  with payload ``[u64 index][u64 term][u8 kind][data]``. Entries are contiguous across segments; a new
  segment starts when the current one passes ``segment_size`` bytes.
* ``hardstate``: term, vote, commit and mark; ``hardstate.copy``: the same, written after it;
  ``snapshot``: the latest snapshot (index, term, voters, data). Each is ``[4-byte magic][u32 crc32][u32
  length][payload]`` and replaced atomically (write a temporary file, fsync it, rename it over the old one,
  fsync the directory). ``hardstate.lost``: present while the term and vote were lost (below).

``sync="always"`` fsyncs before ``append`` returns; ``sync="interval"`` leaves it to the caller's
periodic ``sync()`` (a crash may then lose the entries written since the last sync, which RAFT cannot
tolerate on a majority: ``always`` is the safe setting). Hard state and snapshots are always durable
when their call returns.

``WAL.open`` recovers: a torn tail (an incomplete or bad last record of the last segment, nothing valid
after it) is truncated away and counted in ``truncated_bytes``; a bad record anywhere else, a gap in the
indexes or a damaged snapshot file raises ``WALCorruption`` naming the file and offset:
stored data is never served unchecked. With ``repair=True`` (a member of a replicated group, which can take
the entries again from the others) damaged entries are cut instead: the log ends before the first bad record
(``Recovered.damaged`` says where and why; the caller must then not vote before it caught up), and a damaged
snapshot file is dropped with every entry (the leader's snapshot is taken again).

The hard state (its term and vote must never be forgotten: voting twice in one term could elect two leaders):

* The copy is rewritten after every save of the primary, fsynced when its term or vote changes; a save that
  changes only the commit index or the mark (about once a second per busy group, while the term and vote
  change at elections only) writes the copy without fsync (0.2 ms instead of 0.5-3 ms here). So whenever a
  message that depends on a term or vote is sent, both files durably hold it; after a power cut the copy holds
  that term and vote with the commit and mark of its last fsync or later, or fails its check. ``open`` puts a
  missing, damaged or different copy right from a valid primary.
* A damaged (or missing) primary with a valid copy: the copy is used, and the primary rewritten from it
  (``Recovered.hs_note`` says so). Its commit index and mark may be older than the primary's were: they only
  serve to find entries a majority lost, which may then go unreported.
* Both damaged (or a damaged primary and no copy), ``repair=True``: ``Recovered.votes_lost``. ``hardstate.lost``
  is written first (fsynced), and every open while it exists says the same; the term starts at the highest one
  the log and snapshot hold (the node's term never goes below a term it had acknowledged entries of). The
  node then grants no vote and does not campaign until it knows a term at least as high as any it may have
  voted in (rillet.raft.node, ``votes_lost``), records a vote for itself in that term, and the first hard state
  saved with a vote removes the marker. Without ``repair`` it raises ``WALCorruption`` as before.

Encrypted (``WAL.open(..., keys=KeyRing)``, jetstream { key }): ``key`` holds the log's key record (context:
the directory's name), opened before anything else is read or changed (a wrong key raises
KeyRecoveryError, 'unable to recover keys'); each record's data and the snapshot's payload are sealed
(rillet.cipher; a record's index/term/kind are its associated data).
"""
from __future__ import annotations

import os
import struct
import zlib
from array import array
from dataclasses import dataclass
from typing import Optional, Sequence

import msgspec

from rillet.durable import fsync_dir, make_dirs_durable

from .msgs import ENTRY_KINDS, HardState, Snapshot

_REC = struct.Struct("<II")       # payload length, crc32(payload)
_ENT = struct.Struct("<QQB")      # index, term, kind
_FILE = struct.Struct("<4sII")    # magic, crc32(payload), payload length
_HS_MAGIC = b"RHS1"
_SNAP_MAGIC = b"RSN1"
_MIN_PAYLOAD = _ENT.size
_MAX_PAYLOAD = 1 << 30

_enc = msgspec.msgpack.Encoder()
_hs_dec = msgspec.msgpack.Decoder(HardState)
_snap_dec = msgspec.msgpack.Decoder(Snapshot)


class WALCorruption(Exception):
    """Stored RAFT data failed its checksum or structure check somewhere other than a torn tail."""




HS_FILE = "hardstate"
HS_COPY = "hardstate.copy"
HS_LOST = "hardstate.lost"


def _write_atomic(dirpath: str, name: str, magic: bytes, payload: bytes, sync: bool = True) -> None:
    """``name`` replaced by a file holding ``payload`` (checked on reading); durable when it returns unless
    ``sync`` is False (then a power cut may leave the old file or one that fails its check, never another)."""
    tmp = os.path.join(dirpath, name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(_FILE.pack(magic, zlib.crc32(payload), len(payload)) + payload)
        f.flush()
        if sync:
            os.fsync(f.fileno())
    os.replace(tmp, os.path.join(dirpath, name))
    if sync:
        fsync_dir(dirpath)


def _read_checked(path: str, magic: bytes) -> Optional[bytes]:
    try:
        with open(path, "rb") as f:
            buf = f.read()
    except FileNotFoundError:
        return None
    if len(buf) < _FILE.size:
        raise WALCorruption(f"{path}: {len(buf)} bytes, shorter than its header")
    m, crc, n = _FILE.unpack_from(buf)
    if m != magic:
        raise WALCorruption(f"{path}: bad magic {m!r}")
    payload = buf[_FILE.size:]
    if len(payload) != n or zlib.crc32(payload) != crc:
        raise WALCorruption(f"{path}: checksum or length mismatch")
    return payload


def _wal_key(path: str, keys):
    """The log's asset key (None when not encrypted): its key record ``<path>/key`` opened with ``keys``
    (a cipher.KeyRing) or made; a log with a key record and no keys configured is refused."""
    kpath = os.path.join(path, "key")
    if keys is None:
        if os.path.exists(kpath):
            from rillet.cipher import CipherError
            raise CipherError("encryption not enabled")
        return None
    ctx = os.path.basename(os.path.normpath(path))
    try:
        with open(kpath, "rb") as f:
            rec = f.read()
    except FileNotFoundError:
        if any(n.startswith("seg-") or n == "snapshot" for n in os.listdir(path)):
            from rillet.cipher import CipherError
            raise CipherError(f"{path}: a RAFT log written without encryption cannot be opened with a key")
        key, rec = keys.new_asset(ctx)
        _write_atomic_raw(path, "key", rec)
        return key
    r = keys.recover(ctx, rec)  # KeyRecoveryError: nothing read or changed
    if r.rotated:
        _write_atomic_raw(path, "key", keys.rewrap(ctx, r.key))
    return r.key


def _write_atomic_raw(dirpath: str, name: str, data: bytes) -> None:
    tmp = os.path.join(dirpath, name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(dirpath, name))
    fsync_dir(dirpath)


def encode_record(index: int, term: int, kind: int, data: bytes) -> bytes:
    payload = _ENT.pack(index, term, kind) + data
    return _REC.pack(len(payload), zlib.crc32(payload)) + payload


class _Segment:
    __slots__ = ("first", "path", "offsets", "terms", "size")

    def __init__(self, first: int, path: str):
        self.first = first
        self.path = path
        self.offsets = array("Q")  # start offset of each record
        self.terms = array("Q")
        self.size = 0

    def last(self) -> int:
        return self.first + len(self.offsets) - 1


@dataclass(slots=True)
class Recovered:
    """What ``WAL.open`` found: pass it to ``Node(hard_state=..., snapshot=..., entries=...)``."""
    hard_state: Optional[HardState]
    snapshot: Optional[Snapshot]
    entries: list
    truncated_bytes: int
    # the commit index the hard state file held; above the last recovered entry when entries that were
    # known committed were lost (not fsynced before a power cut): pass it to the node as ``known_commit``
    stored_commit: int = 0
    # (``repair``) where damaged entries were found ("" when none) and the index the log was cut at (the
    # entries from there on were dropped)
    damaged: str = ""
    cut_at: int = 0
    # (``repair``) the term and vote were lost (both hard state files damaged, or ``hardstate.lost`` still
    # there): pass it to the node (``Node(votes_lost=True)``); ``hard_state`` then holds no vote
    votes_lost: bool = False
    # what was wrong with the hard state files, and what was done ("" when both were whole and alike)
    hs_note: str = ""


class WAL:
    def __init__(self, path: str, sync: str = "always", segment_size: int = 64 << 20, key=None):
        """Use ``WAL.open``; the constructor does no recovery. ``key``: a cipher.AssetKey (encrypted)."""
        if sync not in ("always", "interval"):
            raise ValueError(f"wal sync policy must be 'always' or 'interval', not {sync!r}")
        self.path = path
        self.policy = sync
        self.segment_size = segment_size
        self.segments: list[_Segment] = []
        self.snap_index = 0
        self.snap_term = 0
        self._f = None          # the open last segment (unbuffered: each append is one write to the OS)
        self._dirty = False
        self._key = key
        self._copy_tv: Optional[tuple] = None  # (term, vote) the copy durably holds; None: not known to
        self._copy_dirty = False  # the copy was rewritten without fsync since
        self._votes_lost = False  # ``hardstate.lost`` is there

    @classmethod
    def open(cls, path: str, sync: str = "always", segment_size: int = 64 << 20,
             keys=None, repair: bool = False) -> tuple["WAL", Recovered]:
        make_dirs_durable(path)  # (the directory's entry, and its parents' new ones, survive a power cut)
        w = cls(path, sync, segment_size, _wal_key(path, keys))
        rec = w._recover(repair)
        return w, rec

    # ---- recovery ----------------------------------------------------------------------------------------

    def _recover(self, repair: bool = False) -> Recovered:
        d = self.path
        for name in os.listdir(d):
            if name.endswith(".tmp"):
                os.unlink(os.path.join(d, name))  # an atomic replace that did not finish: the old file stands
        hs, hs_note = self._recover_hard_state(repair)
        damaged = ""
        cut_at = 0
        try:
            raw = _read_checked(os.path.join(d, "snapshot"), _SNAP_MAGIC)
            if raw is not None and self._key is not None:
                raw = self._key.open(raw, _SNAP_MAGIC)
            snap = _snap_dec.decode(raw) if raw is not None else None
        except (msgspec.DecodeError, msgspec.ValidationError, WALCorruption) as e:
            if not repair:
                if isinstance(e, WALCorruption):
                    raise
                raise WALCorruption(f"{d}: undecodable snapshot: {e}") from None
            # (repair: the snapshot and every entry after it go; the member takes the leader's snapshot again. The
            # hard state stays: its term and vote must not be forgotten, its commit says what was lost here)
            damaged, cut_at, snap = f"{e}", 1, None
            os.unlink(os.path.join(d, "snapshot"))
        if snap is not None:
            self.snap_index, self.snap_term = snap.index, snap.term
        names = sorted(n for n in os.listdir(d) if n.startswith("seg-") and n.endswith(".log"))
        entries: list = []
        truncated = 0
        expect = None
        for k, name in enumerate(names):
            try:
                first = int(name[4:-4])
            except ValueError:
                raise WALCorruption(f"{d}/{name}: not a segment name") from None
            seg = _Segment(first, os.path.join(d, name))
            if damaged:  # (repair: past the cut, dropped)
                os.unlink(seg.path)
                continue
            with open(seg.path, "rb") as f:
                buf = f.read()
            last_seg = k == len(names) - 1
            if expect is not None and first != expect:
                if not repair:
                    raise WALCorruption(f"{seg.path}: starts at index {first}, expected {expect}")
                damaged, cut_at = f"{seg.path}: starts at index {first}, expected {expect}", expect
                os.unlink(seg.path)
                continue
            pos = 0
            idx = first
            n = len(buf)
            while pos < n:
                bad = self._check_record(buf, pos, idx)
                if bad is None:
                    ln = _REC.unpack_from(buf, pos)[0]
                    i, t, kind = _ENT.unpack_from(buf, pos + 8)
                    end = pos + 8 + ln
                    seg.offsets.append(pos)
                    seg.terms.append(t)
                    if i > self.snap_index:
                        data = buf[pos + 8 + _ENT.size:end]
                        if self._key is not None:
                            data = self._key.open(data, buf[pos + 8:pos + 8 + _ENT.size])
                        entries.append((i, t, kind, data))
                    pos = end
                    idx += 1
                    continue
                if last_seg and not self._valid_record_after(buf, pos, idx):
                    truncated = n - pos
                    with open(seg.path, "r+b") as f:
                        f.truncate(pos)
                        f.flush()
                        os.fsync(f.fileno())
                    break
                if not repair:
                    raise WALCorruption(f"{seg.path}: offset {pos}: {bad}")
                damaged, cut_at = f"{seg.path}: offset {pos}: {bad}", idx
                with open(seg.path, "r+b") as f:
                    f.truncate(pos)
                    f.flush()
                    os.fsync(f.fileno())
                break
            seg.size = pos
            expect = first + len(seg.offsets)
            if seg.offsets or (last_seg and not damaged):
                self.segments.append(seg)
            elif damaged:
                os.unlink(seg.path)  # (repair: nothing before the cut was in it)
        if self.segments and not self.segments[-1].offsets:
            os.unlink(self.segments.pop().path)  # only a torn record (or, repaired, a damaged one) was in it
        bad = ""
        if entries and entries[0][0] != self.snap_index + 1:
            bad = f"{d}: entries start at {entries[0][0]} but the snapshot ends at {self.snap_index}"
        elif self.segments and self.segments[0].first > self.snap_index + 1:
            bad = f"{d}: first segment starts at {self.segments[0].first}, after the snapshot index {self.snap_index}"
        elif repair and self.segments and self.segments[-1].last() < self.snap_index:
            bad = f"{d}: entries end at {self.segments[-1].last()}, before the snapshot index {self.snap_index}"
        if bad:  # (with repair, a cut below the snapshot's end lands here: only the snapshot is kept)
            if not repair:
                raise WALCorruption(bad)
            damaged = damaged or bad
            cut_at = self.snap_index + 1
            entries = []
            while self.segments:
                os.unlink(self.segments.pop().path)
        if damaged:
            cut_at = max(cut_at, self.snap_index + 1)  # (the entries the snapshot covers were not needed)
            fsync_dir(d)
        last = entries[-1][0] if entries else self.snap_index
        if self._votes_lost:
            # (the term from the highest one held here: never below a term this node acknowledged entries of; no
            # vote: the node grants none until it knows the terms it may have voted in)
            local = max(self.term_at(self.last_index()) or 0, self.snap_term)
            hs = HardState(max(local, hs.term if hs is not None else 0), None,
                           hs.commit if hs is not None else 0, hs.mark if hs is not None else 0)
        stored_commit = hs.commit if hs is not None else 0
        if hs is not None and hs.commit > last:
            hs = HardState(hs.term, hs.vote, last, hs.mark)  # entries not synced when the commit was written were lost
        return Recovered(hs, snap, entries, truncated, stored_commit, damaged, cut_at, self._votes_lost, hs_note)

    def _read_hs(self, name: str) -> tuple[Optional[HardState], str]:
        """(the hard state in file ``name``, "") when whole; (None, why) when damaged; (None, "") when missing."""
        path = os.path.join(self.path, name)
        try:
            raw = _read_checked(path, _HS_MAGIC)
            return (_hs_dec.decode(raw) if raw is not None else None), ""
        except WALCorruption as e:
            return None, str(e)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            return None, f"{path}: undecodable hard state: {e}"

    def _recover_hard_state(self, repair: bool) -> tuple[Optional[HardState], str]:
        """The hard state from the primary or its copy, each put right from the other (see the docstring), and
        what was wrong ("" when nothing); sets ``_votes_lost`` when neither is whole (``repair``; else raises)."""
        d = self.path
        hs, bad = self._read_hs(HS_FILE)
        copy, copy_bad = self._read_hs(HS_COPY)
        lost_path = os.path.join(d, HS_LOST)
        self._votes_lost = os.path.exists(lost_path)
        note = ""
        if hs is not None:
            if copy != hs:
                cpath = os.path.join(d, HS_COPY)
                # (an empty copy is one whose write was not synced before an unclean stop, as the copy's commit
                # and mark writes are not: expected, rewritten without a note; anything else is damage)
                if copy_bad and not (os.path.exists(cpath) and os.path.getsize(cpath) == 0):
                    note = f"{copy_bad}: rewritten from {HS_FILE}"
                _write_atomic(d, HS_COPY, _HS_MAGIC, _enc.encode(hs))
            self._copy_tv = (hs.term, hs.vote)
        elif copy is not None:
            note = (f"{bad or os.path.join(d, HS_FILE) + ': missing'}: the hard state was taken from "
                    f"{HS_COPY} (its commit index and mark may be older) and {HS_FILE} rewritten from it")
            hs = copy
            _write_atomic(d, HS_FILE, _HS_MAGIC, _enc.encode(hs))
            self._copy_tv = (hs.term, hs.vote)
        elif bad or copy_bad:
            why = "; ".join(w for w in (bad, copy_bad or f"{os.path.join(d, HS_COPY)}: missing") if w)
            if not repair:
                raise WALCorruption(why)
            note = f"{why}: the term and vote are lost"
            self._votes_lost = True
        if self._votes_lost:
            if not os.path.exists(lost_path):
                _write_atomic_raw(d, HS_LOST, b"")  # (durable before anything else happens)
            elif not note:
                note = f"{lost_path}: the term and vote were lost before, and are not known again yet"
        return hs, note

    @staticmethod
    def _check_record(buf: bytes, pos: int, idx: int) -> Optional[str]:
        n = len(buf)
        if pos + 8 > n:
            return "incomplete record header"
        ln, crc = _REC.unpack_from(buf, pos)
        if ln < _MIN_PAYLOAD or ln > _MAX_PAYLOAD:
            return f"bad record length {ln}"
        if pos + 8 + ln > n:
            return "record extends past the end of the file"
        if zlib.crc32(buf[pos + 8:pos + 8 + ln]) != crc:
            return "checksum mismatch"
        i, t, kind = _ENT.unpack_from(buf, pos + 8)
        if i != idx:
            return f"record index {i} where {idx} was expected"
        if kind not in ENTRY_KINDS:
            return f"unknown entry kind {kind}"
        return None

    def _valid_record_after(self, buf: bytes, pos: int, idx: int) -> bool:
        """Whether any complete, checksummed record with a later index lies after the bad one at ``pos``
        (at any byte offset: the bad record's own length field may be the damaged part). Then the
        damage is in the middle of the log, not a torn tail."""
        n = len(buf)
        unpack, ent = _REC.unpack_from, _ENT.unpack_from
        for q in range(pos + 1, n - 8 - _MIN_PAYLOAD + 1):
            ln, crc = unpack(buf, q)
            if ln < _MIN_PAYLOAD or q + 8 + ln > n:
                continue
            if zlib.crc32(buf[q + 8:q + 8 + ln]) == crc and ent(buf, q + 8)[0] >= idx:
                return True
        return False

    # ---- writing -----------------------------------------------------------------------------------------

    def last_index(self) -> int:
        return self.segments[-1].last() if self.segments and self.segments[-1].offsets else self.snap_index

    def term_at(self, index: int) -> Optional[int]:
        if index == self.snap_index:
            return self.snap_term
        for seg in reversed(self.segments):
            if seg.first <= index:
                k = index - seg.first
                return seg.terms[k] if k < len(seg.terms) else None
        return None

    def append(self, entries: Sequence[tuple]) -> None:
        """Append entries (index, term, kind, data); any stored entries from ``entries[0][0]`` on are
        replaced (a follower's conflicting suffix)."""
        if not entries:
            return
        first = entries[0][0]
        last = self.last_index()
        if first <= last:
            self.truncate_suffix(first)
        elif first != last + 1:
            raise ValueError(f"wal append at {first} leaves a gap after {last}")
        seg = self.segments[-1] if self.segments else None
        if seg is None or seg.size >= self.segment_size:
            seg = self._new_segment(first)
        parts: list = []
        add = parts.append
        pos = seg.size
        offsets = seg.offsets
        terms = seg.terms
        rec, ent, crc32, hsize = _REC.pack, _ENT.pack, zlib.crc32, _ENT.size
        key = self._key
        for e in entries:  # (no per-entry concatenation: header, entry header and data joined once)
            data = e[3]
            h = ent(e[0], e[1], e[2])
            if key is not None:
                data = key.seal(data, h)
            n = hsize + len(data)
            offsets.append(pos)
            terms.append(e[1])
            add(rec(n, crc32(data, crc32(h))))
            add(h)
            add(data)
            pos += 8 + n
        f = self._file(seg)
        data = b"".join(parts)
        n = f.write(data)
        while n < len(data):  # (a short write to a regular file is rare: finish it; errors raise)
            n += f.write(memoryview(data)[n:])
        seg.size = pos
        self._dirty = True
        if self.policy == "always":
            self.sync()

    def _new_segment(self, first: int) -> _Segment:
        if self._f is not None:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
            self._f = None
        seg = _Segment(first, os.path.join(self.path, f"seg-{first:020d}.log"))
        open(seg.path, "wb").close()
        fsync_dir(self.path)
        self.segments.append(seg)
        return seg

    def _file(self, seg: _Segment):
        if self._f is None:
            # (no Python buffer: an append is written with one write() and no lseek, which a buffered
            # random-access file adds to every flush)
            self._f = open(seg.path, "r+b", buffering=0)
            self._f.seek(seg.size)
        return self._f

    def flush(self) -> None:
        """Hand what was appended to the operating system (no fsync): it survives the process being
        killed, not a power loss (``sync`` for that). Appends are written unbuffered, so they are already
        there."""

    def sync(self) -> None:
        if self._f is not None and self._dirty:
            self._f.flush()
            os.fsync(self._f.fileno())
        self._dirty = False

    def truncate_suffix(self, index: int) -> None:
        """Remove the entries with index >= ``index``."""
        if index <= self.snap_index:
            raise ValueError(f"cannot truncate at {index}: entries up to {self.snap_index} are in the snapshot")
        self._close()
        while self.segments and self.segments[-1].first >= index:
            os.unlink(self.segments.pop().path)
        if self.segments:
            seg = self.segments[-1]
            k = index - seg.first
            if k < len(seg.offsets):
                seg.size = seg.offsets[k]
                del seg.offsets[k:]
                del seg.terms[k:]
                with open(seg.path, "r+b") as f:
                    f.truncate(seg.size)
                    f.flush()
                    os.fsync(f.fileno())
        fsync_dir(self.path)

    def save_hard_state(self, hs: HardState) -> None:
        """Both files (primary first); the copy fsynced only when its term or vote changes (docstring). The
        first hard state saved with a vote after a loss removes ``hardstate.lost``: the node records no vote
        before it knows the terms it may have voted in."""
        raw = _enc.encode(hs)
        _write_atomic(self.path, HS_FILE, _HS_MAGIC, raw)
        tv = (hs.term, hs.vote)
        if tv != self._copy_tv:
            self._copy_tv = None  # (until the copy is durable)
            _write_atomic(self.path, HS_COPY, _HS_MAGIC, raw)
            self._copy_tv = tv
            self._copy_dirty = False
        else:
            _write_atomic(self.path, HS_COPY, _HS_MAGIC, raw, sync=False)
            self._copy_dirty = True
        if self._votes_lost and hs.vote is not None:
            os.unlink(os.path.join(self.path, HS_LOST))
            fsync_dir(self.path)
            self._votes_lost = False

    def save_snapshot(self, snap: Snapshot) -> None:
        """Store ``snap`` and drop the entries it covers. If the log does not hold the snapshot's last
        entry (a snapshot installed from the leader), every entry is dropped."""
        keep = self.term_at(snap.index) == snap.term
        raw = _enc.encode(snap)
        if self._key is not None:
            raw = self._key.seal(raw, _SNAP_MAGIC)
        _write_atomic(self.path, "snapshot", _SNAP_MAGIC, raw)
        if keep:
            self._compact(snap.index)
        else:
            self._close()
            while self.segments:
                os.unlink(self.segments.pop().path)
            fsync_dir(self.path)
        self.snap_index, self.snap_term = snap.index, snap.term

    def _compact(self, index: int) -> None:
        """Delete the segments whose entries are all <= ``index`` (the first kept one may start earlier;
        recovery skips the entries the snapshot covers)."""
        segs = self.segments
        removed = False
        while segs:
            if len(segs) > 1:
                if segs[1].first > index + 1:
                    break
            elif segs[0].last() > index:
                break
            else:
                self._close()
            os.unlink(segs.pop(0).path)
            removed = True
        if removed:
            fsync_dir(self.path)

    def _close(self) -> None:
        if self._f is not None:
            self.sync()
            self._f.close()
            self._f = None

    def close(self) -> None:
        self._close()
        if self._copy_dirty:  # (a clean stop leaves the copy's commit and mark durable too)
            with open(os.path.join(self.path, HS_COPY), "rb") as f:
                os.fsync(f.fileno())
            fsync_dir(self.path)
            self._copy_dirty = False



class MemWAL:
    """The WAL's interface for a group that keeps its log in memory only (nats-server's in-memory WAL for
    memory-storage groups): nothing is written to disk, so a restarted member starts with an empty log,
    term and vote, and gets the log or a snapshot from the leader again. The RAFT node holds its entries
    itself; this only checks that appends stay contiguous (as the file WAL does) and keeps the last hard
    state and snapshot for ``status``. ``MemWAL.open()`` is ``WAL.open``'s counterpart."""

    policy = "memory"
    path = ""

    def __init__(self) -> None:
        self.last = 0
        self.snap_index = 0
        self.snap_term = 0
        self.hard_state: Optional[HardState] = None
        self.appended = 0  # entries appended (counter)

    @classmethod
    def open(cls) -> tuple["MemWAL", Recovered]:
        return cls(), Recovered(None, None, [], 0)

    def last_index(self) -> int:
        return max(self.last, self.snap_index)

    def append(self, entries: Sequence[tuple]) -> None:
        if not entries:
            return
        first = entries[0][0]
        if first > self.last_index() + 1:
            raise ValueError(f"wal append at {first} leaves a gap after {self.last_index()}")
        self.last = entries[-1][0]  # (a follower's conflicting suffix from ``first`` on is replaced)
        self.appended += len(entries)

    def flush(self) -> None:
        """Nothing to hand to the operating system."""

    def sync(self) -> None:
        """Nothing to make durable."""

    def truncate_suffix(self, index: int) -> None:
        if index <= self.snap_index:
            raise ValueError(f"cannot truncate at {index}: entries up to {self.snap_index} are in the snapshot")
        self.last = min(self.last, index - 1)

    def save_hard_state(self, hs: HardState) -> None:
        self.hard_state = hs

    def save_snapshot(self, snap: Snapshot) -> None:
        self.snap_index, self.snap_term = snap.index, snap.term
        self.last = max(self.last, snap.index)

    def close(self) -> None:
        """Nothing to close: the log goes with the process."""
