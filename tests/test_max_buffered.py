"""Stream ingest limits ``jetstream { max_buffered_msgs, max_buffered_size }`` (nats-server 2.11;
rillet.jetstream.ingest): a publish that finds the stream's backlog full is answered ``NATS/1.0 429 Too Many
Requests`` with the PubAck error 10167 and not stored. Side by side with nats-server: a burst of publishes sent
without waiting gets 429 answers on both, the same bytes, and exactly the acknowledged messages are stored. The
replicated backlog (proposed, not applied) through a log that commits when told (``DeferredLog``)."""
from __future__ import annotations

import asyncio
import json

import nats
import pytest

from jsdiff import Raw, ServerPair, run_both, same
from rillet.config.options import JetStreamOptions
from rillet.jetstream import ingest
from rillet.jetstream.log import DeferredLog
from rillet.server import Options

CONF = ('listen: 127.0.0.1:-1\njetstream {\n  store_dir: "{store}"\n  max_buffered_msgs: %s\n'
        '  max_buffered_size: %s\n}\n')
ERR_429 = {"code": 429, "err_code": 10167, "description": "too many requests"}


async def _api(r: Raw, subject: str, body: object = b"") -> dict:
    """A request (an API request or a JetStream publish) and its JSON answer, waited for up to 10 s (a loaded
    machine can take more than Raw's 1 s to create a file stream)."""
    ans = await r.request(subject, body, timeout=10.0)  # type: ignore[arg-type]
    assert ans and ans[0] != "<timeout>", (subject, ans)
    return json.loads(ans[0][1])


async def _burst(url: str, n: int, payload: bytes, create: bool = True) -> dict:
    """``n`` publishes to ING in one write, each with its own reply subject; every answer, then the stream's
    count. ``create``: make ING (a file stream) first."""
    r = await Raw.open(url)
    try:
        if create:
            await _api(r, "$JS.API.STREAM.CREATE.ING", {"name": "ING", "subjects": ["ing"], "storage": "file"})
        r.rc.sub("_B.*", "b")
        await r.rc.ping()
        r.rc.send(b"".join(b"PUB ing _B.%d %d\r\n%s\r\n" % (i, len(payload), payload) for i in range(n)))
        answers: dict[str, tuple] = {}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while len(answers) < n:
            assert loop.time() < deadline, f"{len(answers)} of {n} answers"
            m = await r.rc.read_msg(10.0)
            if m.subject.startswith("_B."):
                answers[m.subject] = (m.headers, m.payload)
        info = await _api(r, "$JS.API.STREAM.INFO.ING")
    finally:
        await r.close()
    ok = [json.loads(p) for h, p in answers.values() if h is None and b'"error"' not in p]
    refused = [(h, p) for h, p in answers.values() if h is not None]
    others = [(h, p) for h, p in answers.values() if h is None and b'"error"' in p]
    return {"ok": len(ok), "acked seqs": sorted(a["seq"] for a in ok), "refused": refused, "others": others,
            "stored": info["state"]["messages"], "last_seq": info["state"]["last_seq"]}


def _compare(res: dict) -> dict:
    """What must be the same on both: the forms of the answers, and that what was stored is what was acked."""
    out = {}
    for kind, r in res.items():
        assert r["refused"], f"{kind}: no publish refused ({r['ok']} stored)"
        assert r["others"] == [], (kind, r["others"][:3])
        assert r["stored"] == r["ok"] == r["last_seq"] and r["acked seqs"] == list(range(1, r["ok"] + 1)), kind
        out[kind] = sorted(set(r["refused"]))
    return out


@pytest.mark.parametrize("limits, n, payload", [
    (("1", "1kb"), 1000, b""),                # the count (nats-server's own test: max 1 message)
    (("100000", "600"), 400, b"x" * 100),     # the size: subject, reply and payload counted
], ids=["msgs", "size"])
async def test_a_burst_is_refused_with_429_like_nats_server(limits, n, payload):
    pair = ServerPair(CONF % limits)
    try:
        res = await run_both(pair, lambda kind, url: _burst(url, n, payload), timeout=60)
    finally:
        pair.stop()
    forms = same(_compare(res))  # (the bytes: nats-server's JSON field order)
    assert forms == [(b"NATS/1.0 429 Too Many Requests\r\n\r\n", b'{"error":{"code":429,"err_code":10167,'
                      b'"description":"too many requests"},"stream":"ING","seq":0}')], forms


async def test_default_limits_take_a_burst():
    pair = ServerPair('listen: 127.0.0.1:-1\njetstream {\n  store_dir: "{store}"\n}\n')
    try:
        res = await run_both(pair, lambda kind, url: _burst(url, 1000, b"y" * 50), timeout=60)
    finally:
        pair.stop()
    for kind, r in res.items():
        assert r["refused"] == [] and r["ok"] == r["stored"] == 1000, (kind, r["ok"], r["refused"][:1])


# ---- the replicated backlog: proposed, not applied yet -------------------------------------------------


@pytest.fixture
async def deferred(tmp_path):
    opts = Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(
        enabled=True, store_dir=str(tmp_path), extra={"max_buffered_msgs": 3, "max_buffered_size": 400}))
    from rillet.app.embed import run_server
    async with run_server(opts) as srv:
        nc = await nats.connect(srv.client_url)
        r = await nc.request("$JS.API.STREAM.CREATE.D", json.dumps(
            {"name": "D", "subjects": ["d.>"], "storage": "memory"}).encode(), timeout=2)
        assert "error" not in json.loads(r.data)
        jsa = next(j for j in srv.jetstream.accounts.values() if "D" in j.streams)
        st = jsa.streams["D"]
        log = DeferredLog(st.apply)
        log.on_leader_change = st.leader_changed
        st.log = log
        yield srv, nc, st, log
        await nc.close()


async def _until(cond, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


async def test_proposed_not_applied_messages_are_the_backlog(deferred):
    srv, nc, st, log = deferred
    assert st.ingest_limits == (3, 400)
    fs = [asyncio.ensure_future(nc.request(f"d.{i}", b"m", timeout=5)) for i in range(5)]
    await _until(lambda: sum(f.done() for f in fs) == 2)
    assert len(log.queue) == 3 and (st._bl_n, st._wb_n) == (3, 0)
    for f in fs[3:]:
        m = f.result()
        assert m.headers and m.headers.get("Status") == "429", m.headers
        assert json.loads(m.data) == {"error": ERR_429, "stream": "D", "seq": 0}
    assert log.flush() == 3
    acks = [json.loads((await f).data) for f in fs[:3]]
    assert [a["seq"] for a in acks] == [1, 2, 3] and (st._bl_n, st._bl_b) == (0, 0)
    assert st.store.state().msgs == 3
    # room again: the next publish goes in flight; a big one does not fit the bytes left
    f = asyncio.ensure_future(nc.request("d.a", b"z" * 100, timeout=5))
    await _until(lambda: len(log.queue) == 1)
    big = await nc.request("d.b", b"z" * 300, timeout=5)
    assert json.loads(big.data)["error"] == ERR_429
    small = asyncio.ensure_future(nc.request("d.c", b"z" * 100, timeout=5))
    await _until(lambda: len(log.queue) == 2)
    log.flush()
    assert json.loads((await f).data)["seq"] == 4 and json.loads((await small).data)["seq"] == 5
    assert st._bl_n == 0 and st._bl_b == 0


async def test_r3_stream_refuses_past_its_proposed_backlog():
    """A replicated stream's leader: a burst of publishes finds more than ``max_buffered_msgs`` proposed and not
    committed yet; the rest are refused (429), and the stream holds exactly the acknowledged ones."""
    from rillet.app.embed import run_cluster
    extra = {"max_buffered_msgs": 5}
    async with run_cluster(3, jetstream=True, server_fields=lambda i: {
            "jetstream": JetStreamOptions(extra=dict(extra))}) as servers:
        nc = await nats.connect(servers[0].client_url)
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while True:
                r = json.loads((await nc.request("$JS.API.STREAM.CREATE.ING", json.dumps(
                    {"name": "ING", "subjects": ["ing"], "num_replicas": 3}).encode(), timeout=5)).data)
                if "error" not in r:
                    break
                assert loop.time() < deadline, r
                await asyncio.sleep(0.5)
            while True:  # (every replica current before the burst)
                info = json.loads((await nc.request("$JS.API.STREAM.INFO.ING", b"", timeout=5)).data)
                c = info.get("cluster") or {}
                if c.get("leader") and len([p for p in c.get("replicas", []) if p.get("current")]) == 2:
                    break
                assert loop.time() < deadline, info
                await asyncio.sleep(0.2)
        finally:
            await nc.close()
        res = await _burst(servers[0].client_url, 300, b"x", create=False)
    assert res["refused"] and res["others"] == [], (res["ok"], res["refused"][:1], res["others"][:1])
    assert {h for h, _ in res["refused"]} == {b"NATS/1.0 429 Too Many Requests\r\n\r\n"}
    assert res["stored"] == res["ok"] == res["last_seq"] and res["acked seqs"] == list(range(1, res["ok"] + 1))


async def test_a_lost_leadership_empties_the_backlog(deferred):
    srv, nc, st, log = deferred
    fs = [asyncio.ensure_future(nc.request(f"d.{i}", b"m", timeout=1)) for i in range(3)]
    await _until(lambda: len(log.queue) == 3)
    log.step_down()
    assert (st._bl_n, st._bl_b) == (0, 0)
    for f in fs:
        with pytest.raises(nats.errors.TimeoutError):  # (an outcome unknown: no answer, as nats-server)
            await f


# ---- configuration ------------------------------------------------------------------------------------


class _O:
    def __init__(self, **extra):
        self.jetstream = JetStreamOptions(extra=extra)


def test_limits_defaults_and_no_limit():
    assert ingest.limits(_O()) == (100_000, 128 * 1024 * 1024)
    assert ingest.limits(_O(max_buffered_msgs=0, max_buffered_size=0)) == (100_000, 128 * 1024 * 1024)
    assert ingest.limits(_O(max_buffered_msgs=7, max_buffered_size=2048)) == (7, 2048)
    assert ingest.limits(_O(max_buffered_msgs=-1, max_buffered_size=-5)) == (0, 0)  # negative: no limit


@pytest.mark.parametrize("text, want", [
    ("jetstream {\n  max_buffered_msgs: 10\n  max_buffered_size: 1kb\n}", {"max_buffered_msgs": 10,
                                                                           "max_buffered_size": 1024}),
    ('jetstream {\n  max_buffered_size: "2K"\n}', {"max_buffered_size": 2048}),
])
def test_keys_parsed(tmp_path, text, want):
    from rillet.config.flags import parse_command_line
    p = tmp_path / "f.conf"
    p.write_text(text + "\n")
    js = parse_command_line(["-c", str(p)]).options.jetstream
    assert {k: v for k, v in js.extra.items() if k.startswith("max_buffered")} == want


@pytest.mark.parametrize("text, words", [
    ('jetstream {\n  max_buffered_msgs: "x"\n}', '2:3: Expected a parseable size for "max_buffered_msgs", got x'),
    ("jetstream {\n  max_buffered_size: true\n}", "2:3: max_buffered_size must be int64 or string"),
])
def test_bad_values_refused(tmp_path, text, words):
    from rillet.config.errors import ConfigError
    from rillet.config.flags import parse_command_line
    p = tmp_path / "f.conf"
    p.write_text(text + "\n")
    with pytest.raises(ConfigError) as e:
        parse_command_line(["-c", str(p)])
    assert words in str(e.value), str(e.value)


async def test_a_reload_that_changes_them_is_refused(tmp_path):
    from rillet.app.embed import run_server
    opts = Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(
        enabled=True, store_dir=str(tmp_path), extra={"max_buffered_msgs": 5}))
    async with run_server(opts) as srv:
        new = Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(
            enabled=True, store_dir=str(tmp_path), extra={"max_buffered_msgs": 6}))
        with pytest.raises(ValueError, match="config reload not supported for StreamMaxBufferedMsgs: old=5, new=6"):
            srv.reload(new)
