"""Issue 24, overload: what a client can make the server allocate is bounded by the configured limits
(subscriptions, payloads, connections; pending output: tests/test_overload_pending.py), and what is refused
is refused with nats-server's answer to the same bytes; JetStream API requests past the queue limit are
dropped, never queued without bound (nats-server's request_queue_limit; its advisory, beside nats-server:
tests/test_fairness.py::test_api_queue_limit_drops_and_advises).

Each limit test runs nats-server 2.15 and Rillet as subprocesses on the same input and reads the server's
RSS from /proc.
"""
from __future__ import annotations

import asyncio
import json
import shutil
import socket
import time

import pytest

from tests.helpers import RawClient, serve_config
from tests.test_fairness import monitor, raw_connect, running
from tests.test_overload_pending import rss_mb

HAVE_GO = shutil.which("nats-server") is not None
needs_go = pytest.mark.skipif(not HAVE_GO, reason="needs nats-server")


def read_until(s: socket.socket, end: bytes, timeout: float = 30) -> bytes:
    s.settimeout(timeout)
    buf = b""
    while not buf.endswith(end):
        chunk = s.recv(1 << 20)
        assert chunk, ("closed", buf[-200:])
        buf += chunk
    return buf


def read_to_close(s: socket.socket, timeout: float = 10) -> bytes:
    s.settimeout(timeout)
    buf = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return buf
        buf += chunk


def sub_flood(kind: str, conf: str, n: int) -> dict:
    with running(kind, conf) as (proc, mport):
        pid = proc.proc.pid
        base = monitor(mport, "/varz")["subscriptions"]
        s = raw_connect(proc.port)
        rss0 = rss_mb(pid)
        s.sendall(b"".join(b"SUB s.%d %d\r\n" % (i, i) for i in range(n)) + b"PING\r\n")
        buf = read_until(s, b"PONG\r\n")
        growth = rss_mb(pid) - rss0
        errs = buf.count(b"-ERR 'maximum subscriptions exceeded'\r\n")
        s.sendall(b"PING\r\n")
        read_until(s, b"PONG\r\n")  # (still connected)
        subs = monitor(mport, "/varz")["subscriptions"] - base
        s.close()
        return {"growth": growth, "errs": errs, "subs": subs, "rest": len(buf) - errs * 39 - 6}


@needs_go
def test_subscriptions_past_max_subscriptions_are_refused_and_cost_nothing():
    """50,000 SUBs on one connection, max_subscriptions 100: 100 kept, 49,900 answered "maximum
    subscriptions exceeded", the connection kept, by both servers; Rillet's RSS grows by under 10 MB (all
    50,000 kept cost it ~36 MB, checked below)."""
    res = {k: sub_flood(k, "max_subscriptions: 100\n", 50_000) for k in ("go", "rillet")}
    for k, r in res.items():
        assert r["errs"] == 49_900 and r["subs"] == 100 and r["rest"] == 0, (k, res)
    assert res["rillet"]["growth"] < 10, res
    unlimited = sub_flood("rillet", "", 50_000)
    assert unlimited["subs"] == 50_000 and unlimited["growth"] > 2 * max(res["rillet"]["growth"], 5), unlimited


def big_pub(kind: str, conf: str, announced: int) -> dict:
    with running(kind, conf) as (proc, mport):
        pid = proc.proc.pid
        s = raw_connect(proc.port)
        rss0 = rss_mb(pid)
        s.sendall(b"PUB x %d\r\n" % announced)
        answer = read_to_close(s)
        growth = rss_mb(pid) - rss0
        closed = monitor(mport, "/connz?state=closed")["connections"]
        s.close()
        return {"answer": answer, "growth": growth, "reasons": [c.get("reason") for c in closed]}


@needs_go
@pytest.mark.parametrize("announced, answer, reason", [
    (100_000_000, b"-ERR 'Maximum Payload Violation'\r\n", "Maximum Message Payload Exceeded"),
    (1_000_000_000, b"", "Protocol Violation"),  # (nats-server takes at most 9 digits: no -ERR)
], ids=["100MB", "1GB"])
def test_a_payload_past_max_payload_is_refused_before_it_is_read(announced, answer, reason):
    """A PUB announcing 100 MB (max_payload 1 MB) is refused from its control line with nats-server's error
    and the connection closed (its /connz reason: nats-server's), one announcing 1 GB as a protocol
    violation, by both servers, nothing allocated for either."""
    res = {k: big_pub(k, "", announced) for k in ("go", "rillet")}
    for k, r in res.items():
        assert r["answer"] == answer and r["reasons"] == [reason], (k, res)
    assert res["rillet"]["growth"] < 8, res


def conn_flood(kind: str, conf: str, n: int) -> dict:
    with running(kind, conf) as (proc, mport):
        kept, answers = [], []
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", proc.port))
            s.settimeout(10)
            buf = b""
            while b"\r\n" not in buf:
                chunk = s.recv(4096)
                assert chunk, buf
                buf += chunk
            s.settimeout(0.05)  # (a refused connection's -ERR follows its INFO at once: read it before writing)
            try:
                buf += s.recv(4096) if buf.count(b"\r\n") == 1 else b""
            except socket.timeout:
                pass
            s.settimeout(10)
            if buf.count(b"\r\n") == 1:
                s.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
            while not buf.endswith(b"PONG\r\n") and not buf.endswith(b"exceeded'\r\n"):
                try:
                    chunk = s.recv(4096)
                except ConnectionResetError:
                    chunk = b""
                if not chunk:
                    break
                buf += chunk
            if buf.endswith(b"PONG\r\n"):
                kept.append(s)
                continue
            answers.append(buf.split(b"\r\n", 1)[1] if buf.startswith(b"INFO ") else buf)
            s.close()
        varz = monitor(mport, "/varz")
        for s in kept:
            s.close()
        return {"kept": len(kept), "answers": set(answers), "connections": varz["connections"]}


@needs_go
def test_connections_past_max_connections_are_refused():
    """60 connections, max_connections 20: 20 admitted, 40 answered "maximum connections exceeded" and
    closed, by both servers."""
    res = {k: conn_flood(k, "max_connections: 20\n", 60) for k in ("go", "rillet")}
    for k, r in res.items():
        assert r["kept"] == 20 and r["connections"] == 20, (k, res)
        assert r["answers"] == {b"-ERR 'maximum connections exceeded'\r\n"}, (k, res)


@pytest.mark.asyncio
async def test_api_requests_from_many_clients_never_queue_past_the_limit(tmp_path, monkeypatch):
    """Eight clients each send 1,500 requests at once (request_queue_limit 100): the queue never holds more
    than the limit, what is dropped is counted in the advisories, and everything else is answered."""
    from rillet.jetstream.api import queue as queue_mod
    most = [0]
    orig = queue_mod.ApiQueue.submit

    def spy(self, info, fn, args, client=None):
        orig(self, info, fn, args, client)
        most[0] = max(most[0], len(self.queue), len(self.info))

    monkeypatch.setattr(queue_mod.ApiQueue, "submit", spy)
    conf = (f"listen: 127.0.0.1:-1\njetstream {{ store_dir: {json.dumps(str(tmp_path))}, request_queue_limit: 100 }}\n"
            "accounts { SYS { users [ {user: sys, password: sys} ] }, APP { jetstream: enabled, users [ {user: app, "
            "password: app} ] } }\nsystem_account: SYS\n")
    async with serve_config(conf, str(tmp_path)) as srv:
        sysc = await RawClient.open(srv, user="sys", **{"pass": "sys"})
        sysc.sub("$JS.EVENT.ADVISORY.API.LIMIT_REACHED", 1)
        await sysc.ping()
        clients = []
        n = 1500
        for k in range(8):
            c = await RawClient.open(srv, user="app", **{"pass": "app"})
            c.sub(f"r{k}.*", 1)
            await c.ping()
            clients.append(c)
        for k, c in enumerate(clients):
            c.send(b"".join(b"PUB $JS.API.STREAM.MSG.GET.NONE r%d.%d 9\r\n{\"seq\":1}\r\n" % (k, i)
                            for i in range(n)))
        got = [b""] * len(clients)
        for k, c in enumerate(clients):
            got[k] += await c.ping(timeout=60)
        q = srv.jetstream.api_queue
        for _ in range(3000):
            if not len(q):
                break
            await asyncio.sleep(0.01)
        assert not len(q)
        for k, c in enumerate(clients):  # (answers worked off after the first PONG come before this one)
            got[k] += await c.ping(timeout=30)
        answered = sum(g.count(b"MSG r") for g in got)
        assert all(b'"code":404' in g for g in got if g)
        dropped = q.dropped
        assert most[0] <= 100, most
        assert dropped > 0 and answered + dropped == 8 * n, (answered, dropped)
        data = await sysc.ping()
        advised = sum(json.loads(part.split(b"\r\n", 2)[1])["dropped"]
                      for part in data.split(b"MSG $JS.EVENT.ADVISORY.API.LIMIT_REACHED 1 ")[1:])
        assert advised == dropped, (advised, dropped)
        for c in clients + [sysc]:
            await c.close()


CALLOUT_CONF = """
accounts {{ AUTH {{ users [{{user: auth, password: pwd}}] }}, A {{}} }}
authorization {{ timeout: 3
  auth_callout {{ issuer: {issuer}, auth_users: [auth], account: AUTH }} }}
"""


def held_flood(kind: str, seconds: float = 1.5) -> dict:
    """A client floods PUBs after its CONNECT while the auth callout (a service that never answers) decides."""
    from rillet import jwt
    from tests.test_auth_callout import ISSUER
    with running(kind, CALLOUT_CONF.format(issuer=jwt.public_key(ISSUER))) as (proc, mport):
        pid = proc.proc.pid
        svc = raw_connect(proc.port, connect=b'{"verbose":false,"pedantic":false,"user":"auth","pass":"pwd"}')
        svc.sendall(b"SUB $SYS.REQ.USER.AUTH 1\r\nPING\r\n")
        read_until(svc, b"PONG\r\n")
        s = socket.create_connection(("127.0.0.1", proc.port))
        read_until(s, b"\r\n")
        rss0 = peak = rss_mb(pid)
        s.sendall(b'CONNECT {"verbose":false,"user":"x","pass":"y"}\r\n')
        s.settimeout(0.2)
        chunk = b"PUB a 1\r\nx\r\n" * 5000
        sent = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                s.sendall(chunk)
                sent += len(chunk)
            except socket.timeout:
                pass
            peak = max(peak, rss_mb(pid))
        s.close()
        svc.close()
        return {"sent": sent, "growth": peak - rss0}


@needs_go
def test_input_while_the_auth_callout_decides_is_bounded():
    """What a client sends after its CONNECT while the auth callout decides waits in the socket's buffers:
    nats-server's read loop waits in the callout; Rillet pauses reading past 64 KB kept (before, it kept all:
    ~200 MB in 2 s, without bound until the callout's timeout)."""
    res = {k: held_flood(k) for k in ("go", "rillet")}
    for k, r in res.items():
        assert r["sent"] < 32 * 1024 * 1024 and r["growth"] < 16, (k, res)


@pytest.mark.asyncio
async def test_a_client_paused_while_the_callout_decides_reads_again_once_admitted(tmp_path):
    """2 MB sent behind the CONNECT while the callout decides: at most HELD_MAX (and one read) kept, reading
    paused; once admitted every message is delivered in order and the connection goes on."""
    import nats
    from rillet.server.pacing import HELD_MAX
    from tests.test_auth_callout import conf, response, user_jwt
    async with serve_config(conf(timeout="10"), str(tmp_path)) as srv:
        asked: asyncio.Queue = asyncio.Queue()
        nc = await nats.connect(srv.client_url.replace("nats://", "nats://auth:pwd@"))
        await nc.subscribe("$SYS.REQ.USER.AUTH", cb=asked.put)
        await nc.flush()
        c = await RawClient.open(srv, connect=False)
        n, size = 2000, 1000
        c.send(b'CONNECT {"verbose":false,"pedantic":false,"user":"alice","pass":"a"}\r\nSUB a.x 1\r\n'
               + b"".join(b"PUB a.x %d\r\n%06d%b\r\n" % (size, i, b"p" * (size - 6)) for i in range(n))
               + b"PING\r\n")
        msg = await asyncio.wait_for(asked.get(), 10)
        held = [x for x in srv.clients.values() if x._held is not None]
        assert len(held) == 1
        for _ in range(200):  # (until the client's writes have reached the paused socket)
            if held[0]._held_paused:
                break
            await asyncio.sleep(0.01)
        assert held[0]._held_paused and held[0]._held_bytes <= HELD_MAX + 256 * 1024, held[0]._held_bytes
        from rillet import jwt
        req = jwt.decode(msg.data.decode())
        await msg.respond(response(req, user_jwt(req["nats"]["user_nkey"], "A")))
        got = await c.read_until(b"PONG\r\n", timeout=30)
        frames = got.split(b"MSG a.x 1 %d\r\n" % size)[1:]
        assert [int(f[:6]) for f in frames] == list(range(n))
        assert await c.ping() == b""
        await c.close()
        await nc.close()
