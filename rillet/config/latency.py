"""The ``latency`` entry of a service export, parsed and checked as nats-server does.

``latency: "lat.svc"`` (100% sampling) or ``latency: {sampling: 50%, subject: "lat.svc"}``; ``sampling:
headers`` measures only requests that carry a tracing header. The config builder checks it when the file is
loaded (``-t``), and the server's latency tracking (``rillet.server.latency``) uses the parsed ``Latency``.
"""
from __future__ import annotations

import re
from typing import Any

from rillet.gocompat.goquote import go_quote, go_type as _go_type

DEFAULT_SAMPLING = 100
HEADERS_SAMPLING = 0  # sampling driven by tracing headers only

BAD_SAMPLING = "bad sampling percentage, should be 1-100"


class Latency:
    """The latency settings of one service export."""

    __slots__ = ("sampling", "subject")

    def __init__(self, sampling: int, subject: str) -> None:
        self.sampling = sampling
        self.subject = subject



def _atoi(s: str) -> int:
    """Go's strconv.Atoi, with its error text."""
    if not re.fullmatch(r"[+-]?[0-9]+", s):
        raise ValueError(f"Failed to parse latency sample: strconv.Atoi: parsing {go_quote(s)}: invalid syntax")
    n = int(s)
    if not -(1 << 63) <= n < (1 << 63):
        raise ValueError(f"Failed to parse latency sample: strconv.Atoi: parsing {go_quote(s)}: value out of range")
    return n


def parse_latency(v: Any) -> Latency:
    """The ``latency`` value of a service export (a subject, or a map). ValueError with nats-server's text."""
    if isinstance(v, str):
        return Latency(DEFAULT_SAMPLING, v)
    if not isinstance(v, dict):
        raise ValueError(f"Expected latency entry to be a map/struct or string, got {_go_type(v)}")
    sampling = DEFAULT_SAMPLING
    if "sampling" in v:
        s = v["sampling"]
        header = False
        if isinstance(s, int) and not isinstance(s, bool):
            n = s
        elif isinstance(s, str):
            if s.strip().lower() == "headers":
                header = True
                n = HEADERS_SAMPLING
            else:
                n = _atoi(s[:-1] if s.endswith("%") else s)
        else:
            raise ValueError(f"Expected latency sample to be a string or map/struct, got {_go_type(s)}")
        if not header and not 1 <= n <= 100:
            raise ValueError(BAD_SAMPLING)
        sampling = n
    if "subject" not in v:
        raise ValueError("Latency subject required, but missing")
    subj = v["subject"]
    if not isinstance(subj, str):
        # (nats-server names the type of the empty string it would have filled in, not of the value)
        raise ValueError("Expected latency subject to be a string, got string")
    return Latency(sampling, subj)
