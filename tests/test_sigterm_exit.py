"""SIGTERM (issue 19, point 7): the process ends promptly, in nats-server's order, with JetStream data kept.

nats-server is gone ~1-2 ms after SIGTERM, and a client sees its connection end at about the moment the
process ends. nats.py's ``test_cluster_reconnect_sequential_shutdown`` depends on that: it stops the server
its client is connected to (SIGTERM, then waits for the process), and only then starts waiting for the
client's reconnection; a server whose clients reconnect elsewhere before its process is gone makes that
wait miss the event. The bounds below are generous (they check the behaviour, not the speed): the process
gone within 0.5 s, a client's connection ending no more than 0.1 s before it.
"""
from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import socket
import sys
import time

import nats
import pytest

from tests.helpers import ServerProcess, free_port

RILLET = [sys.executable, "-m", "rillet.server"]
GO = ["nats-server"]
BOUND = 0.5  # seconds from SIGTERM to the process's end


def _gone_within(proc: ServerProcess, seconds: float) -> float:
    """Send SIGTERM; the seconds until the process ended (AssertionError past ``seconds``)."""
    fd = os.pidfd_open(proc.pid)
    try:
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        p = select.poll()
        p.register(fd, select.POLLIN)
        ready = p.poll(seconds * 1000)
        took = time.monotonic() - t0
    finally:
        os.close(fd)
    assert ready, f"still running {seconds}s after SIGTERM; output:\n{proc.output}"
    assert proc.wait(5) == 0
    return took


def test_idle_server_exits_promptly():
    proc = ServerProcess("-a", "127.0.0.1", "-p", "-1", "-m", "-1", command=RILLET).wait_ready()
    try:
        _gone_within(proc, BOUND)
        lines = proc.output.splitlines()
        tail = [l.partition("[INF] ")[2] for l in lines[-3:]]
        assert tail == ['Trapped "terminated" signal', "Initiating Shutdown...", "Server Exiting.."], lines[-3:]
    finally:
        proc.stop()


@pytest.mark.parametrize("command", [GO, RILLET], ids=["go", "rillet"])
def test_client_sees_the_end_with_the_process(command):
    """A connected client's connection ends when the process does (nats-server: within ~1 ms of it)."""
    proc = ServerProcess("-a", "127.0.0.1", "-p", "-1", command=command).wait_ready()
    try:
        s = socket.create_connection(("127.0.0.1", proc.port))
        s.recv(4096)
        s.sendall(b'CONNECT {"verbose":false,"protocol":1}\r\nPING\r\n')
        assert s.recv(100).startswith(b"PONG")
        fd = os.pidfd_open(proc.pid)
        try:
            p = select.poll()
            p.register(fd, select.POLLIN)
            p.register(s.fileno(), select.POLLIN)
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            eof = exited = None
            while eof is None or exited is None:
                events = p.poll(BOUND * 1000)
                assert events, f"no end of connection/process within {BOUND}s: eof={eof} exited={exited}"
                now = time.monotonic()
                for f, _ in events:
                    if f == fd:
                        exited = now
                        p.unregister(fd)
                    else:
                        try:
                            data = s.recv(4096)
                        except OSError:
                            data = b""
                        if not data:
                            eof = now
                            p.unregister(s.fileno())
        finally:
            os.close(fd)
            s.close()
        assert exited - t0 < BOUND
        assert exited - eof < 0.1, f"the client saw its connection end {exited - eof:.3f}s before the process"
        assert proc.wait(5) == 0
    finally:
        proc.stop()


async def _cluster(command: list[str], size: int, tmp) -> list[asyncio.subprocess.Process]:
    """Servers started as nats.py's run_cluster does (flags, one asyncio subprocess each); (proc, port)."""
    cports = [free_port() for _ in range(size)]
    servers = []
    for i in range(size):
        routes = ",".join(f"nats://127.0.0.1:{p}" for j, p in enumerate(cports) if j != i)
        port = free_port()
        proc = await asyncio.create_subprocess_exec(
            *command, "-a", "127.0.0.1", "-p", str(port), "--cluster", f"nats://127.0.0.1:{cports[i]}",
            "--cluster_name", "cluster", "--routes", routes, "-n", f"node{i + 1}",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        while True:
            line = await asyncio.wait_for(proc.stderr.readline(), 15)
            assert line, "server exited while starting"
            if b"Server is ready" in line:
                break
        servers.append((proc, port))
    return servers


@pytest.mark.parametrize("command", [GO, RILLET], ids=["go", "rillet"])
async def test_cluster_reconnect_sequential_shutdown(command, tmp_path):
    """The shape of nats.py's test: three servers started as its run_cluster does; the server the client is
    on is stopped (SIGTERM, the harness waits for the process), twice; the client reconnects each time and
    its subscription still works. Each process is gone within the bound, and the client learnt of it (its
    connection ended) no more than 0.1 s before the process was gone. (nats.py's own test clears its
    reconnection event after the wait: that races with the client's reconnection to the next server, which
    on a loaded machine loses now and then against nats-server too; the disconnection time is what the
    server decides.)"""
    servers = await _cluster(command, 3, tmp_path)
    try:
        events: list[tuple[str, float]] = []

        async def on_disconnect():
            events.append(("disconnected", time.monotonic()))

        async def on_reconnect():
            events.append(("reconnected", time.monotonic()))

        async def on_error(e):
            pass

        nc = await nats.connect(f"nats://127.0.0.1:{servers[0][1]}", allow_reconnect=True,
                                max_reconnect_attempts=60, reconnect_time_wait=0.0, dont_randomize=True,
                                disconnected_cb=on_disconnect, reconnected_cb=on_reconnect, error_cb=on_error)
        deadline = time.monotonic() + 10
        while len(nc.servers) < 3:  # the other servers, gossiped in INFO
            assert time.monotonic() < deadline, nc.servers
            await asyncio.sleep(0.05)
        sub = await nc.subscribe("seq.test")
        await nc.publish("seq.test", b"first")
        assert (await sub.next_msg(timeout=2)).data == b"first"
        for i in range(2):
            port = nc.connected_url.port
            proc = next(p for p, pt in servers if pt == port)
            events.clear()
            t0 = time.monotonic()
            proc.terminate()
            await asyncio.wait_for(proc.wait(), BOUND)
            gone = time.monotonic()
            assert proc.returncode == 0 and gone - t0 < BOUND
            deadline = time.monotonic() + 10
            while not any(e == "reconnected" for e, _ in events):
                assert time.monotonic() < deadline, f"no reconnection after stopping server {i}"
                await asyncio.sleep(0.01)
            disconnected = next(t for e, t in events if e == "disconnected")
            assert gone - disconnected < 0.1, f"the client was disconnected {gone - disconnected:.3f}s early"
            await asyncio.sleep(0.2)
            await nc.publish("seq.test", f"after {i}".encode())
            assert (await sub.next_msg(timeout=5)).data == f"after {i}".encode()
        await nc.close()
    finally:
        for proc, _ in servers:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_jetstream_data_survives_sigterm(tmp_path):
    """Messages and a consumer's acknowledgements written before SIGTERM are there after a restart."""
    store = tmp_path / "store"
    conf = tmp_path / "js.conf"
    conf.write_text(f'listen: 127.0.0.1:-1\njetstream {{ store_dir: "{store}" }}\n')
    proc = ServerProcess("-c", str(conf), command=RILLET).wait_ready()
    try:
        nc = await nats.connect(f"nats://127.0.0.1:{proc.port}")
        js = nc.jetstream(timeout=3)
        await js.add_stream(name="KEEP", subjects=["keep.>"])
        for i in range(50):
            await js.publish(f"keep.{i % 5}", f"m{i}".encode())
        psub = await js.pull_subscribe("keep.>", durable="D")
        msgs = await psub.fetch(20, timeout=3)
        for m in msgs:
            await m.ack_sync(timeout=3)
        await nc.close()
        _gone_within(proc, BOUND)
    finally:
        proc.stop()
    proc = ServerProcess("-c", str(conf), command=RILLET).wait_ready()
    try:
        nc = await nats.connect(f"nats://127.0.0.1:{proc.port}")
        js = nc.jetstream(timeout=3)
        info = await js.stream_info("KEEP")
        assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (50, 1, 50)
        ci = await js.consumer_info("KEEP", "D")
        assert ci.ack_floor.stream_seq == 20 and ci.num_pending == 30
        psub = await js.pull_subscribe("keep.>", durable="D")
        nxt = await psub.fetch(1, timeout=3)
        assert nxt[0].data == b"m20"
        await nc.close()
        _gone_within(proc, BOUND)
    finally:
        proc.stop()


@pytest.mark.parametrize("command", [GO, RILLET], ids=["go", "rillet"])
async def test_shutdown_event_first(command, tmp_path):
    """Shutdown begins with $SYS.SERVER.<id>.SHUTDOWN (the server info: what the other servers' JetStream
    marks offline on), delivered to a system user's subscription before its connection closes."""
    conf = tmp_path / "sys.conf"
    conf.write_text("listen: 127.0.0.1:-1\nserver_name: s1\n"
                    "accounts { $SYS { users = [ {user: admin, pass: s} ] } }\n")
    proc = ServerProcess("-c", str(conf), command=command).wait_ready()
    try:
        got = []
        closed = asyncio.Event()

        async def on_msg(m):
            got.append((m.subject, json.loads(m.data)))

        async def on_error(e):
            pass

        async def on_disconnect():
            closed.set()

        nc = await nats.connect(f"nats://127.0.0.1:{proc.port}", user="admin", password="s",
                                allow_reconnect=False, error_cb=on_error, disconnected_cb=on_disconnect)
        await nc.subscribe("$SYS.SERVER.*.SHUTDOWN", cb=on_msg)
        await nc.flush()
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(closed.wait(), 5)
        assert len(got) == 1, got
        subject, body = got[0]
        assert subject == f"$SYS.SERVER.{body['id']}.SHUTDOWN"
        assert body["name"] == "s1" and body["host"] == "127.0.0.1" and body["jetstream"] is False
        assert set(body) == {"name", "host", "id", "ver", "feature_flags", "jetstream", "flags", "seq", "time"}
        assert proc.wait(5) == 0
    finally:
        proc.stop()


@pytest.mark.parametrize("command", [GO, RILLET], ids=["go", "rillet"])
async def test_waiting_pull_request_told_of_shutdown(command, tmp_path):
    """A pull request waiting on a one-replica consumer is answered 409 Server Shutdown with what it still
    wanted, first thing in the shutdown (nats-server's signalPullConsumers)."""
    conf = tmp_path / "js.conf"
    conf.write_text(f'listen: 127.0.0.1:-1\njetstream {{ store_dir: "{tmp_path / "store"}" }}\n')
    proc = ServerProcess("-c", str(conf), command=command).wait_ready()
    try:
        async def on_error(e):
            pass

        nc = await nats.connect(f"nats://127.0.0.1:{proc.port}", allow_reconnect=False, error_cb=on_error)
        js = nc.jetstream(timeout=3)
        await js.add_stream(name="P", subjects=["p.>"])
        await js.add_consumer("P", durable_name="C", ack_policy="explicit")
        await js.publish("p.1", b"one")
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.P.C", b'{"batch": 5, "max_bytes": 1000, "expires": 30000000000}',
                         reply=inbox)
        first = await sub.next_msg(timeout=3)
        assert first.data == b"one"
        await asyncio.sleep(0.1)  # (the request waits for 4 more)
        proc.send_signal(signal.SIGTERM)
        m = await sub.next_msg(timeout=3)
        assert m.headers is not None and m.data == b""
        assert m.headers.get("Status") == "409"
        assert m.headers.get("Description") == "Server Shutdown"
        assert m.headers.get("Nats-Pending-Messages") == "4"
        assert m.headers.get("Nats-Pending-Bytes") == "955"  # (1000 less the message's accounted size, 45)
        assert proc.wait(5) == 0
    finally:
        proc.stop()
