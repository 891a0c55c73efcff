"""feature_flags (nats-server 2.14+), compared with nats-server: the merged flags in the server info of system
events and /varz; ``js_ack_fc_v2: true`` makes consumers send v2 ack and flow control reply subjects
(``$JS.ACK.<domain>.<account hash>.<stream>.<consumer>...``), which work as acks; flags Rillet does not act on
are refused unless at nats-server's default."""
from __future__ import annotations

import asyncio
import json

import nats
import pytest

from helpers import RawClient
from jsdiff import Raw, ServerPair, run_both, same

CONF = 'listen: 127.0.0.1:-1\nhttp: 127.0.0.1:-1\njetstream {\n  store_dir: "{store}"\n}\n' \
       'feature_flags { js_ack_fc_v2: true, js_raft_delete_range: true, unknown_flag: false }\n'


@pytest.fixture(scope="module")
def pair():
    p = ServerPair(CONF)
    yield p
    p.stop()


def _shape(subject: str) -> list:
    t = subject.split(".")
    return t[:6] + ["<n>" if x.isdigit() else x for x in t[6:]]


async def test_v2_ack_and_flow_control_subjects_like_nats_server(pair):
    async def scenario(kind: str, url: str) -> list:
        r = await Raw.open(url)
        out: list = []
        try:
            await r.api("$JS.API.STREAM.CREATE.FF", {"name": "FF", "subjects": ["ff"]})
            for i in range(3):
                await r.publish("ff", f"m{i}")
            await r.api("$JS.API.CONSUMER.CREATE.FF.P", {"stream_name": "FF", "config": {
                "durable_name": "P", "ack_policy": "explicit"}})
            r.rc.sub("_P.1", "p1")
            r.rc.pub("$JS.API.CONSUMER.MSG.NEXT.FF.P", b'{"batch": 2}', reply="_P.1")
            acks = []
            for _ in range(2):
                m = await r.rc.read_msg(2.0)
                out.append(("pull reply", _shape(m.reply)))
                acks.append(m.reply)
            for a in acks:
                r.rc.pub(a, b"+ACK")
            await r.rc.ping()
            await asyncio.sleep(0.1)
            info = await r.api("$JS.API.CONSUMER.INFO.FF.P")
            out.append(("acked", info["ack_floor"]["stream_seq"], info["num_ack_pending"]))
            # a push consumer with flow control: its flow control request's reply subject
            # (its own connection: r.api reads past other subscriptions' messages, and nats-server has sent the
            # push consumer's messages before the create answer)
            d = await RawClient.open(url, headers=True)
            d.sub("dlv.ff", "d1")
            await d.ping()
            await r.api("$JS.API.CONSUMER.CREATE.FF.D", {"stream_name": "FF", "config": {
                "durable_name": "D", "deliver_subject": "dlv.ff", "ack_policy": "flow_control",
                "max_ack_pending": 10}})
            seen = []
            last = (0, 0)  # the (consumer, stream) sequences of the last message received
            answered = 0  # the consumer sequence the last flow control answer covered
            # the three messages and flow control requests, in whichever order the server sends them; each request
            # is answered at once, as a client does, with the last message received (the answer acknowledges what
            # it names: ack policy flow_control)
            for _ in range(12):
                if last[0] == 3 and answered == 3:
                    break
                try:
                    m = await d.read_msg(2.5)
                except AssertionError:
                    break
                if m.sid != "d1":
                    continue
                if m.reply and m.reply.startswith("$JS.FC."):
                    if not any(x[0] == "fc" for x in seen):
                        seen.append(("fc", m.reply.split(".")[:6], len(m.reply.split("."))))
                    d.hpub(m.reply, f"NATS/1.0\r\nNats-Last-Consumer: {last[0]}\r\n"
                                       f"Nats-Last-Stream: {last[1]}\r\n\r\n".encode(), b"")
                    answered = last[0]
                elif m.reply:
                    seen.append(("msg", _shape(m.reply)))
                    toks = m.reply.split(".")
                    last = (int(toks[8]), int(toks[7]))
            out.append(("push", sorted(seen, key=repr)))
            await d.ping()
            await d.close()
            await asyncio.sleep(0.1)
            info = await r.api("$JS.API.CONSUMER.INFO.FF.D")
            out.append(("flow control acked", info["ack_floor"]["stream_seq"], info["num_ack_pending"]))
        finally:
            await r.close()
        return out

    res = same(await run_both(pair, scenario))
    got = {o[0]: o[1:] for o in res}
    assert got["pull reply"][0][:4] == ["$JS", "ACK", "_", got["pull reply"][0][3]] and len(got["pull reply"][0]) > 9
    assert got["acked"] == (2, 0) and got["flow control acked"] == (3, 0), got


async def test_merged_flags_in_server_info_and_varz():
    from tests.difftarget import go_server, rillet_server
    from tests.helpers import free_port
    conf = ("listen: 127.0.0.1:{port}\nhttp: 127.0.0.1:{http}\nsystem_account: SYS\n"
            "accounts { SYS { users [{user: sys, password: sys}] } }\n"
            "feature_flags { js_ack_fc_v2: true, nope: true }\n")
    got = {}
    for kind, run in (("rillet", rillet_server), ("go", go_server)):
        port, http = free_port(), free_port()
        async with run(conf.replace("{port}", str(port)).replace("{http}", str(http))):
            import urllib.request
            body = await asyncio.get_running_loop().run_in_executor(
                None, lambda: urllib.request.urlopen(f"http://127.0.0.1:{http}/varz", timeout=3).read())
            nc = await nats.connect(f"nats://sys:sys@127.0.0.1:{port}")
            try:
                m = await nc.request("$SYS.REQ.SERVER.PING.STATSZ", b"", timeout=3)
            finally:
                await nc.close()
            got[kind] = (json.loads(body).get("feature_flags"), json.loads(m.data)["server"].get("feature_flags"))
    assert got["rillet"] == got["go"], got
    assert got["rillet"][0]["js_ack_fc_v2"] is True and "nope" not in got["rillet"][0]


@pytest.mark.parametrize("text, words", [
    ("feature_flags {\n  js_raft_delete_range: false\n}", '2:3: feature flag "js_raft_delete_range: false" is not'),
    ("feature_flags {\n  js_ack_fc_v2: 1\n}", '2:3: error parsing feature flag "js_ack_fc_v2": expected bool, got int64'),
])
def test_flags_rillet_does_not_act_on_are_refused(tmp_path, text, words):
    from rillet.config.errors import ConfigError
    from rillet.config.flags import parse_command_line
    p = tmp_path / "f.conf"
    p.write_text(text + "\n")
    with pytest.raises(ConfigError) as e:
        parse_command_line(["-c", str(p)])
    assert words in str(e.value), str(e.value)
