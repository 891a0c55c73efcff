"""$JS.API.CONSUMER.RESET.<stream>.<consumer> and the Nats-Required-Api-Level header, compared with
nats-server: resets to the ack floor and to a sequence, what the consumer delivers next, deliver-policy
limits, bad bodies, a missing consumer (no responder)."""
from __future__ import annotations

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
