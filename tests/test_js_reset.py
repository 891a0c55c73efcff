"""$JS.API.CONSUMER.RESET.<stream>.<consumer> and the Nats-Required-Api-Level header, compared with
nats-server: resets to the ack floor and to a sequence, what the consumer delivers next, deliver-policy
limits, bad bodies, a missing consumer (no responder)."""
from __future__ import annotations

import asyncio
import json

import pytest

from jsdiff import Raw, ServerPair, norm_json, run_both, same

CONF = """
listen: 127.0.0.1:-1
jetstream { store_dir: "{store}" }
"""


@pytest.fixture(scope="module")
def pair():
    p = ServerPair(CONF)
    yield p
    p.stop()


async def pull(r: Raw, subject: str, n: int, hdr: bytes | None = None, timeout: float = 1.0) -> list:
    """``n`` messages (subject, payload, delivery count, stream seq, consumer seq, pending) or the status."""
    r.n += 1
    inbox, sid = f"_P.{r.n}", f"p{r.n}"
    r.rc.sub(inbox, sid)
    body = json.dumps({"batch": n, "expires": 300_000_000}).encode()
    if hdr is not None:
        r.rc.hpub(subject, hdr, body, reply=inbox)
    else:
        r.rc.pub(subject, body, reply=inbox)
    out: list = []
    while len(out) < n:
        try:
            m = await r.rc.read_msg(timeout)
        except AssertionError:
            out.append("<timeout>")
            break
        if m.sid != sid:
            continue
        if (m.headers or b"").startswith(b"NATS/1.0 "):
            out.append(m.headers.decode().split("\r\n")[0])
            break
        t = m.reply.split(".")
        out.append((m.subject, m.payload.decode(), t[4], t[5], t[6], t[8]))
    r.rc.send(f"UNSUB {sid}\r\n".encode())
    return out


def _info(ans: dict) -> dict:
    keep = {k: ans[k] for k in ("type", "error", "delivered", "ack_floor", "num_ack_pending", "num_redelivered",
                                "num_pending", "reset_seq") if k in ans}
    return norm_json(keep)


@pytest.mark.parametrize("storage", ["memory", "file"])
async def test_consumer_reset_like_nats_server(pair, storage):
    async def scenario(kind: str, url: str) -> list:
        r = await Raw.open(url)
        out: list = []
        try:
            await r.api("$JS.API.STREAM.DELETE.RST")
            ans = await r.api("$JS.API.STREAM.CREATE.RST", {"name": "RST", "subjects": ["rst.>"], "storage": storage})
            assert "error" not in ans, ans
            for i in range(6):
                await r.publish(f"rst.{i % 2}", f"m{i}")
            for name, cfg in (("C", {}), ("L", {"deliver_policy": "last"}),
                              ("S", {"deliver_policy": "by_start_sequence", "opt_start_seq": 3}),
                              ("A", {"ack_policy": "all"})):
                ans = await r.api(f"$JS.API.CONSUMER.CREATE.RST.{name}", {"stream_name": "RST", "config": {
                    "durable_name": name, "ack_policy": "explicit", **cfg}})
                assert "error" not in ans, ans
            N = "$JS.API.CONSUMER.MSG.NEXT.RST.C"
            R = "$JS.API.CONSUMER.RESET.RST."

            async def reset(label: str, name: str, body=b"", hdr: bytes | None = None) -> None:
                ans = await r.request(R + name, body, hdr=hdr)
                out.append((label, _info(json.loads(ans[0][1])) if ans[0] != "<timeout>" else ans[0]))

            got = await pull(r, N, 3)
            out.append(("first three", got))
            r.rc.pub(f"$JS.ACK.RST.C.1.{got[0][3]}.{got[0][4]}.0.0", b"+ACK")
            await r.rc.ping()
            for _ in range(100):  # (nats-server applies an ack on the consumer's own goroutine: wait for it there)
                if (await r.api("$JS.API.CONSUMER.INFO.RST.C")).get("ack_floor", {}).get("stream_seq") == 1:
                    break
                await asyncio.sleep(0.02)
            await reset("back to the ack floor", "C")
            out.append(("after floor reset", await pull(r, N, 2)))
            await reset("to seq 5", "C", {"seq": 5})
            out.append(("after reset to 5", await pull(r, N, 3)))
            await reset("past the end", "C", {"seq": 100})
            out.append(("after reset past the end", await pull(r, N, 1)))
            await reset("seq 0", "C", {"seq": 0})
            await reset("bad json", "C", b"{nope")
            await reset("seq a string", "C", {"seq": "3"})
            await reset("seq negative", "C", {"seq": -1})
            await reset("deliver last to a seq", "L", {"seq": 2})
            await reset("deliver last to the floor", "L")
            await reset("start seq below", "S", {"seq": 2})
            await reset("start seq above", "S", {"seq": 4})
            await reset("ack all", "A", {"seq": 2})
            await reset("unknown consumer", "NOPE")
            await reset("api level too high", "C", b"", hdr=b"NATS/1.0\r\nNats-Required-Api-Level: 99\r\n\r\n")
            await reset("api level not a number", "C", b"", hdr=b"NATS/1.0\r\nNats-Required-Api-Level: x\r\n\r\n")
            await reset("api level fine", "C", {"seq": 1}, hdr=b"NATS/1.0\r\nNats-Required-Api-Level: 1\r\n\r\n")
            out.append(("pull api level too high", await pull(
                r, N, 1, hdr=b"NATS/1.0\r\nNats-Required-Api-Level: 99\r\n\r\n")))
            info = await r.api("$JS.API.CONSUMER.INFO.RST.C")
            out.append(("info", _info(info)))
        finally:
            await r.close()
        return out

    same(await run_both(pair, scenario))


async def test_consumer_reset_on_r3_consumer():
    """CONSUMER.RESET on an R3 consumer in three in-process servers: the C_RESET entry is replicated (encoded by
    the cluster log), every replica forgets what was pending and moves its scan position where the reset says
    (also backwards), so a new consumer leader after a stepdown delivers from the reset sequence."""
    import asyncio
    import time

    import nats

    from rillet.app.embed import run_cluster

    def creps(servers):
        out = []
        for s in servers:
            rep = s.jetstream.cluster.streams.replica("$G", "RS")
            if rep is not None and "C" in rep.creps:
                out.append(rep.creps["C"])
        return out

    async def until(cond, what: str, timeout: float = 8.0) -> bool:
        deadline = time.monotonic() + timeout
        while not cond():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.01)
        return True

    def leader(servers):
        ls = [c for c in creps(servers) if c.leader]
        return ls[0] if len(ls) == 1 else None

    async with run_cluster(3, jetstream=True) as servers:
        nc = await nats.connect(servers[0].client_url)
        try:
            js = nc.jetstream()
            await js.add_stream(name="RS", subjects=["rs.>"], num_replicas=3)
            for i in range(1, 9):
                await js.publish("rs.a", b"%d" % i)
            psub = await js.pull_subscribe("rs.a", durable="C", stream="RS")
            await until(lambda: len(creps(servers)) == 3 and leader(servers) is not None, "consumer leader")

            async def take(n: int) -> list[tuple[int, int]]:
                ms = await psub.fetch(n, timeout=3)
                return [(m.metadata.sequence.stream, m.metadata.sequence.consumer) for m in ms]

            async def stepdown() -> None:
                """A former follower leads the consumer (a stepdown may elect the same server again: retried)."""
                old = leader(servers)
                for _ in range(3):
                    r = json.loads((await nc.request("$JS.API.CONSUMER.LEADER.STEPDOWN.RS.C", b"", timeout=3)).data)
                    assert r.get("success") is True, r
                    await until(lambda: leader(servers) is not None, "a consumer leader")
                    try:
                        await until(lambda: leader(servers) not in (None, old), "a new consumer leader", 2.0)
                        return
                    except AssertionError:
                        continue
                raise AssertionError("the consumer leader stayed on the same server")

            got = await take(5)
            assert got == [(i, i) for i in range(1, 6)], got
            r = json.loads((await nc.request("$JS.API.CONSUMER.RESET.RS.C", json.dumps({"seq": 2}).encode(),
                                             timeout=3)).data)
            assert r["reset_seq"] == 2 and r["num_ack_pending"] == 0 and r["delivered"]["stream_seq"] == 1, r
            # every replica applied it: nothing pending, consumer sequences from 1, scanning from 2
            await until(lambda: all(c.c.pending == {} and c.c.dseq == 1 and c.c.sseq == 2
                                    for c in creps(servers)), "the reset on every replica")
            await stepdown()
            got = await take(2)
            assert got == [(2, 1), (3, 2)], got  # the new leader goes on from the reset, not from 6
            r = json.loads((await nc.request("$JS.API.CONSUMER.RESET.RS.C", json.dumps({"seq": 7}).encode(),
                                             timeout=3)).data)
            assert r["reset_seq"] == 7, r
            await until(lambda: all(c.c.sseq == 7 and c.c.pending == {} for c in creps(servers)),
                        "the forward reset on every replica")
            await stepdown()
            got = await take(2)
            assert got == [(7, 1), (8, 2)], got
        finally:
            await nc.close()
