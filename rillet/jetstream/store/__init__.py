"""JetStream message stores: MemStore (memory) and FileStore (disk), and what they share from ``base``
(messages, config, state, errors).  README.md in this folder has the layout."""

from . import base
from .base import *  # noqa: F403  (the names of base.__all__)
from .filestore import FileStore, restore, restore_into
from .memstore import MemStore

__all__ = [*base.__all__, "FileStore", "MemStore", "restore", "restore_into"]
