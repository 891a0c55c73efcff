"""A stored message's consumers are asked once whether they want it (issue 23's ninth step): ``Consumer.on_stream_msg``
answers whether the consumer (open) takes the subject, and ``Stream._msg_done`` asks interest retention
(``retention.on_new_msg``) only when none still open did. The removals one entry makes reach the stream's only
consumer in one call (``Consumer.on_stream_removes``), with what ``on_stream_remove`` does for each."""
from __future__ import annotations

import asyncio
import json

import nats
from nats.js.api import ConsumerConfig, RetentionPolicy

from rillet.app.embed import run_server
from rillet.config.options import JetStreamOptions
from rillet.jetstream.consumer.engine import Consumer
from rillet.server import Options


def _opts(store: str) -> Options:
    return Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(enabled=True, store_dir=store))


async def _until(cond, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_interest_stream_keeps_what_a_consumer_takes_and_drops_the_rest(tmp_path):
    async with run_server(_opts(str(tmp_path))) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["a", "b"], retention=RetentionPolicy.INTEREST)
        await js.add_consumer("S", ConsumerConfig(durable_name="d", filter_subject="a", ack_policy="explicit"))
        stream = srv.jetstream.accounts["$G"].streams["S"]
        c = stream.consumers["d"]
        # (a Nats-Msg-Id header keeps the no-interest skip away: each message is stored, then asked about)
        await js.publish("a", b"1", headers={"Nats-Msg-Id": "m1"})
        await js.publish("b", b"2", headers={"Nats-Msg-Id": "m2"})  # nobody takes it: removed once stored
        st = stream.store.state()
        assert (st.msgs, st.last_seq) == (1, 2)
        assert stream.store.subject_for_seq(1) == "a" and stream.store.subject_for_seq(2) is None
        assert c.on_stream_msg(3, "b") is False and c.on_stream_msg(3, "a") is True
        await nc.close()


async def test_a_consumer_closed_while_told_does_not_keep_the_message(tmp_path):
    # the consumer that took the message is stopped while it is told of it (closed, still in the stream's
    # consumers): retention asks again and finds nobody, as before the answer was kept (on_new_msg looked at
    # the consumers after every one was told)
    async with run_server(_opts(str(tmp_path))) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["a"], retention=RetentionPolicy.INTEREST)
        await js.add_consumer("S", ConsumerConfig(durable_name="d", filter_subject="a", ack_policy="explicit"))
        stream = srv.jetstream.accounts["$G"].streams["S"]
        c = stream.consumers["d"]
        told = []

        def on_stream_msg(seq: int, subject: str) -> bool | None:
            r = Consumer.on_stream_msg(c, seq, subject)
            told.append((seq, r))
            c.stop()
            return r

        c.on_stream_msg = on_stream_msg  # type: ignore[method-assign]
        await js.publish("a", b"1", headers={"Nats-Msg-Id": "m1"})
        assert told == [(1, True)] and c.closed and stream.consumers["d"] is c
        st = stream.store.state()
        assert (st.msgs, st.last_seq) == (0, 1)
        await nc.close()


async def _pending_after_delete(tmp_path, consumers: int) -> list[tuple[int, int]]:
    """(num_ack_pending, num_pending) of each consumer after two of three delivered messages are deleted."""
    async with run_server(_opts(str(tmp_path))) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["a"], retention=RetentionPolicy.INTEREST)
        subs = []
        for i in range(consumers):
            await js.add_consumer("S", ConsumerConfig(durable_name=f"d{i}", ack_policy="explicit", ack_wait=60))
            subs.append(await js.pull_subscribe_bind(f"d{i}", stream="S"))
        for n in range(3):
            await js.publish("a", str(n).encode(), headers={"Nats-Msg-Id": f"m{n}"})
        for sub in subs:
            assert len(await sub.fetch(3, timeout=5)) == 3  # (delivered, not acked: pending)
        for seq in (1, 3):
            r = await nc.request("$JS.API.STREAM.MSG.DELETE.S", json.dumps({"seq": seq}).encode(), timeout=5)
            assert json.loads(r.data) == {"type": "io.nats.jetstream.api.v1.stream_msg_delete_response",
                                          "success": True}
        stream = srv.jetstream.accounts["$G"].streams["S"]
        cs = [stream.consumers[f"d{i}"] for i in range(consumers)]
        await _until(lambda: all(len(c.pending) == 1 for c in cs))
        out = []
        for i in range(consumers):
            info = await js.consumer_info("S", f"d{i}")
            out.append((info.num_ack_pending, info.num_pending))
        await nc.close()
        return out


async def test_removals_reach_the_only_consumer_as_they_reach_several(tmp_path):
    # one consumer: on_stream_removes; two: on_stream_remove for each, consumer by consumer (the same answers)
    one = await _pending_after_delete(tmp_path / "one", 1)
    two = await _pending_after_delete(tmp_path / "two", 2)
    assert one == [(1, 0)] and two == [(1, 0), (1, 0)]


def test_on_stream_removes_goes_through_a_subclass_on_stream_remove():
    # a subclass that overrides on_stream_remove (the clustered consumer's: only its engine hears) gets each
    calls = []

    class Sub(Consumer):
        def __init__(self) -> None:  # (no consumer state: only the dispatch is looked at)
            pass

        def on_stream_remove(self, seq: int) -> None:
            calls.append(seq)

    Sub().on_stream_removes([4, 5, 9])
    assert calls == [4, 5, 9]


async def test_a_plain_message_is_matched_against_the_filters_once(tmp_path, monkeypatch):
    """A plain message of an interest stream (no header: the no-interest skip is asked first, ``_no_interest``)
    is matched against the consumer's filters once: ``on_stream_msg`` takes that answer (``_mtook``), which a
    new filter forgets. Kept and dropped as before."""
    calls: list[str] = []
    real = Consumer._matches

    def counting(self, subject):
        calls.append(subject)
        return real(self, subject)

    monkeypatch.setattr(Consumer, "_matches", counting)
    async with run_server(_opts(str(tmp_path))) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["a", "b"], retention=RetentionPolicy.INTEREST)
        await js.add_consumer("S", ConsumerConfig(durable_name="d", filter_subject="a", ack_policy="explicit"))
        stream = srv.jetstream.accounts["$G"].streams["S"]
        calls.clear()
        for i in range(5):
            await js.publish("a", b"%d" % i)
        assert calls == ["a"] * 5
        await js.publish("b", b"x")  # (nobody takes it: not stored)
        st = stream.store.state()
        assert (st.msgs, st.last_seq) == (5, 6)
        # the filter changes: "a" no longer taken, whatever the consumer was last asked
        await js.add_consumer("S", ConsumerConfig(durable_name="d", filter_subject="b", ack_policy="explicit"))
        c = stream.consumers["d"]
        assert c._mtook is None
        calls.clear()
        await js.publish("a", b"y")
        await js.publish("b", b"z")
        st = stream.store.state()
        assert st.last_seq == 8 and stream.store.subject_for_seq(7) is None and stream.store.subject_for_seq(8) == "b"
        assert c.on_stream_msg(9, "a") is False and c._mtook == "b"
        await nc.close()
