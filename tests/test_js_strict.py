"""The strict JetStream API (nats-server 2.12+: unknown fields in a request are an error, 10025) and
``jetstream { strict: false }`` (they are ignored), compared with nats-server for stream and consumer creates
and updates and other requests (stream info, names, list, purge, message get and delete: the zero fields Go adds
to their error answers); an idempotent stream create says did_create, as nats-server."""
from __future__ import annotations

import pytest

from jsdiff import Raw, ServerPair, run_both, same

CONF = 'listen: 127.0.0.1:-1\njetstream {\n  store_dir: "{store}"\n{extra}}\n'


@pytest.mark.parametrize("strict", [True, False])
async def test_unknown_request_fields_like_nats_server(strict):
    pair = ServerPair(CONF.replace("{extra}", "" if strict else "  strict: false\n"))
    try:
        async def scenario(kind: str, url: str) -> list:
            r = await Raw.open(url)
            out: list = []
            try:
                for label, subj, body in (
                        ("stream create", "$JS.API.STREAM.CREATE.X", {"name": "X", "subjects": ["x"], "bogus": 1}),
                        ("stream create", "$JS.API.STREAM.CREATE.X", {"name": "X", "subjects": ["x"]}),
                        ("stream update", "$JS.API.STREAM.UPDATE.X", {"name": "X", "subjects": ["x", "y"], "zz": []}),
                        ("consumer create", "$JS.API.CONSUMER.CREATE.X.D", {
                            "stream_name": "X", "config": {"durable_name": "D", "nope": 2}, "extra": True}),
                        ("consumer durable create", "$JS.API.CONSUMER.DURABLE.CREATE.X.E", {
                            "stream_name": "X", "config": {"durable_name": "E", "ack_policy": "explicit", "q": 1}}),
                        ("stream info", "$JS.API.STREAM.INFO.X", {"bogus": 1}),
                        ("msg get", "$JS.API.STREAM.MSG.GET.X", {"seq": 1, "bogus": 1}),
                        ("stream names", "$JS.API.STREAM.NAMES", {"offset": 0, "bogus": 1}),
                        ("purge", "$JS.API.STREAM.PURGE.X", {"bogus": 1})):
                    if label == "msg get":
                        await r.publish("x", "one")
                    ans = await r.api(subj, body)
                    out.append((label, ans.get("error"), sorted(k for k in ans if k not in (
                        "created", "ts", "cluster", "state", "config"))))
            finally:
                await r.close()
            return out

        res = same(await run_both(pair, scenario))
        errs = {label: e for label, e, _ in res if e}
        if strict:
            assert errs["stream update"]["err_code"] == 10025 and errs["consumer create"]["err_code"] == 10025
        else:
            assert "stream update" not in errs and "consumer durable create" not in errs, errs
    finally:
        pair.stop()
