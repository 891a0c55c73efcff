"""A wiped replica catches up (issue 19, point 8), as processes, the same drill against Rillet and the Go
nats-server: three servers, an R3 file stream with an R3 durable consumer, `sync_interval: always`, a
publisher running throughout. One stream follower (not the meta leader) is stopped, its store directory
deleted, and it is started again; with ``other_down`` the third server is stopped meanwhile too.

With the third server down, Rillet's stream has no leader until the third server is back (issue 24,
tests/faults/wiped-vote.md): the wiped server's member of the stream, which had acknowledged entries before, starts
recovering and gives no vote (entries the wiped member and the third server had committed may be missing from the
stream leader's log, and its vote would make that leader give them again). Checked: no publish acknowledged, the
wiped server unhealthy, its log saying why, for as long as the third server is down; then the third server comes
back and the wiped one catches up. nats-server's wiped server catches up from the stream leader while the third is
down (its vote counts at once: the hazard).

Checked: the wiped server gets the meta state back (the assignments: it recreates its replicas), the
stream's messages and the consumer's state; at the end every running server holds the same messages, the
leader's stream and consumer info list it as current, and its /healthz answers 200; before it has at least
the messages the stream held when it was stopped, its /healthz never answers 200. The catch-up time (from
the restarted server's "ready" until it holds the messages the leader held at that moment and is healthy)
is printed (pytest -s): the earlier test (test_jscluster_stream_membership) removed a replica inside a
running server, whose meta state stayed, and published after it came back, which hid the idle meta group's
blind spot this drill hits.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
import urllib.error
import urllib.request

import nats
import pytest

from helpers import ServerProcess, free_port

NAMES = ["s0", "s1", "s2"]
PUBLISH_BEFORE = 1500  # messages acknowledged before the follower is stopped (more by hand: past a snapshot)


def _conf(tmp: str, name: str, port: int, http: int, rport: int, routes: list[int]) -> str:
    rs = ", ".join(f"nats-route://127.0.0.1:{p}" for p in routes)
    text = "\n".join([
        f"listen: 127.0.0.1:{port}", f"http: 127.0.0.1:{http}", f"server_name: {name}",
        'accounts { SYS { users [{user: sys, password: sys}] }, '
        'G { jetstream: enabled, users [{user: a, password: a}] } }', "system_account: SYS",
        f'jetstream {{ store_dir: "{os.path.join(tmp, name)}", sync_interval: always }}',
        f"cluster {{ name: C, listen: 127.0.0.1:{rport}, routes: [{rs}] }}"]) + "\n"
    path = os.path.join(tmp, f"{name}.conf")
    with open(path, "w") as f:
        f.write(text)
    return path


def _get(http: int, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http}{path}", timeout=3) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")
    except OSError:
        return 0, {}


def _stream_msgs(http: int) -> int | None:
    """The messages of this server's replica of stream W (None: it has none)."""
    code, d = _get(http, "/jsz?accounts=true&streams=true")
    for acc in d.get("account_details") or []:
        for sd in acc.get("stream_detail") or []:
            if sd.get("name") == "W":
                return int(sd["state"]["messages"])
    return None


async def _api(nc, subject: str, body: dict | None = None, timeout: float = 3.0) -> dict:
    m = await nc.request(subject, json.dumps(body or {}).encode(), timeout=timeout)
    return json.loads(m.data)


async def _until(cond, timeout: float, what: str, every: float = 0.1, why=None):
    deadline = time.monotonic() + timeout
    while True:
        r = await cond()
        if r:
            return r
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}" + (f": {why()}" if why else ""))
        await asyncio.sleep(every)


async def _drill(tmp: str, command: list[str] | None, mode: str) -> dict:
    other_down = mode != "all-up"
    ports = [free_port() for _ in NAMES]
    https = [free_port() for _ in NAMES]
    rports = [free_port() for _ in NAMES]
    confs = [_conf(tmp, n, ports[i], https[i], rports[i], rports) for i, n in enumerate(NAMES)]
    procs: list[ServerProcess | None] = [ServerProcess("-c", c, command=command) for c in confs]
    urls = [f"nats://a:a@127.0.0.1:{p}" for p in ports]
    ncs: list = []
    stop_pub = asyncio.Event()
    pub_task = None
    try:
        for pr in procs:
            pr.wait_ready(20)
        nc = await nats.connect(servers=urls, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
        ncs.append(nc)
        js = nc.jetstream(timeout=3)

        async def created():
            try:
                r = await _api(nc, "$JS.API.STREAM.CREATE.W", {"name": "W", "subjects": ["w.>"], "num_replicas": 3,
                                                               "storage": "file"}, timeout=5)
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                return None
            return r if "error" not in r else None
        await _until(created, 30, "the stream created")
        r = await _api(nc, "$JS.API.CONSUMER.DURABLE.CREATE.W.D",
                       {"stream_name": "W", "config": {"durable_name": "D", "ack_policy": "explicit",
                                                       "num_replicas": 3}}, timeout=5)
        assert "error" not in r, r

        acked = [0]

        async def publisher():
            k = 0
            while not stop_pub.is_set():
                try:
                    await js.publish(f"w.{k % 7}", b"x" * 64)
                    acked[0] += 1
                    k += 1
                except Exception:  # (no quorum for a while, a server stopping: the publisher goes on)
                    await asyncio.sleep(0.05)
        pub_task = asyncio.get_running_loop().create_task(publisher())
        await _until(lambda: asyncio.sleep(0, acked[0] >= PUBLISH_BEFORE), 600, f"{PUBLISH_BEFORE} messages published")
        # some of them consumed and acknowledged, so the consumer has state to replicate
        psub = await js.pull_subscribe("w.>", durable="D", stream="W")
        for m in await psub.fetch(100, timeout=5):
            await m.ack_sync()

        info = await _api(nc, "$JS.API.STREAM.INFO.W")
        leader = info["cluster"]["leader"]
        meta_leader = (await _until(lambda: asyncio.sleep(0, _get(https[0], "/jsz")[1].get("meta_cluster", {})
                                                          .get("leader")), 10, "a meta leader"))
        followers = [n for n in NAMES if n != leader]
        wiped = next((n for n in followers if n != meta_leader), followers[0])
        w = NAMES.index(wiped)
        other = next(n for n in followers if n != wiped)
        o = NAMES.index(other)
        if mode == "other-killed":
            # the third server leads the meta group and dies without a word: the stream leader's server is left
            # with a meta group without a leader, which only the wiped server's vote can give it
            sysc = await nats.connect(f"nats://sys:sys@127.0.0.1:{ports[o]}")
            ncs.append(sysc)

            async def meta_led_by_other():
                if _get(https[o], "/jsz")[1].get("meta_cluster", {}).get("leader") == other:
                    return True
                try:
                    await _api(sysc, "$JS.API.META.LEADER.STEPDOWN", {"placement": {"preferred": other}})
                except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                    pass
                await asyncio.sleep(0.5)
                return False
            await _until(meta_led_by_other, 20, f"{other} meta leader")
            meta_leader = other
            ncs.remove(sysc)
            await sysc.close()

        # the follower stops; its store directory goes
        procs[w].stop()
        held_at_stop = _stream_msgs(https[NAMES.index(leader)])
        assert held_at_stop is not None and held_at_stop >= PUBLISH_BEFORE
        shutil.rmtree(os.path.join(tmp, wiped))
        await asyncio.sleep(1.0)  # (the publisher goes on meanwhile)
        if other_down:
            if mode == "other-killed":
                procs[o].proc.kill()
            procs[o].stop()
            procs[o] = None
            if command is None:
                # (Rillet) the stream leader, alone, steps down within an election timeout (check-quorum); until
                # then it could still catch the wiped member up and commit with it, safely: it leads with every
                # committed entry. The point below is that no new leader is elected with the wiped member's vote
                async def leaderless():
                    try:
                        d = await _api(nc, "$JS.API.STREAM.INFO.W", timeout=1)
                    except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                        return True
                    return "error" in d or not (d.get("cluster") or {}).get("leader")
                await _until(leaderless, 30, "the stream without a leader")
        t0 = time.monotonic()
        procs[w] = ServerProcess("-c", confs[w], command=command)
        procs[w].wait_ready(20)
        t_ready = time.monotonic()
        lead_http = https[NAMES.index(leader)]
        leaderless_for = 0.0
        if other_down and command is None:
            # (Rillet) the wiped member starts recovering, without a vote: no leader while the third server is down
            acked_then = acked[0]
            procs[w].wait_log(r"for a member of a group this server had \(a wiped store\)", 60)
            seen_at = time.monotonic()
            while time.monotonic() - seen_at < 4.0:
                code, _ = _get(https[w], "/healthz")
                assert code != 200, "the wiped server healthy while the third server is down"
                assert acked[0] == acked_then, "a publish acknowledged while the third server is down"
                await asyncio.sleep(0.1)
            leaderless_for = time.monotonic() - t_ready
            procs[o] = ServerProcess("-c", confs[o], command=command)
            procs[o].wait_ready(20)
        up = [i for i, p in enumerate(procs) if p is not None]
        at_restart = _stream_msgs(lead_http) or 0
        unhealthy_behind = []  # samples where the wiped server said 200 while lacking messages

        async def caught_up():
            code, _ = _get(https[w], "/healthz")
            mine = _stream_msgs(https[w])
            if code == 200 and (mine or 0) < held_at_stop:
                unhealthy_behind.append((round(time.monotonic() - t_ready, 2), mine))
            return code == 200 and mine is not None and mine >= at_restart
        def state() -> str:
            return (f"its healthz {_get(https[w], '/healthz?details=true')}, its messages {_stream_msgs(https[w])}; "
                    f"the leader's meta view {_get(lead_http, '/jsz')[1].get('meta_cluster')}")
        # (nats-server caught up in 4-5 s unloaded; when it does not in 40 s it does not at all in this run, and the
        # test reports it as the reference's outcome: a longer wait only made the suite slower)
        bound = 90 if command is None else 40
        await _until(caught_up, bound, f"{wiped} (wiped) caught up and healthy", every=0.05, why=state)
        catch_up = time.monotonic() - t_ready

        # the publisher stops: every running server converges on the same messages; the leader's infos list
        # the wiped server as current
        stop_pub.set()
        await pub_task
        pub_task = None

        async def converged():
            counts = [_stream_msgs(https[i]) for i in up]
            return counts if len(set(counts)) == 1 and counts[0] is not None else None
        counts = await _until(converged, 30, "the same messages on every running server")

        async def listed_current(subject: str):
            try:
                d = await _api(nc, subject)
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                return None
            reps = {r["name"]: r for r in (d.get("cluster") or {}).get("replicas") or []}
            ok = wiped in reps and reps[wiped].get("current") and not reps[wiped].get("offline")
            return d if ok else None
        si = await _until(lambda: listed_current("$JS.API.STREAM.INFO.W"), 30, f"{wiped} current in stream info")
        ci = await _until(lambda: listed_current("$JS.API.CONSUMER.INFO.W.D"), 30, f"{wiped} current in consumer info")
        assert si["state"]["messages"] == counts[0]
        code, hz = _get(https[w], "/healthz")
        assert code == 200, hz
        # the stream's leadership can move onto it (it was refused, 10008, while it silently lacked the log), and
        # the consumer goes on after what was acknowledged
        sd = await _api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.W", {"placement": {"preferred": wiped}}, timeout=10)
        assert sd.get("success"), sd

        async def led_by_wiped():
            try:
                d = await _api(nc, "$JS.API.STREAM.INFO.W")
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                return None
            return d if d.get("cluster", {}).get("leader") == wiped else None
        si2 = await _until(led_by_wiped, 20, f"{wiped} leads the stream")
        assert si2["state"]["messages"] == counts[0], (si2["state"], counts)
        for m in await psub.fetch(10, timeout=5):
            assert m.metadata.sequence.stream > 100
            await m.ack_sync()
        return {"wiped": wiped, "leader": leader, "meta_leader": meta_leader, "catch_up": catch_up,
                "restart_to_ready": t_ready - t0, "at_restart": at_restart, "held_at_stop": held_at_stop,
                "final": counts[0], "unhealthy_behind": unhealthy_behind, "ack_floor": ci["ack_floor"],
                "leaderless_for": leaderless_for}
    finally:
        stop_pub.set()
        if pub_task is not None:
            pub_task.cancel()
        for c in ncs:
            try:
                await c.close()
            except Exception:
                pass
        for pr in procs:
            if pr is not None:
                pr.stop()


@pytest.mark.parametrize("mode", ["all-up", "other-down", "other-killed"])
@pytest.mark.parametrize("target", ["rillet", "nats-server"])
async def test_wiped_replica_catches_up(tmp_path, target, mode):
    """``other-down``: the third server stopped while the wiped one is down; ``other-killed``: the third server,
    made meta leader first, killed (SIGKILL) then."""
    if target == "nats-server" and shutil.which("nats-server") is None:
        pytest.skip("needs the Go nats-server on PATH")
    if target == "nats-server" and mode == "other-killed":
        # (run by hand: 2.15's wiped server stays at "JetStream has not established contact with a meta leader" and
        # the surviving member's meta group has no leader for as long as the third server is down; Rillet's wiped
        # server joins the leaderless group to vote, see rillet/jetstream/cluster/meta.py JOIN_LEADERLESS_AFTER)
        pytest.skip("nats-server does not recover from this one (no meta leader while the third server is down)")
    try:
        r = await _drill(str(tmp_path), ["nats-server"] if target == "nats-server" else None, mode)
    except AssertionError as e:
        if target == "nats-server" and mode == "other-down":
            # the reference's own outcome, not Rillet's: on a loaded 2-core machine 2.15's wiped server sometimes
            # gets no meta leader within the bound with the third server down (it caught up in 4-5 s unloaded)
            pytest.xfail(f"nats-server did not catch up in this run: {e}")
        raise
    print(f"\n{target} {mode}: {r}")
    assert not r["unhealthy_behind"], r
    assert r["final"] >= r["at_restart"] >= r["held_at_stop"]
