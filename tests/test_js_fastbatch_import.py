"""A fast batch (allow_batched, ``.$FI`` reply subjects) published in another account through a service import,
compared with nats-server: the stream sees a ``_R_.`` reply and reads the batch controls from the publisher's
own reply kept in the ``Nats-Request-Info`` client info; flow acks, gaps, errors and the final PubAck reach the
publisher through the import's response map (as nats-server 2.14+)."""
from __future__ import annotations

import json

from jsdiff import Raw, norm_json
from tests.difftarget import both

CONF = """
listen: 127.0.0.1:{port}
jetstream { store_dir: "{store}" }
accounts {
  A { jetstream: enabled, users: [{user: a, password: a}], exports: [{service: "fb.>"}] }
  B { users: [{user: b, password: b}], imports: [{service: {account: A, subject: "fb.>"}}] }
}
"""


async def _scenario(url: str) -> list:
    a = await Raw.open(url, user="a", **{"pass": "a"})
    b = await Raw.open(url, user="b", **{"pass": "b"})
    out: list = []
    try:
        ans = await a.api("$JS.API.STREAM.CREATE.FB", {"name": "FB", "subjects": ["fb.>"], "allow_batched": True})
        assert "error" not in ans, ans

        async def answers(seconds: float = 0.3) -> list:
            from helpers import parse_stream
            got = []
            for m in parse_stream(await b.rc.read_for(seconds)):
                if isinstance(m, bytes):
                    continue
                t = m.subject.split(".")
                got.append((".".join(t[2:-1]) if m.subject.endswith(".$FI") else m.subject,
                            norm_json(json.loads(m.payload))))
            return got

        # a batch of 5 (flow 2), one message missing in "ok" mode, then the commit
        for seq, op in ((1, 0), (2, 1), (4, 1), (5, 2)):
            b.rc.pub("fb.x", f"m{seq}", reply=f"_R.fb.B1.2.ok.{seq}.{op}.$FI")
        out.append(("ok batch", await answers()))
        # "fail" mode: a gap ends the batch with the PubAck of what was stored
        for seq, op in ((1, 0), (2, 1), (4, 1)):
            b.rc.pub("fb.x", f"n{seq}", reply=f"_R.fb.B2.2.fail.{seq}.{op}.$FI")
        out.append(("fail batch", await answers()))
        # refusals: an unknown batch, a bad pattern
        b.rc.pub("fb.x", "u", reply="_R.fb.B3.2.fail.3.1.$FI")
        b.rc.pub("fb.x", "v", reply="_R.fb.B4.2.maybe.1.0.$FI")
        out.append(("refusals", await answers()))
        info = await a.api("$JS.API.STREAM.INFO.FB")
        out.append(("stored", info["state"]["messages"], info["state"]["last_seq"]))
        m = await a.api("$JS.API.STREAM.MSG.GET.FB", {"seq": 1})
        import base64
        hdrs = base64.b64decode(m["message"].get("hdrs", "")).decode()
        ri = json.loads(hdrs.split("Nats-Request-Info: ")[1].split("\r\n")[0]) if "Nats-Request-Info" in hdrs else {}
        out.append(("stored client info", ri.get("acc"), ri.get("reply")))
    finally:
        await a.close()
        await b.close()
    return out


async def test_fast_batch_through_a_service_import_as_nats_server(tmp_path):
    conf = CONF.replace("{store}", str(tmp_path / "{kind}"))
    res = {}
    async with both(conf.replace("{kind}", "x")) as servers:
        for kind, srv in servers.items():
            res[kind] = await _scenario(srv.client_url)
    assert res["rillet"] == res["go"], (res["rillet"], res["go"])
    got = {o[0]: o[1:] for o in res["rillet"]}
    assert got["stored"] == (6, 6), got  # B1: 1, 2, 4, 5; B2: 1, 2
    assert got["stored client info"] == (None, None), got  # (not stored, as nats-server)
    assert any(a[1].get("batch") == "B1" for a in got["ok batch"][0]), got
