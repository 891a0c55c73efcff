"""JetStream message stores: MemStore (memory) and FileStore (disk)."""

from .base import (
    ConsumerState,
    ErrDeleted,
    ErrMaxBytes,
    ErrMaxMsgs,
    ErrMaxMsgSize,
    ErrMaxMsgsPerSubject,
    ErrNoSuchMsg,
    ErrSequenceMismatch,
    ErrStoreClosed,
    ErrStoreCorrupt,
    ErrStoreFull,
    ErrTooManyResults,
    SequencePair,
    StoreConfig,
    StoredMsg,
    StoreError,
    StreamState,
)
from .filestore import FileStore, restore, restore_into
from .memstore import MemStore

__all__ = [
    "ConsumerState",
    "ErrDeleted",
    "ErrMaxBytes",
    "ErrMaxMsgSize",
    "ErrMaxMsgs",
    "ErrMaxMsgsPerSubject",
    "ErrNoSuchMsg",
    "ErrSequenceMismatch",
    "ErrStoreClosed",
    "ErrStoreCorrupt",
    "ErrStoreFull",
    "ErrTooManyResults",
    "FileStore",
    "MemStore",
    "SequencePair",
    "StoreConfig",
    "StoreError",
    "StoredMsg",
    "StreamState",
    "restore",
    "restore_into",
]
