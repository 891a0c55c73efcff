"""Virtual streams (issue 14): cluster-scoped account mappings that make the name ``foo`` write to the
region's write stream (``foo.x`` -> ``foo.<region>.x``) and act on the region's read stream
``foo-read-<region>`` through the JetStream API, with unmodified nats.py calls.

Creating a consumer through the virtual name is where Rillet goes beyond nats-server: the request body
still says ``"stream_name": "foo"`` after the mapping rewrote the subject; nats-server answers 10056, Rillet
applies the mapping to the body too (rillet.jetstream.api.router._mapped_body_stream). The Go behaviour is pinned
by ``test_nats_server_refuses_consumer_create_through_the_mapping``.
"""
from __future__ import annotations

import asyncio
import os
import json
import shutil

import nats
import pytest

from rillet.cli.vstream import mappings, read_name, render_mappings, stream_configs, write_name
from rillet.config.parser import parse_string
from rillet.jetstream.api.router import _mapped_body_stream
from rillet.app.embed import run_cluster
from rillet.subjects.mapping import Mapping, mapped_from, parse_mappings
from tests.helpers import ServerProcess, free_port, serve_config

REGIONS = ["west", "central", "east"]


# ---- pure parts -----------------------------------------------------------------------------------


def _select(ms, subject, cluster):
    for m in ms:
        if m.match(subject):
            return m.select(subject, cluster)
    return subject


def test_rendered_mappings_parse_and_pick_the_region():
    text = render_mappings("foo", REGIONS)
    ms = parse_mappings(parse_string("mappings {\n" + text + "\n}")["mappings"])
    for r in REGIONS:
        rs = f"foo-read-{r}"
        assert _select(ms, "foo.x", r) == f"foo.{r}.x"
        assert _select(ms, "foo.a.b", r) == f"foo.{r}.a.b"
        assert _select(ms, "$JS.API.STREAM.INFO.foo", r) == f"$JS.API.STREAM.INFO.{rs}"
        assert _select(ms, "$JS.API.CONSUMER.CREATE.foo", r) == f"$JS.API.CONSUMER.CREATE.{rs}"
        assert _select(ms, "$JS.API.CONSUMER.CREATE.foo.c.foo.x", r) == f"$JS.API.CONSUMER.CREATE.{rs}.c.foo.x"
        assert _select(ms, "$JS.API.CONSUMER.DURABLE.CREATE.foo.d", r) == f"$JS.API.CONSUMER.DURABLE.CREATE.{rs}.d"
        assert _select(ms, "$JS.API.CONSUMER.INFO.foo.d", r) == f"$JS.API.CONSUMER.INFO.{rs}.d"
        assert _select(ms, "$JS.API.CONSUMER.MSG.NEXT.foo.d", r) == f"$JS.API.CONSUMER.MSG.NEXT.{rs}.d"
        assert _select(ms, "$JS.API.STREAM.MSG.GET.foo", r) == f"$JS.API.STREAM.MSG.GET.{rs}"
        assert _select(ms, "$JS.API.DIRECT.GET.foo", r) == f"$JS.API.DIRECT.GET.{rs}"
        assert _select(ms, "$JS.API.DIRECT.GET.foo.foo.x", r) == f"$JS.API.DIRECT.GET.{rs}.foo.x"
        assert _select(ms, "$JS.ACK.foo.d.1.2.3.4.0", r) == f"$JS.ACK.{rs}.d.1.2.3.4.0"
    # other names and a server outside the regions' clusters are left alone
    assert _select(ms, "$JS.API.STREAM.INFO.foo-read-west", "west") == "$JS.API.STREAM.INFO.foo-read-west"
    assert _select(ms, "foo.x", "elsewhere") == "foo.x"
    assert _select(ms, "food.x", "west") == "food.x"
    # the one-region form (a single server) is not cluster scoped
    local = parse_mappings(mappings("foo", REGIONS, local="east"))
    assert _select(local, "foo.x", "") == "foo.east.x"
    assert _select(local, "$JS.API.CONSUMER.CREATE.foo", "") == "$JS.API.CONSUMER.CREATE.foo-read-east"


def test_stream_configs():
    cfgs = {c["name"]: c for c in stream_configs("foo", REGIONS, replicas=3, max_age_ns=7)}
    assert sorted(cfgs) == sorted([write_name("foo", r) for r in REGIONS] + [read_name("foo", r) for r in REGIONS])
    w = cfgs["foo-write-central"]
    assert w["subjects"] == ["foo.central.>"] and w["num_replicas"] == 3 and w["max_age"] == 7
    assert w["placement"] == {"cluster": "central"}
    rd = cfgs["foo-read-east"]
    assert "subjects" not in rd and rd["placement"] == {"cluster": "east"} and rd["allow_direct"] is True
    assert [s["name"] for s in rd["sources"]] == [f"foo-write-{r}" for r in REGIONS]
    assert all(s["subject_transforms"] == [{"src": "foo.*.>", "dest": "foo.>"}] for s in rd["sources"])
    # ordering variant: one stream sources the write streams, the read streams mirror it
    cfgs = {c["name"]: c for c in stream_configs("foo", REGIONS, ordering="stretch")}
    assert cfgs["foo-order"]["placement"] == {"cluster": "stretch"} and len(cfgs["foo-order"]["sources"]) == 3
    assert cfgs["foo-read-west"]["mirror"] == {"name": "foo-order"} and "sources" not in cfgs["foo-read-west"]


def test_mapped_from_checks_every_destination_of_the_first_matching_mapping():
    m = Mapping("a.>", [("a.w.>", 100, "w"), ("a.e.>", 100, "e")])
    assert sorted(m.results("a.x")) == ["a.e.x", "a.w.x", "a.x"]  # (elsewhere: the subject unchanged)
    assert mapped_from([m], "a.x", "a.e.x") and mapped_from([m], "a.x", "a.w.x")
    assert not mapped_from([m], "a.x", "a.z.x") and not mapped_from([m], "b.x", "a.w.x")
    first = Mapping("a.x", ["b.x"])
    assert not mapped_from([first, m], "a.x", "a.w.x")  # a.x is taken by the first mapping


def test_body_stream_name_follows_the_mapping():
    ms = parse_mappings(mappings("foo", REGIONS))
    toks = "$JS.API.CONSUMER.CREATE.foo-read-east.c1.foo.x".split(".")
    args = toks[4:]
    body = b'{"stream_name":"foo","config":{"name":"c1","filter_subject":"foo.x","ack_wait":1e9},"action":""}'
    out = json.loads(_mapped_body_stream(ms, toks, args, body))
    assert out == {"stream_name": "foo-read-east", "config": {"name": "c1", "filter_subject": "foo.x",
                                                              "ack_wait": 1e9}, "action": ""}
    assert b'"ack_wait":1e9' in _mapped_body_stream(ms, toks, args, body)  # other values kept as sent
    # a name the mapping does not lead from, the right name, no name, bad JSON: unchanged
    for b in (body.replace(b'"foo"', b'"bar"'), body.replace(b'"foo"', b'"foo-read-east"'),
              b'{"config":{}}', b'{"stream_name":', b'[1]', b'{"stream_name": 5}'):
        assert _mapped_body_stream(ms, toks, args, b) == b
    dtoks = "$JS.API.CONSUMER.DURABLE.CREATE.foo-read-west.d".split(".")
    assert json.loads(_mapped_body_stream(ms, dtoks, dtoks[5:], b'{"stream_name":"foo","config":{}}')
                      )["stream_name"] == "foo-read-west"


# ---- a single server (the region's mappings, not cluster scoped) ----------------------------------


async def _create_streams(nc, replicas=1):
    async def create(cfg):
        r = await nc.request(f"$JS.API.STREAM.CREATE.{cfg['name']}", json.dumps(cfg).encode(), timeout=5)
        return json.loads(r.data)
    # (at once: in a cluster each create waits for its meta proposal to be applied)
    for r in await asyncio.gather(*map(create, stream_configs("foo", REGIONS, replicas=replicas, placement="none"))):
        assert "error" not in r, r


async def _read_state(js, stream, n, timeout=5.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        si = await js.stream_info(stream)
        if si.state.messages >= n or loop.time() > deadline:
            return si
        await asyncio.sleep(0.05)


@pytest.fixture
def conf_dir(tmp_path):
    (tmp_path / "foo.mappings.conf").write_text(render_mappings("foo", REGIONS, local="west"))
    return tmp_path


async def test_virtual_stream_on_one_server_with_nats_py(conf_dir):
    conf = f"""
listen: 127.0.0.1:-1
jetstream {{ store_dir: "{conf_dir}/js" }}
mappings {{ include "foo.mappings.conf" }}
"""
    async with serve_config(conf, tmp_dir=str(conf_dir)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        await _create_streams(nc)
        for i in range(3):
            ack = await js.publish(f"foo.k{i}", f"m{i}".encode())
            assert ack.stream == "foo-write-west" and ack.seq == i + 1
        # the write stream holds the region's subject, the read stream the original one
        assert (await js.get_msg("foo-write-west", 1)).subject == "foo.west.k0"
        si = await _read_state(js, "foo", 3)  # STREAM.INFO.foo -> foo-read-west
        assert si.config.name == "foo-read-west" and si.state.messages == 3
        got = await js.get_msg("foo", 2)  # STREAM.MSG.GET.foo
        assert got.subject == "foo.k1" and got.data == b"m1"
        r = await nc.request("$JS.API.DIRECT.GET.foo", b'{"seq": 3}')
        assert r.headers["Nats-Subject"] == "foo.k2" and r.headers["Nats-Stream"] == "foo-read-west"
        r = await nc.request("$JS.API.DIRECT.GET.foo.foo.k0", b"")  # last message for a subject
        assert r.data == b"m0" and r.headers["Nats-Sequence"] == "1"

        # consumers through the virtual name, every create form nats.py uses
        ci = await js.add_consumer("foo")  # CONSUMER.CREATE.foo (ephemeral)
        assert ci.stream_name == "foo-read-west"
        ci = await js.add_consumer("foo", durable_name="legacy")  # CONSUMER.DURABLE.CREATE.foo.legacy
        assert ci.stream_name == "foo-read-west" and ci.name == "legacy"
        ci = await js.add_consumer("foo", name="one", filter_subject="foo.k1", ack_policy="explicit")
        assert ci.stream_name == "foo-read-west" and ci.config.filter_subject == "foo.k1"
        assert (await js.consumer_info("foo", "one")).num_pending == 1  # CONSUMER.INFO.foo.one

        # pull: fetch (MSG.NEXT.foo.p) and acks
        psub = await js.pull_subscribe("foo.>", durable="p", stream="foo")
        msgs = await psub.fetch(3, timeout=2)
        assert [m.subject for m in msgs] == ["foo.k0", "foo.k1", "foo.k2"]
        assert {m.metadata.stream for m in msgs} == {"foo-read-west"}
        for m in msgs[:2]:
            await m.ack_sync()
        # an ack sent to the virtual name's ack subject reaches the read stream's consumer
        last = msgs[2].reply.replace("$JS.ACK.foo-read-west.", "$JS.ACK.foo.")
        await nc.request(last, b"+ACK", timeout=2)
        ci = await js.consumer_info("foo", "p")
        assert ci.num_ack_pending == 0 and ci.ack_floor.stream_seq == 3

        # push
        sub = await js.subscribe("foo.>", stream="foo", manual_ack=True)
        seen = []
        for _ in range(3):
            m = await sub.next_msg(timeout=2)
            seen.append(m.subject)
            await m.ack()
        assert seen == ["foo.k0", "foo.k1", "foo.k2"]
        await js.delete_consumer("foo", "legacy")  # CONSUMER.DELETE.foo.legacy
        names = await nc.request("$JS.API.CONSUMER.NAMES.foo-read-west", b"")
        assert "legacy" not in json.loads(names.data)["consumers"]

        # a body naming another stream than the subject's (no mapping between them): still 10056
        r = json.loads((await nc.request("$JS.API.CONSUMER.CREATE.foo-read-west",
                                         b'{"stream_name":"foo-read-east","config":{}}')).data)
        assert r["error"]["err_code"] == 10056
        await nc.close()


@pytest.mark.skipif(shutil.which("nats-server") is None, reason="needs the nats-server binary")
async def test_nats_server_refuses_consumer_create_through_the_mapping(conf_dir):
    """The documented difference: the Go server maps the subject and then refuses the body's name."""
    conf = conf_dir / "go.conf"
    conf.write_text(f"""
listen: 127.0.0.1:{free_port()}
jetstream {{ store_dir: "{conf_dir}/gojs" }}
mappings {{ include "foo.mappings.conf" }}
""")
    proc = ServerProcess("-c", str(conf), command=["nats-server"])
    try:
        await asyncio.get_running_loop().run_in_executor(None, proc.wait_ready)
        nc = await nats.connect(proc.client_url)
        await _create_streams(nc)
        assert (await nc.jetstream().stream_info("foo")).config.name == "foo-read-west"
        r = json.loads((await nc.request("$JS.API.CONSUMER.CREATE.foo",
                                         b'{"stream_name":"foo","config":{}}')).data)
        assert r["error"]["err_code"] == 10056
        await nc.close()
    finally:
        proc.stop()


# ---- one cluster named after its region, cluster-scoped mappings ----------------------------------


async def test_cluster_scoped_virtual_stream_in_a_cluster():
    async with run_cluster(3, jetstream=True, name="central", mappings=mappings("foo", REGIONS)) as servers:
        ncs = [await nats.connect(s.client_url) for s in servers]
        js = [nc.jetstream() for nc in ncs]
        await _create_streams(ncs[0], replicas=1)
        for i, j in enumerate(js):  # from every server of the cluster
            ack = await j.publish(f"foo.s{i}", b"x")
            assert ack.stream == "foo-write-central"
        si = await _read_state(js[1], "foo", 3)
        assert si.config.name == "foo-read-central" and si.state.messages == 3
        # consumers through the virtual name, asked of every server (at once, as above)
        cis = await asyncio.gather(*(j.add_consumer("foo", durable_name=f"d{i}", ack_policy="explicit")
                                     for i, j in enumerate(js)))
        assert [ci.stream_name for ci in cis] == ["foo-read-central"] * 3
        for i, j in enumerate(js):
            psub = await j.pull_subscribe_bind(f"d{i}", stream="foo")
            msgs = await psub.fetch(3, timeout=3)
            assert sorted(m.subject for m in msgs) == ["foo.s0", "foo.s1", "foo.s2"]
            for m in msgs:
                await m.ack_sync()
            ci = await j.consumer_info("foo", f"d{i}")
            assert ci.num_ack_pending == 0 and ci.num_pending == 0
        for nc in ncs:
            await nc.close()


async def test_ordering_variant_on_one_server(conf_dir):
    """``--ordering``: foo-order sources the write streams, every read stream mirrors it (one order)."""
    conf = f"""
listen: 127.0.0.1:-1
jetstream {{ store_dir: "{conf_dir}/js" }}
mappings {{ include "foo.mappings.conf" }}
"""
    async with serve_config(conf, tmp_dir=str(conf_dir)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        for cfg in stream_configs("foo", REGIONS, replicas=1, placement="none", ordering="any"):
            r = json.loads((await nc.request(f"$JS.API.STREAM.CREATE.{cfg['name']}",
                                             json.dumps(cfg).encode(), timeout=5)).data)
            assert "error" not in r, r
        # (every foo.> publish on this region-west server is mapped: foo.east.b is stored as foo.west.east.b)
        for subj in ("foo.a", "foo.east.b", "foo.c"):
            assert (await js.publish(subj, b"x")).stream == "foo-write-west"
        order = await _read_state(js, "foo-order", 3)
        assert order.state.messages == 3
        want = [(await js.get_msg("foo-order", s)).subject for s in (1, 2, 3)]
        assert sorted(want) == ["foo.a", "foo.c", "foo.east.b"]
        for r in REGIONS:
            await _read_state(js, f"foo-read-{r}", 3)
            assert [(await js.get_msg(f"foo-read-{r}", s)).subject for s in (1, 2, 3)] == want
        psub = await js.pull_subscribe("foo.>", durable="o", stream="foo")  # through the mapping
        assert [m.subject for m in await psub.fetch(3, timeout=2)] == want
        await nc.close()


async def test_jwt_form_of_the_mappings_in_operator_mode(tmp_path):
    """``rillet vstream mappings --jwt``: the account JWT's form, scoped by the server's cluster."""
    from rillet.cli.vstream import jwt_mappings
    from tests.test_operator import Operator, connect
    op = Operator()
    akp, _, _ = op.account("A", mappings=jwt_mappings("foo", REGIONS))
    async with serve_config(op.config("cluster { name: east, listen: 127.0.0.1:-1 }")) as srv:
        nc = await connect(srv, tmp_path, *op.user(akp))
        data = await nc.subscribe("foo.>")
        api = await nc.subscribe("$JS.API.>")
        await nc.flush()
        await nc.publish("foo.x", b"1")
        await nc.publish("$JS.API.CONSUMER.DURABLE.CREATE.foo.d", b"{}")
        assert (await data.next_msg(timeout=1)).subject == "foo.east.x"
        assert (await api.next_msg(timeout=1)).subject == "$JS.API.CONSUMER.DURABLE.CREATE.foo-read-east.d"
        await nc.close()


async def test_vstream_jwt_signs_and_pushes_the_mappings_in_operator_mode(tmp_path):
    """``rillet vstream jwt --push``: the account JWT gets the virtual stream's mappings (entries for other
    subjects kept), signed with the operator key, pushed through $SYS.REQ.CLAIMS.UPDATE; the running server
    applies them (scoped by its cluster). Bad inputs are refused with a clear error."""
    import subprocess
    import sys

    from rillet import jwt as J
    from tests.test_operator import Operator, connect, creds
    op = Operator()
    akp, apub, atok = op.account("A", mappings={"old.x": [{"subject": "old.y", "weight": 100}]})
    (tmp_path / "A.jwt").write_text(atok)
    (tmp_path / "op.nk").write_text(op.kp.seed.decode())
    (tmp_path / "acc.nk").write_text(akp.seed.decode())

    def cli(*args: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NATS_")}
        env.update(RILLET_CONFIG_DIR="/nonexistent-rillet-config", COLUMNS="200")
        return subprocess.run([sys.executable, "-m", "rillet.cli", *args], capture_output=True, text=True,
                              timeout=30, env=env)

    async with serve_config(op.config("cluster { name: east, listen: 127.0.0.1:-1 }")) as srv:
        skp = op.sys[0]
        sys_creds = creds(tmp_path, *op.user(skp, name="sys"), name="sys")
        base = ["vstream", "jwt", "foo", "--regions", ",".join(REGIONS), "--account-jwt", str(tmp_path / "A.jwt")]
        r = await asyncio.to_thread(cli, *base, "--signing-key", str(tmp_path / "acc.nk"))
        assert r.returncode != 0 and "signed by an operator key" in r.stderr + r.stdout, r
        nc = await connect(srv, tmp_path, *op.user(akp))  # (a memory resolver updates loaded accounts only)
        data = await nc.subscribe("foo.>")
        await nc.publish("foo.x", b"0")
        assert (await data.next_msg(timeout=1)).subject == "foo.x"  # no mapping yet
        r = await asyncio.to_thread(cli, *base, "--signing-key", str(tmp_path / "op.nk"), "--out",
                                    str(tmp_path / "A2.jwt"), "--push", "--server", srv.client_url,
                                    "--creds", sys_creds)
        assert r.returncode == 0, r
        assert "Pushed: jwt updated" in r.stdout, r.stdout
        claims = J.decode((tmp_path / "A2.jwt").read_text().strip())  # (a valid signature)
        assert claims["iss"] == op.pub and claims["sub"] == apub
        m = claims["nats"]["mappings"]
        assert m["old.x"] == [{"subject": "old.y", "weight": 100}] and m["foo.>"][2]["cluster"] == "east"
        await nc.flush()
        await nc.publish("foo.x", b"1")
        assert (await data.next_msg(timeout=1)).subject == "foo.east.x"
        await nc.close()
        (tmp_path / "bad.jwt").write_text("not-a-jwt")
        r = await asyncio.to_thread(cli, "vstream", "jwt", "foo", "--regions", "west", "--account-jwt",
                                    str(tmp_path / "bad.jwt"), "--signing-key", str(tmp_path / "op.nk"))
        assert r.returncode != 0 and "not an account JWT" in r.stderr + r.stdout, r
