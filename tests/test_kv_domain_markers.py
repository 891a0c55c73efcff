"""KV through a JetStream domain and KV entries of TTL markers, Rillet and nats-server side by side (issue 19,
points 5 and 6).

* nats.js kv_test 'kv - mirror cross domain': a hub (domain HUB) holds bucket TEST; a leaf server (domain
  LEAF) mirrors it as KV_MIRROR with ``external.api = $JS.HUB.API``; the mirror's writes go to the origin as
  ``$JS.HUB.API.$KV.TEST.<key>`` (nats-server maps ``$JS.<domain>.API.$KV.>`` to ``$KV.>`` in every account
  with JetStream in a domain; Rillet answered no responders).
* nats.js kv_test 'kv - get entry ttl markerTTL from bucket': a bucket with ``subject_delete_marker_ttl``; a
  KV purge with its own TTL is a delete marker itself, so when it expires nothing is left (Rillet left a
  MaxAge marker, which nats.js shows as a PURGE entry); a value or a DEL with a TTL leaves a MaxAge marker
  with the bucket's marker TTL, which expires in turn.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import nats  # noqa: E402

from helpers import ServerProcess, free_port  # noqa: E402
from jsdiff import GO_BINARY, ServerPair, run_both, same  # noqa: E402

pytestmark = pytest.mark.asyncio

HUB = """
server_name: HUB
listen: 127.0.0.1:-1
jetstream: {domain: HUB, store_dir: "%s"}
leafnodes: {listen: "127.0.0.1:%d"}
"""
LEAF = """
server_name: LEAF
listen: 127.0.0.1:-1
jetstream: {domain: LEAF, store_dir: "%s"}
leafnodes: {remotes: [{url: "leaf://127.0.0.1:%d"}]}
"""


class HubAndLeaf:
    """A hub and a leaf server of one kind (Rillet or nats-server), as subprocesses."""

    def __init__(self, kind: str) -> None:
        self.dir = tempfile.mkdtemp(prefix=f"rillet-kvdom-{kind}-")
        cmd = [GO_BINARY] if kind == "go" else None
        lp = free_port()
        self.procs: list[ServerProcess] = []
        try:
            for name, text in (("hub", HUB % (os.path.join(self.dir, "hub"), lp)),
                               ("leaf", LEAF % (os.path.join(self.dir, "leaf"), lp))):
                path = os.path.join(self.dir, name + ".conf")
                with open(path, "w") as f:
                    f.write(text)
                self.procs.append(ServerProcess("-c", path, command=cmd).wait_ready())
            self.procs[0].wait_log(r"Leafnode connection created", 10)
            self.procs[1].wait_log(r"Leafnode connection created", 10)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for p in self.procs:
            p.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


async def _json_req(nc, subject: str, body: object = b"", headers: dict | None = None) -> object:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    try:
        m = await nc.request(subject, data, timeout=2, headers=headers)
    except nats.errors.NoRespondersError:
        return "no responders"
    return json.loads(m.data) if m.data else dict(m.headers or {})


async def _mirror_cross_domain(kind: str) -> dict:
    servers = HubAndLeaf(kind)
    hub_url, leaf_url = (p.client_url for p in servers.procs)
    nc = lnc = None
    try:
        nc = await nats.connect(hub_url)
        lnc = await nats.connect(leaf_url)
        kv = await nc.jetstream().create_key_value(bucket="TEST", direct=True)
        await kv.put("name", b"derek")
        await kv.put("age", b"22")
        await kv.put("v", b"v")
        await kv.delete("v")
        out: dict = {}
        created = await _json_req(lnc, "$JS.API.STREAM.CREATE.KV_MIRROR", {
            "name": "KV_MIRROR", "mirror": {"name": "KV_TEST", "external": {"api": "$JS.HUB.API"}},
            "mirror_direct": True, "allow_direct": True, "max_msgs_per_subject": 1, "deny_delete": True,
            "allow_rollup_hdrs": True, "discard": "new", "num_replicas": 1, "storage": "file"})
        assert isinstance(created, dict) and "error" not in created, created
        out["mirror_direct"] = created["config"]["mirror_direct"]

        async def mirror_state(want_last: int) -> dict:
            st: dict = {}
            for _ in range(40):
                st = (await _json_req(lnc, "$JS.API.STREAM.INFO.KV_MIRROR"))["state"]  # type: ignore[index]
                if st["last_seq"] >= want_last:
                    break
                await asyncio.sleep(0.1)
            return {"messages": st["messages"], "last_seq": st["last_seq"]}
        out["mirrored"] = await mirror_state(4)
        # the mirror's KV writes (nats.js: editPrefix = external api + $KV.TEST)
        out["put"] = await _json_req(lnc, "$JS.HUB.API.$KV.TEST.name", b"rip")
        out["del"] = await _json_req(lnc, "$JS.HUB.API.$KV.TEST.v", b"", headers={"KV-Operation": "DEL"})
        # the hub's own client through its own domain's prefix
        out["hub put"] = await _json_req(nc, "$JS.HUB.API.$KV.TEST.age", b"23")
        out["mirrored after"] = await mirror_state(7)
        got = await lnc.request("$JS.API.DIRECT.GET.KV_MIRROR.$KV.TEST.name", b"", timeout=2)
        out["mirror get"] = (got.data, got.headers.get("Nats-Sequence"))
        got = await lnc.request("$JS.HUB.API.DIRECT.GET.KV_TEST.$KV.TEST.age", b"", timeout=2)
        out["origin get"] = (got.data, got.headers.get("Nats-Sequence"))
        return out
    finally:
        for c in (nc, lnc):
            if c is not None:
                await c.close()
        servers.stop()


async def test_kv_mirror_cross_domain() -> None:
    kinds = ["rillet"] + (["go"] if GO_BINARY else [])
    results = dict(zip(kinds, await asyncio.gather(*(_mirror_cross_domain(k) for k in kinds))))
    r = same(results)
    assert r["mirror_direct"] is True
    assert r["mirrored"] == {"messages": 3, "last_seq": 4}
    assert r["put"] == {"stream": "KV_TEST", "domain": "HUB", "seq": 5}
    assert r["del"] == {"stream": "KV_TEST", "domain": "HUB", "seq": 6}
    assert r["hub put"] == {"stream": "KV_TEST", "domain": "HUB", "seq": 7}
    assert r["mirrored after"] == {"messages": 3, "last_seq": 7}
    assert r["mirror get"] == (b"rip", "5")
    assert r["origin get"] == (b"23", "7")


MARKERS = 'listen: 127.0.0.1:-1\njetstream: {store_dir: "{store}"}\n'


async def test_kv_ttl_marker_entries() -> None:
    """nats.js 'kv - get entry ttl markerTTL from bucket' (key a) and the markers a value (b) and a DEL (d)
    with their own TTLs leave: each get's headers, sequence and status, then the stream's state."""
    pair = ServerPair(MARKERS)

    async def scenario(kind: str, url: str) -> list:
        nc = await nats.connect(url)
        out: list = []
        try:
            cfg = {"name": "KV_A", "subjects": ["$KV.A.>"], "max_msgs_per_subject": 1, "allow_msg_ttl": True,
                   "subject_delete_marker_ttl": 1_000_000_000, "allow_direct": True, "allow_rollup_hdrs": True,
                   "deny_delete": True, "discard": "new", "storage": "file"}
            created = await _json_req(nc, "$JS.API.STREAM.CREATE.KV_A", cfg)
            assert "error" not in created, created  # type: ignore[operator]

            async def pub(key: str, headers: dict) -> None:
                out.append((f"pub {key}", await _json_req(nc, f"$KV.A.{key}", b"", headers=headers)))

            async def get(tag: str, key: str) -> None:
                m = await nc.request(f"$JS.API.DIRECT.GET.KV_A.$KV.A.{key}", b"", timeout=2)
                h = {k: v for k, v in (m.headers or {}).items() if k != "Nats-Time-Stamp"}
                out.append((f"{tag} get {key}", h, m.data))
            t0 = time.monotonic()
            await pub("a", {"Nats-Expected-Last-Subject-Sequence": "0", "Nats-TTL": "2s"})  # kv.create(.., "2s")
            await pub("a", {"KV-Operation": "DEL"})
            await get("t0", "a")
            await pub("a", {"KV-Operation": "PURGE", "Nats-Rollup": "sub", "Nats-TTL": "2s"})
            await pub("b", {"Nats-TTL": "1s"})
            await pub("d", {"KV-Operation": "DEL", "Nats-TTL": "1s"})
            await get("t0", "a")
            await asyncio.sleep(max(0.0, 1.5 - (time.monotonic() - t0)))
            for k in "abd":
                await get("t1.5", k)
            await asyncio.sleep(max(0.0, 3.3 - (time.monotonic() - t0)))
            for k in "abd":
                await get("t3.3", k)
            st = (await _json_req(nc, "$JS.API.STREAM.INFO.KV_A"))["state"]  # type: ignore[index]
            out.append(("state", {k: st.get(k) for k in ("messages", "first_seq", "last_seq", "num_deleted")}))
        finally:
            await nc.close()
        return out

    try:
        r = same(await run_both(pair, scenario, timeout=30))
    finally:
        pair.stop()
    got = {x[0]: x[1:] for x in r}
    assert got["t0 get a"][0]["KV-Operation"] == "PURGE"
    assert got["t1.5 get b"][0]["Nats-Marker-Reason"] == "MaxAge" and got["t1.5 get b"][0]["Nats-TTL"] == "1s"
    assert got["t1.5 get d"][0]["Nats-Marker-Reason"] == "MaxAge"
    for k in "abd":
        assert got[f"t3.3 get {k}"][0].get("Status") == "404", got[f"t3.3 get {k}"]
    assert got["state"][0]["messages"] == 0


DOMAIN = 'listen: 127.0.0.1:-1\njetstream: {domain: HUB, store_dir: "{store}"}\n'


async def test_pub_ack_bytes_with_domain() -> None:
    """The PubAck of a server with a domain, byte for byte: the domain before the sequence; a duplicate's."""
    from jsdiff import Raw
    pair = ServerPair(DOMAIN)

    async def scenario(kind: str, url: str) -> list:
        r = await Raw.open(url)
        try:
            await r.api("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "storage": "memory"})
            out = [await r.request("s.1", b"x")]
            out.append(await r.request("s.2", b"x", hdr=b"NATS/1.0\r\nNats-Msg-Id: m1\r\n\r\n"))
            out.append(await r.request("s.3", b"x", hdr=b"NATS/1.0\r\nNats-Msg-Id: m1\r\n\r\n"))
            out.append(await r.request("$JS.HUB.API.$KV.S.k", b"x"))  # (no bucket: no responders)
            return out
        finally:
            await r.close()

    try:
        r = same(await run_both(pair, scenario))
    finally:
        pair.stop()
    assert r[0] == [(None, b'{"stream":"S","domain":"HUB","seq":1}')]
    assert r[2] == [(None, b'{"stream":"S","domain":"HUB","seq":2,"duplicate": true}')]
    assert r[3][0][0].startswith("NATS/1.0 503")
