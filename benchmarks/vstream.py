"""Virtual streams over a super-cluster: Go nats-server and Rillet side by side on the same topology, one after
the other in one run, and the ratio Rillet/Go.

    python -m benchmarks.vstream                           # both kinds, 1 run each (~4 min)
    python -m benchmarks.vstream --kinds rillet --runs 3 --json out.json

Topology (``scripts/vstream_faults.py``'s ``VLab``: the walk-through's servers, each in its own network
namespace on one bridge): regions ``west``, ``central``, ``east``, each a cluster of 3 servers named after the
region, plus a 4th cluster ``stretch`` of 3 servers, one "in" each region (server tags ``region:<r>``; no
``unique_tag``: the regional servers have no region tag and would then be refused for every stream, and an
R3 stream over 3 servers is one per region anyway), the 4 clusters joined by gateways: 12 servers, one meta group. The
virtual stream ``foo`` is made by ``rillet vstream create foo --replicas 3`` (write and read streams R3,
placed by cluster); the stretch stream ``global`` (subjects ``global.>``, R3, ``placement {cluster:
stretch}``) gets one replica per region. A region "is" its cluster's 3 servers plus its stretch server: a
region outage stops all four, a partition between regions cuts every server pair across them. A stretch
cluster needs its own cluster because a stream's peers are all in one cluster (nats-server and Rillet);
tagging the regional clusters' servers would not make a stream span them.

Measures:

  latency   a client in ``west`` (connected to the west cluster) publishes ``--msgs`` synchronous JetStream
            messages (nats-py, one at a time, after 50 warm-up ones) on ``foo.lat.<i>`` (the mapping stores
            them in ``foo-write-west``, R3 in west), then the same from the west client to ``plain``
            (``plain.>``, R3, placed in west, nothing sourcing it), which separates the virtual stream's own
            cost (the mapping, and three read streams sourcing every write, all on the same 2 cores) from the
            R3 replication; then a client of the stretch server holding ``global``'s leader publishes as many
            on ``global.near.<i>`` (R3 over the three regions: one round trip to a quorum between regions),
            then a client of another region's stretch server on ``global.far.<i>`` (its publishes and acks
            also cross between regions); p50 / p99 of the round trip. Without ``--wan-delay`` the regions
            are not apart (loopback and a bridge; no ``tc netem`` on this kernel: ``Specified qdisc kind is
            unknown``).
  restart   the region ``east`` is stopped (SIGTERM, its 3 servers and its stretch server), ``--converge-msgs``
            are published in each of west and central, ``--hold`` seconds pass, east is started again:
            seconds from the start command until every read stream holds everything in the write streams
            (the restarted servers' start-up and catch-up included).
  split     west is cut from central+east for ``--hold`` seconds, ``--converge-msgs`` published in every
            region meanwhile; seconds from the heal until every read stream holds everything.

``--wan-delay MS``: every link between regions goes through a delaying TCP proxy (``benchmarks/wan.py``, one
process per server, in that server's network namespace, so a cut between two regions still cuts the proxied
connections): each server has a proxy in front of its gateway port (and, in the stretch cluster, of its route
port) that delays every chunk by MS in each direction for a connection from another region's address, and
copies without delay from its own region's (a regional server's gateway to its region's stretch server). The
gateway URLs of every server, the stretch cluster's routes, and ``gateway { advertise }`` / ``cluster {
advertise }`` (so gossip hands out the proxied address) all point at the proxies; the routes inside a regional
cluster and the clients' connections stay direct. Before measuring, every server's /gatewayz (each outbound
gateway connected to a proxy port) and the stretch servers' /routez (every route through a proxy) are checked,
and the proxies' counters are reported. ``--wan-delay 0`` goes through the proxies without delay (their own
cost); without the option there are no proxies.

Each run checks at the end that every read stream holds every acknowledged message exactly once.
Servers ping every 1 s (``ping_interval``, ``ping_max: 3``) in both kinds so that a cut gateway is noticed
within seconds.
"""
from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import nats

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def _faults_module():
    name = "vstream_faults"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, "scripts", "vstream_faults.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


vf = _faults_module()
REGIONS = vf.REGIONS
say = vf.say
STRETCH = tuple(("stretch", r, (f"region:{r}",)) for r in REGIONS)
GW_PROXY, ROUTE_PROXY, PROXY_STATS = 17222, 16222, 18999  # (in every server's namespace, beside its ports)


def wan_setup(lab, delay_ms: float) -> list:
    """Point every cross-region link of ``lab`` at delaying proxies (see the module's docstring) and start
    them: one ``benchmarks.wan`` process per server, in its namespace. Returns the processes."""
    from benchmarks import wan
    procs = []
    try:
        for s in lab.servers:
            with open(s.conf) as f:
                text = f.read()

            def sub(old: str, new: str) -> str:
                assert text.count(old) >= 1, (s.name, old)
                return text.replace(old, new)
            for t in lab.servers:
                if t.cluster != s.cluster:
                    text = sub(f"nats://{t.host}:{t.gport}", f"nats://{t.host}:{GW_PROXY}")
            text = sub(f"gateway {{\n  name: {s.cluster}\n  listen: {s.host}:{s.gport}\n",
                       f"gateway {{\n  name: {s.cluster}\n  listen: {s.host}:{s.gport}\n"
                       f'  advertise: "{s.host}:{GW_PROXY}"\n')
            forwards = [("gateway", f"{s.host}:{GW_PROXY}", f"{s.host}:{s.gport}")]
            if s.cluster == "stretch":
                for t in lab.servers:
                    if t.cluster == s.cluster and t is not s:
                        text = sub(f"nats-route://{t.host}:{t.rport}", f"nats-route://{t.host}:{ROUTE_PROXY}")
                text = sub(f"  listen: {s.host}:{s.rport}\n",
                           f"  listen: {s.host}:{s.rport}\n  advertise: \"{s.host}:{ROUTE_PROXY}\"\n")
                forwards.append(("route", f"{s.host}:{ROUTE_PROXY}", f"{s.host}:{s.rport}"))
            with open(s.conf, "w") as f:
                f.write(text)
            near = [t.host for t in lab.servers if t.region == s.region]
            procs.append(wan.start(forwards, delay_ms, near, stats_at=f"{s.host}:{PROXY_STATS}", netns=s.netns))
    except BaseException:
        wan_stop(procs)
        raise
    return procs


def wan_stop(procs: list) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait()


def wan_check(lab) -> dict:
    """Every outbound gateway (/gatewayz) connected to a proxy port, every stretch route (/routez) through
    a proxy (solicited: to a peer's proxy port; accepted: from the local proxy, i.e. from the server's own
    address), and the proxies' counters."""
    from benchmarks import wan
    out = {"gateways": 0, "gateways_proxied": 0, "routes": 0, "routes_proxied": 0,
           "proxy_open_delayed": 0, "proxy_open": 0, "proxy_accepted_delayed": 0, "proxy_accepted_near": 0,
           "proxy_connect_failed": 0}
    for s in lab.servers:
        gz = s.http_json("/gatewayz")
        for name, g in (gz.get("outbound_gateways") or {}).items():
            out["gateways"] += 1
            out["gateways_proxied"] += (g.get("connection") or {}).get("port") == GW_PROXY
        if s.cluster == "stretch":
            for r in s.http_json("/routez").get("routes") or []:
                out["routes"] += 1
                out["routes_proxied"] += r.get("port") == ROUTE_PROXY or r.get("ip") == s.host
        st = wan.stats(s.host, PROXY_STATS)
        for f in st.values():
            out["proxy_open"] += f["open"]
            out["proxy_accepted_delayed"] += f["accepted_delayed"]
            out["proxy_accepted_near"] += f["accepted_near"]
            out["proxy_connect_failed"] += f["connect_failed"]
    return out


def cpu_seconds(lab) -> float:
    """User + system CPU seconds of every running server (``ip netns exec`` execs the server: same pid)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for srv in lab.servers:
        if srv.proc is None or srv.proc.poll() is not None:
            continue
        try:
            with open(f"/proc/{srv.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def latencies(nc: nats.NATS, subject: str, n: int, expect_stream: str) -> list[float]:
    js = nc.jetstream(timeout=5)
    for i in range(50):  # (warm-up; the first may wait for a leader)
        await vf.wt.wait_for("a warm-up publish", lambda: js.publish(f"{subject}.w{i}", b"x" * 16), 30)
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        ack = await js.publish(f"{subject}.{i}", b"x" * 16)
        out.append(time.perf_counter() - t0)
        assert ack.stream == expect_stream, ack
    return out


async def run_kind(kind: str, args: argparse.Namespace) -> dict:
    d = tempfile.mkdtemp(prefix=f"rillet-vsbench-{kind}-")
    lab = vf.VLab(d, kind, per_region=3, extra=STRETCH)
    res: dict = {"kind": kind, "wan_delay_ms": args.wan_delay}
    t_all = time.monotonic()
    proxies: list = []
    book = vf.Book()
    try:
        if args.wan_delay is not None:
            proxies = wan_setup(lab, args.wan_delay)
            say(f"{kind}: {len(proxies)} proxies delaying cross-region links by {args.wan_delay} ms each way")
        lab.start(REGIONS)
        await vf.wt.js_ready(lab, REGIONS)
        say(f"{kind}: 12 servers up ({time.monotonic() - t_all:.0f}s); creating foo and global")
        await vf.create_vstream(lab, argparse.Namespace(ordering=False, replicas=3))
        nc = await nats.connect(lab.cluster_urls("stretch", "west"), dont_randomize=True, error_cb=vf.wt._quiet)
        js = nc.jetstream(timeout=10)
        await vf.wt.wait_for("stream global", lambda: js.add_stream(
            name="global", subjects=["global.>"], num_replicas=3,
            placement=nats.js.api.Placement(cluster="stretch")), 60)
        await vf.wt.wait_for("stream plain", lambda: js.add_stream(
            name="plain", subjects=["plain.>"], num_replicas=3,
            placement=nats.js.api.Placement(cluster="west")), 60)
        info = await js.stream_info("global")
        say(f"  global: leader {info.cluster.leader}, replicas "
            f"{[r.name for r in info.cluster.replicas or []]}")
        if proxies:
            w = res["wan"] = wan_check(lab)
            say(f"  through the proxies: {w['gateways_proxied']} of {w['gateways']} outbound gateways, "
                f"{w['routes_proxied']} of {w['routes']} stretch routes (each counted on both ends); proxies: "
                f"{w['proxy_open']} connections open, {w['proxy_accepted_delayed']} accepted from another "
                f"region, {w['proxy_accepted_near']} from the same region, {w['proxy_connect_failed']} failed")

        # -- latency: local R3 write stream vs the stretch R3 stream
        wnc = await nats.connect(lab.cluster_urls("west", "west"), dont_randomize=True, error_cb=vf.wt._quiet)
        cpu = {}
        c0 = cpu_seconds(lab)
        local = await latencies(wnc, "foo.lat", args.msgs, vf.write_name(vf.NAME, "west"))
        # (the latency messages: counted as acknowledged foo messages of west)
        for i in list(range(args.msgs)) + [f"w{i}" for i in range(50)]:
            book.attempted[f"foo.lat.{i}"] = "west"
            book.acked.add(f"foo.lat.{i}")
        await vf.converge(lab, args.deadline, book)  # (the read streams' copies belong to the write's cost)
        c1 = cpu_seconds(lab)
        plain = await latencies(wnc, "plain", args.msgs, "plain")
        c2 = cpu_seconds(lab)
        # (from a client of the stretch server where global's leader is: one round trip to a quorum; then
        # from a client in another region: the publish also crosses to the leader and the ack back)
        leader = (await js.stream_info("global")).cluster.leader or "stretch-west"
        near_r = leader.split("-", 1)[1]
        far_r = next(r for r in REGIONS if r != near_r)
        res["stretch_leader"] = leader
        await nc.close()
        nc = await nats.connect(lab.cluster_urls("stretch", near_r), dont_randomize=True, error_cb=vf.wt._quiet)
        stretch = await latencies(nc, "global.near", args.msgs, "global")
        c3 = cpu_seconds(lab)
        fnc = await nats.connect(lab.cluster_urls("stretch", far_r), dont_randomize=True, error_cb=vf.wt._quiet)
        far = await latencies(fnc, "global.far", args.msgs, "global")
        await fnc.close()
        c4 = cpu_seconds(lab)
        say(f"  stretch publishes: global's leader {leader}; 'stretch' from a client of {leader}, "
            f"'stretch_far' from one of stretch-{far_r}")
        cpu = {"local": c1 - c0, "plain": c2 - c1, "stretch": c3 - c2, "stretch_far": c4 - c3}
        await wnc.close()
        await nc.close()
        for label, xs in (("local", local), ("plain", plain), ("stretch", stretch), ("stretch_far", far)):
            res[f"{label}_cpu_ms_per_msg"] = cpu[label] * 1e3 / (len(xs) + 50)
            res[f"{label}_p50_ms"] = pct(xs, 0.50) * 1e3
            res[f"{label}_p99_ms"] = pct(xs, 0.99) * 1e3
            say(f"  {label} R3 publish: p50 {res[f'{label}_p50_ms']:.2f} ms, p99 {res[f'{label}_p99_ms']:.2f} ms"
                f" ({len(xs)} msgs, mean {statistics.mean(xs) * 1e3:.2f} ms; servers' CPU "
                f"{res[f'{label}_cpu_ms_per_msg']:.2f} ms per message)")
        took, _, total, _ = await vf.converge(lab, args.deadline, book)
        say(f"  every read stream at {total} ({took})")

        # -- region restart
        n = args.converge_msgs
        lab.stop(["east"])
        t0 = time.monotonic()
        say("  " + await vf.publish_all(lab, ["west", "central"], "restart", n, book))
        await asyncio.sleep(max(0.0, args.hold - (time.monotonic() - t0)))
        t0 = time.monotonic()
        lab.start(["east"])
        took, counts, total, _ = await vf.converge(lab, args.deadline, book)
        res["restart_s"] = None if took is None else time.monotonic() - t0
        say(f"  region restart: every read stream at {total} "
            + (f"{res['restart_s']:.2f}s after the restart" if took is not None
               else f"NOT within {args.deadline}s: {counts}"))
        await vf.wt.js_ready(lab, REGIONS)

        # -- split brain heal
        t0 = time.monotonic()
        lab.partition(["west"], ["central", "east"])
        say("  " + await vf.publish_all(lab, REGIONS, "split", n, book))
        await asyncio.sleep(max(0.0, args.hold - (time.monotonic() - t0)))
        t0 = time.monotonic()
        lab.heal()
        took, counts, total, _ = await vf.converge(lab, args.deadline, book)
        res["split_s"] = None if took is None else time.monotonic() - t0
        say(f"  split brain: every read stream at {total} "
            + (f"{res['split_s']:.2f}s after the heal" if took is not None
               else f"NOT within {args.deadline}s: {counts}"))
        res["exactly_once"] = await vf.check_all(lab, book)
        if proxies:
            res["wan_end"] = wan_check(lab)
    finally:
        lab.close()
        wan_stop(proxies)
        shutil.rmtree(d, ignore_errors=True)
    res["wall_s"] = time.monotonic() - t_all
    return res


def fmt(v: float | None, unit: str = "") -> str:
    return "-" if v is None else f"{v:.2f}{unit}"


def table(runs: dict[str, list[dict]], wan_delay: float | None = None) -> str:
    def med(kind: str, key: str) -> float | None:
        xs = [r.get(key) for r in runs.get(kind, [])]
        xs = [x for x in xs if x is not None]
        return statistics.median(xs) if xs else None

    rows = [("converge after a region restart (s)", "restart_s"), ("converge after a split-brain heal (s)", "split_s"),
            ("local R3 write stream publish p50 (ms)", "local_p50_ms"),
            ("local R3 write stream publish p99 (ms)", "local_p99_ms"),
            ("plain R3 stream in west publish p50 (ms)", "plain_p50_ms"),
            ("plain R3 stream in west publish p99 (ms)", "plain_p99_ms"),
            ("stretch-cluster R3 publish p50 (ms)", "stretch_p50_ms"),
            ("stretch-cluster R3 publish p99 (ms)", "stretch_p99_ms"),
            ("stretch-cluster R3 publish from another region than its leader's p50 (ms)", "stretch_far_p50_ms"),
            ("stretch-cluster R3 publish from another region than its leader's p99 (ms)", "stretch_far_p99_ms"),
            ("servers' CPU per virtual-stream write (ms)", "local_cpu_ms_per_msg"),
            ("servers' CPU per plain R3 write (ms)", "plain_cpu_ms_per_msg")]
    where = "loopback" if wan_delay is None else f"{wan_delay:g} ms one-way between regions"
    out = [f"| 3 regions x 3 servers + stretch cluster, {where} | Go nats-server | Rillet | Rillet/Go |",
           "|---|---:|---:|---:|"]
    for label, key in rows:
        g, r = med("go", key), med("rillet", key)
        ratio = f"{r / g:.1f}x" if g and r else "-"
        out.append(f"| {label} | {fmt(g)} | {fmt(r)} | {ratio} |")
    return "\n".join(out)


async def amain(args: argparse.Namespace) -> int:
    kinds = [k for k in args.kinds.split(",") if k]
    if "go" in kinds and shutil.which("nats-server") is None:
        say("nats-server is not on PATH")
        return 2
    runs: dict[str, list[dict]] = {k: [] for k in kinds}
    ok = True
    for _ in range(args.runs):
        for kind in kinds:
            args.deadline = args.deadline_go if kind == "go" else args.deadline_rillet
            r = await run_kind(kind, args)
            ok &= bool(r.get("exactly_once")) and r.get("restart_s") is not None and r.get("split_s") is not None
            runs[kind].append(r)
    print(table(runs, args.wan_delay))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": runs}, f, indent=1)
    return 0 if ok else 1


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kinds", default="go,rillet")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--msgs", type=int, default=1000, help="publishes per latency case")
    ap.add_argument("--converge-msgs", type=int, default=200, help="messages per region in the outages")
    ap.add_argument("--hold", type=float, default=15.0, help="seconds each outage lasts at least")
    ap.add_argument("--deadline-rillet", type=float, default=60.0)
    ap.add_argument("--deadline-go", type=float, default=180.0)
    ap.add_argument("--json", default="")
    ap.add_argument("--wan-delay", type=float, default=None, metavar="MS",
                    help="one-way delay of every cross-region link, through proxies (0: proxies, no delay)")
    sys.exit(asyncio.run(amain(ap.parse_args(argv))))


if __name__ == "__main__":
    main()
