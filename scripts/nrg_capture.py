"""Record the RAFT ($NRG.>) and stream catch-up ($JSC.>) traffic of a 3-server Go nats-server JetStream cluster.

A client of the system account subscribed to ``$NRG.>`` receives every RAFT message of the cluster: the
interest it makes is propagated over the routes, so each server forwards its group traffic to the server the
client is connected to. While it listens, a workload exercises the meta, stream and consumer groups (R1/R3,
file/memory, pull and push consumers, acks, a consumer reset, KV, updates, purges, deletes, an atomic batch, a
large message that is sent compressed, an R1 stream scaled to R3, leader step-downs, a server stopped and
restarted so that it catches up, a server removed). The servers are then stopped and the RAFT snapshots they wrote are read from their store
directories.

    python scripts/nrg_capture.py OUT.json [--keep-all]

OUT.json holds ``{"version": ..., "servers": {name: peer id}, "messages": [[subject, reply, b64], ...],
"snapshots": [[group, file name, b64], ...]}``; by default repeated identical payloads are kept once.
Used by tests/test_raft_gowire.py (live, and through the stored corpus tests/data/nrg_go_corpus.json).
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nats

SERVERS = ("g0", "g1", "g2")
T = 20  # seconds: the workload's request timeouts


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GoCluster:
    """Three nats-server processes in one JetStream cluster (accounts SYS and A), started from ``root``."""

    def __init__(self, root: Path, names=SERVERS, binary: str = "nats-server", extra_routes=()) -> None:
        self.root = root
        self.names = names
        self.binary = binary
        self.extra_routes = tuple(extra_routes)  # route ports of other (e.g. Rillet) servers of the cluster
        self.client_ports = {n: _free_port() for n in names}
        self.route_ports = {n: _free_port() for n in names}
        self.procs: dict[str, subprocess.Popen] = {}

    def conf(self, name: str) -> Path:
        routes = ", ".join([f"nats://127.0.0.1:{self.route_ports[o]}" for o in self.names if o != name]
                           + [f"nats://127.0.0.1:{p}" for p in self.extra_routes])
        path = self.root / f"{name}.conf"
        path.write_text(f"""
server_name: {name}
listen: 127.0.0.1:{self.client_ports[name]}
jetstream {{ store_dir: "{self.root / ('store-' + name)}" }}
accounts {{
  SYS {{ users [{{user: sys, password: sys}}] }}
  A {{ jetstream: enabled, users [{{user: a, password: a}}] }}
}}
system_account: SYS
cluster {{ name: C1, listen: 127.0.0.1:{self.route_ports[name]}, routes: [{routes}] }}
""")
        return path

    def start(self, name: str) -> None:
        for attempt in range(3):
            logpath = self.root / f"{name}.log"
            before = logpath.stat().st_size if logpath.exists() else 0
            with open(logpath, "ab") as log:
                self.procs[name] = subprocess.Popen([self.binary, "-c", str(self.conf(name))], stdout=log,
                                                    stderr=log)
            deadline = time.monotonic() + 30

            def said() -> bytes:
                with open(logpath, "rb") as f:
                    f.seek(before)
                    return f.read()
            # ready: its log says so (client and route listeners up) and its client port answers (a port can
            # answer for another process that took it meanwhile: the log tells ours from it)
            while self.procs[name].poll() is None and time.monotonic() < deadline:
                out = said()
                if b"Server is ready" in out and b"Listening for route connections" in out:
                    try:
                        socket.create_connection(("127.0.0.1", self.client_ports[name]), timeout=0.5).close()
                        return
                    except OSError:
                        pass
                time.sleep(0.05)
            if self.procs[name].poll() is None or b"address already in use" not in said() or attempt == 2:
                raise RuntimeError(f"nats-server {name} did not start, see {logpath}")
            # (a port picked free was taken meanwhile by another process of a busy machine: new ports; the
            # servers started before find this one through its own routes to them)
            self.procs.pop(name)
            self.client_ports[name], self.route_ports[name] = _free_port(), _free_port()

    def stop(self, name: str) -> None:
        p = self.procs.pop(name, None)
        if p is None:
            return
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def start_all(self) -> None:
        for n in self.names:
            self.start(n)

    def stop_all(self) -> None:
        for n in list(self.procs):
            self.stop(n)

    def url(self, name: str, user: str = "a") -> str:
        return f"nats://{user}:{user}@127.0.0.1:{self.client_ports[name]}"

    def snapshots(self) -> list[tuple[str, str, bytes]]:
        """(group, file name, bytes) of every RAFT snapshot file the stopped servers left."""
        out = []
        for n in self.names:
            for f in sorted((self.root / f"store-{n}").rglob("snapshots/snap.*")):
                out.append((f.parent.parent.name, f"{n}:{f.name}", f.read_bytes()))
        return out


async def _until(fn, timeout: float = 40.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            r = await fn()
            if r:
                return r
        except Exception as e:  # noqa: BLE001 - retried until the deadline, re-raised with context below
            last = e
        await asyncio.sleep(0.2)
    raise TimeoutError(f"timed out waiting for {what}: {last!r}")


async def _fetch(sub, n: int) -> list:
    """``n`` messages of a pull consumer just created: the create is answered by its leader before that
    leader's interest in the pull requests reached every server (a request meanwhile gets no responder)."""
    import nats.js.errors
    deadline = time.monotonic() + 40
    while True:
        try:
            return await sub.fetch(n, timeout=T)
        except (nats.js.errors.ServiceUnavailableError, nats.errors.NoRespondersError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def _js_ready(nc) -> bool:
    r = await nc.request("$JS.API.INFO", b"", timeout=2)
    return b'"error"' not in r.data


async def workload(cluster: GoCluster, record: list) -> None:
    """Drive the cluster while a system client records its $NRG/$JSC messages into ``record``."""
    sysnc = await nats.connect(cluster.url("g0", "sys"))

    async def on_msg(m):
        record.append((m.subject, m.reply or "", bytes(m.data)))

    await sysnc.subscribe("$NRG.>", cb=on_msg)
    await sysnc.subscribe("$JSC.>", cb=on_msg)
    await sysnc.flush()

    # (deadlines are generous and waits are polled: the capture also runs as a test, on busy machines)
    nc = await nats.connect(cluster.url("g0"))
    await _until(lambda: _js_ready(nc), 60, what="JetStream meta leader")
    js = nc.jetstream(timeout=30)
    from nats.js.api import ConsumerConfig, StreamConfig, StorageType, AckPolicy

    await js.add_stream(StreamConfig(name="ORDERS", subjects=["orders.>"], num_replicas=3,
                                     allow_atomic_publish=True) if _has_field(StreamConfig, "allow_atomic_publish")
                        else StreamConfig(name="ORDERS", subjects=["orders.>"], num_replicas=3))
    await js.add_stream(StreamConfig(name="MEM", subjects=["mem.>"], num_replicas=3, storage=StorageType.MEMORY))
    await js.add_stream(StreamConfig(name="ONE", subjects=["one.>"], num_replicas=1))
    for i in range(20):
        await js.publish(f"orders.{i % 3}", f"order {i}".encode(), headers={"X-Seq": str(i)})
    await js.publish("orders.big", b"abcdefgh" * 4096)  # over 8 KiB and compressible: sent compressed
    await js.publish("orders.dedupe", b"once", headers={"Nats-Msg-Id": "m1"})
    for i in range(5):
        await js.publish(f"mem.{i}", b"m")
        await js.publish(f"one.{i}", b"o")
    # atomic batch (headers as nats-server 2.11+ reads them); refused answers are fine, traffic is what we want
    await nc.request("$JS.API.STREAM.UPDATE.ORDERS", json.dumps(
        {"name": "ORDERS", "subjects": ["orders.>"], "num_replicas": 3, "allow_atomic": True,
         "max_msgs_per_subject": 100}).encode(), timeout=T)
    for seq in (1, 2, 3):
        hdrs = {"Nats-Batch-Id": "batch-1", "Nats-Batch-Sequence": str(seq)}
        if seq == 3:
            hdrs["Nats-Batch-Commit"] = "1"
            await nc.request("orders.batch", b"b%d" % seq, headers=hdrs, timeout=T)
        else:
            await nc.publish("orders.batch", b"b%d" % seq, headers=hdrs)

    # consumers: pull (acked, naked), push, filtered
    await js.add_consumer("ORDERS", ConsumerConfig(durable_name="pull", ack_policy=AckPolicy.EXPLICIT))
    psub = await js.pull_subscribe_bind("pull", "ORDERS")
    msgs = await _fetch(psub, 10)
    for i, m in enumerate(msgs):
        if i % 4 == 3:
            await m.nak()
        else:
            await m.ack()
    await js.add_consumer("ORDERS", ConsumerConfig(durable_name="filtered", filter_subject="orders.1",
                                                   ack_policy=AckPolicy.EXPLICIT))
    fsub = await js.pull_subscribe_bind("filtered", "ORDERS")
    for m in await _fetch(fsub, 3):
        await m.ack_sync()
    got = asyncio.Event()

    async def push_cb(m):
        await m.ack()
        got.set()

    await js.subscribe("orders.2", durable="push", cb=push_cb, manual_ack=True)
    await asyncio.wait_for(got.wait(), T)
    # a pull request left waiting (pending request entries)
    wait_sub = await js.pull_subscribe("mem.>", durable="memwait")
    try:
        await wait_sub.fetch(10, timeout=1)
    except Exception:  # noqa: BLE001 - a partial fetch times out; only the traffic matters
        pass

    # KV
    kv = await js.create_key_value(bucket="CFG", replicas=3, history=3)
    for i in range(5):
        await kv.put(f"k{i % 2}", f"v{i}".encode())
    await kv.delete("k0")
    await kv.purge("k1")

    # stream admin: update, purge (filtered), delete one message
    await nc.request("$JS.API.STREAM.UPDATE.ONE", json.dumps(
        {"name": "ONE", "subjects": ["one.>"], "num_replicas": 1, "max_msgs": 1000}).encode(), timeout=T)
    await nc.request("$JS.API.STREAM.PURGE.ORDERS", json.dumps({"filter": "orders.0"}).encode(), timeout=T)
    await nc.request("$JS.API.STREAM.MSG.DELETE.ORDERS", json.dumps({"seq": 2}).encode(), timeout=T)
    await nc.request("$JS.API.STREAM.MSG.DELETE.ORDERS", json.dumps({"seq": 3, "no_erase": True}).encode(),
                     timeout=T)

    # a consumer reset to a sequence (2.14+)
    await nc.request("$JS.API.CONSUMER.RESET.ORDERS.pull", json.dumps({"seq": 5}).encode(), timeout=T)
    # an R1 stream with a consumer scaled to R3: its consumers are re-proposed (compressed assignments)
    await js.add_stream(StreamConfig(name="SCALE", subjects=["scale.>"], num_replicas=1))
    await js.publish("scale.a", b"s")
    await js.add_consumer("SCALE", ConsumerConfig(durable_name="sc", ack_policy=AckPolicy.EXPLICIT))
    await nc.request("$JS.API.STREAM.UPDATE.SCALE", json.dumps(
        {"name": "SCALE", "subjects": ["scale.>"], "num_replicas": 3}).encode(), timeout=T)
    # gaps in a memory stream: a replica restarted later is caught up with delete ranges
    for i in range(5, 12):
        await js.publish(f"mem.{i}", b"m")
    for seq in (6, 7, 8, 9):
        await nc.request("$JS.API.STREAM.MSG.DELETE.MEM", json.dumps({"seq": seq}).encode(), timeout=T)
    await nc.request("$JS.API.STREAM.LIST", b"{}", timeout=T)
    await nc.request("$JS.API.CONSUMER.LIST.ORDERS", b"{}", timeout=T)
    await nc.request("$JS.API.CONSUMER.INFO.ORDERS.pull", b"", timeout=T)

    # leader changes: a stream, a consumer, the meta group
    await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.ORDERS", b"", timeout=T)
    await nc.request("$JS.API.CONSUMER.LEADER.STEPDOWN.ORDERS.pull", b"", timeout=T)
    await sysnc.request("$JS.API.META.LEADER.STEPDOWN", b"{}", timeout=T)
    await _until(lambda: _js_ready(nc), 60, what="meta leader after step-down")
    await asyncio.sleep(1)

    # a follower misses entries and catches up (picked once ORDERS has its new leader: not that one)
    async def orders_leader():
        i = json.loads((await nc.request("$JS.API.STREAM.INFO.ORDERS", b"", timeout=T)).data)
        return i.get("cluster", {}).get("leader")
    leader = await _until(orders_leader, 60, what="a leader of ORDERS after its step-down")
    victim = next(n for n in cluster.names if n not in (leader, "g0"))
    cluster.stop(victim)
    for i in range(30):
        await js.publish("orders.late", f"late {i}".encode())
    await kv.put("late", b"1")
    await js.add_consumer("MEM", ConsumerConfig(durable_name="made_while_down", ack_policy=AckPolicy.EXPLICIT))
    cluster.start(victim)

    async def caught_up():
        i = json.loads((await nc.request("$JS.API.STREAM.INFO.ORDERS", b"", timeout=T)).data)
        reps = i.get("cluster", {}).get("replicas", [])
        return any(r["name"] == victim and r.get("current") for r in reps)

    await _until(caught_up, 90, "the restarted server to catch up")

    # removals
    await nc.request("$JS.API.CONSUMER.DELETE.ORDERS.push", b"", timeout=T)
    await nc.request("$JS.API.STREAM.DELETE.ONE", b"", timeout=T)
    # a server removed from the meta group
    cluster.stop(victim)
    await asyncio.sleep(0.5)
    await sysnc.request("$JS.API.SERVER.REMOVE", json.dumps({"peer": victim}).encode(), timeout=T)
    await asyncio.sleep(1.5)
    await sysnc.flush()
    await nc.close()
    await sysnc.close()


def _has_field(cls, name: str) -> bool:
    return name in getattr(cls, "__dataclass_fields__", {})


def capture(root: Path, binary: str = "nats-server") -> dict:
    """Run the workload on a fresh Go cluster under ``root``; everything recorded, not deduplicated."""
    from rillet.raft.gowire import peer_id

    cluster = GoCluster(root, binary=binary)
    record: list = []
    cluster.start_all()
    try:
        asyncio.run(workload(cluster, record))
    finally:
        cluster.stop_all()
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
    return {"version": version, "servers": {n: peer_id(n) for n in cluster.names},
            "messages": record, "snapshots": cluster.snapshots()}


def dedupe(messages: list) -> list:
    seen = set()
    out = []
    for subj, reply, data in messages:
        kind = subj.split(".")[1] if subj.startswith("$NRG.") else subj.split(".")[1] if "." in subj else subj
        key = (kind, data)
        if key not in seen:
            seen.add(key)
            out.append((subj, reply, data))
    return out


def to_json(cap: dict) -> dict:
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return {"version": cap["version"], "servers": cap["servers"],
            "messages": [[s, r, b64(d)] for s, r, d in cap["messages"]],
            "snapshots": [[g, f, b64(d)] for g, f, d in cap["snapshots"]]}


def from_json(doc: dict) -> dict:
    return {"version": doc["version"], "servers": doc["servers"],
            "messages": [(s, r, base64.b64decode(d)) for s, r, d in doc["messages"]],
            "snapshots": [(g, f, base64.b64decode(d)) for g, f, d in doc["snapshots"]]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--keep-all", action="store_true", help="keep repeated identical payloads")
    ap.add_argument("--binary", default=shutil.which("nats-server") or "nats-server")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="nrgcap-") as d:
        cap = capture(Path(d), args.binary)
    total = len(cap["messages"])
    if not args.keep_all:
        cap["messages"] = dedupe(cap["messages"])
    Path(args.out).write_text(json.dumps(to_json(cap), indent=0) + "\n")
    print(f"{cap['version']}: {total} messages recorded, {len(cap['messages'])} kept, "
          f"{len(cap['snapshots'])} snapshots -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
