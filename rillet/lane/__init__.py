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

``ServerParser``, ``wire``, ``FileStore``, ``ack_numbers``, ``ack_reply`` and ``entry_codec`` are loaded on first use, so that importing this module (the client
connection does) does not load ``rillet.cluster`` or ``rillet.jetstream``. (A package rather than a top-level module: top-level modules import
no subpackage, tests/test_import_cycles.py.)
"""
from __future__ import annotations

import importlib.util
import os

from rillet.protocol import parser as _pure_parser

__all__ = ["LANE", "NAME", "REASON", "COMPILED", "ClientParser", "ServerParser", "wire", "FileStore",
           "ack_numbers", "ack_reply", "entry_codec", "pure", "compiled"]
_LAZY = ("ServerParser", "wire", "FileStore", "ack_numbers", "ack_reply", "entry_codec")


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


def pure(name: str):
    """The pure-Python twin of ``ClientParser``, ``ServerParser``, ``wire``, ``FileStore``, ``ack_numbers``,
    ``ack_reply`` or ``entry_codec``, whichever lane runs (tests)."""
    if name == "ClientParser":
        return _pure_parser.ClientParser
    if name == "FileStore":
        from rillet.jetstream.store.filestore import FileStore
        return FileStore
    if name in ("ack_numbers", "ack_reply"):
        from rillet.jetstream import acksubject
        return getattr(acksubject, name)
    if name == "entry_codec":
        from rillet.jetstream.cluster import log
        return log
    from rillet.cluster import protocol
    if name == "ServerParser":
        return protocol.ServerParser
    if name == "wire":
        return protocol
    raise AttributeError(name)


def compiled(name: str):
    """The compiled twin of ``ClientParser``, ``ServerParser``, ``wire``, ``FileStore``, ``ack_numbers``,
    ``ack_reply`` or ``entry_codec``; ImportError when not built (tests compare both lanes even when RILLET_PURE selected the pure one)."""
    if name == "ClientParser":
        from rillet._speedups._cparser import ClientParser
        return ClientParser
    if name == "FileStore":
        from rillet._speedups._cstore import FileStore
        return FileStore
    if name in ("ack_numbers", "ack_reply"):
        from rillet._speedups import _cjs
        return getattr(_cjs, name)
    if name == "entry_codec":
        from rillet._speedups import _ccluster
        return _ccluster
    from rillet._speedups import _cserver
    if name == "ServerParser":
        return _cserver.ServerParser
    if name == "wire":
        return _cserver
    raise AttributeError(name)


ClientParser = compiled("ClientParser") if COMPILED else _pure_parser.ClientParser


def __getattr__(name: str):
    # loaded on first use (rillet.cluster and rillet.jetstream are not imported by client connections)
    if name in _LAZY:
        value = compiled(name) if COMPILED else pure(name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
