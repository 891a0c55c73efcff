"""The JetStream feature flags of nats-server 2.14/2.15 besides ``js_ack_fc_v2`` (tests/test_feature_flags.py):

- ``js_api_reply_v2``: the reply subject of a mirror's or source's requests to its origin (consumer create and
  reset), ``$JSC.R.<uid>`` or ``$JSC.R.<domain>.<account hash>.<stream>.<consumer>.<uid>``, side by side with
  nats-server (rillet.jetstream.apireply);
- ``js_snapshot_sources``: a stream group's snapshot carries its sources' positions, so a replica that installs
  it resumes sourcing where the group was (rillet.jetstream.sourcestate): an R3 stream whose new replicas caught
  up from a snapshot after its messages were purged, and unit tests of the snapshot's form; the positions every
  replica keeps from what it applies, side by side with nats-server (a purged stream's sourcing restarted);
- the flags in /varz as nats-server merges them.
"""
from __future__ import annotations

import asyncio
import json
import re
from types import SimpleNamespace

import pytest

from helpers import RawClient
from jsdiff import Raw, ServerPair, run_both, same
from rillet.config.options import Options
from rillet.jetstream import apireply, sourcestate
from rillet.jetstream.store.base import StoreConfig
from rillet.jetstream.store.memstore import MemStore

CONF = 'listen: 127.0.0.1:-1\nhttp: 127.0.0.1:-1\njetstream {\n  store_dir: "{store}"\n}\n%s'


async def _api(r: Raw, subject: str, body: object = b"") -> dict:
    """A request (an API request or a JetStream publish) and its JSON answer, waited for up to 10 s (a loaded
    machine can take more than Raw's 1 s to create a file stream)."""
    ans = await r.request(subject, body, timeout=10.0)  # type: ignore[arg-type]
    assert ans and ans[0] != "<timeout>", (subject, ans)
    return json.loads(ans[0][1])


def _shape(subject: str) -> list:
    """A subject with its random parts named: a ``$JSC.R`` reply's last token ``<id>`` (8 of 0-9A-Za-z), a
    mirror's or source's consumer name by its prefix."""
    out = []
    toks = subject.split(".")
    for i, t in enumerate(toks):
        if subject.startswith("$JSC.R.") and i == len(toks) - 1 and re.fullmatch(r"[0-9A-Za-z]{8}", t):
            out.append("<id>")
        elif t.startswith("JS_SRC_") or t.startswith("JS_MIRROR_"):
            out.append("_".join(t.split("_")[:3]))  # (the stream's id; Rillet adds an attempt's own part)
        else:
            out.append(t)
    return out


async def _source_requests(url: str) -> list:
    """A mirror and a source of ORIG, a source through ORIG's durable flow-control consumer and one through an
    external API prefix: the subjects and reply subjects of the requests they send."""
    r = await Raw.open(url)
    obs = await RawClient.open(url, headers=True)  # (apart: Raw's requests read what comes meanwhile)
    try:
        obs.sub("$JS.API.CONSUMER.>", "api")
        obs.sub("$JS.HUB.API.CONSUMER.>", "hub")  # (an external API prefix nobody answers)
        await obs.ping()
        await _api(r, "$JS.API.STREAM.CREATE.ORIG", {"name": "ORIG", "subjects": ["orig.>"]})
        await _api(r, "orig.a", "1")
        await _api(r, "$JS.API.CONSUMER.CREATE.ORIG.DUR", {"stream_name": "ORIG", "config": {
            "durable_name": "DUR", "deliver_subject": "dlv.dur", "ack_policy": "flow_control"}})
        seen: dict[str, list] = {}
        for name, cfg in (("MIR", {"mirror": {"name": "ORIG"}}), ("SRC", {"sources": [{"name": "ORIG"}]}),
                          ("DSRC", {"sources": [{"name": "ORIG", "consumer": {"name": "DUR",
                                                                               "deliver_subject": "dlv.dur"}}]}),
                          ("XSRC", {"sources": [{"name": "ORIG", "external": {"api": "$JS.HUB.API"}}]})):
            await _api(r, f"$JS.API.STREAM.CREATE.{name}", {"name": name, **cfg})
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while name not in seen:
                assert loop.time() < deadline, f"no request for {name}"
                try:
                    m = await obs.read_msg(1.0)
                except AssertionError:
                    continue
                ours = m.reply and not m.reply.startswith("_R.")  # (not the test's own requests)
                if ours and ("CREATE.ORIG" in m.subject or "RESET.ORIG" in m.subject):
                    seen[name] = [_shape(m.subject), _shape(m.reply)]
        # SRC no longer sources ORIG: its consumer on ORIG is deleted, with a reply subject of the same form
        await _api(r, "$JS.API.STREAM.CREATE.OTHER", {"name": "OTHER", "subjects": ["other.>"]})
        await _api(r, "$JS.API.STREAM.UPDATE.SRC", {"name": "SRC", "sources": [{"name": "OTHER"}]})
        deadline = asyncio.get_running_loop().time() + 10
        while "SRC delete" not in seen:
            assert asyncio.get_running_loop().time() < deadline, "no consumer delete for SRC"
            try:
                m = await obs.read_msg(1.0)
            except AssertionError:
                continue
            if m.subject.startswith("$JS.API.CONSUMER.DELETE.ORIG."):
                seen["SRC delete"] = [_shape(m.subject)[:5], _shape(m.reply or "")]
        return sorted(seen.items())
    finally:
        await obs.close()
        await r.close()


@pytest.mark.parametrize("flag", [None, False, True], ids=["default", "off", "on"])
async def test_source_request_replies_like_nats_server(flag):
    ff = "" if flag is None else f"feature_flags {{ js_api_reply_v2: {str(flag).lower()} }}\n"
    pair = ServerPair(CONF % ff)
    try:
        res = await run_both(pair, lambda kind, url: _source_requests(url), timeout=40)
    finally:
        pair.stop()
    got = dict(same(res))
    for name, (subject, reply) in got.items():
        if flag:
            assert reply[:2] == ["$JSC", "R"] and len(reply) == 7 and reply[4] == "ORIG", (name, reply)
        else:
            assert reply == ["$JSC", "R", "<id>"], (name, reply)
    if flag:
        assert got["DSRC"][1][5] == "DUR" and got["XSRC"][1][2] == "HUB", got
        assert got["SRC delete"][1][5] == got["SRC"][1][5], got  # (the consumer the delete is for)


def test_reply_subject_forms():
    def stream(flag: bool | None, account: str = "A", domain: str = "") -> SimpleNamespace:
        o = Options()
        if flag is not None:
            o.extra["feature_flags"] = {"js_api_reply_v2": flag}
        return SimpleNamespace(name="S", js=SimpleNamespace(server=SimpleNamespace(opts=o), domain=domain),
                               jsa=SimpleNamespace(account=SimpleNamespace(name=account)))
    assert re.fullmatch(r"\$JSC\.R\.[0-9A-Za-z]{8}", apireply.reply_subject(stream(None), None, "O", "C"))
    assert re.fullmatch(r"\$JSC\.R\.[0-9A-Za-z]{8}", apireply.reply_subject(stream(False), "$JS.HUB.API", "O", "C"))
    from rillet.jetstream.consumer.common import account_hash
    r = apireply.reply_subject(stream(True, "ACC"), "$JS.HUB.API", "O", "C").split(".")
    assert r[:6] == ["$JSC", "R", "HUB", account_hash("ACC"), "O", "C"] and len(r) == 7
    assert apireply.reply_subject(stream(True), None, "O", "C").split(".")[2] == "_"
    a, b = apireply.consumer_name(stream(True), False), apireply.consumer_name(stream(True), False)
    assert a.startswith("JS_SRC_") and a[:15] == b[:15] and a != b  # (the stream's id, then a new part)
    assert apireply.consumer_name(stream(True, domain="D"), True)[:18] != apireply.consumer_name(
        stream(True), True)[:18]


# ---- js_snapshot_sources --------------------------------------------------------------------------------


async def _resume_after_purge(url: str) -> list:
    """SRC sources ORIG; SRC is purged (no Nats-Stream-Source header left); a source added to SRC restarts its
    sourcing: ORIG's position is still known, nothing of ORIG comes again."""
    r = await Raw.open(url)
    try:
        await _api(r, "$JS.API.STREAM.CREATE.ORIG", {"name": "ORIG", "subjects": ["orig.>"]})
        await _api(r, "$JS.API.STREAM.CREATE.OTHER", {"name": "OTHER", "subjects": ["other.>"]})
        for i in range(3):
            await _api(r, f"orig.{i}", str(i))
        await _api(r, "$JS.API.STREAM.CREATE.SRC", {"name": "SRC", "sources": [{"name": "ORIG"}]})
        out = []
        loop = asyncio.get_running_loop()

        async def state_when(cond) -> dict:
            deadline = loop.time() + 15
            while True:
                st = (await _api(r, "$JS.API.STREAM.INFO.SRC"))["state"]
                if cond(st):
                    return st
                assert loop.time() < deadline, st
                await asyncio.sleep(0.1)
        out.append(("sourced", (await state_when(lambda s: s["last_seq"] == 3))["messages"]))
        out.append(("purged", (await _api(r, "$JS.API.STREAM.PURGE.SRC"))["purged"]))
        await _api(r, "other.x", "x")
        upd = await _api(r, "$JS.API.STREAM.UPDATE.SRC", {"name": "SRC", "sources": [{"name": "ORIG"},
                                                                                     {"name": "OTHER"}]})
        assert "error" not in upd, upd
        st = await state_when(lambda s: s["last_seq"] >= 4)
        await asyncio.sleep(1.0)  # (anything of ORIG sourced again would come with or right after OTHER's)
        st = (await _api(r, "$JS.API.STREAM.INFO.SRC"))["state"]
        out.append(("after the update", st["messages"], st["last_seq"]))
        return out
    finally:
        await r.close()


async def test_sources_resume_from_what_was_applied_like_nats_server():
    pair = ServerPair(CONF % "")
    try:
        res = await run_both(pair, lambda kind, url: _resume_after_purge(url), timeout=40)
    finally:
        pair.stop()
    assert same(res) == [("sourced", 3), ("purged", 3), ("after the update", 1, 4)]


def _stream(flag: bool | None) -> SimpleNamespace:
    o = Options()
    if flag is not None:
        o.extra["feature_flags"] = {"js_snapshot_sources": flag}
    from rillet.jetstream.configtypes import StreamConfig
    return SimpleNamespace(source_pos={}, js=SimpleNamespace(server=SimpleNamespace(opts=o)),
                           cfg=StreamConfig(name="S", storage="memory"),
                           store=MemStore(StoreConfig(name="S", storage="memory")), forget_dedup=lambda: None)


def test_positions_from_the_headers_applied():
    st = _stream(None)
    sourcestate.seen(st, b"NATS/1.0\r\nNats-Stream-Source: ORIG 7 > > orig.a\r\n\r\n")
    sourcestate.seen(st, b"NATS/1.0\r\nNats-Stream-Source: O2:abcd1234 3 o.* > o.x Zk3lQ9aB\r\n\r\n")
    sourcestate.seen(st, b"NATS/1.0\r\nNats-Stream-Source: ORIG 9 > > orig.b\r\n\r\n")
    sourcestate.seen(st, b"NATS/1.0\r\nNats-Stream-Source: junk\r\n\r\n")
    assert st.source_pos == {"ORIG": (9, ""), "O2:abcd1234": (3, "Zk3lQ9aB")}


@pytest.mark.parametrize("flag, carried", [(None, False), (False, False), (True, True)])
def test_snapshot_carries_sources_only_with_the_flag(flag, carried):
    from rillet.jetstream.cluster.streams import StreamReplica, _dec
    st = _stream(flag)
    st.source_pos = {"ORIG": (9, "Zk3lQ9aB")}
    rep = SimpleNamespace(stream=st, config_ts=0, _store_state=lambda: {"first": 1, "last": 9, "deleted": []})
    snap = _dec.decode(StreamReplica.snapshot(rep))
    assert snap["last"] == 9
    assert ("sources" in snap) == carried
    if carried:
        assert snap["sources"] == {"ORIG": [9, "Zk3lQ9aB"]}
    # a replica installing it (whatever its own flag): the positions come with it
    other = _stream(None)
    rep2 = SimpleNamespace(stream=other, replay_seq=0, creps={}, config_ts=0)
    StreamReplica._finish_snapshot(rep2, snap)
    assert other.store.last_seq == 9 and rep2.replay_seq == 9
    assert other.source_pos == ({"ORIG": (9, "Zk3lQ9aB")} if carried else {})


def test_restore_ignores_what_is_not_a_position():
    st = _stream(True)
    sourcestate.restore(st, {"sources": {"A": [4, "x"], "B": "no", 5: [1, ""], "C": [1]}})
    assert st.source_pos == {"A": (4, "x")}
    sourcestate.restore(st, {"first": 1})  # (a snapshot without sources: nothing changes)
    assert st.source_pos == {"A": (4, "x")}


def test_flags_in_varz_like_nats_server_defaults():
    """The merged flags (every flag nats-server 2.15.1 knows, at its default unless set) as both servers report
    them: checked by test_feature_flags.py::test_merged_flags_in_server_info_and_varz; here the accepted values."""
    from rillet.config.features import FEATURE_FLAGS, merged
    o = Options()
    o.extra["feature_flags"] = {"js_api_reply_v2": True, "js_snapshot_sources": True}
    m = merged(o)
    assert m["js_api_reply_v2"] is True and m["js_snapshot_sources"] is True
    assert set(m) == set(FEATURE_FLAGS)


async def test_flags_accepted_in_config(tmp_path):
    from rillet.config.flags import parse_command_line
    p = tmp_path / "f.conf"
    p.write_text("feature_flags {\n  js_api_reply_v2: true\n  js_snapshot_sources: true\n}\n")
    o = parse_command_line(["-c", str(p)]).options
    assert o.extra["feature_flags"] == {"js_api_reply_v2": True, "js_snapshot_sources": True}


async def _scaled_source_after_purge(flag: bool) -> dict:
    """An R1 stream SRC sources ORIG (3 messages), is purged, then made R3: the new replicas catch up from the
    leader's state in snapshot form (no message, so no Nats-Stream-Source header, to learn the position from);
    the leader steps down, a new one restarts the sourcing, ORIG gets a 4th message. SRC's state once settled."""
    import nats

    from rillet.app.embed import run_cluster
    ff = {"feature_flags": {"js_snapshot_sources": flag}}
    async with run_cluster(3, jetstream=True, server_fields=lambda i: {"extra": dict(ff)}) as servers:
        nc = await nats.connect(servers[0].client_url)
        loop = asyncio.get_running_loop()

        async def api(subject: str, body: dict | None = None) -> dict:
            m = await nc.request(subject, json.dumps(body).encode() if body is not None else b"", timeout=5)
            return json.loads(m.data)

        async def until(what: str, cond, subject: str, timeout: float = 30.0) -> dict:
            deadline = loop.time() + timeout
            while True:
                try:
                    r = await api(subject)
                    if cond(r):
                        return r
                except nats.errors.TimeoutError:
                    r = {"timeout": subject}
                assert loop.time() < deadline, (what, r)
                await asyncio.sleep(0.2)
        try:
            r = await api("$JS.API.STREAM.CREATE.ORIG", {"name": "ORIG", "subjects": ["orig.>"], "num_replicas": 1})
            assert "error" not in r, r
            for i in range(3):
                await nc.request(f"orig.{i}", b"x", timeout=5)
            r = await api("$JS.API.STREAM.CREATE.SRC", {"name": "SRC", "sources": [{"name": "ORIG"}],
                                                        "num_replicas": 1})
            assert "error" not in r, r
            await until("sourced", lambda r: r.get("state", {}).get("last_seq") == 3, "$JS.API.STREAM.INFO.SRC")
            assert (await api("$JS.API.STREAM.PURGE.SRC"))["purged"] == 3
            info = await api("$JS.API.STREAM.INFO.SRC")
            first = info["cluster"]["leader"]
            cfg = dict(info["config"], num_replicas=3)
            r = await api("$JS.API.STREAM.UPDATE.SRC", cfg)
            assert "error" not in r, r
            await until("R3 current", lambda r: len([p for p in (r.get("cluster") or {}).get("replicas", [])
                                                     if p.get("current")]) == 2, "$JS.API.STREAM.INFO.SRC")
            r = await api("$JS.API.STREAM.LEADER.STEPDOWN.SRC")
            assert r.get("success"), r
            await until("a new leader", lambda r: (r.get("cluster") or {}).get("leader") not in (None, "", first),
                        "$JS.API.STREAM.INFO.SRC")
            await nc.request("orig.3", b"x", timeout=5)  # (ORIG's 4th: SRC has it once its sourcing runs again)
            want = 1 if flag else 4
            await until("sourcing again", lambda r: r.get("state", {}).get("messages", 0) >= want,
                        "$JS.API.STREAM.INFO.SRC")
            await asyncio.sleep(0.5)
            return (await api("$JS.API.STREAM.INFO.SRC"))["state"]
        finally:
            await nc.close()


@pytest.mark.parametrize("flag", [False, True], ids=["off", "on"])
async def test_a_replica_caught_up_from_a_snapshot_resumes_sourcing_with_the_flag(flag):
    st = await _scaled_source_after_purge(flag)
    # with the flag the new leader knows ORIG's position: only the 4th; without, it sources ORIG from its start
    assert (st["messages"], st["last_seq"]) == ((1, 4) if flag else (4, 7)), st


def test_a_replayed_entry_already_stored_still_gives_its_position():
    """After a restart a group replays its log past its snapshot; entries whose messages the store already holds
    are not applied again, but their Nats-Stream-Source positions count (else a snapshot's older position
    would win over them and the source would take those messages again)."""
    from rillet.jetstream.cluster.streams import StreamReplica
    from rillet.jetstream.log import Entry
    st = SimpleNamespace(store=SimpleNamespace(last_seq=5), cfg=SimpleNamespace(sources=[object()]),
                         source_pos={"ORIG": (7, "")})  # (what the snapshot said)
    rep = SimpleNamespace(applied_since_snap=0, group=SimpleNamespace(compact_due=lambda n: False), stream=st,
                          replay_seq=0, replay_skipped=0)
    hdr = b"NATS/1.0\r\nNats-Stream-Source: ORIG 9 > > orig.a\r\n\r\n"
    assert StreamReplica._filter(rep, 1, "", Entry(Entry.MSG, ("s", hdr, b"x", 0, 0, "", 4))) is False
    assert st.source_pos == {"ORIG": (9, "")} and rep.replay_skipped == 1
    assert StreamReplica._filter(rep, 2, "", Entry(Entry.MSG, ("s", hdr.replace(b"9", b"11"), b"x", 0, 0, "", 6)))
    assert st.source_pos == {"ORIG": (9, "")}  # (not stored yet: applied next, which records it)
