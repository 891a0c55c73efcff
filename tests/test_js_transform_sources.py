"""A stream's own ``subject_transform`` and the subject transforms of its sources and mirror, against
nats-server (issue 19, point 2).

nats-server applies, to a message a source brings, first the source's own ``subject_transforms`` (the first
one whose source matches) and then the stream's ``subject_transform`` (which every message the stream stores
goes through, published, sourced or mirrored); a mirror does the same with its ``subject_transforms``. The
stored subject is what consumers filter on, what direct gets and ``last_by_subj`` look up and what
``republish`` matches. Each case below creates streams on both servers, publishes, and compares what each
server stored (per message through STREAM.MSG.GET), what a filtered consumer delivers, direct gets,
republished messages and the errors of refused configurations. The same cases run single-server and (a
subset) on a 3-server cluster with R3 streams.

Without the nats-server binary only Rillet runs, and the cases check the subjects asserted here (recorded
from nats-server 2.15.1).
"""
from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import tempfile
import time
from typing import Any

import pytest

from helpers import ServerProcess, free_port
from jsdiff import GO_BINARY, Raw, ServerPair, norm_hdr, run_both, same

CONF = """
listen: 127.0.0.1:-1
jetstream { store_dir: "{store}" }
"""

W = "foo-write-west"
BLOG_READ = {"name": "foo", "subject_transform": {"src": "foo.*.>", "dest": "foo.>"}, "allow_direct": True,
             "sources": [{"name": W, "filter_subject": "foo.west.>"}]}

# A case: a list of steps (see _run). ("create", cfg) creates a stream and records its error (or the stored
# transforms of the answer), ("pub", subject, data[, headers]) publishes through JetStream, ("msgs", stream, n)
# waits until the stream holds n messages and records each one, ("fetch", stream, filter) records what a pull
# consumer with that filter delivers, ("direct", subject, body) a direct get, ("get", stream, body) a
# STREAM.MSG.GET, ("sub", subject) subscribes (what it gets is recorded at the end), ("update", cfg) a
# stream update.
CASES: dict[str, list[tuple]] = {
    "blog read stream": [
        ("create", {"name": W, "subjects": ["foo.west.>"]}),
        ("create", BLOG_READ),
        ("pub", "foo.west.test", "1"),
        ("pub", "foo.west.a.b", "2"),
        ("msgs", "foo", 2),
        ("fetch", "foo", "foo.test"),
        ("fetch", "foo", "foo.west.>"),
        ("direct", "$JS.API.DIRECT.GET.foo", {"last_by_subj": "foo.test"}),
        ("direct", "$JS.API.DIRECT.GET.foo.foo.a.b", b""),
        ("direct", "$JS.API.DIRECT.GET.foo", {"last_by_subj": "foo.west.test"}),
        ("get", "foo", {"last_by_subj": "foo.a.b"}),
        ("get", "foo", {"last_by_subj": "foo.west.a.b"}),
    ],
    "source transforms first, then the stream's": [
        ("create", {"name": "W", "subjects": ["w.>"]}),
        ("create", {"name": "R", "subject_transform": {"src": "x.>", "dest": "z.>"},
                    "sources": [{"name": "W", "subject_transforms": [{"src": "w.a.>", "dest": "x.a.>"},
                                                                     {"src": "w.b.>", "dest": "y.b.>"}]}]}),
        ("pub", "w.a.1", "a"), ("pub", "w.b.2", "b"), ("pub", "w.c.3", "c"), ("pub", "w.a.4", "d"),
        ("msgs", "R", 3),
        ("fetch", "R", "z.>"),
    ],
    "source transform without destination, stream transform with functions": [
        ("create", {"name": "W1", "subjects": ["w.*.*"]}),
        ("create", {"name": "W2", "subjects": ["v.*.*"]}),
        ("create", {"name": "R", "subject_transform": {"src": "w.*.*", "dest": "s.$2.{{partition(4,1)}}"},
                    "sources": [{"name": "W1", "subject_transforms": [{"src": "w.a.*"}]},
                                {"name": "W2", "subject_transforms": [{"src": "v.*.*", "dest": "w.$2.$1"}]}]}),
        ("pub", "w.a.1", "1"), ("pub", "w.b.2", "2"), ("msgs", "R", 1),
        ("pub", "v.c.3", "3"), ("msgs", "R", 2), ("pub", "w.a.5", "4"),
        ("msgs", "R", 3),
    ],
    "filter_subject source and a stream transform of every subject": [
        ("create", {"name": "W", "subjects": ["w.>"]}),
        ("create", {"name": "R", "subjects": ["r.>"], "subject_transform": {"dest": "t.>"},
                    "sources": [{"name": "W", "filter_subject": "w.keep.>"}]}),
        ("pub", "w.keep.1", "1"), ("pub", "w.drop.2", "2"), ("msgs", "R", 1),
        ("pub", "r.own", "3"), ("msgs", "R", 2),
        ("fetch", "R", "t.w.>"),
        ("direct", "$JS.API.DIRECT.GET.R", {"last_by_subj": "t.r.own"}),
    ],
    "two sources into one transformed subject space": [
        ("create", {"name": "E", "subjects": ["ord.east.>"]}),
        ("create", {"name": "WW", "subjects": ["ord.west.>"]}),
        ("create", {"name": "ALL", "subject_transform": {"src": "ord.*.>", "dest": "all.>"},
                    "max_msgs_per_subject": 1,
                    "sources": [{"name": "E"}, {"name": "WW", "filter_subject": "ord.west.>"}]}),
        ("pub", "ord.east.k", "e1"), ("msgs", "ALL", 1), ("pub", "ord.west.k", "w1"),
        ("msgs", "ALL", 1),
        ("get", "ALL", {"last_by_subj": "all.k"}),
    ],
    "mirror subject_transforms": [
        ("create", {"name": "O", "subjects": ["o.>"]}),
        ("create", {"name": "M", "mirror": {"name": "O", "subject_transforms": [{"src": "o.a.>", "dest": "m.a.>"},
                                                                             {"src": "o.b.>"}]}}),
        ("pub", "o.a.1", "1"), ("pub", "o.c.2", "2"), ("pub", "o.b.3", "3"), ("pub", "o.a.4", "4"),
        ("msgs", "M", 3),
        ("fetch", "M", "m.a.>"),
    ],
    "mirror with a stream subject_transform": [
        ("create", {"name": "O", "subjects": ["o.>"]}),
        ("create", {"name": "M", "mirror": {"name": "O"}, "subject_transform": {"src": "o.*", "dest": "mm.$1"}}),
        ("pub", "o.1", "1"), ("pub", "o.2.x", "2"),
        ("msgs", "M", 2),
    ],
    "mirror transforms, then the stream's": [
        ("create", {"name": "O", "subjects": ["o.>"]}),
        ("create", {"name": "M", "mirror": {"name": "O", "subject_transforms": [{"src": "o.>", "dest": "p.>"}]},
                    "subject_transform": {"src": "p.*", "dest": "q.$1"}, "allow_direct": True}),
        ("pub", "o.1", "1"), ("pub", "o.2.x", "2"),
        ("msgs", "M", 2),
        ("direct", "$JS.API.DIRECT.GET.M", {"last_by_subj": "q.1"}),
    ],
    "republish after the transform": [
        ("create", {"name": W, "subjects": ["foo.west.>"]}),
        ("sub", "rp.>"),
        ("sub", "foo.>"),
        ("create", {**BLOG_READ, "republish": {"src": "foo.*", "dest": "rp.$1"}}),
        ("pub", "foo.west.test", "1"), ("pub", "foo.west.a.b", "2"),
        ("msgs", "foo", 2),
    ],
    "republish headers only after source and stream transforms": [
        ("create", {"name": "W", "subjects": ["w.>"]}),
        ("sub", "rp.>"),
        ("create", {"name": "R", "subject_transform": {"src": "x.*", "dest": "y.$1"},
                    "republish": {"src": "y.>", "dest": "rp.>", "headers_only": True},
                    "sources": [{"name": "W", "subject_transforms": [{"src": "w.*", "dest": "x.$1"}]}]}),
        ("pub", "w.1", "payload"),
        ("msgs", "R", 1),
    ],
    "KV bucket fed by a source through a stream transform": [
        ("create", {"name": "KV_A", "subjects": ["$KV.A.>"], "max_msgs_per_subject": 5, "allow_direct": True,
                    "allow_rollup_hdrs": True, "deny_delete": True}),
        ("create", {"name": "KV_B", "max_msgs_per_subject": 5, "allow_direct": True, "allow_rollup_hdrs": True,
                    "deny_delete": True, "subject_transform": {"src": "$KV.A.>", "dest": "$KV.B.>"},
                    "sources": [{"name": "KV_A"}]}),
        ("pub", "$KV.A.k1", "v1"), ("pub", "$KV.A.k2", "v2"), ("pub", "$KV.A.k1", "v3"),
        ("msgs", "KV_B", 3),
        ("direct", "$JS.API.DIRECT.GET.KV_B.$KV.B.k1", b""),
        ("direct", "$JS.API.DIRECT.GET.KV_B", {"multi_last": ["$KV.B.>"], "batch": 10}),
    ],
    "expectation headers are not checked again by the sourcing stream": [
        ("create", {"name": "W", "subjects": ["w.>"]}),
        ("create", {"name": "R", "subject_transform": {"src": "w.>", "dest": "r.>"}, "sources": [{"name": "W"}]}),
        ("pub", "w.1", "1", b"NATS/1.0\r\nNats-Expected-Stream: W\r\nNats-Expected-Last-Sequence: 0\r\n\r\n"),
        ("pub", "w.2", "2", b"NATS/1.0\r\nNats-Expected-Last-Subject-Sequence: 0\r\nX-Keep: yes\r\n\r\n"),
        ("msgs", "R", 2),
    ],
    "update adds, changes and removes the stream transform": [
        ("create", {"name": "W", "subjects": ["w.>"]}),
        ("create", {"name": "R", "sources": [{"name": "W"}]}),
        ("pub", "w.1", "1"), ("msgs", "R", 1),
        ("update", {"name": "R", "sources": [{"name": "W"}], "subject_transform": {"src": "w.*", "dest": "u.$1"}}),
        ("pub", "w.2", "2"), ("msgs", "R", 2),
        ("update", {"name": "R", "sources": [{"name": "W"}], "subject_transform": {"src": "w.*", "dest": "v.$1"}}),
        ("pub", "w.3", "3"), ("msgs", "R", 3),
        ("update", {"name": "R", "sources": [{"name": "W"}]}),
        ("pub", "w.4", "4"), ("msgs", "R", 4),
    ],
    "mirror of a transformed sourcing stream, sourcing a transforming origin": [
        ("create", {"name": "O", "subjects": ["in.>"], "subject_transform": {"src": "in.>", "dest": "o.>"}}),
        ("create", {"name": "R", "subject_transform": {"src": "o.*", "dest": "r.$1"},
                    "sources": [{"name": "O", "filter_subject": "o.*"}]}),
        ("create", {"name": "M", "mirror": {"name": "R", "subject_transforms": [{"src": "r.*", "dest": "m.$1"}]},
                    "subject_transform": {"src": "m.>", "dest": "n.>"}}),
        ("pub", "in.1", "1"), ("pub", "in.2.x", "2"), ("pub", "in.3", "3"),
        ("msgs", "O", 3), ("msgs", "R", 2), ("msgs", "M", 2),
        ("fetch", "M", "n.3"),
    ],
    "a destination of only the full wildcard": [
        ("create", {"name": "W", "subjects": ["w.>"]}),
        ("create", {"name": "R", "subject_transform": {"src": "k.>", "dest": ">"},
                    "sources": [{"name": "W", "subject_transforms": [{"src": "w.*.>", "dest": ">"}]}]}),
        ("pub", "w.a.k.1", "1"), ("pub", "w.b.c.d", "2"),
        ("msgs", "R", 2),
    ],
    "refused configurations": [
        ("create", {"name": "O", "subjects": ["o.>"]}),
        ("create", {"name": "E1", "mirror": {"name": "O", "filter_subject": "o.a",
                                             "subject_transforms": [{"src": "o.b", "dest": "x"}]}}),
        ("create", {"name": "E2", "mirror": {"name": "O", "subject_transforms": [{"src": "o.>", "dest": "x.>"},
                                                                              {"src": "o.a", "dest": "y"}]}}),
        ("create", {"name": "E3", "mirror": {"name": "O", "subject_transforms": [{"src": "o.*", "dest": "x.$2"}]}}),
        ("create", {"name": "E4", "mirror": {"name": "O"}, "subject_transform": {"src": "o.*", "dest": "x.$2"}}),
        ("create", {"name": "E5", "sources": [{"name": "O", "filter_subject": "o.a",
                                               "subject_transforms": [{"src": "o.b", "dest": "x"}]}]}),
        ("create", {"name": "E6", "sources": [{"name": "O", "subject_transforms": [{"src": "o.>", "dest": "x.>"},
                                                                                {"src": "o.a", "dest": "y"}]}]}),
        ("create", {"name": "E7", "sources": [{"name": "O"}], "subject_transform": {"src": "o.*", "dest": "x.*"}}),
        ("create", {"name": "E8", "sources": [{"name": "O"}], "subject_transform": {"src": "o..", "dest": "x"}}),
        ("create", {"name": "E9", "mirror": {"name": "O", "subject_transforms": [{"src": "o..a", "dest": "x"}]}}),
        ("create", {"name": "E10", "sources": [{"name": "O"}], "subject_transform": {"src": "o.>", "dest": "o.>"},
                    "republish": {"src": "o.>", "dest": "o.x.>"}}),
    ],
}

# what nats-server 2.15.1 stored (stream -> subjects in sequence order) in each case: checked against Rillet
# even when the Go binary is missing
GO_STORED = {
    "blog read stream": {"foo": ["foo.test", "foo.a.b"]},
    "source transforms first, then the stream's": {"R": ["z.a.1", "y.b.2", "z.a.4"]},
    "filter_subject source and a stream transform of every subject": {"R": ["t.w.keep.1", "t.r.own"]},
    "mirror subject_transforms": {"M": ["m.a.1", "o.b.3", "m.a.4"]},
    "mirror with a stream subject_transform": {"M": ["mm.1", "o.2.x"]},
    "mirror transforms, then the stream's": {"M": ["q.1", "p.2.x"]},
    "KV bucket fed by a source through a stream transform": {"KV_B": ["$KV.B.k1", "$KV.B.k2", "$KV.B.k1"]},
    "update adds, changes and removes the stream transform": {"R": ["w.1", "u.2", "v.3", "w.4"]},
}

CLUSTER_CASES = ["blog read stream", "source transforms first, then the stream's", "mirror subject_transforms",
                 "mirror transforms, then the stream's", "republish after the transform",
                 "update adds, changes and removes the stream transform"]


# nats-server 2.15 ends a Nats-Stream-Source value with the origin stream's identity (a hash of its creation
# time, to notice a recreated origin), which Rillet does not track: dropped before comparing
_IDENT = re.compile(r"(Nats-Stream-Source: (?:[^ \r\n]+ ){4}[^ \r\n]+) [^ \r\n]+\r\n")


def _h(text: str | None) -> str | None:
    return _IDENT.sub(r"\1\r\n", text) if text else text


def _hdr_text(b64: str | None) -> str | None:
    return _h(norm_hdr(base64.b64decode(b64))) if b64 else None


async def _stream_count(r: Raw, stream: str) -> tuple[int, dict]:
    ans = await r.request(f"$JS.API.STREAM.INFO.{stream}", timeout=3.0)
    if not isinstance(ans[0], tuple):
        return -1, {}  # (an R3 stream whose leader is still being elected: asked again)
    info = json.loads(ans[0][1])
    return (info.get("state") or {}).get("messages", -1), info


async def _fetch(r: Raw, stream: str, filt: str, n: int) -> Any:
    name = f"F{n}"
    ans = await r.api(f"$JS.API.CONSUMER.CREATE.{stream}.{name}",
                      {"stream_name": stream, "config": {"name": name, "filter_subject": filt, "ack_policy": "none",
                                                         "inactive_threshold": 10_000_000_000}})
    if "error" in ans:
        return {"error": ans["error"]}
    pending = ans.get("num_pending")
    reply = f"_F.{n}"
    r.rc.sub(reply, f"f{n}")
    got: list = []
    for _ in range(10):  # (an R3 consumer just created may answer a no-wait request with nothing before its
        r.rc.pub(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}",  # leader is ready: nats-server did once
                 json.dumps({"batch": 20, "no_wait": True}), reply=reply)  # under load; asked again)
        while True:
            try:
                m = await r.rc.read_msg(2.0)
            except AssertionError:
                got.append("<timeout>")
                break
            if m.reply and m.reply.startswith("$JS.ACK."):
                got.append((m.subject, m.payload.decode()))
            elif m.subject == reply:
                break  # the end (a status)
            else:
                r.answers.setdefault(m.subject, []).append((norm_hdr(m.headers), m.payload))
        if got or not pending:
            break
        await asyncio.sleep(0.3)
    return {"pending": pending, "delivered": got}


async def _run(r: Raw, steps: list[tuple], cluster: bool) -> list[Any]:
    out: list[Any] = []
    subs: list[str] = []
    for n, step in enumerate(steps):
        op = step[0]
        if op in ("create", "update"):
            cfg = dict(step[1])
            if cluster:
                cfg["num_replicas"] = 3
            verb = "CREATE" if op == "create" else "UPDATE"
            deadline = time.monotonic() + 10
            while True:
                ans = await r.api(f"$JS.API.STREAM.{verb}.{cfg['name']}", cfg)
                # (a new cluster may not have its meta leader yet)
                if (ans.get("error") or {}).get("err_code") != 10008 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
            if "error" in ans:
                out.append((op, cfg["name"], ans["error"]))
            else:
                c = ans["config"]
                out.append((op, cfg["name"], c.get("subject_transform"), c.get("republish"),
                            (c.get("mirror") or {}).get("subject_transforms"),
                            [s.get("subject_transforms") for s in c.get("sources") or []]))
        elif op == "pub":
            hdr = step[3] if len(step) > 3 else None
            ack = await r.publish(step[1], step[2], hdr=hdr)
            out.append(("pub", step[1], ack.get("stream"), ack.get("seq"), ack.get("error")))
        elif op == "msgs":
            stream, want = step[1], step[2]
            began = time.monotonic()
            deadline = began + 20  # (a loaded Go R3 cluster left a new stream's info unanswered for over 8 s once)
            while True:
                count, info = await _stream_count(r, stream)
                # (an error answer is taken as final only after 3 s: a loaded R3 cluster's new stream may not
                # answer its info at once, seen on the Go side in CI's clean-clone runs)
                if count >= want or ("error" in info and time.monotonic() > began + 3) or \
                        time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)  # nothing more comes
            count, info = await _stream_count(r, stream)
            while not info and time.monotonic() < began + 40:  # (no answer at all: the Go side under load, once)
                await asyncio.sleep(0.2)
                count, info = await _stream_count(r, stream)
            st = info.get("state") or {}
            msgs = []
            for seq in range(st.get("first_seq", 1), st.get("last_seq", 0) + 1):
                ans = await r.api(f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq})
                if "error" in ans:
                    msgs.append((seq, ans["error"]["err_code"]))
                    continue
                m = ans["message"]
                msgs.append((m["seq"], m["subject"], base64.b64decode(m.get("data") or "").decode(),
                             _hdr_text(m.get("hdrs"))))
            srcs = [(s.get("name"), s.get("filter_subject"), s.get("subject_transforms"), s.get("error"))
                    for s in ([info["mirror"]] if info.get("mirror") else []) + (info.get("sources") or [])]
            # (nats-server lists the sources in no fixed order)
            out.append(("msgs", stream, count, st.get("num_subjects"), msgs, sorted(srcs, key=repr)))
        elif op == "fetch":
            out.append(("fetch", step[1], step[2], await _fetch(r, step[1], step[2], n)))
        elif op == "direct":
            ans = await r.request(step[1], step[2])
            out.append(("direct", step[1], step[2], [a if isinstance(a, str) else (_h(a[0]), a[1].decode())
                                                     for a in ans]))
        elif op == "get":
            ans = await r.api(f"$JS.API.STREAM.MSG.GET.{step[1]}", step[2])
            m = ans.get("message") or {}
            out.append(("get", step[1], step[2], ans.get("error"), m.get("seq"), m.get("subject")))
        elif op == "sub":
            r.rc.sub(step[1], f"s{n}")
            await r.rc.ping()
            subs.append(step[1])
        else:
            raise ValueError(op)
    if subs:
        await r.settle(0.3)
        from rillet.subjects.validate import subject_matches_filter
        got = {k: [(_h(h), p.decode()) for h, p in v] for k, v in r.answers.items()
               if not k.startswith("_R.") and any(subject_matches_filter(k, s) for s in subs)}
        out.append(("received", got))
    return out


async def _clean(r: Raw) -> None:
    deadline = time.monotonic() + 15
    while True:  # (a cluster just started answers once it has a meta leader)
        ans = await r.request("$JS.API.STREAM.NAMES")
        if isinstance(ans[0], tuple) and ans[0][1]:
            resp = json.loads(ans[0][1])
            if "error" not in resp:
                break
        assert time.monotonic() < deadline, ans
        await asyncio.sleep(0.2)
    names = resp.get("streams") or []
    for name in names:
        deadline = time.monotonic() + 15
        while True:  # (a loaded cluster may leave a delete unanswered within the request's timeout: asked again)
            ans = await r.request(f"$JS.API.STREAM.DELETE.{name}")
            if isinstance(ans[0], tuple) and ans[0][1]:
                break
            assert time.monotonic() < deadline, ans
            await asyncio.sleep(0.2)


def _stored(transcript: list[Any]) -> dict[str, list[str]]:
    """stream -> stored subjects, from the last listing of each stream in a transcript."""
    out = {}
    for step in transcript:
        if step[0] == "msgs":
            out[step[1]] = [m[1] for m in step[4] if len(m) > 2]
    return out


async def _compare(targets: Any, case: str, cluster: bool = False) -> list[Any]:
    async def scenario(kind: str, url: str) -> list[Any]:
        r = await Raw.open(url)
        try:
            await _clean(r)
            return await _run(r, CASES[case], cluster)
        finally:
            await _clean(r)
            await r.close()

    res = await run_both(targets, scenario, timeout=60)
    out = same(res)
    for stream, subjects in GO_STORED.get(case, {}).items():
        assert _stored(out)[stream] == subjects, (case, _stored(out))
    return out


@pytest.fixture(scope="module")
def pair():
    p = ServerPair(CONF)
    yield p
    p.stop()


@pytest.mark.parametrize("case", list(CASES))
async def test_transforms_of_sourced_and_mirrored_messages_like_nats_server(pair, case):
    await _compare(pair, case)


# ---------------------------------------------------------------------------------------------------
# 3-server clusters (R3 streams): the leader transforms what its sources bring before proposing it


class ClusterPair:
    """Three Rillet servers and (when the binary is there) three nats-server servers, each set routed
    together, from the same configuration; targets are each cluster's first server."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="rillet-jsdiff-cl-")
        self.procs: dict[str, list[ServerProcess]] = {}
        kinds = [("rillet", None)] + ([("go", [GO_BINARY])] if GO_BINARY else [])
        try:
            for kind, cmd in kinds:
                cports = [free_port() for _ in range(3)]
                routes = ", ".join(f"nats://127.0.0.1:{p}" for p in cports)
                self.procs[kind] = []
                for i, cp in enumerate(cports):
                    store = os.path.join(self.dir, f"{kind}{i}")
                    path = os.path.join(self.dir, f"{kind}{i}.conf")
                    with open(path, "w") as f:
                        f.write(f'listen: 127.0.0.1:-1\nserver_name: {kind}{i}\n'
                                f'jetstream {{ store_dir: "{store}" }}\n'
                                f'cluster {{ name: c, listen: 127.0.0.1:{cp}, routes: [{routes}] }}\n')
                    self.procs[kind].append(ServerProcess("-c", path, command=cmd))
            for ps in self.procs.values():
                for p in ps:
                    p.wait_ready()
        except BaseException:
            self.stop()
            raise

    def targets(self) -> list[tuple[str, str]]:
        return [(k, ps[0].client_url) for k, ps in self.procs.items()]

    def stop(self) -> None:
        for ps in self.procs.values():
            for p in ps:
                p.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def cpair():
    p = ClusterPair()
    yield p
    p.stop()


@pytest.mark.parametrize("case", CLUSTER_CASES)
async def test_transforms_in_r3_streams_like_nats_server(cpair, case):
    await _compare(cpair, case, cluster=True)
