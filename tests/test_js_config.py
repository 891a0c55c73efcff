"""JetStream stream/consumer configuration (rillet/jetstream/configtypes.py, streamconfig.py, consumerconfig.py).

Most cases are differential: the same STREAM.CREATE / STREAM.UPDATE / CONSUMER.CREATE request goes to a
real nats-server (started for this module) and through our normalization; the error object (code,
err_code, description) or the resulting configuration (as JSON, key order included) must be the same.
"""
from __future__ import annotations

import functools
import json
import re

import pytest

from rillet.jetstream import configtypes as C
from rillet.jetstream import consumerconfig as CC
from rillet.jetstream import streamconfig as SC
from rillet.jetstream.api import codec as apijson
from rillet.jetstream import errors as jserr
from rillet.jetstream.errors import ApiError
from rillet.subjects.destination import check_subject_transform, validate_mapping
from rillet.subjects.validate import subjects_collide
from test_js_errors import GoJetStream

S = "$JS.API."


@pytest.fixture(scope="module")
def go():
    g = GoJetStream()
    yield g
    g.close()


def _body(b) -> bytes:
    if isinstance(b, (dict, list)):
        return json.dumps(b, default=apijson._json_default).encode()
    if isinstance(b, str):
        return b.encode()
    return b


class Pair:
    """One account on nats-server and its counterpart on our side."""

    def __init__(self, go: GoJetStream, server_limits: C.ServerLimits | None = None,
                 account_limits: C.AccountLimits | None = None) -> None:
        self.go = go
        self.server_limits = server_limits
        self.account_limits = account_limits
        self.streams: dict[str, C.StreamConfig] = {}
        self.consumers: dict[str, dict[str, C.ConsumerConfig]] = {}
        self.subscribed: set[str] = set()
        self.version = None

    # -- ours
    def _overlap(self, skip: str | None):
        def check(subjects: list[str]) -> bool:
            for name, cfg in self.streams.items():
                if name == skip:
                    continue
                for a in cfg.subjects or []:
                    for b in subjects:
                        if subjects_collide(a, b):
                            return True
            return False
        return check

    def ours_stream(self, op: str, name: str, body: bytes) -> dict:
        try:
            lim = dict(server_limits=self.server_limits, account_limits=self.account_limits)
            if op == "CREATE":
                check = functools.partial(SC.stream_limits_check, account=self.account_limits,
                                          others=list(self.streams.values()))
                cfg = SC.normalize_stream_config(body, subject_name=name, lookup_stream=self.streams.get,
                                                subjects_overlap=self._overlap(None),
                                                existing=self.streams.get(name), limits_check=check, **lim)
            else:
                cfg = SC.normalize_stream_update(self.streams.get(name), body, subject_name=name,
                                                lookup_stream=self.streams.get,
                                                subjects_overlap=self._overlap(name), **lim)
        except ApiError as e:
            return {"error": e.to_dict()}
        self.streams[name] = cfg
        self.consumers.setdefault(name, {})
        return {"config": json.loads(apijson.go_json(C.with_dynamic_metadata(cfg, self.version)))}

    def ours_consumer(self, tokens: list[str], body: bytes, go_name: str | None) -> dict:
        try:
            r = CC.prepare_consumer_create(tokens, body, lookup_stream=self.streams.get,
                                          consumers=lambda s: self.consumers.get(s, {}),
                                          server_limits=self.server_limits, account_limits=self.account_limits,
                                          deliver_subject_in_use=self.subscribed.__contains__)
        except ApiError as e:
            return {"error": e.to_dict()}
        self.consumers[r.stream][r.name or go_name] = r.config
        return {"config": json.loads(apijson.go_json(C.with_dynamic_metadata(r.config, self.version)))}

    # -- both
    def stream(self, name: str, body, op: str = "CREATE") -> tuple[dict, dict]:
        body = _body(body)
        resp = self.go.request(f"{S}STREAM.{op}.{name}", body)
        if self.version is None and "config" in resp:
            self.version = resp["config"]["metadata"]["_nats.ver"]
        got = {"error": resp["error"]} if "error" in resp else {"config": resp["config"]}
        ours = self.ours_stream(op, name, body)
        return got, ours

    def consumer(self, subject_tail: str, body) -> tuple[dict, dict]:
        body = _body(body)
        resp = self.go.request(f"{S}CONSUMER.{subject_tail}", body)
        got = {"error": resp["error"]} if "error" in resp else {"config": resp["config"]}
        ours = self.ours_consumer(subject_tail.split("."), body, resp.get("name"))
        return got, ours

    def same_stream(self, name: str, body, op: str = "CREATE") -> dict:
        got, ours = self.stream(name, body, op)
        assert json.dumps(ours) == json.dumps(got), (name, body)
        return got

    def same_consumer(self, subject_tail: str, body) -> dict:
        got, ours = self.consumer(subject_tail, body)
        assert json.dumps(ours) == json.dumps(got), (subject_tail, body)
        return got


@pytest.fixture(scope="module")
def pair(go):
    p = Pair(go)
    p.same_stream("BASE", {"name": "BASE", "subjects": ["base.>"]})
    return p


_n = [0]


def uniq(prefix: str = "T") -> str:
    _n[0] += 1
    return f"{prefix}{_n[0]}"


# ---------------------------------------------------------------------------------------------------
# Stream create: defaults and validation, compared with nats-server

SEC = C.NS
MS = C.MS

STREAM_CASES = [
    ("defaults", {}),
    ("subjects", {"subjects": ["{n}.a", "{n}.b.*"]}),
    ("max_age caps duplicate window", {"max_age": 1 * SEC}),
    ("max_age big", {"max_age": 3600 * SEC}),
    ("max_age too small", {"max_age": 50 * MS}),
    ("max_age negative", {"max_age": -1}),
    ("dup window small", {"duplicate_window": 50 * MS}),
    ("dup window > max_age", {"duplicate_window": 10 * SEC, "max_age": 5 * SEC}),
    ("dup window negative", {"duplicate_window": -5}),
    ("dup window explicit", {"duplicate_window": 30 * SEC}),
    ("workqueue", {"retention": "workqueue"}),
    ("interest", {"retention": "interest", "storage": "memory"}),
    ("memory", {"storage": "memory", "max_msgs": 10, "max_bytes": 1000, "max_msg_size": 100}),
    ("limits below -1", {"max_msgs": -7, "max_bytes": -3, "max_msgs_per_subject": -2, "max_consumers": -9,
                         "max_msg_size": -4}),
    ("pedantic limits", {"max_msgs": -5, "pedantic": True}),
    ("pedantic max_consumers", {"max_consumers": -5, "pedantic": True}),
    ("pedantic dup vs max_age", {"max_age": 1 * SEC, "pedantic": True}),
    ("replicas 3", {"num_replicas": 3}),
    ("replicas 6", {"num_replicas": 6}),
    ("replicas negative", {"num_replicas": -1}),
    ("description", {"description": "hello <world> & co"}),
    ("description too long", {"description": "x" * 4097}),
    ("metadata", {"metadata": {"b": "2", "a": "1", "_nats.ver": "x"}}),
    ("metadata too big", {"metadata": {"k": "v" * (128 * 1024)}}),
    ("no_ack", {"no_ack": True}),
    ("sealed on create", {"sealed": True}),
    ("mirror_direct without mirror", {"mirror_direct": True}),
    ("deny_purge with rollups", {"deny_purge": True, "allow_rollup_hdrs": True}),
    ("deny flags", {"deny_delete": True, "deny_purge": True, "allow_direct": True}),
    ("discard new per subject without discard new", {"discard_new_per_subject": True}),
    ("discard new per subject without max per subject", {"discard_new_per_subject": True, "discard": "new"}),
    ("discard new per subject ok", {"discard_new_per_subject": True, "discard": "new", "max_msgs_per_subject": 1}),
    ("discard case-insensitive", {"discard": "NEW"}),
    ("msg ttl", {"allow_msg_ttl": True}),
    ("sdm ttl small", {"subject_delete_marker_ttl": 500 * MS}),
    ("sdm ttl turns on ttl and rollups", {"subject_delete_marker_ttl": 2 * SEC, "deny_purge": True}),
    ("sdm ttl negative", {"subject_delete_marker_ttl": -1}),
    ("sdm pedantic", {"subject_delete_marker_ttl": 2 * SEC, "pedantic": True}),
    ("counter discard new", {"allow_msg_counter": True, "discard": "new"}),
    ("counter ttl", {"allow_msg_counter": True, "allow_msg_ttl": True}),
    ("counter interest", {"allow_msg_counter": True, "retention": "interest"}),
    ("counter ok", {"allow_msg_counter": True}),
    ("schedules discard new", {"allow_msg_schedules": True, "discard": "new"}),
    ("schedules", {"allow_msg_schedules": True}),
    ("atomic", {"allow_atomic": True}),
    ("batched", {"allow_batched": True}),
    ("async persist memory", {"persist_mode": "async", "storage": "memory"}),
    ("async persist atomic", {"persist_mode": "async", "allow_atomic": True}),
    ("async persist", {"persist_mode": "async"}),
    ("compression s2", {"compression": "s2"}),
    ("first_seq", {"first_seq": 100}),
    ("subject invalid", {"subjects": ["{n}..x"]}),
    ("subject fwc not last", {"subjects": ["{n}.>.x"]}),
    ("subject duplicate", {"subjects": ["{n}.a", "{n}.a"]}),
    ("subjects overlap", {"subjects": ["{n}.*", "{n}.b"]}),
    ("subjects overlap fwc", {"subjects": ["{n}.x", "{n}.>"]}),
    ("capture all", {"subjects": [">"]}),
    ("capture all replicas", {"subjects": [">"], "no_ack": True, "num_replicas": 3}),
    ("js api subject", {"subjects": ["$JS.API.{n}"]}),
    ("jsc subject", {"subjects": ["$JSC.{n}"]}),
    ("js event subject", {"subjects": ["$JS.EVENT.{n}"]}),
    ("js api subject no_ack", {"subjects": ["$JS.API.{n}"], "no_ack": True}),
    ("sys subject", {"subjects": ["$SYS.{n}"]}),
    ("sys account subject", {"subjects": ["$SYS.ACCOUNT.{n}"]}),
    ("wildcard over api", {"subjects": ["*.API.{n}"]}),
    ("other stream overlap", {"subjects": ["base.x"]}),
    ("placement empty", {"placement": {}}),
    ("placement preferred", {"placement": {"preferred": "srv"}}),
    ("placement cluster", {"placement": {"cluster": "c1", "tags": ["a", "b"]}}),
    ("transform", {"subjects": ["{n}.in.*"], "subject_transform": {"src": "{n}.in.*", "dest": "{n}.out.$1"}}),
    ("transform bad src", {"subject_transform": {"src": "{n}..x", "dest": "y"}}),
    ("transform bad dest", {"subject_transform": {"src": "{n}.*", "dest": "{n}.{{nope()}}"}}),
    ("transform index range", {"subject_transform": {"src": "{n}.*", "dest": "{n}.$2"}}),
    ("transform dest wildcard", {"subject_transform": {"src": "{n}.*", "dest": "{n}.*"}}),
    ("transform fn args", {"subject_transform": {"src": "{n}.*", "dest": "{n}.{{wildcard()}}"}}),
    ("transform partition", {"subject_transform": {"src": "{n}.*", "dest": "{n}.{{partition(3,1)}}.$1"}}),
    ("transform left", {"subject_transform": {"src": "{n}.*", "dest": "{n}.{{left(1,2)}}"}}),
    ("transform split", {"subject_transform": {"src": "{n}.*", "dest": "{n}.{{split(1,-)}}"}}),
    ("republish", {"subjects": ["{n}.a"], "republish": {"src": "{n}.a", "dest": "rp.{n}"}}),
    ("republish empty src", {"subjects": ["{n}.a"], "republish": {"dest": "rp.{n}.>"}}),
    ("republish cycle", {"subjects": ["{n}.>"], "republish": {"src": ">", "dest": "{n}.x"}}),
    ("republish bad transform", {"subjects": ["{n}.*"], "republish": {"src": "{n}.*", "dest": "rp.$2"}}),
    ("republish pedantic", {"subjects": ["{n}.a"], "republish": {"dest": "rp.{n}.>"}, "pedantic": True}),
    ("republish headers only", {"republish": {"src": ">", "dest": "rp2.{n}.>", "headers_only": True}}),
    ("mirror with subjects", {"subjects": ["{n}"], "mirror": {"name": "BASE"}}),
    ("mirror with sources", {"mirror": {"name": "BASE"}, "sources": [{"name": "BASE"}]}),
    ("mirror first seq", {"mirror": {"name": "BASE"}, "first_seq": 5}),
    ("mirror counters", {"mirror": {"name": "BASE"}, "allow_msg_counter": True}),
    ("mirror schedules", {"mirror": {"name": "BASE"}, "allow_msg_schedules": True}),
    ("mirror atomic", {"mirror": {"name": "BASE"}, "allow_atomic": True}),
    ("mirror bad name", {"mirror": {"name": "a.b"}}),
    ("mirror filter and transforms", {"mirror": {"name": "BASE", "filter_subject": "base.a",
                                                 "subject_transforms": [{"src": "base.b", "dest": "x"}]}}),
    ("mirror transforms overlap", {"mirror": {"name": "BASE", "subject_transforms": [
        {"src": "base.*", "dest": "m.$1"}, {"src": "base.a", "dest": "n"}]}}),
    ("mirror transform bad src", {"mirror": {"name": "BASE", "subject_transforms": [{"src": "a..b", "dest": "x"}]}}),
    ("mirror transform bad dest", {"mirror": {"name": "BASE", "subject_transforms": [
        {"src": "base.*", "dest": "x.{{foo(1)}}"}]}}),
    ("mirror sdm", {"mirror": {"name": "BASE"}, "subject_delete_marker_ttl": 2 * SEC}),
    ("mirror", {"mirror": {"name": "BASE", "opt_start_seq": 3}}),
    ("mirror start time", {"mirror": {"name": "BASE", "opt_start_time": "2024-01-02T03:04:05.500+01:00"}}),
    ("mirror missing origin", {"mirror": {"name": "NOPE"}}),
    ("mirror external", {"mirror": {"name": "X", "external": {"api": "$JS.hub.API", "deliver": "dlv.{n}"}}}),
    ("mirror external api overlap", {"mirror": {"name": "X", "external": {"api": "$JS.API"}}}),
    ("mirror external api wildcard", {"mirror": {"name": "X", "external": {"api": "a.*"}}}),
    ("mirror external deliver wildcard", {"mirror": {"name": "X", "external": {"api": "a.b", "deliver": "d.>"}}}),
    ("mirror consumer invalid", {"mirror": {"name": "BASE", "consumer": {"name": "c"}}}),
    ("sources", {"sources": [{"name": "BASE", "filter_subject": "base.a"}, {"name": "BASE", "filter_subject": "base.b"}]}),
    ("sources and subjects", {"subjects": ["{n}.own"], "sources": [{"name": "BASE"}]}),
    ("source duplicate", {"sources": [{"name": "BASE"}, {"name": "BASE"}]}),
    ("source bad name", {"sources": [{"name": "a*"}]}),
    ("source filter and transforms", {"sources": [{"name": "BASE", "filter_subject": "base.a",
                                                   "subject_transforms": [{"src": "base.b", "dest": "x"}]}]}),
    ("source transforms overlap", {"sources": [{"name": "BASE", "subject_transforms": [
        {"src": "base.>", "dest": "x.>"}, {"src": "base.a", "dest": "y"}]}]}),
    ("source transform bad", {"sources": [{"name": "BASE", "subject_transforms": [{"src": "base.*", "dest": "x.$3"}]}]}),
    ("source transform bad src", {"sources": [{"name": "BASE", "subject_transforms": [{"src": "b..x", "dest": "x"}]}]}),
    ("source schedules", {"sources": [{"name": "BASE"}], "allow_msg_schedules": True}),
    ("source consumer bad", {"sources": [{"name": "BASE", "consumer": {"name": "c", "deliver_subject": "d.*"}}]}),
    ("source external", {"sources": [{"name": "Y", "external": {"api": "$JS.leaf.API", "deliver": ""}}]}),
    ("source self cycle", {"subjects": ["{n}.x"], "sources": [{"name": "{n}"}]}),
    ("stream consumer limits", {"consumer_limits": {"max_ack_pending": 50, "inactive_threshold": 10 * SEC}}),
    ("name path separator", {"name": "a\\b"}),
    ("name slash", {"name": "a/b"}),
    ("name gt", {"name": "a>"}),
    ("name star", {"name": "x*"}),
    ("name too long", {"name": "N" * 256}),
]


@pytest.mark.parametrize("desc,extra", STREAM_CASES, ids=[c[0] for c in STREAM_CASES])
def test_stream_create_like_nats_server(pair, desc, extra):
    name = extra.get("name") or uniq("S")
    body = json.loads(json.dumps({"name": name, **extra}).replace("{n}", name))
    pair.same_stream(name, body)


def test_stream_create_twice_and_overlap(pair):
    name = uniq("S")
    first = pair.same_stream(name, {"name": name, "subjects": [f"{name}.>"], "max_msgs": 5})
    # same again (and differently spelled defaults): answered with the existing stream
    pair.same_stream(name, {"name": name, "subjects": [f"{name}.>"], "max_msgs": 5, "num_replicas": 1})
    pair.same_stream(name, {"name": name, "subjects": [f"{name}.>"], "max_msgs": 6})
    other = uniq("S")
    pair.same_stream(other, {"name": other, "subjects": [f"{name}.x"]})
    assert "config" in first


def test_mirror_max_msg_size_and_direct(pair):
    origin = uniq("O")
    pair.same_stream(origin, {"name": origin, "max_msg_size": 1000, "allow_direct": True})
    m = uniq("M")
    pair.same_stream(m, {"name": m, "mirror": {"name": origin}, "max_msg_size": 500})
    pair.same_stream(m, {"name": m, "mirror": {"name": origin}, "max_msg_size": 2000})
    s = uniq("M")
    pair.same_stream(s, {"name": s, "sources": [{"name": origin}], "max_msg_size": 10})
    p = uniq("M")
    pair.same_stream(p, {"name": p, "mirror": {"name": origin}, "pedantic": True})


def test_source_cycle(pair):
    a, b = uniq("CA"), uniq("CB")
    pair.same_stream(a, {"name": a, "subjects": [f"{a}.x"]})
    pair.same_stream(b, {"name": b, "subjects": [f"{b}.x"], "sources": [{"name": a}]})
    pair.same_stream(a, {"name": a, "subjects": [f"{a}.x"], "sources": [{"name": b}]}, op="UPDATE")


# Request decoding: Go's json errors, strictness and leniency.
DECODE_CASES = [
    '{bad',
    '{"name":"{n}",}',
    '{"name":"{n}"',
    '{"name":"{n}"} x',
    '{"name":"{n}"} {"max_msgs": 3}',
    '[1]',
    '"x"',
    'null',
    '',
    '   ',
    '{"name":"{n}","foo":1}',
    '{"name":"{n}","max_msgs":"a"}',
    '{"name":"{n}","max_msgs":1.5}',
    '{"name":"{n}","max_msgs":1e3}',
    '{"name":"{n}","max_msgs":99999999999999999999}',
    '{"name":"{n}","first_seq":-1}',
    '{"name":"{n}","max_msg_size":3000000000}',
    '{"name":"{n}","max_msgs":true}',
    '{"name":"{n}","max_msgs":{}}',
    '{"name":"{n}","max_msgs":[]}',
    '{"name":"{n}","max_msgs":null}',
    '{"name":"{n}","subjects":"a"}',
    '{"name":"{n}","subjects":[1]}',
    '{"name":"{n}","subjects":null}',
    '{"name":"{n}","retention":"Limits"}',
    '{"name":"{n}","retention":null}',
    '{"name":"{n}","retention":5}',
    '{"name":"{n}","storage":"disk"}',
    '{"name":"{n}","compression":"zz"}',
    '{"name":"{n}","compression":5}',
    '{"name":"{n}","persist_mode":""}',
    '{"name":"{n}","persist_mode":"fast"}',
    '{"name":"{n}","placement":"x"}',
    '{"name":"{n}","placement":{"cluster":1}}',
    '{"name":"{n}","placement":{"tags":[1]}}',
    '{"name":"{n}","sources":"x"}',
    '{"name":"{n}","sources":[1]}',
    '{"name":"{n}","sources":[{"name":1}]}',
    '{"name":"{n}","metadata":{"a":1}}',
    '{"name":"{n}","sealed":"true"}',
    '{"name":"{n}","max_age":"1s"}',
    '{"name":"{n}","consumer_limits":{"max_ack_pending":"a"}}',
    '{"name":"{n}","mirror":{"name":"BASE","opt_start_time":5}}',
    '{"name":"{n}","mirror":{"name":"BASE","opt_start_time":"bad"}}',
    '{"name":"{n}","mirror":{"name":"BASE","opt_start_time":"2020-13-01T00:00:00Z"}}',
    '{"name":"{n}","mirror":{"name":"BASE","opt_start_time":"2020-01-01T00:00:00"}}',
    '{"name":"{n}","mirror":{"name":"BASE","opt_start_time":"2020-01-01 00:00:00Z"}}',
    '{"name":"{n}","mirror":{"name":"BASE","opt_start_time":"2020-02-30T00:00:00Z"}}',
    '{"name":"{n}","mirror":{"name":"BASE","opt_start_time":"2020-01-01T00:00:00.123456789Z"}}',
    '{"name":"{n}","mirror":{"name":"BASE","opt_start_time":"2024-01-01T0:00:00Z"}}',
    '{"name":"{n}","mirror":{"name":"BASE","opt_start_time":"2024-01-01T00:00:00,5Z"}}',
    '{"name":"{n}","mirror":{"name":"BASE","opt_start_time":"2024-01-01T00:00:00+25:00"}}',
    '{"name":"{n}","mirror":{"name":"BASE","opt_start_time":"2024-01-01T00:00:00+01:60"}}',
    '{"name":"{n}","mirror":{"name":"BASE","opt_start_time":"2024-01-01T00:00:00.1234567891Z"}}',
    '{"name":"{n}","mirror":{"name":"BASE","opt_start_time":"0000-01-01T00:00:00Z"}}',
    '{"name":"{n}","mirror":{"name":"BASE","opt_start_time":"2024-01-01T00:00:00-00:00"}}',
    '{"name":"{n}","mirror":{"name":"BASE","opt_start_time":"2024-01-01T00:00:00.Z"}}',
    '{"name":"{n}","mirror":{"name":"BASE","opt_start_time":"2024-01-01T00:00:00Zx"}}',
    '{"name":"{n}","mirror":{"name":"BASE","opt_start_time":"2024-01-01t00:00:00z"}}',
    '{"name":"{n}","mirror":{"name":"BASE","opt_start_time":"0001-01-01T00:00:00Z"}}',
    b'{"name"\xc3\xa9:"{n}"}',
    b'{"name":"{n}",\xc3}',
    b'{"name":"{n}",\xc2\xa0}',
    b'{"name":"{n}",\x7f}',
    b'{"name":"{n}","description":"\xe9t\xc3\xa9"}',
    '{"name":"{n}",\'}',
    '{"name":"{n}","max_msgs":"a","foo":1}',
    '{"name":"{n}","foo":1,"max_msgs":"a"}',
    '{"name":"{n}","retention":"x","max_msgs":"a"}',
    '{"name":"{n}","pedantic":"x"}',
    '{"NAME":"{n}","Max_Msgs":5}',
    '{"name":"{n}","maxmsgs":5}',
    '{"name":"{n}","description":"\\u0041\\n\\t<>&\\u2028"}',
    '{"name":"{n}","description":"bad \\x escape"}',
    '{"name":"{n}","description":"ctl \x01"}',
    '{"name":"{n}","max_msgs":-}',
    '{"name":"{n}","max_msgs":01}',
    '{"name":"{n}","max_msgs":1.}',
    '{"name":"{n}","max_msgs":1e}',
    '{"name":"{n}","sealed":tru}',
    '{"name":"{n}","sealed":nul}',
    '{"name":"{n}","sealed":t}',
    '{"name":"{n}","max_msgs":1e+}',
    '{"name":"{n}","max_msgs":-0}',
    '{"name":"{n}","max_msgs":1.5E3}',
    '{"name":"{n}","description":"\\u12"}',
    '{"name":"{n}","description":"\\u12',
    '{"name":"{n}","description":"\\ud800x\\u00e9"}',
    '{"name":"{n}","description":"\t"}',
    '{"name":"{n}","max_msgs":2}{"max_msgs":1.',
    '{"name":"{n}","max_msgs":"a"}{',
    '{"name":"{n}"}]',
    '{"name":"{n}"}5',
    '{"name":"{n}"}null',
    'true',
    '{"name":"{n}","x":\x01}',
    '{"name":"{n}" "x":1}',
    '{"name" "{n}"}',
    '{"name":"{n}","subjects":["a" "b"]}',
    '{"name":"{n}","subjects":["a",]}',
    '{"name":"{n}","metadata":{"a":"1"},"metadata":{"b":"2"}}',
]


@pytest.mark.parametrize("raw", DECODE_CASES)
def test_stream_request_decoding_like_nats_server(pair, raw):
    name = uniq("D")
    body = raw.replace(b"{n}", name.encode()) if isinstance(raw, bytes) else raw.replace("{n}", name)
    pair.same_stream(name, body)


# ---------------------------------------------------------------------------------------------------
# Stream update


def test_stream_update_rules(pair):
    name = uniq("U")
    base = {"name": name, "subjects": [f"{name}.>"], "deny_delete": True, "allow_msg_ttl": True}
    pair.same_stream(name, base)

    def upd(**changes):
        pair.same_stream(name, {**base, **changes}, op="UPDATE")

    upd(storage="memory")
    upd(retention="workqueue")
    upd(retention="interest")
    upd(retention="limits")
    upd(deny_delete=False)
    upd(allow_msg_ttl=False)
    upd(allow_msg_counter=True)
    upd(persist_mode="async")
    upd(num_replicas=3)
    upd(mirror={"name": "BASE"}, subjects=None)
    upd(discard_new_per_subject=True)
    upd(max_age=10 * SEC, max_msgs=100, description="changed")
    upd(subjects=["base.x"])  # overlaps another stream
    upd(name="OTHER")
    upd(max_age=50 * MS)
    upd(subjects=[f"{name}.a", f"{name}.b"])
    upd(allow_msg_schedules=True)
    upd(allow_msg_schedules=False)
    upd(sealed=True)
    upd(sealed=False)
    pair.same_stream(uniq("NOPE"), {"name": "x"}, op="UPDATE")
    missing = uniq("NOPE")
    pair.same_stream(missing, {"name": missing}, op="UPDATE")
    pair.same_stream(missing, {"name": missing, "num_replicas": 3}, op="UPDATE")


def test_stream_update_mirror(pair):
    name = uniq("UM")
    pair.same_stream(name, {"name": name, "mirror": {"name": "BASE"}})
    pair.same_stream(name, {"name": name, "mirror": {"name": "BASE", "opt_start_seq": 2}}, op="UPDATE")
    pair.same_stream(name, {"name": name, "mirror": {"name": "BASE"}, "max_msgs": 5}, op="UPDATE")
    pair.same_stream(name, {"name": name}, op="UPDATE")  # promote the mirror


def test_check_stream_update_consumer_limits():
    old = SC.normalize_stream_config({"name": "S"})
    new = SC.normalize_stream_config({"name": "S", "consumer_limits": {"max_ack_pending": 10}})
    cc = CC.normalize_consumer_config(old, {"durable_name": "d", "ack_policy": "explicit"})
    with pytest.raises(ApiError) as ei:
        SC.check_stream_update(old, new, consumers=[("d", cc)])
    assert ei.value.to_dict() == {"code": 500, "err_code": 10069,
                                  "description": "change to limits violates consumers: d"}


# ---------------------------------------------------------------------------------------------------
# Consumers


@pytest.fixture(scope="module")
def streams(pair):
    out = {}
    for key, extra in (("lim", {}), ("wq", {"retention": "workqueue"}), ("int", {"retention": "interest"}),
                       ("cl", {"consumer_limits": {"max_ack_pending": 50, "inactive_threshold": 10 * SEC}}),
                       ("one", {"max_consumers": 1})):
        name = uniq("CS")
        pair.same_stream(name, {"name": name, "subjects": [f"{name}.>"], **extra})
        out[key] = name
    return out


CONSUMER_CASES = [
    # (stream key, subject tail after CONSUMER. with {s} and {c}, config)
    ("lim", "CREATE.{s}", {}),
    ("lim", "CREATE.{s}", {"durable_name": "x"}),
    ("lim", "CREATE.{s}.{c}", {"ack_policy": "explicit"}),
    ("lim", "CREATE.{s}.{c}", {"durable_name": "{c}", "ack_policy": "explicit"}),
    ("lim", "CREATE.{s}.{c}", {"durable_name": "other"}),
    ("lim", "CREATE.{s}.{c}", {"durable_name": "{c}", "ack_policy": "all", "max_ack_pending": -5}),
    ("lim", "CREATE.{s}.{c}.{s}.a", {"filter_subject": "{s}.a"}),
    ("lim", "CREATE.{s}.{c}.{s}.a", {"filter_subject": "{s}.b"}),
    ("lim", "CREATE.{s}.{c}.{s}.a", {"filter_subjects": ["{s}.a"]}),
    ("lim", "DURABLE.CREATE.{s}.{c}", {"durable_name": "{c}", "ack_policy": "explicit"}),
    ("lim", "DURABLE.CREATE.{s}.{c}", {"ack_policy": "explicit"}),
    ("lim", "DURABLE.CREATE.{s}.{c}", {"durable_name": "zz"}),
    ("lim", "CREATE.{s}.{c}", {"name": "{c}", "durable_name": "{c}", "deliver_subject": "dlv.{c}"}),
    ("lim", "CREATE.{s}.{c}", {"deliver_subject": "dlv.{c}", "max_waiting": 5}),
    ("lim", "CREATE.{s}.{c}", {"deliver_subject": "dlv.{c}", "idle_heartbeat": 50 * MS}),
    ("lim", "CREATE.{s}.{c}", {"deliver_subject": "dlv.{c}", "idle_heartbeat": 5 * SEC, "flow_control": True}),
    ("lim", "CREATE.{s}.{c}", {"deliver_subject": "dlv.{c}", "flow_control": True}),
    ("lim", "CREATE.{s}.{c}", {"deliver_subject": "dlv.{c}", "max_ack_pending": 10}),
    ("lim", "CREATE.{s}.{c}", {"deliver_subject": "dlv.*"}),
    ("lim", "CREATE.{s}.{c}", {"deliver_subject": "dlv..x"}),
    ("lim", "CREATE.{s}.{c}", {"deliver_subject": "{s}.x"}),
    ("lim", "CREATE.{s}.{c}", {"deliver_subject": "dlv.{c}", "rate_limit_bps": 1000, "headers_only": True,
                               "deliver_group": "q", "sample_freq": "50%", "ack_policy": "explicit"}),
    ("lim", "CREATE.{s}.{c}", {"rate_limit_bps": 1000}),
    ("lim", "CREATE.{s}.{c}", {"idle_heartbeat": SEC}),
    ("lim", "CREATE.{s}.{c}", {"flow_control": True}),
    ("lim", "CREATE.{s}.{c}", {"max_batch": -1, "max_bytes": -1, "max_expires": -1, "max_waiting": -1}),
    ("lim", "CREATE.{s}.{c}", {"max_expires": 500_000}),
    ("lim", "CREATE.{s}.{c}", {"max_batch": 10, "max_expires": 10 * SEC, "max_bytes": 1024, "max_waiting": 7}),
    ("lim", "CREATE.{s}.{c}", {"filter_subject": "{s}.a", "filter_subjects": ["{s}.b"]}),
    ("lim", "CREATE.{s}.{c}", {"filter_subjects": ["{s}.*", "{s}.a"]}),
    ("lim", "CREATE.{s}.{c}", {"filter_subjects": ["{s}.a", ""]}),
    ("lim", "CREATE.{s}.{c}", {"filter_subject": "{s}..a"}),
    ("lim", "CREATE.{s}.{c}", {"filter_subjects": ["{s}.a", "{s}.b"]}),
    ("lim", "CREATE.{s}.{c}", {"filter_subject": "elsewhere.x"}),
    ("lim", "CREATE.{s}.{c}", {"deliver_policy": "by_start_sequence"}),
    ("lim", "CREATE.{s}.{c}", {"deliver_policy": "by_start_sequence", "opt_start_seq": 5}),
    ("lim", "CREATE.{s}.{c}", {"deliver_policy": "all", "opt_start_seq": 5}),
    ("lim", "CREATE.{s}.{c}", {"deliver_policy": "new", "opt_start_time": "2024-01-01T00:00:00Z"}),
    ("lim", "CREATE.{s}.{c}", {"deliver_policy": "by_start_time"}),
    ("lim", "CREATE.{s}.{c}", {"deliver_policy": "by_start_time", "opt_start_time": "2024-01-01T00:00:00+02:00"}),
    ("lim", "CREATE.{s}.{c}", {"deliver_policy": "by_start_time", "opt_start_time": "2024-01-01T00:00:00Z",
                               "opt_start_seq": 3}),
    ("lim", "CREATE.{s}.{c}", {"deliver_policy": "last_per_subject"}),
    ("lim", "CREATE.{s}.{c}", {"deliver_policy": "last_per_subject", "filter_subject": "{s}.*"}),
    ("lim", "CREATE.{s}.{c}", {"deliver_policy": "last", "opt_start_seq": 1}),
    ("lim", "CREATE.{s}.{c}", {"deliver_policy": "undefined"}),
    ("lim", "CREATE.{s}.{c}", {"ack_policy": "explicit", "backoff": [SEC, 2 * SEC], "max_deliver": 1}),
    ("lim", "CREATE.{s}.{c}", {"ack_policy": "explicit", "backoff": [SEC, 2 * SEC], "max_deliver": 5}),
    ("lim", "CREATE.{s}.{c}", {"ack_policy": "explicit", "backoff": [SEC, -1]}),
    ("lim", "CREATE.{s}.{c}", {"ack_policy": "explicit", "ack_wait": -1}),
    ("lim", "CREATE.{s}.{c}", {"ack_policy": "explicit", "ack_wait": 5 * SEC, "max_deliver": -4}),
    ("lim", "CREATE.{s}.{c}", {"num_replicas": 2}),
    ("lim", "CREATE.{s}.{c}", {"num_replicas": -1}),
    ("lim", "CREATE.{s}.{c}", {"num_replicas": 1, "mem_storage": True}),
    ("lim", "CREATE.{s}", {"name": "a>"}),
    ("lim", "DURABLE.CREATE.{s}.a>", {"durable_name": "a>"}),
    ("lim", "CREATE.{s}.a\\b", {}),
    ("lim", "CREATE.{s}.{c}", {"description": "x" * 4097}),
    ("lim", "CREATE.{s}.{c}", {"metadata": {"k": "v" * (128 * 1024)}}),
    ("lim", "CREATE.{s}.{c}", {"metadata": {"z": "1", "a": "2"}}),
    ("lim", "CREATE.{s}.{c}", {"priority_policy": "pinned_client"}),
    ("lim", "CREATE.{s}.{c}", {"priority_policy": "pinned_client", "priority_groups": ["g1"]}),
    ("lim", "CREATE.{s}.{c}", {"priority_policy": "overflow", "priority_groups": ["bad group!"]}),
    ("lim", "CREATE.{s}.{c}", {"priority_policy": "overflow", "priority_groups": [""]}),
    ("lim", "CREATE.{s}.{c}", {"priority_groups": ["g"]}),
    ("lim", "CREATE.{s}.{c}", {"priority_timeout": SEC}),
    ("lim", "CREATE.{s}.{c}", {"priority_policy": "prioritized", "priority_groups": ["a"],
                               "deliver_subject": "dlv.{c}"}),
    ("lim", "CREATE.{s}.{c}", {"priority_policy": "bogus"}),
    ("lim", "CREATE.{s}.{c}", {"sample_freq": "abc"}),
    ("lim", "CREATE.{s}.{c}", {"sample_freq": "-5%"}),
    ("lim", "CREATE.{s}.{c}", {"direct": True}),
    ("lim", "CREATE.{s}.{c}", {"ack_policy": "flow_control"}),
    ("lim", "CREATE.{s}.{c}", {"ack_policy": "flow_control", "deliver_subject": "dlv.{c}"}),
    ("lim", "CREATE.{s}.{c}", {"ack_policy": "nope"}),
    ("lim", "CREATE.{s}.{c}", {"replay_policy": "original", "pause_until": "2099-01-01T00:00:00+01:00"}),
    ("lim", "CREATE.{s}.{c}", {"inactive_threshold": 3 * SEC}),
    ("lim", "CREATE.{s}.{c}", {"durable_name": "{c}", "inactive_threshold": 3 * SEC}),
    ("wq", "CREATE.{s}.{c}", {}),
    ("wq", "CREATE.{s}.{c}", {"deliver_subject": "dlv.{c}"}),
    ("wq", "CREATE.{s}.{c}", {"ack_policy": "explicit", "deliver_policy": "last"}),
    ("wq", "CREATE.{s}.{c}", {"ack_policy": "explicit", "num_replicas": 1}),
    ("wq", "CREATE.{s}.{c}", {"ack_policy": "explicit"}),
    ("wq", "CREATE.{s}.{c}", {"ack_policy": "explicit", "filter_subject": "{s}.a"}),
    ("int", "CREATE.{s}.{c}", {"ack_policy": "explicit"}),
    ("cl", "CREATE.{s}.{c}", {"ack_policy": "explicit"}),
    ("cl", "CREATE.{s}.{c}", {"ack_policy": "explicit", "max_ack_pending": 60}),
    ("cl", "CREATE.{s}.{c}", {"ack_policy": "explicit", "inactive_threshold": 20 * SEC}),
    ("cl", "CREATE.{s}.{c}", {"durable_name": "{c}", "ack_policy": "explicit", "pedantic": True}),
    ("one", "CREATE.{s}.{c}", {}),
    ("one", "CREATE.{s}.{c}", {}),
]


@pytest.mark.parametrize("skey,tail,cfg", CONSUMER_CASES)
def test_consumer_create_like_nats_server(pair, streams, skey, tail, cfg):
    s = streams[skey]
    c = uniq("c")
    cfg = dict(cfg)
    pedantic = cfg.pop("pedantic", False)
    cfg = json.loads(json.dumps(cfg).replace("{s}", s).replace("{c}", c))
    body = {"stream_name": s, "config": cfg}
    if pedantic:
        body["pedantic"] = True
    pair.same_consumer(tail.replace("{s}", s).replace("{c}", c), body)


def test_consumer_stream_mismatch_and_missing(pair, streams):
    s = streams["lim"]
    pair.same_consumer(f"CREATE.{s}.x1", {"stream_name": "other", "config": {}})
    pair.same_consumer("CREATE.NOSUCH.x1", {"stream_name": "NOSUCH", "config": {}})
    pair.same_consumer(f"CREATE.{s}.x2", '{"stream_name":"%s","config":{"max_deliver":"x"}}' % s)
    pair.same_consumer(f"CREATE.{s}.x3", '{"stream_name":"%s","config":{},"action":"bogus"}' % s)
    pair.same_consumer(f"CREATE.{s}.x4", '{"stream_name":"%s","config":{"backoff":["1s"]}}' % s)


def test_consumer_actions_and_updates(pair, streams):
    s = streams["lim"]
    c = uniq("u")
    base = {"durable_name": c, "ack_policy": "explicit", "max_ack_pending": 20}
    pair.same_consumer(f"CREATE.{s}.{c}", {"stream_name": s, "config": base, "action": "update"})
    pair.same_consumer(f"CREATE.{s}.{c}", {"stream_name": s, "config": base, "action": "create"})
    pair.same_consumer(f"CREATE.{s}.{c}", {"stream_name": s, "config": base, "action": "create"})
    pair.same_consumer(f"CREATE.{s}.{c}", {"stream_name": s, "config": {**base, "max_ack_pending": 30},
                                           "action": "create"})
    for change in ({"max_ack_pending": 30, "description": "d"}, {"deliver_policy": "new"},
                   {"ack_policy": "all"}, {"replay_policy": "original"}, {"max_waiting": 10},
                   {"deliver_subject": "dlv.u"}, {"opt_start_seq": 1, "deliver_policy": "by_start_sequence"},
                   {"mem_storage": True}, {"filter_subject": f"{s}.x"}, {"backoff": [SEC, SEC], "max_deliver": 1},
                   {"ack_wait": 3 * SEC}):
        pair.same_consumer(f"CREATE.{s}.{c}", {"stream_name": s, "config": {**base, **change},
                                               "action": "update"})
    p = uniq("p")
    push = {"durable_name": p, "deliver_subject": f"dlv.{p}"}
    pair.same_consumer(f"CREATE.{s}.{p}", {"stream_name": s, "config": push})
    pair.same_consumer(f"CREATE.{s}.{p}", {"stream_name": s, "config": {**push, "deliver_subject": ""}})
    pair.same_consumer(f"CREATE.{s}.{p}", {"stream_name": s, "config": {**push, "deliver_subject": "dlv.other"}})
    sub = pair.go._run(pair.go.nc.subscribe("dlv.other"))
    pair.go._run(pair.go.nc.flush())
    pair.subscribed.add("dlv.other")
    try:
        pair.same_consumer(f"CREATE.{s}.{p}", {"stream_name": s, "config": {**push, "deliver_subject": "dlv.third"}})
    finally:
        pair.go._run(sub.unsubscribe())
        pair.subscribed.discard("dlv.other")
    pair.same_consumer(f"CREATE.{s}.{p}", {"stream_name": s, "config": {**push, "idle_heartbeat": 5 * SEC}})


def test_workqueue_consumers(pair):
    s = uniq("WQ")
    pair.same_stream(s, {"name": s, "subjects": [f"{s}.>"], "retention": "workqueue"})
    pair.same_consumer(f"CREATE.{s}.a", {"stream_name": s, "config": {"ack_policy": "explicit",
                                                                      "filter_subject": f"{s}.a.>"}})
    pair.same_consumer(f"CREATE.{s}.b", {"stream_name": s, "config": {"ack_policy": "explicit"}})
    pair.same_consumer(f"CREATE.{s}.c", {"stream_name": s, "config": {"ack_policy": "explicit",
                                                                      "filter_subject": f"{s}.*.x"}})
    pair.same_consumer(f"CREATE.{s}.d", {"stream_name": s, "config": {"ack_policy": "explicit",
                                                                      "filter_subjects": [f"{s}.b", f"{s}.c"]}})
    pair.same_consumer(f"CREATE.{s}.a", {"stream_name": s, "config": {"ack_policy": "explicit",
                                                                      "filter_subject": f"{s}.b"}})


def test_ephemeral_named_create_twice(pair, streams):
    s = streams["lim"]
    c = uniq("e")
    pair.same_consumer(f"CREATE.{s}.{c}", {"stream_name": s, "config": {}, "action": "create"})
    pair.same_consumer(f"CREATE.{s}.{c}", {"stream_name": s, "config": {}, "action": "create"})
    pair.same_consumer(f"CREATE.{s}.{c}", {"stream_name": s, "config": {}})


# ---------------------------------------------------------------------------------------------------
# Server and account limits

LIMITS_CONF = """
listen: 127.0.0.1:{port}
jetstream { store_dir: "{store}", limits { max_request_batch: 50, max_ack_pending: 100, duplicate_window: "1m" } }
accounts {
  A {
    users [{user: a, password: a}]
    jetstream {
      max_mem: 10MB, max_file: 50MB, max_streams: 5, max_consumers: 3, max_bytes_required: true,
      memory_max_stream_bytes: 2MB, store_max_stream_bytes: 20MB, max_ack_pending: 80
    }
  }
}
"""


def test_limits_like_nats_server():
    go = GoJetStream(LIMITS_CONF, user="a", password="a")
    try:
        limits = go.request(f"{S}INFO")["limits"]
        acct = apijson.from_dict(limits, C.AccountLimits)
        srv = C.ServerLimits(max_request_batch=50, max_ack_pending=100, max_duplicate_window=60 * SEC)
        p = Pair(go, srv, acct)
        mb = 1024 * 1024
        p.same_stream("L0", {"name": "L0"})
        p.same_stream("L0", {"name": "L0", "max_bytes": 30 * mb})
        p.same_stream("L0", {"name": "L0", "max_bytes": 20 * mb, "max_consumers": 5})
        p.same_stream("L0", {"name": "L0", "max_bytes": mb, "duplicate_window": 120 * SEC})
        p.same_stream("L0", {"name": "L0", "max_bytes": mb, "pedantic": True})
        p.same_stream("L0", {"name": "L0", "max_bytes": 3 * mb, "storage": "memory"})
        p.same_stream("L1", {"name": "L1", "max_bytes": 20 * mb, "max_consumers": 3})
        p.same_stream("L2", {"name": "L2", "max_bytes": 20 * mb})
        p.same_stream("L3", {"name": "L3", "max_bytes": 20 * mb})
        p.same_stream("L3", {"name": "L3", "max_bytes": 5 * mb, "max_age": 30 * SEC})
        p.same_stream("L4", {"name": "L4", "max_bytes": mb, "storage": "memory"})
        p.same_stream("L5", {"name": "L5", "max_bytes": mb, "storage": "memory"})
        p.same_stream("L6", {"name": "L6", "max_bytes": mb, "storage": "memory"})
        p.same_stream("L1", {"name": "L1", "max_bytes": 20 * mb, "max_consumers": 3})
        for cfg in ({"durable_name": "c1", "ack_policy": "explicit"},
                    {"durable_name": "c2", "ack_policy": "explicit", "max_ack_pending": 90},
                    {"durable_name": "c2", "ack_policy": "explicit", "max_ack_pending": 150},
                    {"durable_name": "c2", "max_batch": 60},
                    {"durable_name": "c2", "deliver_subject": "dlv.c2", "ack_policy": "all"},
                    {"durable_name": "c3", "ack_policy": "explicit", "pedantic": True},
                    {"durable_name": "c3", "ack_policy": "none"},
                    {"durable_name": "c4", "ack_policy": "none"}):
            pedantic = cfg.pop("pedantic", False)
            name = cfg["durable_name"]
            body = {"stream_name": "L1", "config": cfg, **({"pedantic": True} if pedantic else {})}
            p.same_consumer(f"CREATE.L1.{name}", body)
    finally:
        go.close()


# ---------------------------------------------------------------------------------------------------
# nats-py inputs round trip


def test_nats_py_stream_configs_round_trip(pair):
    from nats.js import api

    for kw in (dict(subjects=["{n}.a"], max_age=1.5, description="d"),
               dict(subjects=["{n}.b"], retention=api.RetentionPolicy.WORK_QUEUE, storage=api.StorageType.MEMORY,
                    max_msgs=10, discard=api.DiscardPolicy.NEW, duplicate_window=10),
               dict(mirror=api.StreamSource(name="BASE", opt_start_seq=2, filter_subject="base.a")),
               dict(sources=[api.StreamSource(name="BASE", subject_transforms=[
                   api.SubjectTransform(src="base.>", dest="copy.>")])]),
               dict(subjects=["{n}.c"], republish=api.RePublish(src="{n}.c", dest="rp.{n}", headers_only=True),
                    placement=api.Placement(cluster="x"), metadata={"k": "v"}, allow_direct=True)):
        name = uniq("P")
        cfg = api.StreamConfig(name=name, **kw).as_dict()
        body = json.loads(json.dumps(cfg, default=apijson._json_default).replace("{n}", name))
        got = pair.same_stream(name, body)
        ours = apijson.from_dict(body, C.StreamConfigRequest)
        back = json.loads(apijson.go_json(ours))
        for k, v in body.items():
            if v not in (None, False, 0, "", [], {}):
                assert back[k] == v, k
        assert "config" in got


def test_nats_py_consumer_configs_round_trip(pair, streams):
    from nats.js import api

    s = streams["lim"]
    for kw in (dict(ack_policy=api.AckPolicy.EXPLICIT, ack_wait=5, max_deliver=3, backoff=[1, 2]),
               dict(deliver_subject="dlv.np", idle_heartbeat=2, flow_control=True),
               dict(ack_policy=api.AckPolicy.ALL, filter_subjects=[f"{s}.a", f"{s}.b"], max_waiting=5,
                    inactive_threshold=30, metadata={"x": "y"}, num_replicas=1),
               dict(deliver_policy=api.DeliverPolicy.BY_START_TIME, opt_start_time="2024-05-06T07:08:09.1Z")):
        name = uniq("np")
        cfg = api.ConsumerConfig(durable_name=name, **kw).as_dict()
        body = {"stream_name": s, "config": cfg}
        pair.same_consumer(f"CREATE.{s}.{name}", body)
        ours = apijson.from_dict(cfg, C.ConsumerConfig)
        back = json.loads(apijson.go_json(ours))
        for k, v in json.loads(json.dumps(cfg, default=apijson._json_default)).items():
            if v not in (None, False, 0, "", [], {}):
                assert back[k] == v, k


# ---------------------------------------------------------------------------------------------------
# Unit checks of the helpers


def test_encoded_bytes_like_nats_server(go):
    # the escaping in a stream configuration as nats-server writes it, byte for byte: HTML characters,
    # control characters, U+2028/9, non-ASCII text, in a string field and in map values
    text = "<a&b>\b\f\t\n\x01\x1f\x7f\u2028\u2029é\"\\/"
    body = {"name": "ENC", "subjects": ["enc.x"], "description": text, "metadata": {"z": text, "a": "&"}}
    theirs = go._run(go.nc.request(S + "STREAM.CREATE.ENC", json.dumps(body).encode(), timeout=5)).data
    go.request(S + "STREAM.DELETE.ENC")
    ours = apijson.go_json(C.StreamConfig(description=text, metadata={"z": text, "a": "&"}))

    def field(doc: bytes, name: bytes) -> bytes:
        m = re.search(rb'"' + name + rb'":"(?:[^"\\]|\\.)*"', doc)
        assert m, (name, doc)
        return m.group(0)

    for name in (b"description", b"z", b"a"):
        assert field(ours, name) == field(theirs, name)


def test_encoding_rules():
    cfg = C.StreamConfig(name="a<b>&c", description="\b\f\u2028")
    out = apijson.go_json(cfg)
    assert b"a\\u003cb\\u003e\\u0026c" in out
    assert b'"description":"\\b\\f\\u2028"' in out  # Go 1.22+ (nats-server 2.15) writes \\b and \\f
    assert b'"metadata"' not in out and b'"subjects"' not in out
    cc = C.ConsumerConfig(priority_policy="none", metadata={"b": "1", "a": "2"})
    assert apijson.go_json(cc).endswith(b'"num_replicas":0,"metadata":{"a":"2","b":"1"}}')


def test_transform_validation():
    assert validate_mapping("a.*", "b.$1") is None
    assert validate_mapping("a.*", "b.{{wildcard(1)}}") is None
    assert validate_mapping("a.*", "b.$2") == "invalid mapping destination: wildcard index out of range in $2: [2]"
    assert validate_mapping("a.*", "b.{{nope()}}") == "invalid mapping destination: unknown function in {{nope()}}"
    assert validate_mapping("a.*", "b..c") == "invalid mapping destination: invalid transform"
    assert validate_mapping("a.>", "b.*") == "invalid subject"
    assert check_subject_transform("", "") is None


def test_error_catalog_names_used_exist():
    import pathlib
    import re
    src = "".join(p.read_text() for p in pathlib.Path(C.__file__).parent.rglob("*.py"))
    for name in set(re.findall(r"jserr\.([A-Z][A-Z0-9_]+)\(", src)):
        assert name in jserr.CATALOG, name


# ---------------------------------------------------------------------------------------------------
# Seeded random configurations (combinations the tables above do not list), against nats-server

RANDOM_STREAM_FIELDS = {
    "subjects": [None, [], ["{n}.a"], ["{n}.a", "{n}.*"], ["{n}..x"], [">"], ["$JS.API.x"], ["{n}.>", "{n}.b.c"],
                 ["base.q"]],
    "retention": ["limits", "interest", "workqueue"],
    "storage": ["file", "memory", None],
    "max_age": [0, 50 * MS, SEC, -1, 3600 * SEC],
    "duplicate_window": [0, 50 * MS, 2 * SEC, 7200 * SEC, -3],
    "max_msgs": [0, -1, -5, 10],
    "max_msgs_per_subject": [0, 1, -2],
    "max_msg_size": [0, 100, -9],
    "discard": ["old", "new"],
    "discard_new_per_subject": [False, True],
    "num_replicas": [0, 1, 3, 7, -1],
    "no_ack": [False, True],
    "deny_purge": [False, True], "deny_delete": [False, True], "allow_rollup_hdrs": [False, True],
    "sealed": [False, False, True],
    "mirror_direct": [False, False, True],
    "allow_msg_ttl": [False, True],
    "subject_delete_marker_ttl": [0, 0, 500 * MS, 2 * SEC, -1],
    "allow_msg_counter": [False, False, True],
    "allow_msg_schedules": [False, False, True],
    "allow_atomic": [False, True], "allow_batched": [False, True],
    "persist_mode": ["default", "async"],
    "first_seq": [0, 5],
    "mirror": [None, None, {"name": "BASE"}, {"name": "a.b"},
               {"name": "BASE", "filter_subject": "base.a", "subject_transforms": [{"src": "base.b", "dest": "x"}]},
               {"name": "X", "external": {"api": "$JS.API"}}],
    "sources": [None, None, [{"name": "BASE"}], [{"name": "BASE"}, {"name": "BASE"}], [{"name": "a*"}],
                [{"name": "BASE", "subject_transforms": [{"src": "base.*", "dest": "x.$2"}]}]],
    "republish": [None, None, {"dest": "rp.{n}.>"}, {"src": ">", "dest": "{n}.a"}],
    "subject_transform": [None, None, {"src": "{n}.*", "dest": "{n}.{{nope()}}"}, {"src": "{n}.a", "dest": "t.{n}"}],
    "placement": [None, {}, {"preferred": "x"}],
    "pedantic": [False, False, True],
    "max_consumers": [0, -3],
    "consumer_limits": [{}, {"max_ack_pending": 5}],
    "description": ["", "x"],
}

RANDOM_CONSUMER_FIELDS = {
    "durable_name": [None, "{c}", "other", "a>"],
    "name": [None, "{c}", "zz"],
    "deliver_policy": ["all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject"],
    "opt_start_seq": [0, 5],
    "opt_start_time": [None, "2024-01-01T00:00:00Z"],
    "ack_policy": ["none", "all", "explicit", "explicit", "flow_control"],
    "ack_wait": [0, -1, 5 * SEC],
    "max_deliver": [0, -1, 1, 5, -3],
    "backoff": [None, [SEC, 2 * SEC], [SEC, -1]],
    "filter_subject": [None, "{s}.a", "{s}..x", "other.x"],
    "filter_subjects": [None, ["{s}.a", "{s}.b"], ["{s}.*", "{s}.a"], [""]],
    "replay_policy": ["instant", "original"],
    "rate_limit_bps": [0, 1000],
    "sample_freq": [None, "50%", "x"],
    "max_waiting": [0, 5, -1],
    "max_ack_pending": [0, -1, 10, -5, 2000],
    "flow_control": [False, True],
    "headers_only": [False, True],
    "max_batch": [0, 5, -1],
    "max_expires": [0, 500000, 5 * SEC],
    "max_bytes": [0, 1024],
    "deliver_subject": [None, None, "dlv.{c}", "dlv.*", "{s}.x"],
    "deliver_group": [None, "q"],
    "idle_heartbeat": [0, 50 * MS, SEC, 5 * SEC],
    "inactive_threshold": [0, 3 * SEC, 20 * SEC, -1],
    "num_replicas": [0, 1, 2, -1],
    "mem_storage": [False, True],
    "direct": [False, True],
    "metadata": [None, {"a": "b"}],
    "priority_policy": ["none", "overflow", "pinned_client"],
    "priority_groups": [None, ["g"], ["bad!"], [""]],
    "priority_timeout": [0, SEC],
    "description": [None, "d"],
}


def _random_fields(rnd, table: dict, lo: int, hi: int) -> dict:
    out = {}
    for k in rnd.sample(list(table), rnd.randint(lo, hi)):
        v = rnd.choice(table[k])
        if v is not None:
            out[k] = v
    return out


def test_random_stream_creates_and_updates(pair):
    import random
    rnd = random.Random(20240601)
    names = [uniq("RS") for _ in range(25)]
    for i in range(300):
        n = names[i % len(names)] if i >= 100 else uniq("RS")
        body = json.loads(json.dumps({"name": n, **_random_fields(rnd, RANDOM_STREAM_FIELDS, 1, 6)})
                          .replace("{n}", n))
        op = "CREATE" if i < 100 else rnd.choice(["CREATE", "UPDATE", "UPDATE"])
        pair.same_stream(n, body, op)


def test_random_consumers(pair, streams):
    import random
    rnd = random.Random(424242)
    names = [uniq("rc") for _ in range(30)]
    for i in range(300):
        c = names[i % len(names)]
        s = streams[rnd.choice(["lim", "lim", "wq", "int", "cl"])]
        cfg = json.loads(json.dumps(_random_fields(rnd, RANDOM_CONSUMER_FIELDS, 0, 5))
                         .replace("{s}", s).replace("{c}", c))
        body = {"stream_name": s, "config": cfg}
        action = rnd.choice(["", "", "create", "update"])
        if action:
            body["action"] = action
        if rnd.random() < 0.1:
            body["pedantic"] = True
        tail = rnd.choice([f"CREATE.{s}.{c}", f"CREATE.{s}.{c}", f"CREATE.{s}", f"DURABLE.CREATE.{s}.{c}",
                           f"CREATE.{s}.{c}.{s}.a"])
        pair.same_consumer(tail, body)
