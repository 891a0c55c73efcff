"""s2 compression of routes and leaf node connections: the modes and their negotiation, as nats-server 2.15.

Pure functions, no I/O (the codec is ``rillet.cluster.s2``; the wire switch is in ``ServerConn``,
``RouteConn``/``Cluster`` and ``LeafConn``).

Modes (the strings nats-server puts in INFO, CONNECT ``compress_mode`` and /routez, /leafz ``compression``):
``off``, ``accept`` (compress only when the peer asks), ``s2_uncompressed``, ``s2_fast``, ``s2_better``,
``s2_best``, ``s2_auto`` (a level picked from the connection's RTT and the ``rtt_thresholds``), and
``not supported`` (what a peer that sends no compression field is taken to be).

Negotiation, per connection and per direction (each side writes with the level it selected, reads any):

* the side that accepted the connection sends its configured mode in its first INFO;
* the dialling side, when compression is configured (anything but off / not supported), delays its first
  INFO until it has read the peer's, then selects a mode (``select_mode``); when that mode compresses it
  sends its INFO (with the selected mode, or ``s2_auto``) uncompressed and from then on writes and reads
  s2; the accepting side reads that INFO, selects too and, when it compresses, switches first and sends
  its INFO compressed. Routes then carry on with the usual registration (the dialling side's delayed INFO
  comes after the peer's compressed INFO); a leaf then sends its CONNECT (``compress_mode``) compressed.
"""
from __future__ import annotations

NOT_SUPPORTED = "not supported"
OFF = "off"
ACCEPT = "accept"
S2_AUTO = "s2_auto"
S2_UNCOMPRESSED = "s2_uncompressed"
S2_FAST = "s2_fast"
S2_BETTER = "s2_better"
S2_BEST = "s2_best"

ROUTE_DEFAULT = ACCEPT  # nats-server's default for a cluster block
LEAF_DEFAULT = S2_AUTO  # and for the leafnodes block and each remote
ROUTE_ON = S2_FAST  # what "on"/"enabled"/"true" means in a cluster block
LEAF_ON = S2_AUTO  # and for leaf nodes

# s2_auto's default thresholds (seconds): up to 10ms uncompressed, to 50ms fast, to 100ms better, then best
DEFAULT_RTT_THRESHOLDS = (0.010, 0.050, 0.100)

# S2Writer levels by mode
WRITER_LEVEL = {S2_UNCOMPRESSED: "uncompressed", S2_FAST: "fast", S2_BETTER: "better", S2_BEST: "best"}


class CompressionConfig:
    """A normalized ``compression`` setting: a mode and, for s2_auto, the RTT thresholds (seconds)."""

    __slots__ = ("mode", "rtt_thresholds")

    def __init__(self, mode: str, rtt_thresholds: tuple[float, ...] = ()) -> None:
        self.mode = mode
        self.rtt_thresholds = tuple(rtt_thresholds)

    def thresholds(self) -> tuple[float, ...]:
        return self.rtt_thresholds or DEFAULT_RTT_THRESHOLDS

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CompressionConfig):
            return NotImplemented
        if self.mode != other.mode:
            return False
        return self.mode != S2_AUTO or self.thresholds() == other.thresholds()

    def __hash__(self) -> int:
        return hash(self.mode)

    def __repr__(self) -> str:
        if self.mode == S2_AUTO:
            return f"CompressionConfig({self.mode!r}, {self.thresholds()!r})"
        return f"CompressionConfig({self.mode!r})"


def _go_durations(values: tuple[float, ...]) -> str:
    from rillet.gocompat.gotime import format_seconds
    return "[" + " ".join(format_seconds(v) for v in values) + "]"


def normalize(mode: str, rtts: tuple[float, ...] = (), on: str = ROUTE_ON) -> CompressionConfig:
    """A configured mode (any case, nats-server's aliases) as one of the mode constants, with its thresholds
    checked and trimmed for s2_auto. ``on``: the mode "on"/"enabled"/"true" stands for. ValueError with
    nats-server's words for what it refuses."""
    m = mode.lower()
    if m in ("on", "enabled", "true"):
        m = on
    if m in ("not supported", "not_supported"):
        return CompressionConfig(NOT_SUPPORTED)
    if m in ("disabled", "off", "false"):
        return CompressionConfig(OFF)
    if m == "accept":
        return CompressionConfig(ACCEPT)
    if m in ("auto", "s2_auto"):
        if not rtts:
            return CompressionConfig(S2_AUTO)
        out: list[float] = []
        for v in rtts:
            v = max(v, 0.0)  # (negative: taken as 0, a level not used)
            if out and v != 0 and any(v < p for p in out):
                raise ValueError(f"RTT threshold values {_go_durations(tuple(rtts))} should be in ascending order")
            out.append(v)
        while out and out[-1] == 0:
            out.pop()
        if len(out) > 4:
            raise ValueError(f'compression mode "{mode}" should have no more than 4 RTT thresholds: '
                             f"{_go_durations(tuple(rtts))}")
        if not out:
            raise ValueError(f'compression mode "{mode}" requires at least one RTT threshold')
        return CompressionConfig(S2_AUTO, tuple(out))
    if m in ("fast", "s2_fast"):
        return CompressionConfig(S2_FAST)
    if m in ("better", "s2_better"):
        return CompressionConfig(S2_BETTER)
    if m in ("best", "s2_best"):
        return CompressionConfig(S2_BEST)
    # (s2_uncompressed is a level s2_auto picks and a mode a peer may announce, not a setting: nats-server
    # refuses it in a config file, and so does this)
    raise ValueError(f'unsupported compression mode "{mode}"')


def needs_compression(mode: str) -> bool:
    """Whether a connection with this (configured or negotiated) mode negotiates / compresses."""
    return mode != "" and mode != OFF and mode != NOT_SUPPORTED


def select_mode(ours: str, theirs: str) -> str:
    """The mode this side uses given our configured mode (which compresses or is accept) and the peer's
    announced one. ValueError for a mode the peer should not announce."""
    if theirs == NOT_SUPPORTED or theirs == "":
        return NOT_SUPPORTED
    if theirs == OFF:
        return OFF
    if theirs == ACCEPT:
        return OFF if ours == ACCEPT else ours
    if theirs in (S2_AUTO, S2_UNCOMPRESSED, S2_FAST, S2_BETTER, S2_BEST):
        if ours == ACCEPT:
            return S2_FAST if theirs == S2_AUTO else theirs
        return ours
    raise ValueError(f'unsupported route compression mode "{theirs}"')


def info_mode(cfg: CompressionConfig, selected: str) -> str:
    """The mode announced in the negotiation INFO: s2_auto when configured so, else the selected one."""
    return S2_AUTO if cfg.mode == S2_AUTO else selected


def level_for_rtt(rtt: float, thresholds: tuple[float, ...]) -> str:
    """s2_auto's level for an RTT (seconds): the first threshold the RTT does not exceed gives its slot
    (uncompressed, fast, better, best); a zero threshold disables its slot; past them all, best when three
    or more are given, else the last given slot."""
    idx = -1
    for i, d in enumerate(thresholds):
        if rtt <= d:
            idx = i
            break
    if idx < 0:
        idx = 3 if len(thresholds) >= 3 else len(thresholds) - 1
    return (S2_UNCOMPRESSED, S2_FAST, S2_BETTER)[idx] if idx < 3 else S2_BEST
