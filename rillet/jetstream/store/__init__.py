"""JetStream message stores: MemStore (memory) and FileStore (disk), and what they share from ``base``
(messages, config, state, errors).  README.md in this folder has the layout.

The package itself loads only ``base``; ``FileStore``, ``MemStore``, ``restore`` and ``restore_into`` (and the
submodules) are loaded when first asked for, so that importing one module of the package (its ``base``, say)
does not load them all in one go: the API's modules are imported a few per loop pass
(rillet.jetstream.api.staged, issue 20) and this package's were ~25 ms of a single step."""

import importlib
import importlib.util

from . import base
from .base import *  # noqa: F403  (the names of base.__all__)

_LAZY = {"FileStore": "filestore", "restore": "filestore", "restore_into": "filestore", "MemStore": "memstore"}

__all__ = [*base.__all__, "FileStore", "MemStore", "restore", "restore_into"]


def __getattr__(name: str):  # PEP 562: the names above, loaded with their module when first used
    mod = _LAZY.get(name)
    if mod is None:
        if name.startswith("__") or not importlib.util.find_spec(f"{__name__}.{name}"):
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return importlib.import_module(f"{__name__}.{name}")  # a submodule (loaded with the package before)
    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value
