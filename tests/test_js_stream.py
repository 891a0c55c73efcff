"""JetStream streams through nats-py: create/info/update/delete, publish acks and expectations, dedup,
purge, message get/delete, direct get, rollup, limits, and recovery after a restart."""
from __future__ import annotations

import asyncio
import json
import os

import nats
import pytest
from nats.js.api import StreamConfig
from nats.js.errors import APIError, BadRequestError, NotFoundError

from rillet.server import Options
from rillet.app.embed import run_server
from rillet.config.options import JetStreamOptions


def js_opts(tmp_path, **kw) -> Options:
    return Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(enabled=True, store_dir=str(tmp_path), **kw))


async def api(nc, subject: str, body: dict | None = None) -> dict:
    msg = await nc.request(subject, json.dumps(body).encode() if body is not None else b"", timeout=2)
    return json.loads(msg.data)


async def test_info_advertises_jetstream_and_account_info(tmp_path):
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        assert nc._server_info.get("jetstream") is True
        info = await api(nc, "$JS.API.INFO")
        assert info["type"] == "io.nats.jetstream.api.v1.account_info_response"
        assert info["streams"] == 0 and info["limits"]["max_streams"] == -1
        await nc.close()


async def test_stream_create_info_publish_and_get(tmp_path):
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        si = await js.add_stream(name="ORDERS", subjects=["orders.>"])
        assert si.config.name == "ORDERS" and si.config.max_msgs == -1 and si.config.duplicate_window == 120.0
        ack = await js.publish("orders.eu", b"one")
        assert (ack.stream, ack.seq) == ("ORDERS", 1)
        ack = await js.publish("orders.us", b"two", headers={"X": "y"})
        assert ack.seq == 2
        si = await js.stream_info("ORDERS")
        assert si.state.messages == 2 and si.state.first_seq == 1 and si.state.last_seq == 2
        m = await js.get_msg("ORDERS", 2)
        assert m.subject == "orders.us" and m.data == b"two" and m.headers["X"] == "y"
        m = await js.get_last_msg("ORDERS", "orders.eu")
        assert m.seq == 1
        # same config again is fine; a different one is refused
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        with pytest.raises(BadRequestError) as ei:
            await js.add_stream(name="ORDERS", subjects=["orders.>", "x"])
        assert ei.value.err_code == 10058
        with pytest.raises(NotFoundError):
            await js.stream_info("NOPE")
        await nc.close()


async def test_create_again_of_a_stream_without_subjects(tmp_path):
    """A stream with no subjects of its own (a sourcing read stream) created twice with the same request is
    answered with the stream, not 10058 (its stored config kept subjects absent, not [])."""
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        await api(nc, "$JS.API.STREAM.CREATE.w", {"name": "w", "subjects": ["foo.west.>"]})
        cfg = {"name": "r", "subject_transform": {"src": "foo.*.>", "dest": "foo.>"},
               "sources": [{"name": "w", "filter_subject": "foo.west.>"}]}
        first = await api(nc, "$JS.API.STREAM.CREATE.r", cfg)
        again = await api(nc, "$JS.API.STREAM.CREATE.r", cfg)
        assert "error" not in first and "error" not in again, again
        assert "subjects" not in again["config"]
        await nc.close()


async def test_overlapping_subjects_refused(tmp_path):
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        await js.add_stream(name="A", subjects=["a.>"])
        with pytest.raises(BadRequestError) as ei:
            await js.add_stream(name="B", subjects=["a.b"])
        assert ei.value.err_code == 10065
        await nc.close()


async def test_dedup_and_expectations(tmp_path):
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["s.*"])
        a1 = await js.publish("s.a", b"1", headers={"Nats-Msg-Id": "m1"})
        a2 = await js.publish("s.a", b"1", headers={"Nats-Msg-Id": "m1"})
        assert a1.seq == a2.seq == 1 and a2.duplicate
        with pytest.raises(APIError) as ei:
            await js.publish("s.a", b"x", headers={"Nats-Expected-Last-Sequence": "7"})
        assert ei.value.err_code == 10071 and "wrong last sequence: 1" in ei.value.description
        await js.publish("s.a", b"2", headers={"Nats-Expected-Last-Sequence": "1"})
        with pytest.raises(APIError) as ei:
            await js.publish("s.b", b"x", headers={"Nats-Expected-Last-Subject-Sequence": "1"})
        assert ei.value.err_code == 10071
        await js.publish("s.b", b"x", headers={"Nats-Expected-Last-Subject-Sequence": "0"})
        with pytest.raises(APIError) as ei:
            await js.publish("s.a", b"x", headers={"Nats-Expected-Stream": "OTHER"})
        assert ei.value.err_code == 10060
        with pytest.raises(APIError) as ei:
            await js.publish("s.a", b"x", headers={"Nats-Expected-Last-Msg-Id": "nope"})
        assert ei.value.err_code == 10070
        await nc.close()


async def test_purge_delete_and_limits(tmp_path):
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        await js.add_stream(name="L", subjects=["l.*"], max_msgs_per_subject=2)
        for i in range(5):
            await js.publish("l.a", str(i).encode())
        await js.publish("l.b", b"b")
        si = await js.stream_info("L")
        assert si.state.messages == 3 and si.state.first_seq == 4
        assert await js.delete_msg("L", 5)
        si = await js.stream_info("L")
        assert si.state.messages == 2 and si.state.num_deleted == 1
        await js.purge_stream("L", subject="l.b")
        si = await js.stream_info("L")
        assert si.state.messages == 1
        await js.purge_stream("L")
        si = await js.stream_info("L")
        assert si.state.messages == 0 and si.state.first_seq == 7
        await nc.close()


async def test_discard_new_refuses_when_full(tmp_path):
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        await js.add_stream(name="F", subjects=["f"], max_msgs=2, discard="new")
        await js.publish("f", b"1")
        await js.publish("f", b"2")
        with pytest.raises(APIError) as ei:
            await js.publish("f", b"3")
        assert "maximum messages exceeded" in ei.value.description
        await nc.close()


async def test_rollup_and_direct_get(tmp_path):
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        await js.add_stream(name="R", subjects=["r.>"], allow_rollup_hdrs=True, allow_direct=True)
        for i in range(3):
            await js.publish("r.k", str(i).encode())
        await js.publish("r.j", b"j")
        await js.publish("r.k", b"final", headers={"Nats-Rollup": "sub"})
        si = await js.stream_info("R")
        assert si.state.messages == 2
        m = await js.get_msg("R", subject="r.k", direct=True)
        assert m.data == b"final" and m.seq == 5
        r = await nc.request("$JS.API.DIRECT.GET.R.r.j", b"", timeout=1)
        assert r.data == b"j" and r.headers["Nats-Sequence"] == "4" and r.headers["Nats-Stream"] == "R"
        r = await nc.request("$JS.API.DIRECT.GET.R.r.none", b"", timeout=1)
        assert r.headers.get("Status") == "404"
        await nc.close()


async def test_stream_survives_restart(tmp_path):
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        await js.add_stream(name="P", subjects=["p.>"])
        for i in range(10):
            await js.publish(f"p.{i % 3}", str(i).encode())
        await js.delete_msg("P", 5)
        await nc.close()
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        si = await js.stream_info("P")
        assert si.state.messages == 9 and si.state.last_seq == 10 and si.state.num_deleted == 1
        assert (await js.get_msg("P", 10)).data == b"9"
        ack = await js.publish("p.x", b"after")
        assert ack.seq == 11
        await nc.close()


async def test_replicas_refused_without_clustering(tmp_path):
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        with pytest.raises(APIError) as ei:
            await js.add_stream(StreamConfig(name="R3", subjects=["r3"], num_replicas=3))
        assert ei.value.err_code == 10074
        await nc.close()


async def test_bad_json_gets_invalid_json_error(tmp_path):
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        r = await api_raw(nc, "$JS.API.STREAM.CREATE.X", b"{bad")
        assert r["error"]["err_code"] == 10025
        await nc.close()


async def api_raw(nc, subject: str, body: bytes) -> dict:
    msg = await nc.request(subject, body, timeout=2)
    return json.loads(msg.data)


async def test_sync_always_acks_after_fsync(tmp_path):
    async with run_server(js_opts(tmp_path, sync_interval="always")) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        await js.add_stream(name="D", subjects=["d"])
        acks = await asyncio.gather(*[js.publish("d", str(i).encode()) for i in range(50)])
        assert sorted(a.seq for a in acks) == list(range(1, 51))
        await nc.close()


async def test_full_disk_fails_publishes_and_recovers(tmp_path, monkeypatch):
    import errno

    import rillet.jetstream.store.filestore as fsmod
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        await js.add_stream(name="DISK", subjects=["disk"])
        await js.publish("disk", b"before")

        def no_space(*a, **k):
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(fsmod.os, "pwritev", no_space)
        monkeypatch.setattr(fsmod, "_write_all", no_space)
        with pytest.raises(APIError) as ei:
            await js.publish("disk", b"lost")
        assert (ei.value.code, ei.value.err_code, ei.value.description) == (503, 10023, "insufficient resources")
        # the server keeps serving everything else
        assert (await js.stream_info("DISK")).state.messages == 1
        monkeypatch.undo()
        ack = await js.publish("disk", b"after")
        assert ack.seq == 2
        assert (await js.get_msg("DISK", 2)).data == b"after"
        await nc.close()


async def test_snapshot_and_restore(tmp_path):
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        await js.add_stream(name="SNAP", subjects=["snap.>"])
        for i in range(200):  # (random bytes: the archive is S2-compressed, several 4 KiB chunks still)
            await js.publish(f"snap.{i % 7}", os.urandom(250).hex().encode() + str(i).encode())
        await js.delete_msg("SNAP", 10)
        await js.pull_subscribe("snap.>", durable="dur")
        # snapshot: the answer, then chunks with ack replies, then an empty 204 message
        inbox = nc.new_inbox()
        chunks: list[bytes] = []
        done = asyncio.get_running_loop().create_future()

        async def on_chunk(msg):
            if msg.reply:
                chunks.append(msg.data)
                await nc.publish(msg.reply, b"")
            else:
                done.set_result(msg.headers)
        sub = await nc.subscribe(inbox, cb=on_chunk)
        resp = await api(nc, "$JS.API.STREAM.SNAPSHOT.SNAP", {"deliver_subject": inbox, "chunk_size": 4096})
        assert resp["type"] == "io.nats.jetstream.api.v1.stream_snapshot_response"
        assert resp["state"]["messages"] == 199
        await asyncio.wait_for(done, 5)
        await sub.unsubscribe()
        assert len(chunks) > 5
        config = resp["config"]
        await js.delete_stream("SNAP")
        # restore: send the chunks, then an empty message, and get the stream's info
        resp = await api(nc, "$JS.API.STREAM.RESTORE.SNAP", {"config": config, "state": resp["state"]})
        subj = resp["deliver_subject"]
        for c in chunks:
            await nc.request(subj, c, timeout=2)
        fin = json.loads((await nc.request(subj, b"", timeout=5)).data)
        assert fin["type"] == "io.nats.jetstream.api.v1.stream_create_response", fin
        si = await js.stream_info("SNAP")
        assert si.state.messages == 199 and si.state.last_seq == 200 and si.state.num_deleted == 1
        assert (await js.get_msg("SNAP", 200)).data.endswith(b"199")
        ci = await js.consumer_info("SNAP", "dur")
        assert ci.num_pending == 199
        # restoring over an existing stream is refused
        r = await api(nc, "$JS.API.STREAM.RESTORE.SNAP", {"config": config})
        assert r["error"]["err_code"] == 10130
        await nc.close()


async def test_account_storage_limit_refuses_publishes(tmp_path):
    conf_limits = {"A": {"users": [{"user": "a", "password": "a"}],
                         "jetstream": {"max_mem": 1024, "max_file": 4096}}}
    from rillet.config.options import User
    o = js_opts(tmp_path)
    o.accounts = conf_limits
    o.users = [User(username="a", password="a", account="A")]
    async with run_server(o) as srv:
        nc = await nats.connect(srv.client_url, user="a", password="a")
        js = nc.jetstream()
        info = await js.account_info()
        assert info.limits.max_memory == 1024 and info.limits.max_storage == 4096
        await js.add_stream(name="CAP", subjects=["cap"], storage="memory")
        await js.publish("cap", b"x" * 500)
        with pytest.raises(APIError) as ei:
            for _ in range(5):
                await js.publish("cap", b"x" * 500)
        assert ei.value.err_code == 10002
        assert (await js.stream_info("CAP")).state.messages >= 1
        await nc.close()


async def test_republish_headers(tmp_path):
    from nats.js.api import RePublish
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        await js.add_stream(name="RP", subjects=["rp.>"], republish=RePublish(src="rp.>", dest="out.>"))
        sub = await nc.subscribe("out.>")
        await js.publish("rp.a", b"one")
        await js.publish("rp.b", b"two")
        await js.publish("rp.a", b"three")
        msgs = [await sub.next_msg(timeout=1) for _ in range(3)]
        assert [m.subject for m in msgs] == ["out.a", "out.b", "out.a"]
        last = msgs[2].headers
        assert last["Nats-Stream"] == "RP" and last["Nats-Sequence"] == "3" and last["Nats-Last-Sequence"] == "1"
        assert last["Nats-Subject"] == "rp.a"
        await nc.close()


async def test_direct_get_batches(tmp_path):
    """Batch direct gets as nats-server answers them (checked side by side with it)."""
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        await js.add_stream(name="DG", subjects=["dg.>"], allow_direct=True)
        for i in range(5):
            await js.publish(f"dg.{i % 2}", f"m{i}".encode())
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)

        async def get(req: dict) -> list[tuple[bytes, dict]]:
            await nc.publish("$JS.API.DIRECT.GET.DG", json.dumps(req).encode(), reply=inbox)
            out = []
            while True:
                m = await sub.next_msg(timeout=1)
                h = {k: v for k, v in (m.headers or {}).items() if k != "Nats-Time-Stamp"}
                out.append((m.data, h))
                if h.get("Status"):
                    return out
        out = await get({"seq": 2, "batch": 3})
        assert [(d, h["Nats-Sequence"], h["Nats-Num-Pending"], h["Nats-Last-Sequence"]) for d, h in out[:3]] == [
            (b"m1", "2", "3", "0"), (b"m2", "3", "2", "2"), (b"m3", "4", "1", "3")]
        assert out[3][1]["Status"] == "204" and out[3][1]["Nats-Num-Pending"] == "1"
        out = await get({"seq": 1, "batch": 2, "next_by_subj": "dg.0"})
        assert [(d, h["Nats-Sequence"], h["Nats-Num-Pending"]) for d, h in out[:2]] == [
            (b"m0", "1", "2"), (b"m2", "3", "1")]
        assert out[2][1]["Status"] == "204" and out[2][1]["Nats-Num-Pending"] == "1"
        out = await get({"multi_last": ["dg.>"]})
        assert [d for d, _ in out[:2]] == [b"m3", b"m4"] and out[2][1]["Nats-UpTo-Sequence"] == "5"
        out = await get({"multi_last": ["dg.0"], "up_to_seq": 3})
        assert out[0][0] == b"m2" and out[1][1]["Nats-UpTo-Sequence"] == "3"
        out = await get({"seq": 99, "batch": 2})
        assert out[0][1]["Status"] == "404"
        await nc.close()
