"""The installed server, driven as a user would: run by scripts/smoke_wheel.sh with the Python of a fresh
virtual environment where the rillet wheel (not an editable install) was installed.

Checks that the installed server runs the compiled lane (``--version``, the startup log, /varz
``rillet_lane``), starts ``rillet-server -js -sd DIR`` from the environment's bin directory, creates a file stream with the
environment's ``rillet`` command line, publishes (CLI and nats-py), consumes with a pull consumer, reads
/jsz, stops the server with SIGTERM, restarts it on the same store and finds the messages again. Any
failure exits non-zero with the server's log.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


class SmokeFailure(Exception):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, bin_dir: Path, work: Path, name: str, port: int, http: int) -> None:
        self.log_path = work / f"{name}.log"
        self.log_file = open(self.log_path, "w")
        cmd = [str(bin_dir / "rillet-server"), "-js", "-sd", str(work / "data"), "-a", "127.0.0.1",
               "-p", str(port), "-m", str(http)]
        print("wheel smoke: $", " ".join(cmd), flush=True)
        self.proc = subprocess.Popen(cmd, stdout=self.log_file, stderr=subprocess.STDOUT, cwd=work)

    @property
    def log(self) -> str:
        if not self.log_file.closed:
            self.log_file.flush()
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while "Server is ready" not in self.log:
            if self.proc.poll() is not None:
                raise SmokeFailure(f"rillet-server exited with status {self.proc.returncode} before it was ready")
            if time.monotonic() > deadline:
                raise SmokeFailure(f"rillet-server not ready after {timeout}s")
            time.sleep(0.05)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                raise SmokeFailure("rillet-server did not stop within 15s of SIGTERM")
        self.log_file.close()
        return self.proc.returncode


def cli(bin_dir: Path, url: str, *args: str) -> str:
    cmd = [str(bin_dir / "rillet"), "--server", url, *args]
    print("wheel smoke: $", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        raise SmokeFailure(f"{' '.join(cmd)} exited with {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p.stdout


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


async def publish_and_consume(url: str) -> None:
    import nats

    nc = await nats.connect(url, connect_timeout=5, allow_reconnect=False)
    try:
        js = nc.jetstream()
        for i in range(3):
            ack = await js.publish("smoke.py", f"py-{i}".encode())
            if ack.stream != "SMOKE" or ack.seq != 2 + i:
                raise SmokeFailure(f"unexpected publish ack {ack}")
        sub = await js.pull_subscribe("smoke.>", durable="SMOKE_C")
        msgs = await sub.fetch(4, timeout=5)
        got = [m.data.decode() for m in msgs]
        if got != ["from-cli", "py-0", "py-1", "py-2"]:
            raise SmokeFailure(f"consumed {got}")
        for m in msgs:
            await m.ack_sync()
        info = await js.consumer_info("SMOKE", "SMOKE_C")
        if info.num_ack_pending != 0 or info.delivered.stream_seq != 4:
            raise SmokeFailure(f"consumer state after acks: {info}")
    finally:
        await nc.close()


async def check_after_restart(url: str) -> None:
    import nats

    nc = await nats.connect(url, connect_timeout=5, allow_reconnect=False)
    try:
        js = nc.jetstream()
        si = await js.stream_info("SMOKE")
        if si.state.messages != 4 or si.state.last_seq != 4:
            raise SmokeFailure(f"stream state after restart: {si.state}")
        msg = await js.get_msg("SMOKE", 4)
        if msg.data != b"py-2":
            raise SmokeFailure(f"message 4 after restart: {msg.data!r}")
    finally:
        await nc.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, type=Path, help="the virtual environment's bin directory")
    ap.add_argument("--work", required=True, type=Path, help="a scratch directory")
    a = ap.parse_args()

    import rillet
    where = Path(rillet.__file__).resolve()
    print(f"wheel smoke: rillet {getattr(rillet, '__version__', '?')} imported from {where}", flush=True)
    if "site-packages" not in where.parts:
        raise SmokeFailure(f"rillet is not imported from the installed wheel but from {where}")

    port, http = free_port(), free_port()
    url = f"nats://127.0.0.1:{port}"
    servers = []
    try:
        # the installed server runs the compiled lane (rillet.lane): --version, the startup log and /varz say so
        env = {k: v for k, v in os.environ.items() if k != "RILLET_PURE"}
        version = subprocess.run([str(a.bin / "rillet-server"), "--version"], capture_output=True, text=True,
                                 timeout=60, env=env).stdout.strip()
        print(f"wheel smoke: {version}", flush=True)
        if not version.endswith(", compiled lane)"):
            raise SmokeFailure(f"the installed server does not run the compiled lane: {version!r}")
        srv = Server(a.bin, a.work, "server", port, http)
        servers.append(srv)
        srv.wait_ready()
        lane = get_json(f"http://127.0.0.1:{http}/varz").get("rillet_lane")
        if lane != "compiled" or "Lane:     compiled lane" not in srv.log:
            raise SmokeFailure(f"/varz rillet_lane is {lane!r}; the log's lane line: "
                               f"{[x for x in srv.log.splitlines() if 'Lane:' in x]}")
        out = cli(a.bin, url, "stream", "add", "SMOKE", "--subjects", "smoke.>", "--storage", "file")
        if "SMOKE" not in out:
            raise SmokeFailure(f"stream add printed:\n{out}")
        cli(a.bin, url, "pub", "--jetstream", "smoke.cli", "from-cli")
        asyncio.run(publish_and_consume(url))
        jsz = get_json(f"http://127.0.0.1:{http}/jsz")
        if jsz.get("streams") != 1 or jsz.get("messages") != 4 or jsz.get("consumers") != 1:
            raise SmokeFailure(f"/jsz: {jsz}")
        rc = srv.stop()
        if rc != 0:
            raise SmokeFailure(f"rillet-server exited with status {rc} after SIGTERM")

        srv = Server(a.bin, a.work, "restart", port, http)
        servers.append(srv)
        srv.wait_ready()
        asyncio.run(check_after_restart(url))
        rc = srv.stop()
        if rc != 0:
            raise SmokeFailure(f"restarted rillet-server exited with status {rc} after SIGTERM")
        for s in servers:
            bad = [line for line in s.log.splitlines() if "[FTL]" in line or "[ERR]" in line or "Traceback" in line]
            if bad:
                raise SmokeFailure(f"{s.log_path.name} has errors:\n" + "\n".join(bad))
    except BaseException as e:
        for s in servers:
            if s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait(5)
            print(f"----- {s.log_path.name} -----\n{s.log}", file=sys.stderr)
        if isinstance(e, SmokeFailure):
            print(f"wheel smoke: FAILED: {e}", file=sys.stderr)
            return 1
        raise
    print("wheel smoke: OK (installed wheel: compiled lane, server start, stream, publish, consume, monitor, "
          "restart)",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
