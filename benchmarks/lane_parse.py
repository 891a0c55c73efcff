"""Micro-benchmark of the parsers and frame builders in both lanes (rillet.lane): CPU nanoseconds per
operation, pure-Python against compiled, with handlers that do nothing (the parser's own cost only).

    python -m benchmarks.lane_parse                 # every case, best of 5 runs
    python -m benchmarks.lane_parse --only pub16,rmsg16 --repeat 9 --json out.json

Each case feeds a buffer of about 64 KiB of identical operations (what one socket read carries under
load) to a fresh parser, again and again for ``--seconds``; the figure is process CPU time per operation,
the best of ``--repeat`` runs (CPU time rather than wall time: the machine may be shared).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import rillet.cluster  # noqa: F401  (registers its lane twins: ServerParser, wire)
from rillet import lane


class NullHandler:
    """Every handler method of both protocols, doing nothing."""

    def _nothing(self, *a):
        return None

    proto_pub = proto_hpub = proto_sub = proto_unsub = proto_ping = proto_pong = _nothing
    proto_rmsg = proto_hmsg = proto_lmsg = proto_leaf_msg = proto_leaf_hmsg = _nothing
    proto_rs_sub = proto_rs_unsub = proto_ls_sub = proto_ls_unsub = proto_leaf_sub = proto_leaf_unsub = _nothing


P16 = b"x" * 16
P128 = b"x" * 128
HDR = b"NATS/1.0\r\nA: b\r\n\r\n"

# name -> (parser kind: "client" or a server connection kind, one operation's bytes)
PARSE_CASES: dict[str, tuple[str, bytes]] = {
    "pub16": ("client", b"PUB foo.bar 16\r\n" + P16 + b"\r\n"),
    "pub128": ("client", b"PUB foo.bar 128\r\n" + P128 + b"\r\n"),
    "pub16_reply": ("client", b"PUB foo.bar _INBOX.abcdefgh.12345 16\r\n" + P16 + b"\r\n"),
    "hpub16": ("client", b"HPUB foo.bar %d %d\r\n" % (len(HDR), len(HDR) + 16) + HDR + P16 + b"\r\n"),
    "sub": ("client", b"SUB foo.bar.baz 12345\r\n"),
    "sub_queue": ("client", b"SUB foo.bar.baz workers 12345\r\n"),
    "unsub": ("client", b"UNSUB 12345 10\r\n"),
    "ping": ("client", b"PING\r\n"),
    "rmsg16": ("ROUTER", b"RMSG $G foo.bar 16\r\n" + P16 + b"\r\n"),
    "rmsg16_reply": ("ROUTER", b"RMSG $G foo.bar _INBOX.abcdefgh.12345 16\r\n" + P16 + b"\r\n"),
    "rmsg16_queues": ("ROUTER", b"RMSG $G foo.bar + _INBOX.abc q1 q2 16\r\n" + P16 + b"\r\n"),
    "hmsg16": ("ROUTER", b"HMSG $G foo.bar %d %d\r\n" % (len(HDR), len(HDR) + 16) + HDR + P16 + b"\r\n"),
    "lmsg16_leaf": ("LEAF", b"LMSG foo.bar 16\r\n" + P16 + b"\r\n"),
    "rs_sub": ("ROUTER", b"RS+ $G foo.bar.baz\r\n"),
    "rs_sub_queue": ("ROUTER", b"RS+ $G foo.bar.baz workers 1\r\n"),
    "ls_unsub_leaf": ("LEAF", b"LS- foo.bar.baz\r\n"),
}

BUILD_CASES = {
    "rmsg_head": lambda w: w.rmsg_head(b"$G", b"foo.bar", None, (), 16),
    "rmsg_head_reply": lambda w: w.rmsg_head(b"$G", b"foo.bar", b"_INBOX.abcdefgh.12345", (), 16),
    "rmsg_head_queues": lambda w: w.rmsg_head(b"$G", b"foo.bar", b"_INBOX.abc", (b"q1", b"q2"), 16),
    "hmsg_head": lambda w: w.hmsg_head(b"$G", b"foo.bar", None, (), 19, 35),
    "leaf_msg_head": lambda w: w.leaf_msg_head(b"foo.bar", None, (), 16),
}

BUF = 64 * 1024


def _parser(lane_name: str, kind: str):
    get = lane.compiled if lane_name == "compiled" else lane.pure
    if kind == "client":
        return get("ClientParser")(NullHandler())
    return get("ServerParser")(NullHandler(), kind)


def bench_parse(lane_name: str, kind: str, op: bytes, seconds: float) -> float:
    n = max(1, BUF // len(op))
    data = op * n
    _parser(lane_name, kind).feed(data)  # warm up (and fail early)
    ops = 0
    t0 = time.process_time()
    while True:
        for _ in range(20):
            _parser(lane_name, kind).feed(data)
        ops += 20 * n
        el = time.process_time() - t0
        if el >= seconds:
            return el * 1e9 / ops


def bench_build(lane_name: str, fn, seconds: float) -> float:
    w = lane.compiled("wire") if lane_name == "compiled" else lane.pure("wire")
    ops = 0
    t0 = time.process_time()
    while True:
        for _ in range(10000):
            fn(w)
        ops += 10000
        el = time.process_time() - t0
        if el >= seconds:
            return el * 1e9 / ops


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated case names")
    ap.add_argument("--seconds", type=float, default=0.3, help="CPU seconds per run (default 0.3)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per case and lane; the best counts")
    ap.add_argument("--json", help="write the figures here too")
    a = ap.parse_args(argv)
    try:
        lane.compiled("ClientParser")
    except ImportError as e:
        print(f"the compiled lane is not built ({e}): `pip install -e .` first", file=sys.stderr)
        return 1
    only = set(a.only.split(",")) if a.only else None
    rows = []
    cases = [(n, "parse", c) for n, c in PARSE_CASES.items()] + [(n, "build", c) for n, c in BUILD_CASES.items()]
    for name, what, case in cases:
        if only and name not in only:
            continue
        res = {}
        for ln in ("pure", "compiled"):
            runs = [bench_parse(ln, case[0], case[1], a.seconds) if what == "parse" else
                    bench_build(ln, case, a.seconds) for _ in range(a.repeat)]
            res[ln] = min(runs)
        rows.append({"case": name, "pure_ns": round(res["pure"], 1), "compiled_ns": round(res["compiled"], 1),
                     "speedup": round(res["pure"] / res["compiled"], 2)})
        print(f"{name:18} pure {res['pure']:8.1f} ns/op   compiled {res['compiled']:8.1f} ns/op   "
              f"x{res['pure'] / res['compiled']:.2f}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"python": sys.version.split()[0], "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
