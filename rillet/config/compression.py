"""The ``compression`` setting of a ``cluster {}`` block, a ``leafnodes {}`` block and a leaf remote, as
nats-server reads it: a string (``off``, ``accept``, ``s2_fast``, ``s2_better``, ``s2_best``, ``s2_auto``
and their aliases), a boolean (true: s2_fast for routes, s2_auto for leaf nodes), or a map ``{ mode,
rtt_thresholds: ["10ms", ...] }``. nats-server checks the mode when the server starts; here it is checked
at load with its error text and the key's file:line:col."""
from __future__ import annotations

from rillet.compression import CompressionConfig, normalize
from rillet.gocompat.goquote import go_type

from .typed import Field
from rillet.gocompat.gotime import parse_go_duration


def parse_compression(f: Field, on: str) -> CompressionConfig:
    """``f``: the compression entry; ``on``: the mode "on"/"true" stands for here."""
    v = f.value
    rtts: list[float] = []
    if isinstance(v, bool):
        mode = on if v else "off"
    elif isinstance(v, str):
        mode = v
    elif isinstance(v, dict):
        mode = ""
        for e in f.entries():
            name = e.name.lower()
            if name == "mode":
                mode = e.as_str()
            elif name in ("rtt_thresholds", "thresholds", "rtts", "rtt"):
                for item in e.items():
                    try:
                        rtts.append(parse_go_duration(item.as_str()))
                    except ValueError as err:
                        raise item.error(str(err)) from None
            elif not e.used_var:
                raise e.error(f'unknown field "{e.key}"')
    else:
        raise f.error(f'field "{f.key}" should be a boolean or a structure, got {go_type(v)}')
    if mode == "":  # (a map without a mode: the default mode applies, as nats-server)
        return CompressionConfig("", tuple(rtts))
    try:
        return normalize(mode, tuple(rtts), on)
    except ValueError as e:
        raise f.error(str(e)) from None
