"""Open the store a stream's configuration asks for (memory or file) with the stream's limits."""
from __future__ import annotations

import os
from typing import Any


def store_config(cfg: Any, js: Any = None) -> Any:
    """The StoreConfig (limits the store enforces) for a StreamConfig."""
    from rillet.jetstream.store.base import StoreConfig
    kw: dict[str, Any] = dict(
        name=cfg.name,
        storage=cfg.storage,
        max_msgs=cfg.max_msgs,
        max_bytes=cfg.max_bytes,
        max_age=cfg.max_age / 1e9 if cfg.max_age else 0,
        max_msgs_per_subject=cfg.max_msgs_per_subject,
        max_msg_size=cfg.max_msg_size,
        discard=cfg.discard,
        discard_new_per_subject=bool(cfg.discard_new_per_subject),
        first_seq=cfg.first_seq or 1,
        compression=cfg.compression or "none",
        allow_msg_ttl=bool(cfg.allow_msg_ttl),
        subject_delete_marker_ttl=(cfg.subject_delete_marker_ttl or 0) / 1e9,
    )
    if js is not None and cfg.storage == "file":
        kw["sync_interval"] = js.sync_interval
    fields = getattr(StoreConfig, "__dataclass_fields__", None) or getattr(StoreConfig, "__struct_fields__", ())
    return StoreConfig(**{k: v for k, v in kw.items() if k in fields})


def open_store(cfg: Any, sdir: str, js: Any) -> Any:
    scfg = store_config(cfg, js)
    if cfg.storage == "memory":
        from rillet.jetstream.store.memstore import MemStore
        return MemStore(scfg)
    from rillet.cipher import keyring_from_options
    # jetstream { key }: encrypted at rest; the account (<store_dir>/jetstream/<account>/streams/<stream>)
    # is part of the key derivation, as in nats-server
    keys = keyring_from_options(js.server.opts.jetstream, os.path.basename(os.path.dirname(os.path.dirname(
        os.path.normpath(sdir))))) if js is not None else None
    if keys is not None:
        # the compiled twin writes records itself: an encrypted store takes the pure path
        from rillet.jetstream.store.filestore import FileStore
    else:
        from rillet.lane import FileStore  # the pure one, or its twin with the compiled append (RILLET_PURE)

    def log(level: str, text: str) -> None:
        getattr(js.log, {"warn": "warn", "warning": "warn", "error": "error"}.get(level, "notice"))(
            f"Stream '{cfg.name}': {text}")
    return FileStore(os.path.join(sdir, "store"), scfg, log=log, keys=keys)
