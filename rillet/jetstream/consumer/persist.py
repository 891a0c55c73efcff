"""A consumer's state kept: the delivery state flushed to the store, the config in ``meta.json``
(``ConsumerPersist``), and which consumers are kept on disk."""
from __future__ import annotations

import json
import os
import shutil
from typing import TYPE_CHECKING, Any

from rillet.cipher import CipherError
from rillet.jetstream import metafile
from rillet.jetstream.store.base import ErrStoreClosed
from rillet.durable import fsync_dir, make_dirs_durable

from rillet.jetstream.consumer.common import (STATE_FLUSH, _cfg)

if TYPE_CHECKING:
    from rillet.jetstream.stream import Stream
    from rillet.jetstream.consumer.engine import Consumer



class StateMixin:
    # ---- state --------------------------------------------------------------------------------------

    def get_state(self) -> Any:
        from rillet.jetstream.store.base import ConsumerState, SequencePair
        return ConsumerState(
            delivered=SequencePair(consumer_seq=self.dseq - 1,
                                   stream_seq=self.dsseq if self.has_state else self.sseq - 1),
            ack_floor=SequencePair(consumer_seq=self.adflr, stream_seq=self.asflr),
            pending={s: (p[0], p[1]) for s, p in self.pending.items()},
            redelivered={s: c - 1 for s, c in self.rdc.items() if c > 1},
        )

    def apply_state(self, state: Any) -> None:
        """Restore the replicated state from the persisted one (a snapshot install), then the engine's
        scan position from it."""
        self.dseq = state.delivered.consumer_seq + 1
        self.sseq = state.delivered.stream_seq + 1
        self.dsseq = state.delivered.stream_seq
        self.has_state = True
        self.adflr = state.ack_floor.consumer_seq
        self.asflr = state.ack_floor.stream_seq
        self.pending = {int(s): [int(p[0]), int(p[1])] for s, p in (state.pending or {}).items()}
        self.rdc = {int(s): int(c) + 1 for s, c in (state.redelivered or {}).items()}
        # everything pending is due for redelivery after a restart once its ack wait passes
        lst = self.stream.store.state().last_seq
        if self.asflr > lst:
            self.asflr = lst
            self.adflr = self.dseq - 1
            self.pending = {}
            self.rdc = {}
        for s in [s for s in self.pending if s > lst]:
            del self.pending[s]
        if self.sseq > lst + 1:
            self.sseq = (max(self.pending) + 1) if self.pending else self.asflr + 1
        self.npc_dirty = True

    def _mark_dirty(self) -> None:
        if self.persist is None or self.closed:
            return
        self._dirty = True
        if self._flush_timer is None:
            self._flush_timer = self.loop.call_later(STATE_FLUSH, self._flush_cb)

    def _flush_cb(self) -> None:
        self._flush_timer = None
        if not self.closed:
            self.flush_state()

    def flush_state(self) -> None:
        if self.persist is None or not self._dirty:
            return
        self._dirty = False
        try:
            self.persist.write_state(self.get_state())
        except Exception as e:
            self.js.log.error(f"JetStream consumer '{self.stream.name} > {self.name}' state write failed: {e}")


# ---- persistence ------------------------------------------------------------------------------------------


class ConsumerPersist:
    """A consumer on disk: its config in ``<stream dir>/consumers/<name>/meta.json`` (sealed, with its
    ``meta.key``, under jetstream { key }), its delivery state in the stream store's
    ``consumer_store(name)`` (which the store flushes and syncs with the stream)."""

    def __init__(self, path: str, store: Any, name: str, keys: Any = None, context: str = "") -> None:
        self.path = path
        self.store = store
        self.name = name
        self.cs: Any = None
        # jetstream { key }: meta.json sealed (rillet.jetstream.metafile), with this key-derivation context
        self.keys = keys
        self.context = context or name

    def _cs(self) -> Any:
        if self.cs is None or getattr(self.cs, "_closed", False):
            self.cs = self.store.consumer_store(self.name)
        return self.cs

    def write_meta(self, c: Consumer) -> None:
        from rillet.jetstream.api import consumers as api_consumer
        make_dirs_durable(self.path)
        data = json.dumps({"config": api_consumer.config_to_dict(c.cfg, dynamic_meta=False, for_store=True),
                           "created": c.created, "name": c.name}).encode()
        metafile.write(os.path.join(self.path, "meta.json"), data, self.keys, self.context)

    def write_state(self, state: Any, durable: bool = False) -> None:
        """Write the delivery state (``durable``: and fsync it, as an AckSync's confirmation needs)."""
        cs = self._cs()
        cs.update(state)
        cs.flush(durable)

    def load(self, log: Any) -> tuple[dict | None, Any]:
        """(config file contents, delivery state); (None, None) with an error logged when the consumer
        cannot be recovered. A state the store cannot decode was logged by the store: no state."""
        path = os.path.join(self.path, "meta.json")
        try:
            meta = json.loads(metafile.read(path, self.keys, self.context))
        except (OSError, ValueError, CipherError) as e:
            log.error(f"  Error recovering consumer '{self.name}': cannot read {path}: {e}")
            return None, None
        return meta, self._cs().state()

    def delete(self) -> None:
        try:
            cs = self._cs()
        except ErrStoreClosed:
            cs = None  # the stream and its store were deleted first: the state went with them
        if cs is not None:
            cs.delete()
        shutil.rmtree(self.path, ignore_errors=True)


def _atomic_write(path: str, data: bytes, sync: bool = True) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync:  # the rename survives a crash too
        fsync_dir(os.path.dirname(path))


def consumers_dir(stream: "Stream") -> str:
    return os.path.join(stream.jsa.stream_dir(stream.name), "consumers")


def persist_for(stream: "Stream", name: str) -> ConsumerPersist:
    """The ConsumerPersist of consumer ``name`` of ``stream``, with the account's keys when the store is
    encrypted at rest."""
    keys = metafile.stream_keys(stream.js, stream.jsa.account.name)
    return ConsumerPersist(os.path.join(consumers_dir(stream), name), stream.store, name, keys,
                           metafile.consumer_context(stream.name, name))


def persisted(stream: "Stream", cfg: Any) -> bool:
    """Consumers on memory streams, or asking for memory storage, are not written to disk."""
    return _cfg(stream.cfg, "storage", "file") == "file" and not _cfg(cfg, "mem_storage", False)

