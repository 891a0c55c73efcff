"""Idle resident memory of Rillet and the Go nats-server, side by side: each server is started with the
same flags, and once it has logged "Server is ready" and has been idle a few seconds, its VmRSS is read from
/proc/<pid>/status. Median of --repeat runs per server and configuration, a markdown table on stdout.
No client ever connects (what tests/test_idle_rss.py measures too); with --connect, one client connects, sends
its CONNECT and a PING, reads the PONG and leaves before the idle wait (Rillet then has loaded what a client
connection uses).

    python -m benchmarks.idle_rss                  # plain, and -js -sd DIR -m PORT (the README's run)
    python -m benchmarks.idle_rss --repeat 5 --idle 5
    python -m benchmarks.idle_rss --modules        # also: which modules each Rillet configuration loads
    python -m benchmarks.idle_rss --connect        # after one client has come and gone
    python -m benchmarks.idle_rss --python VENV/bin/python   # an installed Rillet (a wheel in VENV)

--python measures the Rillet installed in another interpreter's environment (e.g. a virtual environment with
the wheel installed, as CI's scripts/smoke_wheel.sh makes one): that interpreter runs ``-m rillet.server`` from
a scratch directory with PYTHONPATH unset, so that this checkout is not what it imports. A checkout's
interpreter may run site hooks (``.pth`` files: an editable install's finder, a sandbox's certificate hook)
that an installed server's does not: ~1.4 MB at 5604e4f.

Bytecode: an installed Rillet has its .pyc files (pip writes them); a checkout run with
PYTHONDONTWRITEBYTECODE=1 compiles every module at each start, which leaves ~3 MB more behind. Unless
--no-pyc is given, Rillet runs with PYTHONPYCACHEPREFIX set to a temporary directory (warmed by one
unmeasured start), so the figures are those of an installed server whatever the environment says.
Linux only (/proc).
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HOST = "127.0.0.1"

# (label, extra flags; {dir} and {mport} are filled in per run)
CONFIGS = [
    ("plain", []),
    ("-js -sd DIR -m PORT", ["-js", "-sd", "{dir}", "-m", "{mport}"]),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def vm_rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def wait_ready(proc: subprocess.Popen, log_path: str, timeout: float = 30.0) -> None:
    """Until the server has logged "Server is ready" (both servers log it once they serve clients)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        with open(log_path, "rb") as f:
            if b"Server is ready" in f.read():
                return
        time.sleep(0.05)
    raise RuntimeError("server not ready in time")


def visit(port: int) -> None:
    """One client: connects, reads the INFO, sends a CONNECT (what nats.py sends) and a PING, waits for the PONG,
    leaves."""
    with socket.create_connection((HOST, port), 2) as s:
        s.settimeout(2)
        got = s.recv(4096)
        if not got.startswith(b"INFO"):
            raise RuntimeError("no INFO from the server")
        s.sendall(b'CONNECT {"verbose":false,"pedantic":false,"tls_required":false,"name":"idle_rss",'
                  b'"lang":"python3","version":"2.9.0","protocol":1,"echo":true,"headers":true,'
                  b'"no_responders":true}\r\nPING\r\n')
        while b"PONG" not in got:
            more = s.recv(4096)
            if not more:
                raise RuntimeError("no PONG from the server")
            got += more


def measure(cmd: list[str], flags: list[str], idle: float, env: dict[str, str] | None,
            connect: bool = False, cwd: str | None = None) -> float:
    """MB of VmRSS of one server run, ``idle`` seconds after it is ready (and, with ``connect``, visited by
    one client)."""
    port = free_port()
    store = tempfile.mkdtemp(prefix="idle-rss-")
    args = [a.format(dir=store, mport=free_port()) for a in flags]
    log = tempfile.NamedTemporaryFile(prefix="idle-rss-log-", delete=False)
    proc = subprocess.Popen(cmd + ["-a", HOST, "-p", str(port)] + args, env=env, cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=log)
    try:
        wait_ready(proc, log.name)
        if connect:
            visit(port)
        time.sleep(idle)
        return vm_rss_kb(proc.pid) / 1024
    finally:
        log.close()
        os.unlink(log.name)
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(store, ignore_errors=True)


def rillet_env(pyc: bool, cache: str, installed: bool = False) -> dict[str, str]:
    env = dict(os.environ)
    if installed:
        env.pop("PYTHONPATH", None)
    if pyc:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = cache
    return env


def loaded_modules(cmd: list[str], flags: list[str], env: dict[str, str], cwd: str | None = None) -> list[str]:
    """The modules a Rillet server has imported once ready (from ``-X importtime``)."""
    port = free_port()
    store = tempfile.mkdtemp(prefix="idle-rss-")
    args = [a.format(dir=store, mport=free_port()) for a in flags]
    with tempfile.NamedTemporaryFile("w+") as err:
        proc = subprocess.Popen([cmd[0], "-X", "importtime"] + cmd[1:] + ["-a", HOST, "-p", str(port)] + args,
                                env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err)
        try:
            wait_ready(proc, err.name)
            time.sleep(1)
        finally:
            proc.terminate()
            proc.wait(10)
            shutil.rmtree(store, ignore_errors=True)
        err.seek(0)
        return sorted({line.split("|")[2].strip() for line in err
                       if line.startswith("import time:") and "|" in line and "imported package" not in line})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--idle", type=float, default=3.0, help="seconds idle after ready before reading VmRSS")
    ap.add_argument("--rillet-cmd", default=f"{shlex.quote(sys.executable)} -m rillet.server")
    ap.add_argument("--go-cmd", default="nats-server")
    ap.add_argument("--no-pyc", action="store_true", help="run Rillet with the environment as it is")
    ap.add_argument("--modules", action="store_true", help="list the top-level packages Rillet loads")
    ap.add_argument("--connect", action="store_true", help="one client connects and leaves before the idle wait")
    ap.add_argument("--python", help="run the Rillet installed for this interpreter (from a scratch directory, "
                                     "PYTHONPATH unset) instead of this checkout's")
    a = ap.parse_args()
    if not os.path.exists("/proc/self/status"):
        print("idle_rss: needs Linux /proc", file=sys.stderr)
        return 2
    rillet = [a.python, "-m", "rillet.server"] if a.python else shlex.split(a.rillet_cmd)
    go = shlex.split(a.go_cmd)
    have_go = shutil.which(go[0]) is not None
    cache = tempfile.mkdtemp(prefix="idle-rss-pyc-")
    env = rillet_env(not a.no_pyc, cache, bool(a.python))
    # (not this checkout: ``-m`` puts the working directory first on sys.path)
    cwd = tempfile.mkdtemp(prefix="idle-rss-cwd-") if a.python else None
    try:
        measure(rillet, CONFIGS[-1][1], 0, env, a.connect, cwd)  # warms the bytecode cache; not counted
        rows = []
        for label, flags in CONFIGS:
            r = [measure(rillet, flags, a.idle, env, a.connect, cwd) for _ in range(a.repeat)]
            g = [measure(go, flags, a.idle, None, a.connect) for _ in range(a.repeat)] if have_go else []
            rows.append((label, statistics.median(r), statistics.median(g) if g else None))
            print(f"{label}: rillet {r} go {g}", file=sys.stderr)
        go_version = subprocess.run(go + ["--version"], capture_output=True, text=True).stdout.strip() \
            if have_go else "nats-server not found"
        print(f"Idle VmRSS, median of {a.repeat}, {a.idle:g} s idle after ready"
              f"{' and one client visit' if a.connect else ', no client'}; {go_version}; Python "
              f"{sys.version.split()[0]}; Rillet {'with .pyc files' if not a.no_pyc else 'as the environment runs it'}"
              f"{f', installed for {a.python}' if a.python else ', this checkout'}")
        print()
        print("| configuration | Go nats-server (MB) | Rillet (MB) | Rillet/Go | target |")
        print("|---|---:|---:|---:|---|")
        for label, r, g in rows:
            ratio = f"{r / g:.2f}" if g else "-"
            gs = f"{g:.1f}" if g else "-"
            print(f"| {label} | {gs} | {r:.1f} | {ratio} | ≤ 25 MB: {'met' if r <= 25 else 'missed'} |")
        if a.modules:
            for label, flags in CONFIGS:
                mods = loaded_modules(rillet, flags, env, cwd)
                tops = sorted({m.split(".")[0] if not m.startswith("rillet.") else ".".join(m.split(".")[:2])
                               for m in mods})
                print(f"\n{label}: {len(mods)} modules; packages: {' '.join(tops)}")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        if cwd:
            shutil.rmtree(cwd, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
