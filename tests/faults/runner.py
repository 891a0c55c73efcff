"""The JetStream fault run: a cluster, the workloads, the nemesis, the heal, the checks, the report.
``scripts/js_faults.py`` is its command line; see ``tests/faults/README.md``."""
from __future__ import annotations

import argparse
import json
import asyncio
import contextlib
import os
import random
import shutil
import tempfile
import time

from . import workloads as W
from .cluster import Cluster, Lab, log, parse_kinds
from .kvlimit import LSTREAM, LSUBJECT, KVLimitWorkload
from .linearizable import NOT_CHECKED, check_registers
from .nemesis import KINDS, Nemesis, make_plan


async def _retry(what: str, fn, timeout: float = 60.0, pause: float = 0.5):
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            return await fn()
        except Exception as e:  # retried until the deadline; the last error is raised with the message
            last = e
            await asyncio.sleep(pause)
    raise RuntimeError(f"{what}: no success in {timeout:.0f}s (last error: {W.err_text(last) if last else '-'})")


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.lab: Lab | None = None
        self.tmp = tempfile.mkdtemp(prefix="rillet-js-faults-")
        self.cluster: Cluster | None = None
        self.ctl = None
        self.failures: list[str] = []
        self.notes: set[str] = set()
        self.kvl: KVLimitWorkload | None = None  # (--kv-limit: the bucket at its max_bytes, kvlimit.py)

    async def leader_index(self, stream: str = W.STREAM) -> int | None:
        try:
            si = await self.ctl.jetstream(timeout=1.0).stream_info(stream)
        except Exception:  # (no answer during a fault: the caller falls back to a random server)
            return None
        node = self.cluster.by_name(si.cluster.leader) if si.cluster and si.cluster.leader else None
        return node.i if node else None

    async def stream_healthy(self, stream: str) -> bool:
        si = await self.ctl.jetstream(timeout=2.0).stream_info(stream)
        c = si.cluster
        return bool(c and c.leader and c.replicas is not None and len(c.replicas) == len(self.cluster.nodes) - 1
                    and all(p.current and not p.offline for p in c.replicas))

    async def wait_healthy(self, streams: list[str], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if all([await self.stream_healthy(s) for s in streams]):
                    return True
            except Exception:  # not yet: retried until the deadline
                pass
            await asyncio.sleep(0.5)
        return False

    async def main(self) -> int:
        a = self.args
        if not a.no_netns:
            self.lab = Lab(3)
            try:
                self.lab.up()
            except OSError as e:
                log(f"network namespaces not permitted ({e}); on 127.0.0.1, partitions skipped")
                self.lab = None
        self.cluster = Cluster(a.server, self.tmp, self.lab, sync=a.sync, pythonpath=a.rillet_src,
                               lazyfs=any(m.startswith("power") for m in a.modes), go_debug=a.go_debug)
        plan = make_plan(a.seed, a.modes, a.time, quick=a.quick)
        log(f"seed {a.seed}; servers {self.cluster.describe()} {self.cluster.urls}, sync_interval "
            f"{'always' if a.sync == 'always' else 'default'}; logs and stores in {self.tmp}")
        log("plan: " + "; ".join(str(f) for f in plan))
        code = 2
        try:
            self.cluster.start()
            code = await self.run(plan)
        finally:
            with contextlib.suppress(Exception):
                if self.ctl is not None:
                    await self.ctl.close()
            self.cluster.stop()
            if self.lab is not None:
                self.lab.down()
            if code == 0 and not a.keep:
                shutil.rmtree(self.tmp, ignore_errors=True)
            else:
                log(f"server logs and stores kept in {self.tmp}")
        return code

    async def run(self, plan) -> int:
        a, c = self.args, self.cluster
        self.ctl = await W.connect(c.urls, "control")
        js = self.ctl.jetstream(timeout=3.0)
        q = W.QueueWorkload(c.urls_from, n_publishers=a.publishers, timeout=a.op_timeout, rate=a.rate)
        kv = W.KVWorkload(c.urls_from, random.Random(a.seed + 1), n_clients=a.kv_clients, keys=a.kv_keys,
                          timeout=a.op_timeout, direct=a.kv_direct)
        schema = W.SchemaWorkload(c.urls_from)
        watched = [W.STREAM, f"KV_{W.BUCKET}"]
        t0 = time.monotonic()
        await _retry("create the queue stream and consumer", lambda: q.setup(js), 90)
        await _retry("create the KV bucket", lambda: kv.setup(js), 60)
        if a.kv_limit:
            self.kvl = KVLimitWorkload(c.urls_from, a.kv_limit, timeout=a.op_timeout)
            await _retry("create the KV bucket at its max_bytes", lambda: self.kvl.setup(js), 60)
            watched.append(LSTREAM)
        if not await self.wait_healthy(watched, 60):
            self.failures.append("streams not healthy before the faults")
            return self.report(q, kv, schema, [], {})
        log(f"cluster and streams ready in {time.monotonic() - t0:.1f}s; leader of {W.STREAM}: "
            f"n{await self.leader_index()}")
        tasks = [asyncio.ensure_future(q.publisher(i)) for i in range(a.publishers)]
        ctask = asyncio.ensure_future(q.consumer(2))
        tasks += [asyncio.ensure_future(kv.client(i)) for i in range(a.kv_clients)]
        stask = asyncio.ensure_future(schema.run())
        if self.kvl is not None:
            tasks.append(asyncio.ensure_future(self.kvl.run()))
        nem = Nemesis(c, self.leader_index)
        try:
            await asyncio.sleep(2.0)
            for f in plan:
                await nem.apply(f)
            healed = nem.heal()
            if healed:
                log("healed: " + ", ".join(healed))
            t1 = time.monotonic()
            ok = await self.wait_healthy(watched, a.heal_timeout)
            log(f"after the faults: streams {'healthy' if ok else 'NOT healthy'} in {time.monotonic() - t1:.1f}s")
            if not ok:
                self.failures.append(f"streams not healthy {a.heal_timeout:.0f}s after the heal")
            await asyncio.sleep(3.0)
        finally:
            q.stop.set()
            kv.stop.set()
            schema.stop.set()
            if self.kvl is not None:
                self.kvl.stop.set()
            done, pending = await asyncio.wait(tasks + [stask], timeout=a.op_timeout * 3 + 10)
            for t in pending:
                t.cancel()
            for t in done:
                if t.exception() is not None:
                    self.failures.append(f"client task died: {t.exception()!r}")
        drained = await q.drain(js, timeout=30.0)
        q.stop_consumer.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ctask, a.op_timeout * 2 + 5)
        if ctask.done() and not ctask.cancelled() and ctask.exception() is not None:
            self.failures.append(f"consumer task died: {ctask.exception()!r}")
        if not drained:
            self.failures.append("the durable consumer did not drain")
        try:
            stream = await _retry("read the stream", lambda: W.read_stream(js, W.STREAM, W.SUBJECT), 60)
        except RuntimeError as e:
            if "10059" not in str(e):
                raise
            # (nats-server after a power cut of every server: the stream is gone, and with it every value)
            self.failures.append(f"the stream {W.STREAM} was forgotten by the cluster ({e})")
            stream = []
        if a.compare_replicas and stream:
            await self.compare_replicas([(W.STREAM, W.SUBJECT), (f"KV_{W.BUCKET}", f"$KV.{W.BUCKET}.>")]
                                        + ([(LSTREAM, LSUBJECT)] if self.kvl is not None else []))
            await self.compare_consumers(W.STREAM, W.CONSUMER)
        elif self.kvl is not None:  # (no replica comparison: the bucket read through its leader only)
            try:
                held = await _retry("read the KV bucket at its limit", lambda: W.read_stream(js, LSTREAM, LSUBJECT), 60)
                self.failures += self.kvl.check(f"the leader ({await self.leader_name(LSTREAM)})", held)
            except RuntimeError as e:
                self.failures.append(f"{LSTREAM}: {e}")
        # final reads of every key by a fresh client, after the heal
        await self.final_reads(kv)
        forgotten = await self.never_forgotten(schema, q, stream)
        await q.close()
        await kv.close()
        await schema.close()
        if self.kvl is not None:
            await self.kvl.close()
        self.nemesis = nem
        return self.report(q, kv, schema, stream, forgotten, nem.done)

    async def compare_replicas(self, streams: list[tuple[str, str]]) -> None:
        """Every server in turn made the stream's leader and the stream read back in full through it: a replica
        that differs (a fork, a replica short of messages it reports as current) is a failure."""
        js = self.ctl.jetstream(timeout=5.0)
        for name, subject in streams:
            seen: dict[str, tuple[int, int]] = {}
            for node in self.cluster.nodes:
                if not await self._make_leader(node.name, lambda: self.leader_name(name),
                                               f"$JS.API.STREAM.LEADER.STEPDOWN.{name}"):
                    self.notes.add(f"{name}: could not make {node.name} the leader to read its replica")
                    continue
                msgs = None
                for attempt in range(5):  # (a leader just elected may answer 503 for a moment)
                    try:
                        msgs = await W.read_stream(js, name, subject, timeout=60.0)
                        break
                    except Exception as e:
                        err = e
                        await asyncio.sleep(1.0)
                if msgs is None:
                    self.failures.append(f"{name}: reading the replica of {node.name} failed: {W.err_text(err)}")
                    continue
                seen[node.name] = (len(msgs), hash(tuple(msgs)))
                if self.kvl is not None and name == LSTREAM:
                    self.failures += self.kvl.check(node.name, msgs)
                log(f"replica of {name} on {node.name}: {len(msgs)} messages")
            if len(set(seen.values())) > 1:
                self.failures.append(f"{name}: the replicas differ when each leads: "
                                     + ", ".join(f"{n} {c} messages" for n, (c, _) in sorted(seen.items())))

    async def _make_leader(self, name: str, leader_of, stepdown: str) -> bool:
        """Whether server ``name`` leads (``leader_of()``), after up to three stepdowns naming it as preferred."""
        for _ in range(3):
            if await leader_of() == name:
                return True
            with contextlib.suppress(Exception):  # (no answer during an election: asked again)
                await self.ctl.request(stepdown, json.dumps({"placement": {"preferred": name}}).encode(), timeout=5.0)
            for _ in range(50):
                await asyncio.sleep(0.2)
                if await leader_of() == name:
                    return True
        return False

    async def compare_consumers(self, stream: str, consumer: str) -> None:
        """Every server in turn made the durable consumer's leader and its state read through it: what was
        delivered, the acknowledged floor and what is pending must be the same on every replica (a consumer
        replica that forked, or came back behind what it had confirmed, fails)."""
        js = self.ctl.jetstream(timeout=5.0)

        async def leader() -> str | None:
            try:
                ci = await js.consumer_info(stream, consumer)
            except Exception:  # (no answer during an election)
                return None
            return ci.cluster.leader if ci.cluster else None
        seen: dict[str, tuple] = {}
        for node in self.cluster.nodes:
            if not await self._make_leader(node.name, leader,
                                           f"$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.{consumer}"):
                self.notes.add(f"{stream}/{consumer}: could not make {node.name} the consumer's leader")
                continue
            try:
                ci = await js.consumer_info(stream, consumer)
            except Exception as e:
                self.failures.append(f"{stream}/{consumer}: its info through {node.name} failed: {W.err_text(e)}")
                continue
            seen[node.name] = (ci.delivered.stream_seq, ci.ack_floor.stream_seq, ci.num_ack_pending, ci.num_pending)
            log(f"consumer {stream}/{consumer} led by {node.name}: delivered {seen[node.name][0]}, ack floor "
                f"{seen[node.name][1]}, ack pending {seen[node.name][2]}, pending {seen[node.name][3]}")
        if len(set(seen.values())) > 1:
            self.failures.append(f"{stream}/{consumer}: the consumer's replicas differ when each leads: " + ", ".join(
                f"{n} delivered {d} ack floor {a} ack pending {p} pending {q}" for n, (d, a, p, q) in sorted(seen.items())))

    async def leader_name(self, stream: str) -> str | None:
        try:
            si = await self.ctl.jetstream(timeout=1.0).stream_info(stream)
        except Exception:  # (no answer during an election)
            return None
        return si.cluster.leader if si.cluster else None

    async def final_reads(self, kv: W.KVWorkload) -> None:
        nc = await W.connect(self.cluster.urls, "kv-final")
        try:
            try:
                b = await nc.jetstream(timeout=3.0).key_value(W.BUCKET)
            except (W.nats.js.errors.BucketNotFoundError, W.nats.js.errors.NotFoundError) as e:
                self.failures.append(f"the KV bucket {W.BUCKET} was forgotten by the cluster ({W.err_text(e)})")
                return
            for key in kv.keys:
                p = kv.history.new_process()
                kv.history.invoke(p, "read", key, None)
                try:
                    e = await b.get(key)
                    kv.history.complete(p, "ok", int(e.value))
                except W.nats.js.errors.KeyNotFoundError:
                    kv.history.complete(p, "ok", None)
                except Exception as e:
                    kv.history.complete(p, "info", error=W.err_text(e))
        finally:
            await nc.close()

    async def never_forgotten(self, schema: W.SchemaWorkload, q: W.QueueWorkload,
                              stream: list[tuple[int, str]]) -> dict[str, list[str]]:
        """server name -> what it lacks: a stream or consumer whose creation was acknowledged, or messages
        (fewer than acknowledged, or fewer than the leader has, once caught up). Consumers are checked in
        each server's /jsz consumer_detail; a server whose /jsz has none is asked through the API instead
        (which only the consumer leader answers) and noted."""
        want: dict[str, tuple[int, set[str]]] = {W.STREAM: (len(stream), {W.CONSUMER}),
                                                  f"KV_{W.BUCKET}": (0, set())}
        for cr in schema.created:
            if cr.stream == "ok":
                want[cr.name] = (cr.msgs_acked, {"D"} if cr.consumer == "ok" else set())
        deadline = time.monotonic() + 30.0
        js = self.ctl.jetstream(timeout=3.0)
        while True:
            missing: dict[str, list[str]] = {}
            api_check: set[tuple[str, str]] = set()
            for n in self.cluster.nodes:
                if n.mixed and n.kind == "rillet":
                    # (a Rillet member of nats-server's JetStream cluster keeps its replicas out of its /jsz,
                    # docs/mixed-clusters.md: asked through the API and its store directory instead)
                    lacks = await self._member_lacks(n, want, js)
                    if lacks:
                        missing[n.name] = lacks
                    continue
                have = n.jsz_streams()
                if have is None:
                    missing[n.name] = ["/jsz did not answer"]
                    continue
                for name, (msgs, consumers) in want.items():
                    s = have.get(name)
                    if s is None:
                        missing.setdefault(n.name, []).append(f"stream {name}")
                        continue
                    got = int(s["state"].get("messages", 0))
                    if got < msgs:
                        missing.setdefault(n.name, []).append(f"{name}: {got} messages < {msgs}")
                    if s["consumers"] is None:
                        self.notes.add(f"{n.name}: /jsz has no consumer_detail; consumers checked through the API")
                        api_check.update((name, cn) for cn in consumers)
                        continue
                    for cn in consumers - s["consumers"]:
                        missing.setdefault(n.name, []).append(f"consumer {name}/{cn}")
            for name, cn in sorted(api_check):
                try:
                    await js.consumer_info(name, cn)
                except Exception as e:  # not found, or no answer: reported as missing
                    missing.setdefault("API", []).append(f"consumer {name}/{cn}: {W.err_text(e)}")
            if not missing or time.monotonic() > deadline:
                return missing
            await asyncio.sleep(1.0)

    async def _member_lacks(self, n, want: dict[str, tuple[int, set[str]]], js) -> list[str]:
        """What a Rillet member of a mixed cluster lacks of ``want``: a stream whose info (from its leader) does not
        name the server as its leader or a current replica, or whose replica directory is not in the server's
        store (``go_streams/<account>/<stream>``); a consumer whose info does not name it. (Its message counts are
        compared when each server leads in turn, --compare-replicas.)"""
        self.notes.add(f"{n.name}: a Rillet member of the Go servers' JetStream cluster (no streams in its /jsz): "
                       f"its replicas checked through stream/consumer info and its store directory")
        lacks: list[str] = []
        for name, (_msgs, consumers) in want.items():
            try:
                si = await js.stream_info(name)
            except Exception as e:  # not found, or no answer: reported as missing (retried until the deadline)
                lacks.append(f"stream {name}: {W.err_text(e)}")
                continue
            cl = si.cluster
            current = {r.name for r in (cl.replicas or []) if r.current and not r.offline} if cl else set()
            if cl is None or (cl.leader != n.name and n.name not in current):
                lacks.append(f"stream {name}: not its leader or a current replica")
            if not os.path.isdir(os.path.join(n.store, "go_streams", "A", name)):
                lacks.append(f"stream {name}: no replica directory in its store")
            for cn in consumers:
                try:
                    ci = await js.consumer_info(name, cn)
                except Exception as e:  # as above
                    lacks.append(f"consumer {name}/{cn}: {W.err_text(e)}")
                    continue
                cc = ci.cluster
                peers = {r.name for r in (cc.replicas or [])} | {cc.leader} if cc else set()
                if n.name not in peers:
                    lacks.append(f"consumer {name}/{cn}: not its leader or a replica")
        return lacks

    def explain(self, q: W.QueueWorkload, qr: W.QueueReport) -> None:
        """When and where the first few bad values were published, and what the nemesis was doing."""
        nem = getattr(self, "nemesis", None)
        names = {f"{n.host}:{n.port}": n.name for n in self.cluster.nodes}
        t0 = nem.timeline[0][0] if nem and nem.timeline else 0.0
        bad = [("lost", v) for v in qr.lost[:5]] + [("refused but stored", v) for v in qr.failed_present[:5]]
        bad += [("duplicated", v) for v in list(qr.duplicated)[:5]]
        for v, t_ack, t_again, seq, nd in q.redeliveries[:5]:
            print(f"  redelivered after its ack was confirmed: {v} (stream seq {seq}): ack confirmed at "
                  f"{t_ack - t0:+.2f}s ({nem.during(t_ack) if nem else ''}), delivered again (delivery {nd}) at "
                  f"{t_again - t0:+.2f}s ({nem.during(t_again) if nem else ''})")
        for what, v in bad:
            r = q.records.get(v)
            if r is None:
                continue
            when = nem.during(r.t_invoke) if nem else ""
            print(f"  {what} {v}: published at {r.t_invoke - t0:+.2f}s ({when}), answered {r.type} "
                  f"{r.error or ('seq ' + str(r.seq))} after {r.t_done - r.t_invoke:.2f}s"
                  f"{' from ' + names.get(r.server, r.server) if r.server else ''}")

    def explain_kv(self, kv: W.KVWorkload, r) -> None:
        """For a read that no linearization reaches: who wrote the value it saw, and which acknowledged
        writes had replaced that value before the read was even invoked (a stale read), with times."""
        b = r.blocked
        if b is None or b.f != "read":
            return
        ev = kv.history.events
        nem = getattr(self, "nemesis", None)
        t0 = nem.timeline[0][0] if nem and nem.timeline else ev[0].time

        def at(i: int | None) -> str:
            if i is None:
                return "never"
            t = ev[i].time
            return f"{t - t0:+.2f}s ({nem.during(t) if nem else ''})"

        def new_value(o) -> object:
            return o.arg if o.f == "write" else o.arg[1] if o.f == "cas" else None
        ops = [o for o in kv.history.ops() if o.key == b.key]
        writer = [o for o in ops if o.f in ("write", "cas") and new_value(o) == b.result]
        print(f"    read {b.key} -> {b.result!r}: invoked {at(b.call)}, returned {at(b.ret)}")
        for w in writer:
            print(f"    written by op {w.id} {w.f} {w.arg!r} ({w.type}{' ' + w.error if w.error else ''}): "
                  f"invoked {at(w.call)}, returned {at(w.ret)}")
            later = [o for o in ops if o.type == "ok" and o.f in ("write", "cas") and w.ret is not None
                     and o.call > w.ret and o.ret is not None and o.ret < b.call]
            if later:
                o = later[-1]
                print(f"    but {len(later)} acknowledged writes were invoked after it returned and acknowledged "
                      f"before the read began, the last: op {o.id} {o.f} {o.arg!r} returned {at(o.ret)}")
        if not writer:
            print("    (no operation wrote that value)")

    def dump(self, q: W.QueueWorkload, kv: W.KVWorkload) -> None:
        """The histories as JSON lines next to the logs, for a failed run."""
        import json
        with open(os.path.join(self.tmp, "kv-history.jsonl"), "w") as f:
            for e in kv.history.events:
                f.write(json.dumps({"i": e.index, "p": e.process, "type": e.type, "f": e.f, "key": e.key,
                                    "value": e.value, "t": round(e.time, 4), "error": e.error}) + "\n")
        with open(os.path.join(self.tmp, "queue-publishes.jsonl"), "w") as f:
            for r in q.records.values():
                f.write(json.dumps(r.__dict__) + "\n")
        nem = getattr(self, "nemesis", None)
        if nem is not None:
            with open(os.path.join(self.tmp, "nemesis.jsonl"), "w") as f:
                for a, b, what in nem.timeline:
                    f.write(json.dumps({"start": round(a, 4), "end": round(b, 4), "what": what}) + "\n")
        log(f"histories written to {self.tmp}/*.jsonl")

    def report(self, q: W.QueueWorkload, kv: W.KVWorkload, schema: W.SchemaWorkload,
               stream: list[tuple[int, str]], forgotten: dict[str, list[str]], faults: list[str] = ()) -> int:
        a = self.args
        print()
        print(f"==== js_faults report: server {a.server} ({self.cluster.describe()}), seed {a.seed}, nemesis "
              f"{','.join(a.modes)}, sync_interval {'always' if a.sync == 'always' else 'default'}")
        print("faults: " + ("; ".join(faults) or "none"))
        bad = list(self.failures)
        qr = W.check_queue(q.records, stream, q.consumed)
        for line in qr.lines():
            print(line)
        print(f"queue: consumer deliveries {q.deliveries}, acks that failed {q.ack_failures}, deliveries of a value "
              f"whose ack had been confirmed {q.redelivered_after_ack} (values seen again after their ack was "
              f"confirmed but received before it: {q.seen_after_ack - q.redelivered_after_ack})")
        errs: dict[str, int] = {}
        for r in q.records.values():
            if r.error:
                errs[r.error] = errs.get(r.error, 0) + 1
        if errs:
            print("queue: publish errors: " + ", ".join(f"{k} x{v}" for k, v in sorted(errs.items(), key=lambda kv: -kv[1])[:8]))
        if q.redelivered_after_ack:
            # an AckSync answered only once the ack is committed (nats-server): the value must not come again
            bad.append(f"{q.redelivered_after_ack} deliveries of values whose ack had been confirmed")
        if not qr.ok or q.redelivered_after_ack:
            self.explain(q, qr)
        loss_ok = self._loss_reported() if a.reported_loss_ok else ""
        if not qr.ok and loss_ok and not (qr.duplicated or qr.unexpected or qr.failed_present or qr.seq_mismatch
                                          or qr.seq_reused):
            print(f"queue: acknowledged values lost, as a majority's power cut must lose them, and reported "
                  f"({loss_ok}); nothing duplicated, forked or acknowledged twice")
        elif not qr.ok:
            bad.append("queue check failed")
        if qr.acked == 0:
            bad.append("no publish was acknowledged")
        for line, failure in self.quorum_outages(q):
            print(line)
            if failure:
                bad.append(failure)
        counts = kv.history.counts()
        print("kv: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        results = check_registers(kv.history.ops(), max_steps=a.lin_budget)
        for r in results:
            print("kv: " + r.describe())
            if r.valid is False:
                self.explain_kv(kv, r)
        if any(r.valid is False for r in results) and loss_ok:
            print("kv: not linearizable across the reported loss (acknowledged writes lost with it)")
        elif any(r.valid is False for r in results):
            bad.append("kv history not linearizable")
        if any(r.valid == NOT_CHECKED for r in results):
            print("kv: (a key whose search ran out of budget is neither passed nor failed)")
        if kv.rev_conflicts:
            bad.append(f"kv: one revision, two values: {kv.rev_conflicts[:5]}")
        if self.kvl is not None:
            lr = self.kvl.summary()
            for line in lr.lines():
                print(line)
            if lr.acked == 0:
                bad.append("kv-limit: no put was acknowledged")
            elif lr.replicas and all(first <= 1 for _n, first, _m, _b in lr.replicas.values()):
                bad.append("kv-limit: the bucket never reached its max_bytes (nothing evicted): lower --kv-limit")
            if self.kvl.acked_twice:
                bad.append(f"kv-limit: {self.kvl.acked_twice[:3]}")
        made = [cr for cr in schema.created if cr.stream == "ok"]
        print(f"schema: {len(schema.created)} stream creations tried, {len(made)} acknowledged, "
              f"{sum(1 for cr in made if cr.consumer == 'ok')} consumers acknowledged")
        for server, what in sorted(forgotten.items()):
            print(f"forgotten on {server}: {what[:10]}{' ...' if len(what) > 10 else ''}")
        for note in sorted(self.notes):
            print("note: " + note)
        if forgotten and loss_ok:
            print("forgotten: acknowledged messages or streams missing, within the reported loss")
        elif forgotten:
            bad.append("acknowledged streams/consumers/messages missing on a server")
        if bad:
            self.dump(q, kv)
        print("RESULT: " + ("FAIL - " + "; ".join(bad) if bad else "OK"))
        return 1 if bad else 0


    def quorum_outages(self, q: W.QueueWorkload) -> list[tuple[str, str]]:
        """For each fault that takes two or three servers down at once (kill-two, kill-all, power-two, power-all):
        how many publishes invoked after it began were acknowledged before the servers were started again (none
        may be: no quorum; a failure otherwise), and how long after that restart the first publish was
        acknowledged (the operators' drill's "back within" figure). (line, failure or "") pairs."""
        nem = getattr(self, "nemesis", None)
        out: list[tuple[str, str]] = []
        if nem is None:
            return out
        acks = sorted(r.t_done for r in q.records.values() if r.type == "ok")
        for a, b, what in nem.timeline:
            kind = what.split()[0]
            if kind not in ("kill-two", "kill-all", "power-two", "power-all"):
                continue
            during = sum(1 for r in q.records.values() if r.type == "ok" and r.t_invoke > a + 0.2 and r.t_done < b)
            after = next((t for t in acks if t > b), None)
            back = f"{after - b:.2f}s" if after is not None else "never"
            out.append((f"quorum outage: {what}: {during} publishes acknowledged while it lasted, the first "
                        f"acknowledged {back} after the restart",
                        f"{during} publishes acknowledged during {what}" if during else ""))
        return out

    def _loss_reported(self) -> str:
        """(--reported-loss-ok) Whether every server's log reports the queue stream's and the KV bucket's lost
        committed entries (a majority's power cut with the lazy default cannot keep them; it must say so):
        a summary, or "" when some server does not."""
        found = []
        for n in self.cluster.nodes:
            try:
                with open(n.logfile, errors="replace") as f:
                    text = f.read()
            except OSError:
                return ""
            lines = [ln for ln in text.splitlines() if "committed RAFT entries" in ln and " lost " in ln]
            if not any(f"> {W.STREAM}'" in ln for ln in lines):
                return ""
            found.append(f"{n.name}: {len(lines)} loss reports")
        return ", ".join(found)


def _server_kinds(value: str) -> str:
    try:
        parse_kinds(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description="Jepsen-style fault runs for a clustered JetStream "
                                             "(3 servers in network namespaces)")
    ap.add_argument("--server", default="rillet", type=_server_kinds,
                    help="rillet (rillet-server), go (nats-server), mixed1 (n0 Go, n1 and n2 Rillet), mixed2 (n0 and "
                         "n1 Go, n2 Rillet) or a list of three kinds, e.g. go,rillet,go (Rillet servers of a mixed "
                         "cluster run as members of nats-server's JetStream cluster: docs/mixed-clusters.md)")
    ap.add_argument("--nemesis", default="kill,pause,partition",
                    help=f"comma-separated modes, run in turn ({', '.join(KINDS)})")
    ap.add_argument("--time", type=float, default=60.0, help="seconds of faults per mode")
    ap.add_argument("--quick", action="store_true", help="each kind of fault of each mode once, short (~2 min)")
    ap.add_argument("--seed", type=int, default=None, help="seed of the fault plan and the KV clients")
    ap.add_argument("--sync", choices=["always", "default"], default="always",
                    help="jetstream sync_interval: always, or the server's default")
    ap.add_argument("--publishers", type=int, default=3)
    ap.add_argument("--rate", type=float, default=500.0,
                    help="queue publishes a second, all publishers together (0: unlimited)")
    ap.add_argument("--kv-clients", type=int, default=5)
    ap.add_argument("--kv-keys", type=int, default=3)
    ap.add_argument("--kv-limit", type=int, default=None, metavar="BYTES",
                    help="also put new keys into an R3 KV bucket with this max_bytes (e.g. 32768), evicting steadily, "
                         "and check every replica keeps every acknowledged put it has not evicted "
                         "(tests/faults/kvlimit.py; the operators' KV drill: by default 32768 with --nemesis drill, "
                         "else 0, off)")
    ap.add_argument("--kv-direct", action="store_true",
                    help="KV bucket with allow_direct (reads from any replica: not linearizable by design)")
    ap.add_argument("--op-timeout", type=float, default=3.0, help="client timeout of each operation")
    ap.add_argument("--heal-timeout", type=float, default=60.0)
    ap.add_argument("--lin-budget", type=int, default=3_000_000, help="search steps per key")
    ap.add_argument("--indeterminate-errors", default="",
                    help="comma-separated JetStream err_codes to take as indeterminate (info), not refusals, "
                         "e.g. 10077 to look past a known wrong refusal")
    ap.add_argument("--no-netns", action="store_true", help="on 127.0.0.1 (no partitions)")
    ap.add_argument("--rillet-src", default="",
                    help="directory holding the rillet package the servers run (e.g. a `git archive HEAD` copy; "
                         "default: the installed one)")
    ap.add_argument("--keep", action="store_true", help="keep logs and stores after a good run")
    ap.add_argument("--go-debug", action="store_true",
                    help="nats-server servers log their debug lines too (debug: true), e.g. to see a replica's "
                         "WAL truncations and catch-ups")
    ap.add_argument("--reported-loss-ok", action="store_true",
                    help="(--sync default, a majority's power cuts) acknowledged values lost pass when every server "
                         "reports the stream's loss; duplicates, forks and sequences acknowledged twice still fail")
    ap.add_argument("--no-compare-replicas", dest="compare_replicas", action="store_false",
                    help="skip the end check that makes each server the leader in turn and reads the stream back")
    return ap


KV_LIMIT_DRILL = 32768  # (--kv-limit's default with --nemesis drill: ~115 values of ~280 bytes)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.modes = [m for m in args.nemesis.split(",") if m]
    for m in args.modes:
        if m not in KINDS:
            parser().error(f"unknown nemesis mode {m!r}")
    if args.kv_limit is None:  # (the operators' drill has its KV bucket at max_bytes unless told otherwise)
        args.kv_limit = KV_LIMIT_DRILL if "drill" in args.modes else 0
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    log(f"seed {args.seed}")
    W.INDETERMINATE_ERR_CODES.update(int(x) for x in args.indeterminate_errors.split(",") if x.strip())
    if W.INDETERMINATE_ERR_CODES:
        log(f"err_codes taken as indeterminate: {sorted(W.INDETERMINATE_ERR_CODES)}")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return asyncio.run(Run(args).main())
