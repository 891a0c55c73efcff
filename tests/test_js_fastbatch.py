"""Fast-ingest batch publishing (allow_batched, ADR-50; reply subjects <prefix>.<id>.<flow>.<gap>.<seq>.<op>.$FI),
compared with nats-server: flow acks, gaps in both modes, commit and EOB, errors (disabled, bad patterns, unknown
ids, failed expectations), duplicates, pings, concurrent batches, what is stored; and an R3 stream in an
in-process cluster."""
from __future__ import annotations

import asyncio
import json

import pytest

from jsdiff import Raw, ServerPair, norm_json, run_both, same

CONF = """
listen: 127.0.0.1:-1
jetstream { store_dir: "{store}" }
"""

HDR = "NATS/1.0\r\n{}\r\n"


@pytest.fixture(scope="module")
def pair():
    p = ServerPair(CONF)
    yield p
    p.stop()


class FB:
    """A transcript of fast batch answers: every message on _R.> in arrival order, up to a sync marker (a
    publish the stream refuses without storing, answered after everything sent to the stream before it)."""

    def __init__(self, r: Raw, stream: str, subject: str) -> None:
        self.r, self.stream, self.subject = r, stream, subject
        self.syncs = 0
        self.out: list = []

    def pub(self, bid: str, seq: int, op: int, flow: int = 2, gap: str = "fail", body: str = "",
            hdr: str | None = None, subject: str | None = None, reply: str | None = None) -> None:
        reply = reply or f"_R.fb.{bid}.{flow}.{gap}.{seq}.{op}.$FI"
        subj = subject or self.subject
        if hdr is not None:
            self.r.rc.hpub(subj, HDR.format(hdr).encode(), (body or f"{bid}-{seq}").encode(), reply=reply)
        else:
            self.r.rc.pub(subj, body or f"{bid}-{seq}", reply=reply)

    async def sync(self, label: str, subject: str | None = None) -> None:
        self.syncs += 1
        marker = f"_R.sync.{self.syncs}"
        self.r.rc.hpub(subject or self.subject, b"NATS/1.0\r\nNats-Expected-Stream: nope\r\n\r\n", b"", reply=marker)
        got = []
        while True:
            m = await self.r.rc.read_msg(3.0)
            if m.subject == marker:
                break
            p = json.loads(m.payload)
            got.append((".".join(m.subject.split(".")[-3:-1]) if m.subject.endswith(".$FI") else m.subject,
                        norm_json(p)))
        self.out.append((label, got))


    async def quiet(self, label: str, seconds: float = 0.3) -> None:
        """What arrives within ``seconds`` (for a no_ack stream, which answers no sync marker)."""
        from helpers import parse_stream
        got = [(".".join(m.subject.split(".")[-3:-1]), norm_json(json.loads(m.payload)))
               for m in parse_stream(await self.r.rc.read_for(seconds)) if not isinstance(m, bytes)]
        self.out.append((label, got))


async def _stored(r: Raw, stream: str) -> list:
    info = await r.api(f"$JS.API.STREAM.INFO.{stream}")
    st = info["state"]
    msgs = []
    for seq in range(st["first_seq"], st["last_seq"] + 1):
        ans = await r.api(f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq})
        if "message" in ans:
            m = ans["message"]
            msgs.append((m["seq"], m["subject"], m.get("hdrs"), m.get("data")))
    return [st["messages"], st["last_seq"], msgs]


@pytest.mark.parametrize("storage", ["memory", "file"])
async def test_fast_batch_like_nats_server(pair, storage):
    async def scenario(kind: str, url: str) -> list:
        r = await Raw.open(url)
        try:
            await r.api("$JS.API.STREAM.DELETE.FB")
            await r.api("$JS.API.STREAM.DELETE.FBOFF")
            ans = await r.api("$JS.API.STREAM.CREATE.FB", {"name": "FB", "subjects": ["fb.>"],
                                                            "allow_batched": True, "storage": storage})
            assert "error" not in ans, ans
            created = norm_json({k: ans["config"].get(k) for k in ("allow_batched", "metadata")})
            ans = await r.api("$JS.API.STREAM.CREATE.FBOFF", {"name": "FBOFF", "subjects": ["off.>"],
                                                               "storage": "memory"})
            assert "error" not in ans, ans
            f = FB(r, "FB", "fb.a")
            f.out.append(("config", created))

            f.pub("off", 1, 0, subject="off.a")
            await f.sync("disabled", "off.a")

            for i in range(1, 6):  # flow 2: acks after seq 0 (the start), then as stored
                f.pub("b1", i, 0 if i == 1 else 1)
            f.pub("b1", 6, 2)
            await f.sync("batch of six, flow 2")

            for i in range(1, 4):
                f.pub("b2", i, 0 if i == 1 else 1, flow=1)
            f.pub("b2", 4, 3, flow=1)
            await f.sync("eob commit")

            f.pub("b3", 1, 0)
            f.pub("b3", 2, 1)
            f.pub("b3", 4, 1)
            f.pub("b3", 5, 1)
            await f.sync("gap in fail mode ends the batch")

            f.pub("b4", 1, 0, gap="ok", flow=3)
            f.pub("b4", 2, 1, gap="ok", flow=3)
            f.pub("b4", 5, 1, gap="ok", flow=3)
            f.pub("b4", 6, 1, gap="ok", flow=3)
            f.pub("b4", 7, 2, gap="ok", flow=3)
            await f.sync("gap in ok mode goes on")

            f.pub("b5", 1, 0)
            f.pub("b5", 2, 1)
            f.pub("b5", 2, 1)
            await f.sync("a repeated sequence ends the batch")
            f.pub("b8", 1, 0, gap="ok")
            f.pub("b8", 2, 1, gap="ok")
            f.pub("b8", 2, 1, gap="ok")
            f.pub("b8", 3, 2, gap="ok")
            await f.sync("a repeated sequence in ok mode")

            f.pub("b6", 1, 2)
            await f.sync("one message committed at once")

            f.pub("bad", 1, 0, gap="maybe")
            f.pub("bad", 1, 9)
            f.pub("bad", 2, 0)
            f.pub("bad", 1, 1)
            f.pub("bad", 1, 3)
            f.pub("bad", 1, 0, reply="x.$FI")
            f.pub("bad", 1, 0, reply="_R.1.0.$FI")
            f.pub("x" * 65, 1, 0)
            f.pub("nope", 3, 1)
            f.pub("b7", 1, 0, flow=0)  # flow 0 means 10
            f.pub("b7", 2, 2, flow=0)
            await f.sync("bad patterns, long id, unknown id, default flow")

            f.pub("e1", 1, 0, hdr="Nats-Expected-Last-Sequence: 1")
            await f.sync("first message fails its expectation (fail mode)")
            last = (await r.api("$JS.API.STREAM.INFO.FB"))["state"]["last_seq"]
            f.pub("e2", 1, 0)
            f.pub("e2", 2, 1, hdr="Nats-Expected-Last-Sequence: 1")
            f.pub("e2", 3, 1)
            await f.sync("a later message fails (fail mode)")
            f.pub("e3", 1, 0, gap="ok")
            f.pub("e3", 2, 1, gap="ok", hdr="Nats-Expected-Last-Sequence: 1")
            f.pub("e3", 3, 1, gap="ok", hdr=f"Nats-Expected-Last-Sequence: {last + 2}")
            f.pub("e3", 4, 2, gap="ok", hdr="Nats-Expected-Last-Sequence: 1")
            await f.sync("errors in ok mode, the commit fails too")

            f.pub("d1", 1, 0, hdr="Nats-Msg-Id: m1")
            f.pub("d1", 2, 1, hdr="Nats-Msg-Id: m1")
            f.pub("d1", 3, 1, hdr="Nats-Msg-Id: m2")
            f.pub("d1", 4, 2, hdr="Nats-Msg-Id: m2")
            await f.sync("duplicates in a batch")
            f.pub("d2", 1, 2, hdr="Nats-Msg-Id: m1")
            await f.sync("a one message batch that is a duplicate")

            f.pub("p1", 1, 0, flow=4)
            f.pub("p1", 2, 1, flow=4)
            f.pub("p1", 2, 4, flow=4)
            await f.sync("ping")
            f.pub("p1", 5, 4, flow=4)
            await f.sync("ping in fail mode past what was sent")
            f.pub("p2", 1, 0, gap="ok", flow=4)
            f.pub("p2", 4, 4, gap="ok", flow=4)
            f.pub("p2", 5, 1, gap="ok", flow=4)
            f.pub("p2", 6, 3, gap="ok", flow=4)
            await f.sync("ping in ok mode past what was sent")

            f.pub("c1", 1, 0, flow=100)
            f.pub("c2", 1, 0, flow=100)
            for i in range(2, 6):
                f.pub("c1", i, 1, flow=100)
                f.pub("c2", i, 1, flow=100)
            f.pub("c1", 6, 3, flow=100)
            f.pub("c2", 6, 3, flow=100)
            await f.sync("two batches at once")

            f.pub("l1", 1, 0, hdr="Nats-Required-Api-Level: 99")
            f.pub("l2", 1, 2, hdr="Nats-Required-Api-Level: 1")
            await f.sync("required api level")

            await r.api("$JS.API.STREAM.DELETE.FBNA")
            ans = await r.api("$JS.API.STREAM.CREATE.FBNA", {"name": "FBNA", "subjects": ["na.>"], "no_ack": True,
                                                              "allow_batched": True, "storage": storage})
            assert "error" not in ans, ans
            for i in range(1, 4):
                f.pub("n1", i, 0 if i == 1 else 1, flow=1, subject="na.a")
            f.pub("n1", 5, 2, flow=1, subject="na.a")
            f.pub("n2", 2, 1, subject="na.a")
            await f.quiet("no_ack stream")
            f.out.append(("stored", await _stored(r, "FB")))
        finally:
            await r.close()
        return f.out

    same(await run_both(pair, scenario))


async def test_fast_batch_replicated_stream():
    """An R3 stream in three in-process servers: a fast batch's messages go through the stream's RAFT log,
    are stored on every replica, and the flow acks and final PubAck come once they committed."""
    import time

    import nats
    from rillet.app.embed import run_cluster

    async with run_cluster(3, jetstream=True) as servers:
        nc = await nats.connect(servers[0].client_url)
        try:
            ans = json.loads((await nc.request("$JS.API.STREAM.CREATE.R3FB", json.dumps(
                {"name": "R3FB", "subjects": ["r3.>"], "num_replicas": 3, "allow_batched": True}).encode(),
                timeout=10)).data)
            assert "error" not in ans, ans
            inbox = "_FI." + nc._nuid.next().decode()
            q: asyncio.Queue = asyncio.Queue()

            async def cb(m):
                await q.put(json.loads(m.data))
            await nc.subscribe(inbox + ".>", cb=cb)
            n = 20
            for i in range(1, n + 1):
                op = 0 if i == 1 else (2 if i == n else 1)
                await nc.publish("r3.x", f"m{i}".encode(), reply=f"{inbox}.B.5.fail.{i}.{op}.$FI")
                if i == 1:  # a client waits for the first answer: the flow it may use
                    first = await asyncio.wait_for(q.get(), 10)
                    assert first == {"type": "ack", "seq": 0, "msgs": 5}, first
            got = []
            while True:
                a = await asyncio.wait_for(q.get(), 10)
                got.append(a)
                if "stream" in a:
                    break
            assert got[-1] == {"stream": "R3FB", "seq": n, "batch": "B", "count": n}, got
            assert [a["seq"] for a in got[:-1]] == [5, 10, 15], got
            deadline = time.monotonic() + 8
            while True:  # every replica stored the batch
                reps = [s.jetstream.cluster.streams.replica("$G", "R3FB") for s in servers]
                states = [r.stream.store.state() for r in reps if r is not None]
                if len(states) == 3 and all(st.msgs == n and st.last_seq == n for st in states):
                    break
                assert time.monotonic() < deadline, states
                await asyncio.sleep(0.02)
        finally:
            await nc.close()
