"""JetStream traffic on routes between Rillet and Go nats-server servers of one cluster.

nats-server 2.15 routes a JetStream delivery (push or pull) to the server of its subscriber as
``RMSG <acc> <deliver subject> <ack reply>@<stream subject>``: matched there on the deliver subject (or the
pull request's reply), shown to the client with the stream subject and the plain ack reply (client.go:
the JETSTREAM client's ``pa.subject`` is the deliver subject, ``pa.deliver`` the stream subject, appended
after '@' for routes and leafs in processMsgResults, for gateways in processInboundClientMsg; the receiving
side splits at jsAckDeliverIdx). Seen on the wire of a live Go cluster:
``RMSG $G dlv.x $JS.ACK.S.C.1.1.1.<ts>.2@s.0 2``.

* A Rillet JetStream server with a Go server without JetStream (mixed mode): a client of the Go server
  creates a stream, publishes, consumes push (also in a queue group) and pull, and acks, all served by the
  Rillet server; the API answers once, with no 10039 beside the real answer (the Go server forwards each
  request twice: in the client's account, where Rillet subscribes the API, and in the system account with
  its ``Nats-Request-Info``, through its ``$JS.API.>`` import: Rillet's system-account 10039 stays silent
  for routed requests, as nats-server's apiDispatch).
* Rillet receiving Go's form: a test peer speaks the route protocol as a Go JetStream server does
  (a live Go JetStream cluster takes ~5 s to elect its meta leader when a server without JetStream is in
  it, too slow for this suite; the same exchange was checked by hand against two Go JetStream servers).
"""
from __future__ import annotations

import asyncio
import contextlib
import io
import json
import shutil
import subprocess
import tempfile
import time

import nats
import pytest

from rillet.cluster import info as ci
from rillet.cluster import protocol as cp
from rillet.cluster.protocol import ROUTE, ServerParser
from rillet.config.options import ClusterOptions, JetStreamOptions, Options
from rillet.app.embed import wait_meta_leader
from rillet.server.logging import Logger
from rillet.server.server import Server
from rillet.app.compose import build_server
from tests.helpers import free_port
from tests.test_cluster_protocol import Recorder

needs_go = pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")


async def _until(cond, timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def _go_server(conf: str, port: int):
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write(conf)
    p = subprocess.Popen(["nats-server", "-c", f.name], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                _, w = await asyncio.open_connection("127.0.0.1", port)
                w.close()
                break
            except OSError:
                if p.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"nats-server did not start: {p.stderr.read().decode()[-2000:]}")
                await asyncio.sleep(0.02)
        yield p
    finally:
        p.terminate()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _interest(srv: Server, subject: str) -> bool:
    r = srv.global_account.sublist.match(subject)
    return bool(r.psubs or r.qsubs)


@needs_go
async def test_go_server_without_jetstream_uses_rillet_jetstream(tmp_path):
    gport, gcl, rcl = free_port(), free_port(), free_port()
    conf = (f"port: {gport}\nserver_name: go1\n"
            f"cluster {{ name: c1, listen: 127.0.0.1:{gcl}, routes: [nats-route://127.0.0.1:{rcl}] }}\n")
    o = Options(host="127.0.0.1", port=-1, server_name="r0")
    o.jetstream = JetStreamOptions(enabled=True, store_dir=str(tmp_path / "r0"))
    o.cluster = ClusterOptions(name="c1", host="127.0.0.1", port=rcl, routes=[f"nats-route://127.0.0.1:{gcl}"])
    srv = build_server(o, Logger(out=io.StringIO()))
    async with _go_server(conf, gport):
        await srv.start()
        ng = None
        try:
            await wait_meta_leader([srv], 10, members=1)  # (founded alone: the Go server said no JetStream)
            ng = await nats.connect(f"nats://127.0.0.1:{gport}")
            # every API answer the Go client gets: one, and the real one
            answers: list[dict] = []

            async def on_answer(m):
                answers.append(json.loads(m.data))
            inbox = ng.new_inbox()
            await ng.subscribe(inbox, cb=on_answer)
            await ng.flush()
            await _until(lambda: _interest(srv, "$JS.API.STREAM.CREATE.S") and _interest(srv, inbox), what="interest")
            await ng.publish("$JS.API.STREAM.CREATE.S", json.dumps({"name": "S", "subjects": ["s.>"]}).encode(),
                             reply=inbox)
            await ng.publish("$JS.API.INFO", b"", reply=inbox)
            await _until(lambda: len(answers) >= 2, what="API answers")
            await asyncio.sleep(0.3)  # (a second answer, a 10039, would come within this)
            assert len(answers) == 2, answers
            answers.sort(key=lambda a: a["type"], reverse=True)
            assert answers[0]["type"] == "io.nats.jetstream.api.v1.stream_create_response", answers[0]
            assert answers[0]["config"]["name"] == "S" and answers[0]["cluster"]["leader"] == "r0"
            assert answers[1]["type"] == "io.nats.jetstream.api.v1.account_info_response", answers[1]
            assert "error" not in answers[0] and "error" not in answers[1]

            js = ng.jetstream(timeout=3)
            # push: deliveries cross the route to the Go server's client, with the stream subject
            got: list[tuple[str, str]] = []

            async def on_push(m):
                got.append((m.subject, m.reply))
                await m.ack()
            await ng.subscribe("dlv.go", cb=on_push)
            queued: list[list[str]] = [[], []]
            for i in (0, 1):
                async def on_q(m, i=i):
                    queued[i].append(m.subject)
                    await m.ack()
                await ng.subscribe("dlv.q", queue="grp", cb=on_q)
            await ng.flush()
            await _until(lambda: _interest(srv, "dlv.go") and _interest(srv, "dlv.q"), what="deliver interest")
            await js.add_consumer("S", durable_name="C", deliver_subject="dlv.go", ack_policy="explicit")
            await js.add_consumer("S", durable_name="Q", deliver_subject="dlv.q", deliver_group="grp",
                                  ack_policy="explicit")
            for i in range(3):
                ack = await js.publish(f"s.{i}", b"m%d" % i)
                assert (ack.stream, ack.seq) == ("S", i + 1)
            await _until(lambda: len(got) == 3 and len(queued[0]) + len(queued[1]) == 3, what="deliveries")
            assert [s for s, _ in got] == ["s.0", "s.1", "s.2"]
            assert all(r.startswith("$JS.ACK.S.C.1.") and "@" not in r for _, r in got), got
            assert sorted(queued[0] + queued[1]) == ["s.0", "s.1", "s.2"]

            # the acks came back across the route
            async def acked(name):
                ci_ = await js.consumer_info("S", name)
                return ci_.ack_floor.stream_seq == 3 and ci_.num_ack_pending == 0
            deadline = time.monotonic() + 5
            while not (await acked("C") and await acked("Q")):
                assert time.monotonic() < deadline, "acks did not reach the consumers"
                await asyncio.sleep(0.05)

            # pull: the request's reply is the inbox on the Go server
            psub = await js.pull_subscribe("s.>", durable="P")
            msgs = await psub.fetch(3, timeout=3)
            assert [m.subject for m in msgs] == ["s.0", "s.1", "s.2"]
            assert [m.data for m in msgs] == [b"m0", b"m1", b"m2"]
            for m in msgs:
                await m.ack_sync()
            assert (await js.consumer_info("S", "P")).ack_floor.stream_seq == 3
        finally:
            if ng is not None:
                await ng.close()
            await srv.shutdown()


class _RoutePeer:
    """This test as another server of the cluster: a route connection to a Rillet server's cluster port."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.rec = Recorder()
        self.parser = ServerParser(self.rec, ROUTE)

    @classmethod
    async def dial(cls, port: int) -> "_RoutePeer":
        p = cls(*await asyncio.open_connection("127.0.0.1", port))
        await p.pump(lambda c: any(x[0] == "info" for x in c))
        p.send(cp.connect_frame(ci.encode_route_connect(ci.RouteConnect(
            echo=True, headers=True, name="NGOPEER", cluster="c1", lnoc=True, lnocu=True))),
            cp.info_frame(ci.encode_info(ci.Info(
                server_id="NGOPEER", server_name="gopeer", version="2.15.1", proto=ci.SERVER_PROTO, go="go1.25",
                host="127.0.0.1", port=1, headers=True, max_payload=1048576, cluster="c1", lnoc=True,
                lnocu=True))),
            cp.PING)
        await p.pump(lambda c: ("pong",) in c)
        return p

    def send(self, *frames: bytes) -> None:
        self.writer.write(b"".join(frames))

    async def pump(self, until, timeout: float = 3.0) -> list[tuple]:
        deadline = time.monotonic() + timeout
        while not until(self.rec.calls):
            left = deadline - time.monotonic()
            assert left > 0, f"condition not met; calls so far: {self.rec.calls[-20:]}"
            try:
                data = await asyncio.wait_for(self.reader.read(65536), left)
            except asyncio.TimeoutError:
                continue
            assert data, "the route was closed"
            self.parser.feed(data)
        return self.rec.calls

    def close(self) -> None:
        self.writer.close()


async def test_rillet_client_gets_deliveries_in_go_route_form():
    """What a Go JetStream server sends for a consumer whose deliver subject has a subscriber on a Rillet server
    (RMSG <deliver subject> <ack>@<stream subject>, also with a queue group and with '@' inside the stream
    name and the subject): the client sees the stream subject and the plain ack reply; its ack crosses back."""
    rcl = free_port()
    o = Options(host="127.0.0.1", port=-1, server_name="r0")
    o.cluster = ClusterOptions(name="c1", host="127.0.0.1", port=rcl, pool_size=-1)
    srv = build_server(o, Logger(out=io.StringIO()))
    await srv.start()
    peer = nc = None
    try:
        peer = await _RoutePeer.dial(rcl)
        nc = await nats.connect(srv.client_url)
        got: list[tuple] = []

        async def on_push(m):
            got.append((m.subject, m.reply, m.data, dict(m.headers or {})))
        await nc.subscribe("dlv.x", cb=on_push)
        queued: list[list[str]] = [[], []]
        for i in (0, 1):
            async def on_q(m, i=i):
                queued[i].append((m.subject, m.reply))
            await nc.subscribe("dlv.q", queue="grp", cb=on_q)
        await nc.flush()
        await peer.pump(lambda c: ("rs+", b"$G", b"dlv.x", None, 0) in c and
                        any(x[:4] == ("rs+", b"$G", b"dlv.q", b"grp") for x in c))
        peer.send(cp.rs_sub(b"$G", b"$JS.ACK.>"), cp.PING)
        await peer.pump(lambda c: c.count(("pong",)) == 2)

        ack0 = b"$JS.ACK.S.C.1.1.1.1795639645293312705.2"
        ack1 = b"$JS.ACK.a@b.C.1.2.2.1795639645293318104.1"  # '@' in the stream name: not the separator
        ack2 = b"$JS.ACK.S.Q.1.3.3.1795639645293320375.0"
        hdr = b"NATS/1.0\r\nK: v\r\n\r\n"
        peer.send(cp.rmsg_head(b"$G", b"dlv.x", ack0 + b"@s.0", (), 2), b"m0\r\n",
                  cp.rmsg_head(b"$G", b"dlv.x", ack1 + b"@s.@1", (), 2), b"m1\r\n",
                  b"HMSG $G dlv.x %b@s.h %d %d\r\n%bmh\r\n" % (ack0, len(hdr), len(hdr) + 2, hdr),
                  cp.rmsg_head(b"$G", b"dlv.q", ack2 + b"@s.2", (b"grp",), 2), b"m2\r\n",
                  cp.rmsg_head(b"$G", b"dlv.x", b"plain.reply", (), 2), b"m3\r\n")
        await _until(lambda: len(got) == 4 and len(queued[0]) + len(queued[1]) == 1, what="deliveries")
        assert got == [("s.0", ack0.decode(), b"m0", {}), ("s.@1", ack1.decode(), b"m1", {}),
                       ("s.h", ack0.decode(), b"mh", {"K": "v"}), ("dlv.x", "plain.reply", b"m3", {})]
        assert queued[0] + queued[1] == [("s.2", ack2.decode())]

        await nc.publish(ack0.decode(), b"+ACK")
        await nc.flush()
        calls = await peer.pump(lambda c: any(x[0] == "rmsg" and x[2] == ack0 for x in c))
        assert ("rmsg", b"$G", ack0, None, (), b"+ACK") in calls
    finally:
        if nc is not None:
            await nc.close()
        if peer is not None:
            peer.close()
        await srv.shutdown()


# ==== leaf nodes: the same '@' form (nats-server's processMsgResults sends it to routes and leafs alike) =========

async def _probe_ready(hub_nc, leaf_nc) -> None:
    """Interest made on the leaf side before this call has reached the hub (it travels in order)."""
    async def answer(m):
        await m.respond(b"ok")
    sub = await leaf_nc.subscribe("probe.ready", cb=answer)
    await leaf_nc.flush()
    deadline = time.monotonic() + 5
    while True:
        try:
            await hub_nc.request("probe.ready", b"", timeout=0.2)
            break
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            assert time.monotonic() < deadline, "the leaf's interest did not reach the hub"
            await asyncio.sleep(0.05)
    await sub.unsubscribe()


@contextlib.asynccontextmanager
async def _rillet(tmp_path, name: str, js: bool = False, leaf_port: int = 0, remote: str = ""):
    from rillet.config.leaf_section import LeafNodeOptions, RemoteLeafOptions
    o = Options(host="127.0.0.1", port=-1, server_name=name)
    if js:
        o.jetstream = JetStreamOptions(enabled=True, store_dir=str(tmp_path / name))
    o.leaf = LeafNodeOptions(host="127.0.0.1", port=leaf_port) if leaf_port else \
        LeafNodeOptions(remotes=[RemoteLeafOptions(urls=[remote])])
    srv = build_server(o, Logger(out=io.StringIO()))
    await srv.start()
    try:
        yield srv.client_url
    finally:
        await srv.shutdown()


@pytest.mark.parametrize("hub,leaf", [("rillet", "go"), ("go", "rillet"), ("rillet", "rillet")])
async def test_push_deliveries_to_a_leaf_client_show_the_stream_subject(tmp_path, hub, leaf):
    if "go" in (hub, leaf) and shutil.which("nats-server") is None:
        pytest.skip("nats-server binary not on PATH")
    lport = free_port()
    async with contextlib.AsyncExitStack() as st:
        if hub == "go":
            gp = free_port()
            await st.enter_async_context(_go_server(
                f"port: {gp}\nserver_name: ghub\njetstream {{ store_dir: '{tmp_path / 'ghub'}' }}\n"
                f"leafnodes {{ listen: 127.0.0.1:{lport} }}\n", lport))
            hub_url = f"nats://127.0.0.1:{gp}"
        else:
            hub_url = await st.enter_async_context(_rillet(tmp_path, "hub", js=True, leaf_port=lport))
        if leaf == "go":
            gp = free_port()
            await st.enter_async_context(_go_server(
                f"port: {gp}\nserver_name: gleaf\nleafnodes {{ remotes [ {{ url: nats://127.0.0.1:{lport} }} ] }}\n",
                gp))
            leaf_url = f"nats://127.0.0.1:{gp}"
        else:
            leaf_url = await st.enter_async_context(_rillet(tmp_path, "leaf", remote=f"nats://127.0.0.1:{lport}"))
        nh = await nats.connect(hub_url)
        st.push_async_callback(nh.close)
        nl = await nats.connect(leaf_url)
        st.push_async_callback(nl.close)
        js = nh.jetstream(timeout=3)
        await js.add_stream(name="S", subjects=["s.>"])
        got: list[tuple[str, str]] = []

        async def on_push(m):
            got.append((m.subject, m.reply))
            await m.ack()
        await nl.subscribe("dlv.l", cb=on_push)
        await _probe_ready(nh, nl)
        await js.add_consumer("S", durable_name="C", deliver_subject="dlv.l", ack_policy="explicit")
        for i in range(2):
            await js.publish(f"s.{i}", b"x")
        await _until(lambda: len(got) == 2, what="deliveries on the leaf")
        assert [s for s, _ in got] == ["s.0", "s.1"]
        assert all(r.startswith("$JS.ACK.S.C.1.") and "@" not in r for _, r in got), got
        deadline = time.monotonic() + 5
        while (ci_ := await js.consumer_info("S", "C")).ack_floor.stream_seq != 2:
            assert time.monotonic() < deadline, f"acks did not come back: {ci_}"
            await asyncio.sleep(0.05)
