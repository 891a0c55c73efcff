"""A stream's duplicate window (``DedupMixin``, a base of ``Stream`` in stream.py): the ``Nats-Msg-Id`` of each
message stored within ``duplicate_window``, looked up before a publish is proposed and recorded when it is
applied (every replica alike), rebuilt from the stored messages' headers after a restart."""
from __future__ import annotations

import time
from typing import Any

from rillet.jetstream import headers as H
from rillet.jetstream.store import base as store_base


now_ns = time.time_ns  # (the clock itself, without a Python call around it: read once per stored message)


class DedupMixin:
    """Needs ``store``, ``cfg``, ``js``, ``jsa``, ``name`` and the ``_ddmap``/``_ddorder``/``_dd_loaded``/
    ``_last_msg_id`` state that ``Stream._init_state`` sets."""

    store: Any
    cfg: Any
    js: Any
    jsa: Any
    name: str
    _ddmap: dict
    _ddorder: list
    _dd_loaded: bool
    _last_msg_id: str


    def _rebuild_dedup(self) -> None:
        """After a restart: the msg ids of the stored messages inside the duplicate window, and the last
        message's id, read back from their headers (nats-server rebuilds its dedup table the same way).
        Done once, when a publish first needs it (a msg id or an expected last msg id), not at start."""
        self._dd_loaded = True
        store = self.store
        st = store.state()
        window = self.cfg.duplicate_window
        if not st.msgs or window <= 0 or self.cfg.mirror is not None:
            return
        seq = store.get_seq_from_time(now_ns() - window)
        last = st.last_seq
        corrupt = 0
        while seq <= last:
            try:
                m = store.load_next_msg(">", seq, True)
            except store_base.ErrStoreCorrupt:
                try:
                    m = store.load_msg(seq)
                except store_base.ErrStoreCorrupt:
                    m = None
                    corrupt += 1
                if m is None:
                    seq += 1
                    continue
            if m is None:
                break
            msg_id = (H.get_header(m.hdr, H.MSG_ID) or "") if m.hdr else ""
            if msg_id:
                self._dedup_record(msg_id, m.seq, m.ts)
            if m.seq == last:
                self._last_msg_id = msg_id
            seq = m.seq + 1
        self._ddorder.sort()  # ids recorded since the start came first
        if corrupt:
            self.js.log.error(f"Stream '{self.jsa.account.name} > {self.name}': {corrupt} corrupt message(s) "
                              "skipped while rebuilding the duplicate window")

    def _dedup_lookup(self, msg_id: str) -> int | None:
        if not self._dd_loaded:
            self._rebuild_dedup()
        e = self._ddmap.get(msg_id)
        if e is None:
            return None
        seq, ts = e
        if now_ns() - ts > self.cfg.duplicate_window:
            return None
        return seq

    def _dedup_record(self, msg_id: str, seq: int, ts: int) -> None:
        if self.cfg.duplicate_window <= 0:
            return
        self._ddmap[msg_id] = (seq, ts)
        self._ddorder.append((ts, msg_id))
        if len(self._ddorder) > 1024 and len(self._ddorder) % 256 == 0:
            self._dedup_prune(ts)

    def _dedup_prune(self, now: int) -> None:
        """Forget ids older than the window at ``now`` (the applied entry's time: replicas prune alike)."""
        cutoff = now - self.cfg.duplicate_window
        order = self._ddorder
        i = 0
        while i < len(order) and order[i][0] < cutoff:
            mid = order[i][1]
            e = self._ddmap.get(mid)
            if e is not None and e[1] == order[i][0]:
                del self._ddmap[mid]
            i += 1
        if i:
            del order[:i]
