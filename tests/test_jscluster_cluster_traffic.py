"""``accounts { A { jetstream { cluster_traffic: owner } } }`` (nats-server 2.11): the RAFT traffic of A's replicated
streams and consumers travels in A instead of the system account (rillet/jetstream/cluster/traffic.py).

What is observable, the same way on both servers: the stream and consumer info ``cluster`` (``system_account``,
``traffic_account``), and which account's subscribers see a group's RAFT messages (``$NRG.>`` for nats-server,
``$RNRG.>`` for Rillet, whose RAFT encoding is its own): a user of A subscribed there sees A's groups and nothing of
B's, a user of the system account sees B's and no longer A's. A 3-server cluster of each kind runs the same steps:
owner at the start, the setting changed by a configuration reload (both ways), and a restart of every server, with
the R3 streams taking and keeping messages throughout; the transcripts are compared (without the nats-server
binary, Rillet's is checked on its own).
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import types

import nats
import pytest

from helpers import ServerProcess, free_port

GO = shutil.which("nats-server")
WAIT = 60.0  # (CI: two loaded cores)
WATCH = 2.5  # seconds of RAFT traffic watched per observation (heartbeats, appends of the publishes)


# ---- configuration ----------------------------------------------------------------------------------------------

def _parse(tmp_path, text: str):
    from rillet.config.flags import parse_command_line
    p = tmp_path / "f.conf"
    p.write_text(text + "\n")
    return p, lambda: parse_command_line(["-c", str(p)])


@pytest.mark.parametrize("value", ["owner", "system", '""'])
def test_cluster_traffic_values_accepted(tmp_path, value):
    import subprocess
    p, parse = _parse(tmp_path, f"accounts {{\n  A {{\n    jetstream: {{ cluster_traffic: {value} }}\n  }}\n}}")
    parse()
    if GO:
        go = subprocess.run([GO, "-t", "-c", str(p)], capture_output=True, text=True, timeout=10)
        assert "is valid" in go.stdout + go.stderr, (go.stdout, go.stderr)


@pytest.mark.parametrize("value, words", [
    ("bogus", """3:18: Expected 'system' or 'owner' string value for "cluster_traffic", got bogus"""),
    ("Owner", """3:18: Expected 'system' or 'owner' string value for "cluster_traffic", got Owner"""),
    ("1", """3:18: Expected either 'system' or 'owner' string value for "cluster_traffic", got 1"""),
])
def test_cluster_traffic_bad_values_refused_as_nats_server(tmp_path, value, words):
    import subprocess

    from rillet.config.errors import ConfigError
    p, parse = _parse(tmp_path, f"accounts {{\n  A {{\n    jetstream: {{ cluster_traffic: {value} }}\n  }}\n}}")
    with pytest.raises(ConfigError) as e:
        parse()
    assert words in str(e.value), str(e.value)
    if GO:
        go = subprocess.run([GO, "-t", "-c", str(p)], capture_output=True, text=True, timeout=10)
        assert words in go.stdout + go.stderr, (go.stdout, go.stderr)


# ---- the decision (pure) ----------------------------------------------------------------------------------------

def test_traffic_account_decision():
    """System account unless the owner asked for owner traffic and no member with a statsz lacks the capability
    (a peer known only from its route counts as capable, as an unknown one does in nats-server); decided again for
    the running groups when a peer's claim changes, not at a configuration reload (which only renews the publish
    guard)."""
    from rillet.jetstream.cluster.peers import NodeInfo
    from rillet.jetstream.cluster.traffic import TrafficMover, cluster_traffic_setting

    class Reg:
        def __init__(self):
            self.nodes, self.listeners = {}, []

        def get(self, p):
            return self.nodes.get(p)

    class Tr:
        peer = "me000001"
        choose = None
        moved = 0

        def retarget(self):
            self.moved += 1
            return []

        def accounts(self):
            return {"SYS"}

    sys_acc, acc_a, acc_b = (types.SimpleNamespace(name=n) for n in ("SYS", "A", "B"))
    opts = types.SimpleNamespace(accounts={"A": {"jetstream": {"cluster_traffic": "owner"}},
                                           "B": {"jetstream": {"cluster_traffic": "system"}}})
    srv = types.SimpleNamespace(opts=opts, system_account=sys_acc, accounts={"SYS": sys_acc, "A": acc_a, "B": acc_b},
                                operator=None)
    reg, tr = Reg(), Tr()
    mv = TrafficMover(srv, reg, tr, types.SimpleNamespace(notice=lambda s: None))
    assert tr.choose == mv.choose and reg.listeners == [mv._registry_changed]
    assert srv.raft_accounts == {"A"}  # (its clients may not publish to the RAFT subjects)
    assert cluster_traffic_setting(opts, "A") == "owner" and cluster_traffic_setting(opts, "C") == "system"
    peers = ["me000001", "p0000002", "p0000003"]
    assert mv.choose("A", lambda: peers) is acc_a  # (nobody known: capable)
    assert mv.choose("B", lambda: peers) is None and mv.choose("", lambda: peers) is None
    reg.nodes["p0000002"] = NodeInfo(name="two", id="ID2", statsz_seen=False)  # (a route registration only)
    mv._registry_changed("p0000002")
    assert mv.choose("A", lambda: peers) is acc_a and tr.moved == 0
    reg.nodes["p0000002"] = NodeInfo(name="two", id="ID2", statsz_seen=True, account_nrg=True)
    mv._registry_changed("p0000002")
    assert mv.choose("A", lambda: peers) is acc_a and tr.moved == 0  # (a first claim of it: counted so already)
    reg.nodes["p0000003"] = NodeInfo(name="three", id="ID3", statsz_seen=True, account_nrg=False)  # (an older build)
    mv._registry_changed("p0000003")
    assert mv.choose("A", lambda: peers) is None and tr.moved == 1
    assert mv.choose("A", lambda: peers[:2]) is acc_a  # (a group without that member)
    reg.nodes["p0000003"] = NodeInfo(name="three", id="ID3", statsz_seen=True, account_nrg=True)
    mv._registry_changed("p0000003")
    assert mv.choose("A", lambda: peers) is acc_a and tr.moved == 2
    reg.nodes["p0000003"] = NodeInfo(name="three", id="ID3b", statsz_seen=True, account_nrg=True)  # (restarted)
    mv._registry_changed("p0000003")
    assert tr.moved == 2  # (the same claim: nothing to decide again)
    opts.accounts["B"]["jetstream"]["cluster_traffic"] = "owner"
    mv.reloaded()
    assert srv.raft_accounts == {"A", "B"} and tr.moved == 2  # (a reload moves no running group)
    # servers whose statsz came before the mover started are not news when their next one comes
    reg2, tr2 = Reg(), Tr()
    reg2.nodes["p0000002"] = NodeInfo(name="two", id="ID2", statsz_seen=True, account_nrg=True)
    mv2 = TrafficMover(srv, reg2, tr2, types.SimpleNamespace(notice=lambda s: None))
    mv2._registry_changed("p0000002")
    assert tr2.moved == 0


# ---- live: 3 Rillet servers, 3 nats-servers ----------------------------------------------------------------------

class _Cluster:
    """Three servers of one kind run as processes from configuration files (rewritten for a reload)."""

    def __init__(self, kind: str, tmp: str) -> None:
        self.kind, self.tmp = kind, tmp
        self.command = [GO] if kind == "go" else [sys.executable, "-m", "rillet.server"]
        self.prefix = "$NRG" if kind == "go" else "$RNRG"
        self.ports = [free_port() for _ in range(3)]
        self.cports = [free_port() for _ in range(3)]
        self.http = free_port()  # (server 0's monitoring port: /raftz)
        self.procs: list[ServerProcess] = []

    def write(self, traffic: str) -> None:
        routes = ", ".join(f"nats://127.0.0.1:{p}" for p in self.cports)
        for i in range(3):
            with open(os.path.join(self.tmp, f"s{i}.conf"), "w") as f:
                f.write(f"port: {self.ports[i]}\nhost: 127.0.0.1\nserver_name: {self.kind}{i}\n"
                        + (f"http: 127.0.0.1:{self.http}\n" if i == 0 else "")
                        + f"jetstream {{ store_dir: '{self.tmp}/store{i}' }}\n"
                        f"cluster {{ name: ct, listen: 127.0.0.1:{self.cports[i]}, routes: [{routes}] }}\n"
                        "accounts {\n  SYS { users [{user: sys, password: p}] }\n"
                        f"  A {{ jetstream: {{ cluster_traffic: {traffic} }}, users [{{user: a, password: p}}] }}\n"
                        "  B { jetstream: enabled, users [{user: b, password: p}] }\n}\nsystem_account: SYS\n")

    def start(self) -> None:
        self.procs = [ServerProcess("-c", os.path.join(self.tmp, f"s{i}.conf"), command=self.command)
                      for i in range(3)]
        for p in self.procs:
            p.wait_log("Server is ready", 30)

    def reload(self) -> None:
        marks = [p.mark() for p in self.procs]
        for p in self.procs:
            p.send_signal(signal.SIGHUP)
        for p, m in zip(self.procs, marks):
            p.wait_log("Reloaded server configuration", 20, after=m)

    def stop(self) -> None:
        for p in self.procs:
            p.stop()

    def url(self, user: str, i: int = 0) -> str:
        return f"nats://{user}:p@127.0.0.1:{self.ports[i]}"


async def _api(nc, subject: str, body: dict | None = None, *, until_ok: bool = True) -> dict:
    """A JetStream API request, asked again (a cluster just started, a group electing) until it succeeds."""
    deadline = time.monotonic() + WAIT
    data = json.dumps(body).encode() if body is not None else b""
    while True:
        try:
            r = json.loads((await nc.request(subject, data, timeout=5)).data)
            if "error" not in r or not until_ok:
                return r
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as e:
            r = {"exception": repr(e)}
        assert time.monotonic() < deadline, (subject, r)
        await asyncio.sleep(0.5)


def _get_json(url: str) -> dict:
    import urllib.request
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _traffic(ci: dict) -> dict:
    return {k: ci[k] for k in ("system_account", "traffic_account") if k in ci}


async def _observe(cl: _Cluster, label: str, sent: dict) -> dict:
    """One observation: 3 more messages in each stream (acknowledged), the consumer's fetch and acks, the info's
    traffic fields, the message counts, and which account saw which group's RAFT messages while it ran."""
    na, nb, ns = [await nats.connect(cl.url(u, i), max_reconnect_attempts=-1)
                  for u, i in (("a", 0), ("b", 1), ("sys", 2))]
    seen: dict[str, set] = {"A": set(), "B": set(), "SYS": set()}
    try:
        for acc, nc in (("A", na), ("B", nb), ("SYS", ns)):
            async def got(m, acc=acc) -> None:
                toks = m.subject.split(".")
                if len(toks) >= 3 and toks[1] != "R" and toks[1] != "CR":  # (replies name no group)
                    seen[acc].add(toks[2])
            await nc.subscribe(cl.prefix + ".>", cb=got)
            await nc.flush()
        ia = await _api(na, "$JS.API.STREAM.INFO.S")
        ib = await _api(nb, "$JS.API.STREAM.INFO.S")
        ca = await _api(na, "$JS.API.CONSUMER.INFO.S.D")
        groups = {ia["cluster"]["raft_group"]: "A/S", ca["cluster"]["raft_group"]: "A/S/D",
                  ib["cluster"]["raft_group"]: "B/S"}
        for nc, acc in ((na, "A"), (nb, "B")):
            for _ in range(3):
                ack = json.loads((await nc.request("s", f"{label} {acc}".encode(), timeout=10)).data)
                assert ack.get("stream") == "S" and "error" not in ack, ack
                sent[acc] += 1
        psub = await na.jetstream().pull_subscribe("s", "D", stream="S")
        msgs = await psub.fetch(3, timeout=10)
        for m in msgs:
            await m.ack_sync()
        await asyncio.sleep(WATCH)
        ia = await _api(na, "$JS.API.STREAM.INFO.S")
        ib = await _api(nb, "$JS.API.STREAM.INFO.S")
        ca = await _api(na, "$JS.API.CONSUMER.INFO.S.D")
        raftz = {}
        for acc in ("A", "B", "SYS"):
            rz = await asyncio.to_thread(_get_json, f"http://127.0.0.1:{cl.http}/raftz?acc={acc}")
            raftz[acc] = sorted((groups.get(g, "meta" if g == "_meta_" else "?"), v["system_account"],
                                 v["traffic_account"]) for g, v in rz.get(acc, {}).items())
        return {
            "label": label,
            "raftz": raftz,
            "A/S": _traffic(ia["cluster"]), "A/S/D": _traffic(ca["cluster"]), "B/S": _traffic(ib["cluster"]),
            "messages": [ia["state"]["messages"] == sent["A"], ib["state"]["messages"] == sent["B"]],
            "replicas": [len(ia["cluster"].get("replicas", [])), len(ib["cluster"].get("replicas", []))],
            "seen": {acc: sorted(groups[g] for g in gs if g in groups) for acc, gs in seen.items()},
        }
    finally:
        for nc in (na, nb, ns):
            await nc.close()


async def _raft_publish(cl: _Cluster) -> list:
    """A user of A publishing to the RAFT subjects (nats-server refuses ``$NRG.`` outside the system account)."""
    errors: list = []

    async def on_error(e) -> None:
        errors.append(str(e).replace(cl.prefix.lower() + ".", "<raft>."))  # (nats.py lowercases -ERR text)
    nc = await nats.connect(cl.url("a"), error_cb=on_error)
    try:
        await nc.publish(cl.prefix + ".V.X", b"forged")
        await nc.flush()
        deadline = time.monotonic() + 10
        while not errors and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    finally:
        await nc.close()
    return errors


async def _scenario(cl: _Cluster) -> list:
    out: list = []
    sent = {"A": 0, "B": 0}
    cl.write("owner")
    cl.start()
    na = await nats.connect(cl.url("a"))
    nb = await nats.connect(cl.url("b"))
    try:
        for nc in (na, nb):
            r = await _api(nc, "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s"], "num_replicas": 3})
            assert r["config"]["num_replicas"] == 3, r
        r = await _api(na, "$JS.API.CONSUMER.CREATE.S.D",
                       {"stream_name": "S", "config": {"durable_name": "D", "ack_policy": "explicit"}})
        assert r["config"]["durable_name"] == "D", r
        r1 = await _api(na, "$JS.API.STREAM.CREATE.R1", {"name": "R1", "subjects": ["r1"], "num_replicas": 1})
        out.append(["R1 stream cluster", _traffic(r1["cluster"])])
    finally:
        await na.close()
        await nb.close()
    out.append(["publish to the RAFT subjects in A", await _raft_publish(cl)])
    out.append(await _observe(cl, "owner", sent))
    cl.write("system")
    cl.reload()
    out.append(await _observe(cl, "reloaded to system", sent))
    cl.stop()
    cl.start()
    out.append(await _observe(cl, "restarted with system", sent))
    cl.write("owner")
    cl.reload()
    out.append(await _observe(cl, "reloaded to owner", sent))
    cl.stop()
    cl.start()
    out.append(await _observe(cl, "restarted with owner", sent))
    return out


def _run(kind: str) -> list:
    tmp = tempfile.mkdtemp(prefix=f"rillet-ct-{kind}-")
    cl = _Cluster(kind, tmp)
    try:
        return asyncio.run(_scenario(cl))
    except BaseException:
        for p in cl.procs:
            sys.stderr.write(f"--- {kind} server log\n" + "\n".join(p.lines[-60:]) + "\n")
        raise
    finally:
        cl.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def test_cluster_traffic_owner_as_nats_server():
    rillet = _run("rillet")
    in_a = {"traffic_account": "A"}
    in_sys = {"system_account": True, "traffic_account": "SYS"}
    assert rillet[0] == ["R1 stream cluster", {}]
    rillet_raft_publish = rillet[1][1]
    assert rillet[1] == ["publish to the RAFT subjects in A",
                         ['nats: permissions violation for publish to "<raft>.v.x"']], rillet[1]
    del rillet[1]
    for obs in rillet[1:]:
        assert obs["messages"] == [True, True] and obs["replicas"] == [2, 2], obs
        assert obs["B/S"] == in_sys and "B/S" in obs["seen"]["SYS"] and "B/S" not in obs["seen"]["A"], obs
        owner = obs["A/S"] == in_a
        assert obs["A/S/D"] == obs["A/S"] and (owner or obs["A/S"] == in_sys), obs
        if owner:  # A's groups talk in A: A's user sees them, the system account does not
            assert "A/S" in obs["seen"]["A"] and "A/S" not in obs["seen"]["SYS"], obs
        else:
            assert "A/S" in obs["seen"]["SYS"] and not obs["seen"]["A"], obs
        assert not obs["seen"]["B"], obs
        # /raftz?acc=: each group under its asset's account, with where its traffic goes
        t = ("A", False) if owner else ("SYS", True)
        assert obs["raftz"] == {"A": [("A/S", t[1], t[0]), ("A/S/D", t[1], t[0])], "B": [("B/S", True, "SYS")],
                                "SYS": [("meta", True, "SYS")]}, obs
    # as nats-server: a reload moves no running group; a restart does
    assert [obs["A/S"] for obs in rillet[1:]] == [in_a, in_a, in_sys, in_sys, in_a], rillet
    if GO:
        go = _run("go")
        assert go[1][0] == "publish to the RAFT subjects in A" and go[1][1] == rillet_raft_publish, go[1]
        del go[1]
        for a, b in zip(rillet, go):
            assert a == b, f"Rillet {a}\n    nats-server {b}"
        assert rillet == go
