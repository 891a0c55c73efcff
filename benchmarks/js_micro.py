"""Fixed in-process JetStream hot-path workloads, for instruction counts (``valgrind --tool=callgrind``) or CPU
time, in either lane (rillet.lane): no server, no sockets, no event loop.

    python -m benchmarks.js_micro CASE N [pure|compiled]      # CPU µs per operation
    python -m benchmarks.js_micro --callgrind [N1 N2] [CASE ...]   # instructions per operation, both lanes

``--callgrind`` runs each case twice under callgrind (N1 and N2 operations) in each lane and reports the
difference per operation, so start-up costs cancel out.

Cases:

    store_file16   FileStore.store_msg, one subject, 16 B (append: record, CRC, write, index)
    store_file1k   the same, 1 KB
    store_hdr16    the same with a 20-byte header
    store_kv16     1,000 subjects in turn, max_msgs_per_subject 1 (each append removes the subject's last)
    store_mem16    MemStore.store_msg (no compiled twin: the figure the file store is measured against)
    entry_codec    a replicated stream's MSG entry: rillet.jetstream.cluster.log encode_entry + decode_entry
    entry_ack_codec  the same for a consumer's ack entry
    ack_parse      an ack subject's numbers (rillet.jetstream.acksubject.ack_numbers, the consumer's _on_ack)
    ack_reply      a delivery's ack reply subject (rillet.jetstream.acksubject.ack_reply, the consumer's _run)
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

# cases whose code has no compiled twin (measured once: the same code runs in both lanes)
NO_TWIN = ("store_mem16",)
CASES = ("store_file16", "store_file1k", "store_hdr16", "store_kv16", "store_mem16", "entry_codec", "entry_ack_codec", "ack_parse",
         "ack_reply")


def _filestore(lane_name: str):
    import rillet.jetstream  # noqa: F401  (registers its lane twins)
    from rillet import lane
    return (lane.compiled if lane_name == "compiled" else lane.pure)("FileStore")


def run_case(case: str, n: int, lane_name: str) -> float:
    """CPU seconds for ``n`` operations of ``case``."""
    if case.startswith("store_"):
        from rillet.jetstream.store.base import StoreConfig
        from rillet.jetstream.store.memstore import MemStore
        d = tempfile.mkdtemp(prefix="rillet-jsmicro-")
        try:
            kw = {"max_msgs_per_subject": 1} if case == "store_kv16" else {}
            if case == "store_mem16":
                st = MemStore(StoreConfig(storage="memory", **kw))
            else:
                st = _filestore(lane_name)(d, StoreConfig(**kw))
            subjects = [f"kv.key.{i}" for i in range(1000)] if case == "store_kv16" else ["bench.js"]
            ns = len(subjects)
            data = b"x" * (1024 if case == "store_file1k" else 16)
            hdr = b"NATS/1.0\r\nA: b\r\n\r\n" if case == "store_hdr16" else b""
            for i in range(min(n, 100)):  # warm up: the block and its subjects exist
                st.store_msg(subjects[i % ns], hdr, data)
            t0 = time.process_time()
            for i in range(n):
                st.store_msg(subjects[i % ns], hdr, data)
            dt = time.process_time() - t0
            st.stop()
            return dt
        finally:
            shutil.rmtree(d, ignore_errors=True)
    if case in ("entry_codec", "entry_ack_codec"):
        import rillet.jetstream  # noqa: F401  (registers its lane twins)
        from rillet import lane
        from rillet.jetstream.log import Entry
        codec = (lane.compiled if lane_name == "compiled" else lane.pure)("entry_codec")
        encode_entry, decode_entry = codec.encode_entry, codec.decode_entry
        if case == "entry_codec":
            e, target = Entry(Entry.MSG, ("bench.js", b"", b"x" * 16, time.time_ns(), 0, None, 0), b"_INBOX.abc.1"), ""
        else:
            e, target = Entry(Entry.C_ACK, (123456, 123456, time.time_ns(), 123457)), "C1"
        t0 = time.process_time()
        for _ in range(n):
            decode_entry(encode_entry(e, target))
        return time.process_time() - t0
    if case == "ack_parse":
        import rillet.jetstream  # noqa: F401  (registers its lane twins)
        from rillet import lane
        ack_numbers = (lane.compiled if lane_name == "compiled" else lane.pure)("ack_numbers")
        subject = b"$JS.ACK.BENCH.C1.1.123456.123456.1764377000000000000.49999"
        t0 = time.process_time()
        for _ in range(n):
            ack_numbers(subject)
        return time.process_time() - t0
    if case == "ack_reply":
        import rillet.jetstream  # noqa: F401  (registers its lane twins)
        from rillet import lane
        ack_reply = (lane.compiled if lane_name == "compiled" else lane.pure)("ack_reply")
        prefix = "$JS.ACK.BENCH.C1."
        t0 = time.process_time()
        for i in range(n):
            ack_reply(prefix, 1, i, i, 1764377000000000000, 49999)
        return time.process_time() - t0
    raise SystemExit(f"unknown case {case!r}")


def callgrind(case: str, n: int, lane_name: str) -> int:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-m",
                        "benchmarks.js_micro", case, str(n), lane_name], check=True, capture_output=True)
        with open(out) as f:
            for line in f:
                m = re.match(r"(?:summary|totals): (\d+)", line)
                if m:
                    return int(m.group(1))
    raise RuntimeError("no callgrind totals")


def main() -> None:
    args = sys.argv[1:]
    if args and args[0] == "--callgrind":
        rest = args[1:]
        n1, n2 = (int(rest[0]), int(rest[1])) if len(rest) >= 2 and rest[0].isdigit() else (2000, 12000)
        cases = [a for a in rest if not a.isdigit()] or CASES
        for case in cases:
            figures = []
            for lane_name in ("pure",) if case in NO_TWIN else ("pure", "compiled"):
                a = callgrind(case, n1, lane_name)
                b = callgrind(case, n2, lane_name)
                figures.append((b - a) / (n2 - n1))
            if case in NO_TWIN:
                print(f"{case:14s} {figures[0]:8.0f} instructions/op (no compiled twin)", flush=True)
            else:
                print(f"{case:14s} pure {figures[0]:8.0f}  compiled {figures[1]:8.0f} instructions/op", flush=True)
        return
    case, n = args[0], int(args[1])
    lane_name = args[2] if len(args) > 2 else "compiled"
    dt = run_case(case, n, lane_name)
    print(f"{case} {lane_name} {dt / n * 1e6:.3f} us/op")


if __name__ == "__main__":
    main()
