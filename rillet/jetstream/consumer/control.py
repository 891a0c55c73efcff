"""Inactivity deletes, pauses, delays, config updates, and the consumer's info (a mixin of Consumer)."""
from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from rillet.gocompat.gotime import format_time, to_utc_time
from rillet.jetstream.consumer.state import (C_DUE)
from rillet.jetstream.stream import now_ns


if TYPE_CHECKING:
    pass



class ControlMixin:
    # ---- inactivity, pause, delays ------------------------------------------------------------------

    def _arm_delete(self, delay: float) -> None:
        if self.closed or not self.dthresh_s:
            return
        if self._delete_timer is not None:
            self._delete_timer.cancel()
        self._delete_timer = self.loop.call_later(delay, self._delete_not_active)

    def _delete_not_active(self) -> None:
        self._delete_timer = None
        if self.closed:
            return
        if self.is_push:
            if self.active or self._has_interest():
                return
        else:
            elapsed = self.loop.time() - self.wq_last
            if elapsed < self.dthresh_s:
                self._arm_delete(self.dthresh_s - elapsed)
                return
            self._process_waiting(eos=False)
            if self.waiting:
                self._arm_delete(self.dthresh_s)
                return
            # pending acks may still come: wait for the latest expected ack, then the threshold
            now = now_ns()
            delay = 0
            for seq, p in self.pending.items():
                t = p[1] + self._ack_wait_for(seq) + int(self.dthresh_s * 1e9)
                if t > now:
                    delay = max(delay, t - now)
            if delay > 0:
                self._arm_delete(delay / 1e9)
                return
        self.stream.jsa.js.log.debug(f"JetStream consumer '{self.jsa.account.name} > {self.stream.name} > "
                                     f"{self.name}' deleted for inactivity") if hasattr(self.js.log, "debug") \
            else None
        self.stop(delete=True)

    def _arm_pause(self) -> None:
        if self._pause_timer is not None:
            self._pause_timer.cancel()
            self._pause_timer = None
        if self.pause_until_ns:
            left = (self.pause_until_ns - now_ns()) / 1e9
            if left > 0:
                self._pause_timer = self.loop.call_later(left + 0.001, self._on_unpause)

    def _on_unpause(self) -> None:
        self._pause_timer = None
        if not self.closed:
            self.pause_advisory()
            self.kick()

    def pause_advisory(self) -> None:
        """``$JS.EVENT.ADVISORY.CONSUMER.PAUSE.<stream>.<consumer>`` (paused or resumed)."""
        subject = f"$JS.EVENT.ADVISORY.CONSUMER.PAUSE.{self.stream.name}.{self.name}"
        if not self.jsa.account.sublist.has_interest(subject):
            return
        import base64
        d: dict[str, Any] = {"type": "io.nats.jetstream.advisory.v1.consumer_pause",
                             "id": base64.b32encode(os.urandom(15)).decode()[:22], "timestamp": format_time(now_ns()),
                             "stream": self.stream.name, "consumer": self.name, "paused": self.is_paused(),
                             "pause_until": format_time(self.pause_until_ns)}
        if self.js.domain:
            d["domain"] = self.js.domain
        self.ic.publish(subject.encode(), None, json.dumps(d, separators=(",", ":")).encode())

    def _delay(self, delay: float) -> None:
        if self._delay_timer is not None:
            self._delay_timer.cancel()
        self._delay_timer = self.loop.call_later(delay, self._on_delay)

    def _on_delay(self) -> None:
        self._delay_timer = None
        self.kick()

    # ---- updates ------------------------------------------------------------------------------------

    def update_config(self, cfg: Any) -> None:
        old_deliver = self.deliver_subject
        old_maxpb = self.maxpb
        old_filters = self.filters
        self.cfg = cfg
        self._apply_cfg()
        if self.filters != old_filters:
            self.npc_dirty = True
        if not self.is_push and self.dthresh_s and self._delete_timer is None:
            self._arm_delete(self.dthresh_s)
        if self.flow_control and self.is_push and old_maxpb:
            self.maxpb = old_maxpb
        if self.deliver_subject != old_deliver and self.is_push:
            self._force_expire_pending()
            self._watch_interest(True)
            self.active = self._has_interest()
            if not self.active:
                self._interest_lost()
            if self._hb_timer is None:
                self._arm_hb()
        self._arm_pause()
        if self.persist is not None:
            self.persist.write_meta(self)
        self.kick()

    def _force_expire_pending(self) -> None:
        """Queue every pending message for redelivery now (the deliver subject changed)."""
        expired = sorted(s for s in self.pending if s not in self.rdqi)
        if not expired:
            return
        off = now_ns() - self.pending[expired[0]][1]
        self._propose(C_DUE, (expired, off))
        for seq in expired:
            self._add_rdq(seq)
        self._arm_ack_timer(self.ack_wait_ns / 1e9 + 0.001, force=True)

    def set_pause(self, until_ns: int, until_text: str | None) -> None:
        from rillet.jetstream import consumerconfig as C
        cfg = self.cfg.copy()
        cfg.pause_until = to_utc_time(until_text) if until_text else None
        C.set_static_consumer_metadata(cfg)
        self.cfg = cfg
        self.pause_until_ns = until_ns
        self._arm_pause()
        if self.persist is not None:
            self.persist.write_meta(self)
        self.kick()

    # ---- info ---------------------------------------------------------------------------------------

    def info(self, level_meta: bool = True) -> dict:
        from rillet.jetstream.api import consumers as api_consumer
        cfg_d = api_consumer.config_to_dict(self.cfg, dynamic_meta=level_meta)
        d: dict[str, Any] = {
            "stream_name": self.stream.name,
            "name": self.name,
            "created": format_time(self.created),
            "config": cfg_d,
        }
        dl: dict[str, Any] = {"consumer_seq": max(self.dseq - 1, 0),
                              "stream_seq": self.dsseq if self.has_state else max(self.sseq - 1, 0)}
        if self.ldt:
            dl["last_active"] = format_time(self.ldt)
        af: dict[str, Any] = {"consumer_seq": self.adflr, "stream_seq": self.asflr}
        if self.lat:
            af["last_active"] = format_time(self.lat)
        d["delivered"] = dl
        d["ack_floor"] = af
        d["num_ack_pending"] = len(self.pending)
        d["num_redelivered"] = 0 if self.maxdc == 1 else len(self.rdc)
        if not self.is_push:
            self._process_waiting(eos=False)
        d["num_waiting"] = len(self.waiting)
        d["num_pending"] = self.num_pending()
        rep = self.stream.replication  # a replicated stream's consumer (cluster/streams.py)
        if rep is not None:
            d["cluster"] = rep.cluster_info()
        if self.is_push and self.active:
            d["push_bound"] = True
        if self.pause_until_ns:
            left = self.pause_until_ns - now_ns()
            if left > 0:
                d["paused"] = True
                d["pause_remaining"] = left
        d["ts"] = format_time(now_ns())
        if self.cfg.priority_groups:
            from rillet.jetstream.consumer import priority
            d["priority_groups"] = priority.groups_info(self)
        return d

