"""Removal from the file store: one message (a tombstone in the state log; erased on disk if asked), purge,
compact and truncate over whole blocks, and expiry by age and TTL.  A mixin of ``FileStore``."""

from __future__ import annotations

import os
import zlib
from typing import Any

from ._fsformat import (
    L_DEL, L_FIRST, L_LAST, L_TRUNC, T_ERASED, _CRC, _LAST, _OVERHEAD, _REC, _U64, _encode_log, _parse_record,
)
from ._fsindex import Block
from .base import StoreError


class BlockRemoval:
    # -- removal --------------------------------------------------------------------

    def _remove(self, seq: int, erase: bool = False) -> bool:
        # Records gathered by write-behind are written first when this is one of them (or an erase); an older
        # message is removed with them still gathered, and the state a failed write goes back to is kept as
        # it would be had the removal come before the first of them (_wb_keep_removal).
        gathered = self._wb_off >= 0
        if gathered and (erase or seq > self._wb_save[2]):
            self.flush_writes()
            gathered = False
        loc = self._locate(seq)
        if loc is None:
            return False
        blk, x, slot = loc
        blk.mark_dead(slot)
        sid = x.sid[slot]
        subj = x.subjs[sid]
        size = x.sz[slot]
        blk.scnt[sid] -= 1
        blk.live -= 1
        self._nmsgs -= 1
        self._bytes -= size
        ps = self._subjects[subj]
        if ps[0] == 1:
            del self._subjects[subj]
        else:
            ps[0] -= 1
            if ps[2] == seq:
                ps[2] = self._subj_last_walk(subj, seq - 1)
        if seq == self._first:
            # (in order, as acks usually come: the next slot of the block is live, no search needed)
            n = slot + 1
            d = blk.dead
            if n < len(x.offs) and x.offs[n] and (d is None or n >= len(d) or not d[n]):
                self._first = seq + 1
            else:
                self._first = self._next_alive(seq + 1) or self._last + 1
        if gathered:
            self._wb_keep_removal(seq, blk, subj, size)
        # the state log
        if (self._limit_removal or self._soon) and not erase:
            self._deferred.append(seq)
            if len(self._deferred) >= 256:
                self._log_append(None)
            elif self._soon and not self._dels_due:
                self._dels_due = True  # (written by the owner's flush_writes at the end of the pass)
                if self._wb_off < 0:  # (else the owner was armed by the gathered records' first)
                    self._wb_armed()
        else:
            self._log_append(_encode_log(L_DEL, _U64.pack(seq)))
        if erase:
            self._erase_record(blk, x.offs[slot], x.rlen[slot], seq)
        if blk.live == 0 and blk is not self._active:
            self._unlink_block(blk)
        cb = self._remove_cb
        if cb is not None:
            cb(seq, subj, size)
        return True

    def _wb_keep_removal(self, seq: int, blk: Block, subj: str, size: int) -> None:
        """A message stored before the gathered records was removed (``_remove``, after its own changes): the
        state ``_wb_rollback`` restores should their write fail (``_wb_save``, the per-subject entries of
        ``_wb_ps``) loses it too, so a failed write takes back the gathered messages and nothing else."""
        first, nmsgs, last, last_ts, nbytes, sblk, live, blast, blast_ts, n0 = self._wb_save
        if seq == first:  # (the store's first moved past it, up to the first gathered one at most)
            first = self._first if self._first <= last else last + 1
        if blk is sblk:
            live -= 1
        self._wb_save = (first, nmsgs - 1, last, last_ts, nbytes - size, sblk, live, blast, blast_ts, n0)
        e = self._wb_ps.get(subj)
        if e is not None:  # (the subject's entry as it was before its first gathered record)
            if e[0] <= 1:
                self._wb_ps[subj] = None
            else:
                e[0] -= 1
                if e[2] == seq:  # (its last: found by the rollback, if it comes, as the last live one before)
                    e[2] = -seq

    def remove_msg(self, seq: int, erase: bool = False) -> bool:
        """Remove one message; ``erase`` also overwrites its record on disk.  A lost one (its record failed its
        checksum) is only forgotten: False."""
        self._check_open()
        if seq in self._lost:
            self._lost.discard(seq)
            self._log_append(_encode_log(L_DEL, _U64.pack(seq)))
            return False
        return self._remove(seq, erase)

    def remove_msg_soon(self, seq: int) -> bool:
        """``remove_msg`` for a removal nobody is answered for (interest and work-queue retention), with
        write-behind on: its tombstone joins the batched ones and the owner's ``flush_writes`` at the end of the
        loop pass writes them all in one state-log record (``armed`` is called for the first), unless a
        state-log write, flush or stop writes them first. Without write-behind, ``remove_msg``."""
        if self._wb_armed is None or self._closed or seq in self._lost:
            return self.remove_msg(seq)
        self._soon = True
        try:
            return self._remove(seq, False)
        finally:
            self._soon = False

    def remove_msgs_soon(self, seqs: list[int]) -> list[tuple[int, StoreError]]:
        """``remove_msg_soon`` of each of ``seqs`` in turn (the retention removals of one entry,
        ``Stream._remove_many``); a StoreError fails that removal alone and is returned with its sequence. The
        usual one (write-behind on, a live message stored before any gathered record, not lost) is ``_remove``'s
        steps inline, the block and its index columns looked up once for the sequences in it; any other goes
        through ``remove_msg_soon``, after which nothing read before is trusted. (Acks come in runs on one block
        and subject: per message, no call but the remove callback, which must not change the store: the stream's
        notes the sequence.)"""
        failed: list[tuple[int, StoreError]] = []
        fast = self._wb_armed is not None and not self._closed
        cb = self._remove_cb
        subjects = self._subjects
        lost = self._lost
        gathered = self._wb_off >= 0
        limit = self._wb_save[2] if gathered else -1  # type: ignore[index]
        due = self._dels_due
        blk: Block | None = None
        lo = hi = base = nslots = 0
        offs: Any = None
        ps_subj: str | None = None
        ps: Any = None
        i = retry = 0
        nseqs = len(seqs)
        while i < nseqs:
            seq = seqs[i]
            i += 1
            try:
                if not fast or (gathered and seq > limit) or (lost and seq in lost):
                    blk = ps_subj = None  # (a gathered record written first, or a lost one: the one-at-a-time way)
                    self.remove_msg_soon(seq)
                    fast = self._wb_armed is not None and not self._closed
                    subjects, lost, gathered, due = self._subjects, self._lost, self._wb_off >= 0, self._dels_due
                    limit = self._wb_save[2] if gathered else -1  # type: ignore[index]
                    continue
                if blk is None or seq < lo or seq > hi:  # (_locate's lookup, kept for the next ones)
                    blk = self._block_of(seq)
                    if blk is None:
                        continue
                    if not blk.live:
                        blk = None
                        continue
                    x = self._idx(blk)
                    lo, hi = blk.first, blk.last
                    base, offs, sids, sz, subjs = x.base, x.offs, x.sid, x.sz, x.subjs
                    nslots = len(offs)
                elif not blk.live:
                    continue
                slot = seq - base
                if slot < 0 or slot >= nslots or not offs[slot]:
                    continue
                d = blk.dead
                if d is not None and slot < len(d) and d[slot]:
                    continue
                if due and not gathered and not lost and i >= retry and i + 7 < nseqs and seqs[i + 7] == seq + 8:
                    m = self._soon_run(seqs, i - 1, blk, x, slot, cb, failed)  # (a run of them at once)
                    if m:
                        i += m - 1
                        continue
                    retry = i + 32
                if d is not None and slot < len(d):
                    d[slot] = 1  # (mark_dead)
                else:
                    blk.mark_dead(slot)
                # _remove(seq) from here, its erase and _limit_removal branches left out
                sid = sids[slot]
                subj = subjs[sid]
                size = sz[slot]
                blk.scnt[sid] -= 1
                blk.live -= 1
                self._nmsgs -= 1
                self._bytes -= size
                if subj is not ps_subj:
                    ps_subj = subj
                    ps = subjects[subj]
                if ps[0] == 1:
                    del subjects[subj]
                    ps_subj = None
                else:
                    ps[0] -= 1
                    if ps[2] == seq:
                        ps[2] = self._subj_last_walk(subj, seq - 1)
                if seq == self._first:
                    n = slot + 1
                    d = blk.dead
                    if n < nslots and offs[n] and (d is None or n >= len(d) or not d[n]):
                        self._first = seq + 1
                    else:
                        self._first = self._next_alive(seq + 1) or self._last + 1
                if gathered:
                    self._wb_keep_removal(seq, blk, subj, size)
                dl = self._deferred
                dl.append(seq)
                if len(dl) >= 256:
                    self._log_append(None)
                elif not due:
                    due = self._dels_due = True
                    if not gathered:
                        self._wb_armed()
                if blk.live == 0 and blk is not self._active:
                    self._unlink_block(blk)
                    blk = None
                if cb is not None:
                    cb(seq, subj, size)
            except StoreError as e:
                blk = ps_subj = None
                failed.append((seq, e))
                fast = self._wb_armed is not None and not self._closed
                subjects, lost, gathered, due = self._subjects, self._lost, self._wb_off >= 0, self._dels_due
                limit = self._wb_save[2] if gathered else -1  # type: ignore[index]
        return failed

    def _soon_run(self, seqs: list[int], j: int, blk: Block, x: Any, a: int, cb: Any,
                  failed: list[tuple[int, StoreError]]) -> int:
        """(``remove_msgs_soon``, its tombstones' owner armed already, nothing gathered or lost) ``seqs[j]``,
        ``seqs[j + 1]``, ... consecutive and live in ``blk`` from slot ``a``, of one subject, removed together:
        the same changes, tombstones and callbacks (in order; one failing fails that removal) as one at a time.
        Only where none of them is a step that could go otherwise: the run stops before the subject's last
        message or count, before the next live slot of the block (the first sequence's advance stays a step)
        and before the pending tombstones' write, which the one-at-a-time steps do. Returns how many (0: none,
        nothing changed)."""
        dl = self._deferred
        seq = seqs[j]
        offs, sids = x.offs, x.sid
        m = min(len(seqs) - j - 1, len(offs) - a - 1, 255 - len(dl))
        if m < 2:
            return 0
        z = a + m
        sid = sids[a]
        subj = x.subjs[sid]
        ps = self._subjects[subj]
        d = blk.dead
        if (ps[0] <= m or ps[2] < seq + m or not offs[z] or 0 in offs[a:z] or sids[a:z].count(sid) != m
                or (d is not None and d.count(1, a, z + 1)) or seqs[j:j + m] != list(range(seq, seq + m))):
            return 0
        if d is None or a >= len(d):
            blk.mark_dead(a)
            d = blk.dead
        e = min(z, len(d))  # type: ignore[arg-type]
        d[a:e] = b"\x01" * (e - a)  # type: ignore[index]
        for slot in range(e, z):
            blk.mark_dead(slot)
        sizes = x.sz[a:z]
        blk.scnt[sid] -= m
        blk.live -= m
        self._nmsgs -= m
        self._bytes -= sum(sizes)
        ps[0] -= m
        if seq == self._first:
            self._first = seq + m  # (each one's next slot is the next of the run, and the one after it is live)
        dl.extend(range(seq, seq + m))
        if cb is not None:
            for k in range(m):
                try:
                    cb(seq + k, subj, sizes[k])
                except StoreError as ex:
                    failed.append((seq + k, ex))
        return m

    def _erase_record(self, blk: Block, off: int, rlen: int, seq: int) -> None:
        self._rc = None
        head = _REC.pack(T_ERASED, 0, 0, rlen, seq, 0, 0, 0, 0)
        body = head + bytes(rlen - _OVERHEAD)
        rec = body + _CRC.pack(zlib.crc32(body))
        if blk.idx_on_disk:
            blk.idx_on_disk = False  # its content checksum no longer holds: rewritten at stop
            self._unlink_quiet(self._idx_path(blk))
        try:
            fd = self._fd_for(blk.index)
            self._pwrite_all(fd, self._crypt(blk.index, [rec], off), off, len(rec))
            os.fsync(fd)
        except OSError as ex:
            # The tombstone is written: the message is gone; only the bytes remain.
            self.log("error", f"cannot erase seq {seq} in {blk.path}: {ex.strerror or ex}")

    def _take_live(self, blk: Block, lo: int, hi: int, out: list | None) -> int:
        """Mark every live message of the block in [lo, hi] removed (counters, per subject); with ``out``,
        append (seq, subject, size) of each.  No tombstones: the caller records the bulk change."""
        x = self._idx(blk)
        offs = x.offs
        sid = x.sid
        sz = x.sz
        subjs = x.subjs
        psim = self._subjects
        d = blk.dead
        n = 0
        for slot in range(max(lo - x.base, 0), min(hi - x.base + 1, len(offs))):
            if not offs[slot] or (d is not None and slot < len(d) and d[slot]):
                continue
            blk.mark_dead(slot)
            d = blk.dead
            l = sid[slot]
            size = sz[slot]
            blk.scnt[l] -= 1
            blk.live -= 1
            self._nmsgs -= 1
            self._bytes -= size
            subj = subjs[l]
            ps = psim[subj]
            if ps[0] == 1:
                del psim[subj]
            else:
                ps[0] -= 1
            n += 1
            if out is not None:
                out.append((x.base + slot, subj, size))
        return n

    def _purge_all(self, new_first: int) -> int:
        if self._wb_off >= 0:
            self.flush_writes()
        cb = self._remove_cb
        removed: list[tuple[int, str, int]] = []
        if cb is not None:
            for blk in self._bl:
                if blk.live:
                    self._take_live(blk, blk.first, blk.last, removed)
        n = self._nmsgs if cb is None else len(removed)
        self._nmsgs = 0
        self._bytes = 0
        self._subjects = {}
        if new_first > self._last + 1:
            self._last = new_first - 1
        self._first = new_first
        for blk in self._bl:
            blk.live = 0
        self._lost.clear()
        # Persist the new sequences first, then drop the files.
        if not self._rewrite_log():
            self._log_append(_encode_log(L_FIRST, _U64.pack(new_first)))
            self._log_append(_encode_log(L_LAST, _LAST.pack(self._last, self._last_ts)))
        for blk in list(self._bl):
            self._unlink_block(blk)
        if cb is not None:
            for s, subj, size in removed:
                cb(s, subj, size)
        return n

    def _compact(self, seq: int) -> int:
        if self._wb_off >= 0:
            self.flush_writes()
        cb = self._remove_cb
        removed: list[tuple[int, str, int]] | None = [] if cb is not None else None
        n = 0
        for blk in list(self._bl):
            if not blk.first or blk.first >= seq:
                break
            if blk.live:
                n += self._take_live(blk, blk.first, seq - 1, removed)
        self._first = self._next_alive(seq) or self._last + 1
        self._lost = {s for s in self._lost if s >= seq}
        self._log_append(_encode_log(L_FIRST, _U64.pack(seq)))
        for blk in list(self._bl):
            if blk.live == 0 and blk is not self._active and not (blk.bad and self._lost):
                self._unlink_block(blk)
        if cb is not None and removed:
            for s, subj, size in removed:
                cb(s, subj, size)
        return n

    def truncate(self, seq: int) -> None:
        """Remove every message above ``seq``; last_seq becomes ``seq``."""
        self._check_open()
        if self._wb_off >= 0:
            self.flush_writes()
        removed: list[tuple[int, str, int]] = []
        if seq < self._last:
            for blk in reversed(list(self._bl)):
                if blk.first and blk.last <= seq:
                    break
                if blk.live:
                    part: list[tuple[int, str, int]] = []
                    self._take_live(blk, seq + 1, blk.last, part)
                    part.reverse()
                    removed.extend(part)
        for subj in {r[1] for r in removed}:
            ps = self._subjects.get(subj)
            if ps is not None and ps[2] > seq:
                ps[2] = self._subj_last_walk(subj, seq)
        loc = self._locate(seq)
        if loc is not None:
            self._last_ts = loc[1].ts[loc[2]]
        if seq < self._last:
            self._last = seq
        if not self._nmsgs:
            self._first = self._last + 1
        self._lost = {s for s in self._lost if s <= seq}
        self._truncate_blocks(seq)
        self._log_append(_encode_log(L_TRUNC, _LAST.pack(self._last, self._last_ts)))
        cb = self._remove_cb
        if cb is not None:
            for s, subj, size in reversed(removed):
                cb(s, subj, size)

    def _truncate_blocks(self, seq: int) -> None:
        self._rc = None  # (new records may come where the cut ones were)
        for blk in reversed(list(self._bl)):
            if not blk.first:
                if blk is not self._active:
                    self._unlink_block(blk)
                continue
            if blk.first > seq:
                self._unlink_block(blk)
                continue
            if blk.last > seq:
                x = self._idx(blk)
                cut = self._find_cut(blk, seq)
                fd = self._fd_for(blk.index)
                try:
                    os.ftruncate(fd, cut)
                except OSError as e:
                    raise StoreError(f"cannot truncate {blk.path}: {e.strerror or e}") from e
                blk.size = cut
                blk.synced = min(blk.synced, cut)
                blk.last = self._last_seq_in(blk, cut)
                if blk.idx_on_disk:
                    blk.idx_on_disk = False
                    self._unlink_quiet(self._idx_path(blk))
                if not blk.last:
                    blk.first = 0
                    x.truncate(0)
                    x.base = 0
                    blk.dead = None
                else:
                    n = blk.last - x.base + 1
                    x.truncate(n)
                    if blk.dead is not None:
                        del blk.dead[n:]
                    blk.last_ts = x.ts[n - 1]
                blk.mcache = None
            break
        self._reindex_blocks()
        if self._bl:
            last_blk = self._bl[-1]
            if self._active is not last_blk:
                self._activate(last_blk)
        else:
            self._active = None
            self._aidx = None

    def _find_cut(self, blk: Block, seq: int) -> int:
        buf = self._read_block(blk)
        return next((pos for pos, h in self._records(memoryview(buf)) if h[4] > seq), len(buf))

    def _last_seq_in(self, blk: Block, size: int) -> int:
        last = 0
        for _pos, h in self._records(memoryview(self._read_block(blk, size))):
            last = h[4]
        return last

    # -- expiry ---------------------------------------------------------------------

    def _expire(self, now_ns: int) -> tuple[int, list[str]]:
        if self._wb_off >= 0:
            self.flush_writes()
        removed = 0
        markers: list[str] = []
        if self._max_age_ns and self._nmsgs:
            cutoff = now_ns - self._max_age_ns
            s = self._first
            while True:
                s = self._next_alive(s)
                if not s:
                    break
                loc = self._locate(s)
                if loc is None:  # pragma: no cover - _next_alive returned a live seq
                    break
                blk, x, slot = loc
                if x.ts[slot] > cutoff:
                    break
                if x.ttl is None or x.ttl[slot] >= 0:
                    self._expire_removing(s, x.subjs[x.sid[slot]], markers)
                    removed += 1
                s += 1
        if self.cfg.allow_msg_ttl:
            for blk in list(self._bl):
                if not blk.min_exp or blk.min_exp > now_ns or not blk.live:
                    continue
                x = self._idx(blk)
                ttl = x.ttl
                if ttl is not None:
                    ts = x.ts
                    offs = x.offs
                    for slot in range(len(offs)):
                        t = ttl[slot]
                        if t > 0 and ts[slot] + t <= now_ns and offs[slot] and not blk.is_dead(slot):
                            self._expire_removing(x.base + slot, x.subjs[x.sid[slot]], markers)
                            removed += 1
                self._ttl_bounds(blk, x)
        if removed:
            # Expiry is not re-applied on open before the limits are (it needs the clock): its tombstones
            # are written now, in one record, instead of waiting with the other limit removals.
            self._log_append(None)
        return removed, markers

    def next_expiry(self) -> int | None:
        """Timestamp (ns) at which the next message expires, or None."""
        best: int | None = None
        if self._max_age_ns and self._nmsgs:
            s = self._next_alive(self._first)
            while s:
                loc = self._locate(s)
                if loc is None:  # pragma: no cover
                    break
                _, x, slot = loc
                if x.ttl is None or x.ttl[slot] >= 0:
                    best = x.ts[slot] + self._max_age_ns
                    break
                s = self._next_alive(s + 1)
        if self.cfg.allow_msg_ttl:
            for blk in self._bl:
                if blk.live and blk.min_exp and (best is None or blk.min_exp < best):
                    best = blk.min_exp
        return best
