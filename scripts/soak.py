#!/usr/bin/env python3
"""Soak: a 3-server Rillet cluster under mixed core and JetStream load with faults, watched for growth.

    python scripts/soak.py --quick            # ~90 s (CI)
    python scripts/soak.py --minutes 10       # the issue's soak (run it alone: flock /tmp/heavy.lock ...)

Load, all the time: core publishers fanning out to subscribers (a plain one, a queue group, a deliberately slow
one that the server must cut at max_pending, not buffer without bound), request/reply, R3 JetStream publishes with
a pull consumer acking them, KV puts, and streams created and deleted. Faults: every ``--fault-every`` seconds one
server (never server 0, which is the one measured without restarts) is SIGKILLed and restarted.

Every ``--sample`` seconds each server's RSS, open file descriptors and event-loop tasks are read (/varz ``mem``,
``rillet_fds``, ``rillet_tasks``). After a warm-up of a fifth of the run, the check compares the last third of the
samples with the second third for server 0 (steady, never restarted): RSS may grow by at most ``--rss-growth``
(default 15%) and fds and tasks by at most ``--count-growth`` (default 20 + 10%), and nothing may exceed the
hard bounds. Exit 0: flat; 1: growth (the samples are printed); 2: the run broke. The figures go in
tests/faults/README.md ("Soak").
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import nats  # noqa: E402
from nats.js.api import ConsumerConfig  # noqa: E402

from faults.cluster import Cluster, log  # noqa: E402


def varz(node) -> dict:
    return json.loads(urllib.request.urlopen(f"http://{node.host}:{node.http}/varz", timeout=3).read())


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.stop = asyncio.Event()
        self.counts: dict[str, int] = {}
        self.samples: list[dict[str, list]] = []  # per sample: {node name: [rss, fds, tasks]}

    def bump(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    async def connect(self, i: int, name: str):
        return await nats.connect(self.cluster.urls_from(i), name=name, max_reconnect_attempts=-1,
                                  reconnect_time_wait=0.2, allow_reconnect=True)

    # ---- load ------------------------------------------------------------------------------------------

    async def core(self, i: int) -> None:
        nc = await self.connect(i, f"core{i}")
        sub_nc = await self.connect(i + 1, f"core-sub{i}")
        got = 0

        async def on_msg(m) -> None:
            nonlocal got
            got += 1
        await sub_nc.subscribe(f"soak.core.{i}.>", cb=on_msg)
        await sub_nc.subscribe(f"soak.core.{i}.>", queue="q", cb=on_msg)

        async def respond(m) -> None:
            await m.respond(b"pong")
        await sub_nc.subscribe("soak.svc", queue="svc", cb=respond)
        payload = b"x" * 256
        k = 0
        while not self.stop.is_set():
            try:
                for _ in range(200):
                    await nc.publish(f"soak.core.{i}.{k % 10}", payload)
                    k += 1
                await nc.request("soak.svc", b"ping", timeout=2)
                self.bump("core_published", 200)
            except Exception:  # (a fault in progress: reconnects)
                self.bump("core_errors")
            await asyncio.sleep(0.01)
        self.bump("core_received", got)
        await nc.close()
        await sub_nc.close()

    async def slow(self) -> None:
        """A subscriber that never reads fast enough: the server must cut it (slow consumer), not hold its
        output without bound (counted from /varz slow_consumers: what the kernel buffered still reads after
        the cut, so the socket itself says little)."""
        import socket
        host, port = self.cluster.nodes[0].host, self.cluster.nodes[0].port
        while not self.stop.is_set():
            try:
                s = await asyncio.to_thread(socket.create_connection, (host, port), 5)
                s.sendall(b'CONNECT {"verbose":false}\r\nSUB soak.core.0.> 1\r\nPING\r\n')
                s.settimeout(0.5)
                t0 = time.monotonic()
                while not self.stop.is_set() and time.monotonic() - t0 < 20:
                    await asyncio.sleep(2)  # read almost nothing
                    try:
                        if not s.recv(16):
                            self.bump("slow_cut")
                            break
                    except OSError:
                        self.bump("slow_cut")
                        break
                s.close()
            except OSError:
                await asyncio.sleep(1)

    async def js(self, i: int) -> None:
        nc = await self.connect(i, f"js{i}")
        js = nc.jetstream(timeout=3)
        while not self.stop.is_set():
            try:
                await js.publish("soak.js", b"v" * 128)
                self.bump("js_acked")
            except Exception:
                self.bump("js_errors")
                await asyncio.sleep(0.1)
        await nc.close()

    async def consume(self) -> None:
        nc = await self.connect(2, "consumer")
        js = nc.jetstream(timeout=3)
        psub = None
        while not self.stop.is_set():
            try:
                if psub is None:
                    psub = await js.pull_subscribe("soak.js", durable="SOAK", stream="SOAK",
                                                   config=ConsumerConfig(ack_wait=5))
                for m in await psub.fetch(100, timeout=1):
                    await m.ack()
                    self.bump("js_consumed")
            except nats.errors.TimeoutError:
                pass
            except Exception:
                self.bump("consume_errors")
                await asyncio.sleep(0.2)
        await nc.close()

    async def kv_and_schema(self) -> None:
        nc = await self.connect(1, "kv")
        js = nc.jetstream(timeout=3)
        kv = None
        k = 0
        while not self.stop.is_set():
            try:
                if kv is None:
                    kv = await js.create_key_value(bucket="soak", history=1, num_replicas=3)
                await kv.put(f"k{k % 50}", b"%d" % k)
                self.bump("kv_puts")
                if k % 100 == 0:  # streams made and removed (their groups, files and subscriptions must go)
                    name = f"TMP{k}"
                    await js.add_stream(name=name, subjects=[f"soak.tmp.{k}"], num_replicas=3)
                    await js.publish(f"soak.tmp.{k}", b"t")
                    await js.delete_stream(name)
                    self.bump("streams_cycled")
            except Exception:
                self.bump("kv_errors")
                await asyncio.sleep(0.2)
            k += 1
            await asyncio.sleep(0.005)
        await nc.close()

    # ---- faults and samples ----------------------------------------------------------------------------

    async def faults(self) -> None:
        k = 0
        while not self.stop.is_set():
            try:
                await asyncio.wait_for(self.stop.wait(), self.a.fault_every)
                return
            except asyncio.TimeoutError:
                pass
            node = self.cluster.nodes[1 + k % (len(self.cluster.nodes) - 1)]
            k += 1
            log(f"soak: kill and restart {node.name}")
            node.kill()
            await asyncio.sleep(1.0)
            node.start()
            self.bump("restarts")

    async def sample(self) -> None:
        while not self.stop.is_set():
            row: dict[str, list] = {}
            for n in self.cluster.nodes:
                try:
                    v = await asyncio.to_thread(varz, n)
                    row[n.name] = [v.get("mem", 0), v.get("rillet_fds", 0), v.get("rillet_tasks", 0),
                                   v.get("slow_consumers", 0)]
                except (OSError, ValueError):
                    row[n.name] = [None, None, None, None]
            self.samples.append(row)
            try:
                await asyncio.wait_for(self.stop.wait(), self.a.sample)
            except asyncio.TimeoutError:
                pass

    # ---- the run ----------------------------------------------------------------------------------------

    async def run(self) -> int:
        a = self.a
        tmp = tempfile.mkdtemp(prefix="rillet-soak-")
        self.cluster = Cluster("rillet", tmp, None, sync=a.sync)
        self.cluster.start()
        try:
            nc = None
            for _ in range(100):
                try:
                    nc = await nats.connect(self.cluster.urls)
                    js = nc.jetstream(timeout=5)
                    await js.add_stream(name="SOAK", subjects=["soak.js"], num_replicas=3, max_msgs=200_000)
                    break
                except Exception:
                    if nc is not None:
                        await nc.close()
                        nc = None
                    await asyncio.sleep(0.3)
            else:
                print("soak: the cluster did not start", file=sys.stderr)
                return 2
            await nc.close()
            tasks = [asyncio.create_task(c) for c in
                     [self.core(0), self.core(1), self.slow(), self.js(0), self.js(1), self.consume(),
                      self.kv_and_schema(), self.faults(), self.sample()]]
            t_end = time.monotonic() + a.seconds
            while time.monotonic() < t_end:
                await asyncio.sleep(min(10.0, t_end - time.monotonic()))
                log(f"soak: {int(a.seconds - (t_end - time.monotonic()))}s {self.counts} "
                    f"{self.samples[-1] if self.samples else ''}")
            self.stop.set()
            await asyncio.wait(tasks, timeout=30)
            return self.check()
        finally:
            self.cluster.stop()
            if not a.keep:
                import shutil
                shutil.rmtree(tmp, ignore_errors=True)

    def check(self) -> int:
        a = self.a
        name = self.cluster.nodes[0].name
        rows = [r[name] for r in self.samples if r.get(name) and r[name][0] is not None]
        rows = rows[len(rows) // 5:]  # (after the warm-up)
        if len(rows) < 6:
            print("soak: too few samples", file=sys.stderr)
            return 2
        third = len(rows) // 3
        mid, last = rows[third:2 * third], rows[2 * third:]
        bad = []
        names = ("rss", "fds", "tasks")
        figures = {}
        for k, what in enumerate(names):
            m = statistics.mean(r[k] for r in mid)
            late = statistics.mean(r[k] for r in last)
            peak = max(r[k] for r in rows)
            figures[what] = (round(m), round(late), peak)
            allowed = m * (1 + a.rss_growth) if what == "rss" else m * 1.10 + a.count_growth
            if late > allowed:
                bad.append(f"{what} grew: {m:.0f} -> {late:.0f} (allowed {allowed:.0f})")
        print(f"==== soak: {a.seconds:.0f}s, {len(self.samples)} samples, counts {self.counts}")
        print(f"server {name} (never restarted): rss {figures['rss'][0] / 1e6:.1f} -> {figures['rss'][1] / 1e6:.1f} MB "
              f"(peak {figures['rss'][2] / 1e6:.1f}), fds {figures['fds'][0]} -> {figures['fds'][1]} "
              f"(peak {figures['fds'][2]}), tasks {figures['tasks'][0]} -> {figures['tasks'][1]} "
              f"(peak {figures['tasks'][2]})")
        cut = max((r[name][3] or 0) for r in self.samples if r.get(name) and r[name][0] is not None)
        print(f"slow consumers cut by {name}: {cut}")
        if self.counts.get("js_acked", 0) == 0 or self.counts.get("core_published", 0) == 0:
            bad.append("no load got through")
        if bad:
            for r in self.samples:
                print(json.dumps(r))
        print("RESULT: " + ("FAIL - " + "; ".join(bad) if bad else "OK (flat)"))
        return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Rillet soak: mixed load with faults, watched for growth")
    ap.add_argument("--quick", action="store_true", help="90 s (CI)")
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--fault-every", type=float, default=20.0, help="seconds between server restarts")
    ap.add_argument("--sample", type=float, default=2.0, help="seconds between samples")
    ap.add_argument("--sync", choices=["always", "default"], default="default")
    ap.add_argument("--rss-growth", type=float, default=0.15)
    ap.add_argument("--count-growth", type=float, default=20.0)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args(argv)
    args.seconds = 90.0 if args.quick else args.minutes * 60
    return asyncio.run(Soak(args).run())


if __name__ == "__main__":
    sys.exit(main())
