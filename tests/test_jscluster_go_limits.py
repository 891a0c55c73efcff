"""A Rillet meta leader of a Go cluster checks the account's JetStream limits before it proposes a stream, as
nats-server's meta leader does (jsClusteredStreamLimitsCheck, rillet.jetstream.cluster.golimits): on a create,
and on an update that scales a stream up. Counted from the assignments: the other streams against
``max_streams``, and the bytes every stream reserves (``max_bytes`` times its replicas) against ``max_file`` /
``max_mem``. Unit tests against the meta leader's API with a fake member (test_jscluster_gometa_lead_place's)."""
from __future__ import annotations

import shutil

import pytest

from rillet.jetstream.cluster import gowire as ge
from test_jscluster_gometa_lead_place import _api, _apply, _create, _docs, _request


def _limited(**limits):
    api, m, proposed = _api()
    m.server.opts.accounts = {"A": {"jetstream": limits}}
    return api, m, proposed


def _refused(m, proposed, verb, name, body):
    m.ic.sent.clear()
    _request(m, f"$JS.API.STREAM.{verb}.*", f"$JS.API.STREAM.{verb}.{name}", dict(body, name=name))
    assert not proposed, _docs(proposed)
    (_reply, doc), = m.ic.sent
    return doc["error"]["err_code"], doc["error"]["description"]


def test_creates_are_refused_past_the_accounts_streams_and_reservations():
    _, m, proposed = _limited(max_streams=2, max_file=10_000, max_mem=500, max_consumers=3)
    _create(m, proposed, "S1", {"max_bytes": 1000})
    # R3 of 3001 bytes: 9003 over the 1000 S1 reserves (9000 would fit exactly)
    assert _refused(m, proposed, "CREATE", "S2", {"num_replicas": 3, "max_bytes": 3001}) == \
        (10047, "insufficient storage resources available")
    # memory is counted apart: 2 x 300 > 500
    assert _refused(m, proposed, "CREATE", "M", {"storage": "memory", "num_replicas": 2, "max_bytes": 300}) == \
        (10028, "insufficient memory resources available")
    # a stream's max_consumers over the account's
    assert _refused(m, proposed, "CREATE", "C", {"max_consumers": 5})[0] == 10026
    _create(m, proposed, "S2", {"num_replicas": 2, "max_bytes": 3000})  # (6000 + 1000: fits)
    assert _refused(m, proposed, "CREATE", "S3", {}) == (10027, "maximum number of streams reached")
    # the same create again: the stream itself is not counted, its leader answers
    m.ic.sent.clear()
    _request(m, "$JS.API.STREAM.CREATE.*", "$JS.API.STREAM.CREATE.S1", {"name": "S1", "max_bytes": 1000})
    assert proposed and not m.ic.sent
    proposed.clear()


def test_a_scale_up_is_refused_past_the_accounts_reservations_a_scale_down_never():
    _, m, proposed = _limited(max_file=10_000)
    _create(m, proposed, "S1", {"max_bytes": 1000})
    _create(m, proposed, "S2", {"num_replicas": 2, "max_bytes": 3000})
    # S1 R1 -> R3: 3000 over S2's 6000: fits, proposed as a desired state
    _request(m, "$JS.API.STREAM.UPDATE.*", "$JS.API.STREAM.UPDATE.S1", {"name": "S1", "num_replicas": 3,
                                                                      "max_bytes": 1000})
    up = _docs(proposed)[0]
    assert up.op == ge.OP_UPDATE_STREAM and len(up.doc["group"]["desired"]["peers"]) == 3
    _apply(m, proposed)
    # S2 R2 -> R3: 9000 over S1's 3000 now: refused before any placement
    assert _refused(m, proposed, "UPDATE", "S2", {"num_replicas": 3, "max_bytes": 3000}) == \
        (10047, "insufficient storage resources available")
    # scaling down, or an update that does not scale, is not checked against the reservations
    m.ic.sent.clear()
    _request(m, "$JS.API.STREAM.UPDATE.*", "$JS.API.STREAM.UPDATE.S2", {"name": "S2", "num_replicas": 1,
                                                                      "max_bytes": 3000})
    assert _docs(proposed)[0].doc["group"]["desired"]["scale_down"] is True and not m.ic.sent


def test_no_limits_no_check():
    _, m, proposed = _api()  # (the account's jetstream block without limits)
    for i in range(5):
        _create(m, proposed, f"S{i}", {"num_replicas": 3, "max_bytes": 10**12})


# -- the same requests against nats-server: the expectations above are its answers -------------------------------

_DRILL = [("CREATE", "S1", {"max_bytes": 1000}, None),
          ("CREATE", "S2", {"num_replicas": 3, "max_bytes": 3001}, 10047),
          ("CREATE", "M", {"storage": "memory", "num_replicas": 2, "max_bytes": 300}, 10028),
          ("CREATE", "C", {"max_consumers": 5}, 10026),
          ("CREATE", "S2", {"num_replicas": 2, "max_bytes": 3000}, None),
          ("CREATE", "S3", {}, 10027),
          ("CREATE", "S1", {"max_bytes": 1000}, None),
          ("UPDATE", "S1", {"num_replicas": 3, "max_bytes": 1000}, None),
          ("UPDATE", "S2", {"num_replicas": 3, "max_bytes": 3000}, 10047),
          ("UPDATE", "S2", {"num_replicas": 1, "max_bytes": 3000}, None)]


def test_the_drill_against_the_rillet_meta_leader():
    _, m, proposed = _limited(max_streams=2, max_file=10_000, max_mem=500, max_consumers=3)
    for verb, name, body, code in _DRILL:
        m.ic.sent.clear()
        _request(m, f"$JS.API.STREAM.{verb}.*", f"$JS.API.STREAM.{verb}.{name}", dict(body, name=name))
        if code is None:
            assert proposed and not m.ic.sent, (verb, name, m.ic.sent)
            _apply(m, proposed)
        else:
            assert not proposed and [d["error"]["err_code"] for _r, d in m.ic.sent] == [code], (verb, name)


@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")
async def test_the_drill_against_nats_server(tmp_path):
    """Three nats-server processes, the account with the same limits: the same answers, request by request."""
    import json
    import subprocess
    import nats
    from helpers import free_port
    from test_jscluster_gometa import CAP
    names = ("g0", "g1", "g2")
    cports, rports = {n: free_port() for n in names}, {n: free_port() for n in names}
    procs = []
    try:
        for n in names:
            routes = ", ".join(f"nats://127.0.0.1:{rports[o]}" for o in names if o != n)
            conf = tmp_path / f"{n}.conf"
            conf.write_text(f"""
server_name: {n}
listen: 127.0.0.1:{cports[n]}
jetstream {{ store_dir: "{tmp_path / ('store-' + n)}" }}
accounts {{
  SYS {{ users [{{user: sys, password: sys}}] }}
  A {{ jetstream: {{ max_streams: 2, max_file: 10000, max_mem: 500, max_consumers: 3 }}, users [{{user: a, password: a}}] }}
}}
system_account: SYS
cluster {{ name: C1, listen: 127.0.0.1:{rports[n]}, routes: [{routes}] }}
""")
            log = open(tmp_path / f"{n}.log", "wb")
            procs.append(subprocess.Popen(["nats-server", "-c", str(conf)], stdout=log, stderr=log))
        nc = await nats.connect(f"nats://a:a@127.0.0.1:{cports['g0']}", max_reconnect_attempts=-1)
        await CAP._until(lambda: CAP._js_ready(nc), 60, what="the Go meta leader")
        try:
            for verb, name, body, code in _DRILL:
                async def answer():
                    try:
                        r = await nc.request(f"$JS.API.STREAM.{verb}.{name}",
                                             json.dumps(dict(body, name=name, subjects=[name.lower()])).encode(),
                                             timeout=5)
                    except nats.errors.TimeoutError:
                        return None
                    d = json.loads(r.data)
                    return None if (d.get("error") or {}).get("code") == 503 else d
                d = await CAP._until(answer, 60, what=f"{verb} {name} answered")
                assert (d.get("error") or {}).get("err_code") == code, (verb, name, d)
                if verb == "UPDATE" and code is None:  # (the next request counts the updated assignment)
                    want = body["num_replicas"]

                    async def updated():
                        try:
                            si = await nc.jetstream(timeout=5).stream_info(name)
                        except (nats.errors.TimeoutError, nats.js.errors.APIError):
                            return False
                        return si.config.num_replicas == want
                    await CAP._until(updated, 60, what=f"{name} at R{want}")
        finally:
            await nc.close()
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)
