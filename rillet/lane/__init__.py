"""Which lane runs the per-message loops: the compiled extension (``rillet._speedups``) or the pure-Python
modules it twins. Decided once, when this module is first imported:

* ``RILLET_PURE=1`` (any value but empty and ``0``) in the environment selects the pure-Python lane;
* so does an extension that was not built (no C compiler at install time) or fails to import;
* otherwise the compiled lane runs.

The pure-Python modules (``rillet.protocol.parser``, ``rillet.cluster.protocol``) are the reference: each
compiled class is a subclass of its pure twin that parses the common, well-formed operations in C and hands
everything else (errors included) to the inherited pure-Python code, so both lanes emit the same events and
the same ``ProtocolError``s (tests/test_lanes.py feeds both the same bytes, split at every point).

Importers take the classes from here:

    ClientParser   the client protocol parser (rillet.protocol.parser.ClientParser or its twin)
    ServerParser   the route/gateway/leaf parser (rillet.cluster.protocol.ServerParser or its twin)
    wire           the inter-server frame builders: rmsg_head, hmsg_head, lmsg_head, leaf_msg_head,
                   leaf_hmsg_head, frame (rillet.cluster.protocol or its twin)
    FileStore      the JetStream file store (rillet.jetstream.store.filestore.FileStore or its twin, whose
                   message append is compiled)
    ack_numbers    a JetStream ack subject's numbers (rillet.jetstream.acksubject.ack_numbers or its twin)
    ack_reply      a JetStream delivery's ack reply subject (rillet.jetstream.acksubject.ack_reply or its twin)
    entry_codec    a replicated stream's log entry codec: ``encode_entry``, ``decode_entry``
                   (rillet.jetstream.cluster.log or its twin module)
    run_frames     a JetStream consumer's run of deliveries (rillet.jetstream.consumer.delivery's
                   reference_run_frames or its twin; registered by rillet.jetstream.consumer)

This module decides the lane and knows no package above it (tests/test_import_cycles.py: no package cycle,
lazy imports included). Each package that has twins registers them (``register``) in its ``__init__``:
``rillet.cluster`` the ``ServerParser`` and ``wire``, ``rillet.jetstream`` the ``FileStore``, ``ack_numbers``,
``ack_reply`` and ``entry_codec``; their modules, which read ``lane.<name>``, load after their package's
``__init__``, so the names are registered by then. Every name is resolved on first use, so that importing this
module loads neither lane's classes. (A package rather than a top-level module: top-level modules import no
subpackage.)
"""
from __future__ import annotations

import importlib
import importlib.util
import os
from typing import Any, Callable

__all__ = ["LANE", "NAME", "REASON", "COMPILED", "ClientParser", "ServerParser", "wire", "FileStore",
           "ack_numbers", "ack_reply", "entry_codec", "pure", "compiled", "register",
           "use_compiled_methods"]


def _decide() -> tuple[str, str]:
    if os.environ.get("RILLET_PURE", "") not in ("", "0"):
        return "pure", "RILLET_PURE is set"
    try:
        from rillet._speedups import _cparser  # noqa: F401
    except ImportError as e:
        return "pure", f"the compiled extension is not available ({e})"
    # _cserver (built with _cparser) is found, not loaded: loading it loads rillet.cluster.protocol, which
    # a server without routes, gateways or leaf nodes does not need (~0.2 MB); a broken one fails loudly
    # where it is first used (ServerParser, wire)
    # (_cstore, _cjs and _ccluster likewise: loading them loads the file store, the JetStream modules)
    for mod in ("_cserver", "_cstore", "_cjs", "_ccluster"):
        if importlib.util.find_spec(f"rillet._speedups.{mod}") is None:
            return "pure", f"the compiled extension is not available (no rillet._speedups.{mod})"
    return "compiled", ""


LANE, REASON = _decide()
COMPILED = LANE == "compiled"
# what `rillet-server --version` and the startup log print
NAME = "compiled lane" if COMPILED else "pure-Python lane"


def _pure_client_parser() -> Any:
    from rillet.protocol.parser import ClientParser
    return ClientParser


def _compiled_client_parser() -> Any:
    from rillet._speedups._cparser import ClientParser
    return ClientParser


def _no_trim() -> int:
    return -1  # (the pure-Python lane does not load ctypes for it: ~0.9 MB, about what it would give back)


def _pure_trim_heap() -> Any:
    return _no_trim


def _compiled_trim_heap() -> Any:
    from rillet._speedups._cparser import trim_heap
    return trim_heap


# {name: (loader of the pure-Python twin, loader of the compiled twin)}
_TWINS: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
    "ClientParser": (_pure_client_parser, _compiled_client_parser),
    # ``trim_heap()``: the C heap's free pages back to the system (glibc malloc_trim), once the server has
    # started (rillet.server.gcpolicy); -1 where not available
    "trim_heap": (_pure_trim_heap, _compiled_trim_heap)}


Loader = Callable[[], Any]


def _loader(where: str | Loader) -> Loader:
    if callable(where):
        return where
    module, _, attr = where.partition(":")

    def load() -> Any:
        # (import_module, also while the module itself is being imported and asks for its twin)
        m = importlib.import_module(module)
        if not attr:
            return m
        try:
            return getattr(m, attr)
        except AttributeError:  # (as ``from module import attr``: an extension built before the twin existed)
            raise ImportError(f"cannot import name {attr!r} from {module!r}") from None
    return load


def register(name: str, pure: str | Loader, compiled: str | Loader) -> None:
    """Declare the twins of ``name``: each is where it is, ``"package.module"`` (the module) or
    ``"package.module:attribute"``, or a function that loads it; the compiled one raises ImportError when it
    was not built. A package calls this in its ``__init__`` for the twins its modules use."""
    _TWINS[name] = (_loader(pure), _loader(compiled))


def use_compiled_methods(cls: type, module: str, **methods: str) -> None:
    """In the compiled lane, the methods of ``cls`` named as keywords become their compiled twins
    (``method="its twin's name in module"``), all or none: an extension built before the twins existed leaves
    the pure-Python methods (the references, which the pure-Python lane runs) in place."""
    if not COMPILED:
        return
    try:
        twins = {method: _loader(f"{module}:{name}")() for method, name in methods.items()}
    except ImportError:
        return
    for method, twin in twins.items():
        setattr(cls, method, twin)


def _twins(name: str) -> tuple[Callable[[], Any], Callable[[], Any]]:
    try:
        return _TWINS[name]
    except KeyError:
        raise AttributeError(f"no lane twins named {name!r} (registered: {', '.join(sorted(_TWINS))}; the "
                             f"package that has them registers them when it is imported)") from None


def pure(name: str) -> Any:
    """The pure-Python twin of a registered name (``ClientParser``, ``ServerParser``...), whichever lane runs
    (tests)."""
    return _twins(name)[0]()


def compiled(name: str) -> Any:
    """The compiled twin of a registered name; ImportError when not built (tests compare both lanes even when
    RILLET_PURE selected the pure one)."""
    return _twins(name)[1]()


def __getattr__(name: str) -> Any:
    # loaded on first use, in the running lane
    if name in _TWINS:
        value = compiled(name) if COMPILED else pure(name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
