"""Cross-route throughput: a publisher on server A, a subscriber on server B of a 2-server cluster, for the
Go nats-server and for Rillet (one cluster at a time, servers as subprocesses), 16 B and 1 KB, 2 s each.

    python -m benchmarks.cluster_route
"""
import socket
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import loadgen as L

REPO = Path(__file__).resolve().parent.parent

def free():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def wait_port(p, t=15):
    d = time.time() + t
    while time.time() < d:
        try: socket.create_connection(("127.0.0.1", p), 0.2).close(); return
        except OSError: time.sleep(0.05)
    raise RuntimeError("no port")

def cluster(kind):
    cp = [free(), free()]; pp = [free(), free()]; procs = []
    for i in range(2):
        args = ["-a", "127.0.0.1", "-p", str(pp[i]), "--cluster_name", "x", "--cluster", f"nats://127.0.0.1:{cp[i]}",
                "--routes", f"nats://127.0.0.1:{cp[0]}"]
        cmd = ["nats-server"] if kind == "go" else [sys.executable, "-m", "rillet.server"]
        procs.append(subprocess.Popen(cmd + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO))
        wait_port(pp[i])
    time.sleep(1.5)
    return procs, [f"nats://127.0.0.1:{p}" for p in pp]

def run(urls, size, seconds=2.0):
    ctx = L._ctx(); stop = ctx.Event(); errors = ctx.SimpleQueue()
    ps, ss = ctx.Array("d", 4, lock=False), ctx.Array("d", 4, lock=False)
    sub = ctx.Process(target=L._guard, args=(errors, L._subscriber, urls[1], b"xb.t", None, None, stop, ss), daemon=True)
    sub.start(); time.sleep(0.7)
    bar = ctx.Barrier(1)
    pub = ctx.Process(target=L._guard, args=(errors, L._publisher, urls[0], b"xb.t", size, None, seconds, bar, ps), daemon=True)
    pub.start(); pub.join()
    last = -1
    while ss[L.NRECV] != last:
        last = ss[L.NRECV]; time.sleep(0.5)
    stop.set(); sub.join(3)
    el = ss[L.LAST] - ps[L.T0]
    return {"sent": ps[L.SENT], "recv": ss[L.NRECV], "rate": ss[L.NRECV] / el}

def main():
    res = {}
    for kind in ("go", "rillet"):
        procs, urls = cluster(kind)
        try:
            for size in (16, 1024):
                res[(kind, size)] = run(urls, size)
                print(kind, size, res[(kind, size)], flush=True)
        finally:
            for p in procs:
                p.terminate()
                p.wait(5)
    for size in (16, 1024):
        r, g = res[("rillet", size)], res[("go", size)]
        lost = r["sent"] - r["recv"]
        print(f"cross-route {size} B: rillet {r['rate']:.0f}/s go {g['rate']:.0f}/s "
              f"ratio {r['rate'] / g['rate']:.2f} (rillet lost {lost:.0f})")


if __name__ == "__main__":
    main()
