"""Direct get by sequence: the common request (``DIRECT.GET.<stream>`` with ``{"seq":N}``, no headers) has a
short path in rillet.jetstream.api.direct (``DirectApi.on_direct_get``); it must answer byte for byte as the
general path (``direct_get``) does, which tests/test_js_differential.py checks against nats-server. The
Nats-Time-Stamp text is written from the kept text of its whole second (``_time_stamp``): the same bytes as
``format_time``."""
from __future__ import annotations

import random

import nats

from helpers import RawClient
from rillet.app.embed import run_server
from rillet.config.options import JetStreamOptions, Options
from rillet.gocompat.gotime import format_time
from rillet.jetstream.api.direct import _time_stamp


def test_time_stamp_is_format_time():
    rnd = random.Random(20)
    base = 1_700_000_000 * 10**9
    values = [0, 1, 999, 10**9 - 1, 10**9, 10**9 + 1, -1, -10**9, -10**9 - 3, 2**63 - 1, base, base + 120_000_000,
              base + 1, base + 999_999_999, 253402300799 * 10**9 + 999_999_999]
    values += [rnd.randrange(-10**19, 2**63) for _ in range(3000)]
    values += [base + rnd.randrange(10**10) for _ in range(3000)]
    values += [base + rnd.randrange(10**4) * 10**rnd.randrange(10) for _ in range(3000)]
    for _ in range(2):  # (the second time from the kept seconds)
        for ns in values:
            assert _time_stamp(ns) == format_time(ns).encode(), ns


async def _answer(rc: RawClient, subject: str, body: bytes, reply: str) -> tuple[bytes | None, bytes]:
    rc.pub(subject, body, reply=reply)
    m = await rc.read_msg(5.0)
    assert m.subject == reply
    return m.headers, m.payload


async def test_seq_request_answers_as_the_general_path(tmp_path):
    opts = Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(enabled=True, store_dir=str(tmp_path)))
    async with run_server(opts) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        for storage in ("file", "memory"):
            name = f"DG{storage}"
            await js.add_stream(name=name, subjects=[f"{name}.>"], allow_direct=True, storage=storage)
            await js.publish(f"{name}.a", b"one")
            await js.publish(f"{name}.b", b"two", headers={"X-Kept": "yes"})
            await js.publish(f"{name}.c", b"")
            await js.publish(f"{name}.d", b"four")
            await js.delete_msg(name, 4)
        await js.add_stream(name="NODIRECT", subjects=["nd.>"], allow_direct=False)
        await js.publish("nd.a", b"x")
        rc = await RawClient.open(srv.client_url, headers=True, no_responders=True)
        rc.sub("_R.>", 1)
        await rc.ping()
        n = 0
        for storage in ("file", "memory"):
            subject = f"$JS.API.DIRECT.GET.DG{storage}"
            for seq in (1, 2, 3, 4, 0, 99, 12345678901234567890):
                # short path: the bare sequence, with JSON whitespace too; general: any other field present
                short = [b'{"seq":%d}' % seq, b' {\n"seq" : %d }\t' % seq]
                general = [b'{"seq":%d,"no_hdr":false}' % seq, b'{"batch":0,"seq":%d}' % seq]
                answers = []
                for body in short + general:
                    n += 1
                    answers.append(await _answer(rc, subject, body, f"_R.{n}"))
                assert all(a == answers[0] for a in answers), (storage, seq, answers)
                hdr, payload = answers[0]
                if seq in (1, 2, 3):
                    assert b"Nats-Sequence: %d\r\n" % seq in hdr and payload == [b"one", b"two", b""][seq - 1]
                    assert (b"X-Kept: yes\r\n" in hdr) == (seq == 2)
                elif seq == 0:
                    assert hdr == b"NATS/1.0 408 Empty Request\r\n\r\n"
                else:
                    assert hdr == b"NATS/1.0 404 Message Not Found\r\n\r\n"
            # a sequence body on the subject form (DIRECT.GET.<stream>.<subject>) stays a bad request
            n += 1
            hdr, _ = await _answer(rc, subject + f".DG{storage}.a", b'{"seq":1}', f"_R.{n}")
            assert hdr == b"NATS/1.0 408 Bad Request\r\n\r\n"
            # headers on the request: the general path (an API level above ours is refused)
            n += 1
            rc.hpub(subject, b"NATS/1.0\r\nNats-Required-Api-Level: 99\r\n\r\n", b'{"seq":1}', reply=f"_R.{n}")
            m = await rc.read_msg(5.0)
            assert m.headers == b"NATS/1.0 412 Required Api Level\r\n\r\n"
        n += 1  # no direct gets allowed: nobody answers
        hdr, _ = await _answer(rc, "$JS.API.DIRECT.GET.NODIRECT", b'{"seq":1}', f"_R.{n}")
        assert hdr.startswith(b"NATS/1.0 503")
        await rc.close()
        await nc.close()
