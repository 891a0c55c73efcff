"""The "not yet" rows of the nats-server 2.11-2.15 feature table (docs/compatibility.md), checked by running Rillet: each
setting Rillet does not implement is refused at load with its file:line:col and the reason (never accepted and
ignored) while nats-server 2.15.1 accepts it (``nats-server -t``), and each 2.15 API Rillet does not serve has
no responder (a 503 status, as for any subject nobody answers)."""
from __future__ import annotations

import json
import subprocess

import pytest

from jsdiff import GO_BINARY
from tests.test_tls_options import pki  # noqa: F401  (pki: a module fixture)

# (release, setting, the refusal's words)
REFUSED = [
    ("2.11", "jetstream {\n  tpm { keys_file: x }\n}", '2:3: "tpm" is not supported'),
]


@pytest.mark.parametrize("release, text, words", REFUSED, ids=[f"{r[0]}-{i}" for i, r in enumerate(REFUSED)])
def test_setting_not_yet_refused_where_nats_server_accepts_it(tmp_path, pki, release, text, words):  # noqa: F811
    from rillet.config.errors import ConfigError
    from rillet.config.flags import parse_command_line
    p = tmp_path / "f.conf"
    cert, key = pki["server"]
    p.write_text(text.replace("{cert}", f'"{cert}"').replace("{key}", f'"{key}"') + "\n")
    with pytest.raises(ConfigError) as e:
        parse_command_line(["-c", str(p)])
    assert str(p) + ":" in str(e.value) and words in str(e.value), str(e.value)
    if GO_BINARY:
        go = subprocess.run([GO_BINARY, "-t", "-c", str(p)], capture_output=True, text=True, timeout=10)
        assert "is valid" in go.stdout + go.stderr, (go.stdout, go.stderr)


NOT_SERVED: list[str] = []
# the clustered ones a server without a cluster answers, as nats-server: 10010 (the moves and evacuations
# themselves: tests/test_jscluster_moves.py)
CLUSTER_REQUIRED = {"$JS.API.STREAM.PEER.EVACUATE.S": "stream_evacuate_peer_response",
                    "$JS.API.STREAM.CANCEL_MOVE.S": "stream_cancel_move_response"}


async def test_apis_not_yet_have_no_responder(tmp_path):
    import nats

    from helpers import serve
    from rillet.config.options import JetStreamOptions
    async with serve(jetstream=JetStreamOptions(enabled=True, store_dir=str(tmp_path))) as srv:
        nc = await nats.connect(srv.client_url)
        try:
            await nc.request("$JS.API.STREAM.CREATE.S", json.dumps({"name": "S", "subjects": ["s"]}).encode(),
                             timeout=3)
            for subj in NOT_SERVED:
                with pytest.raises(nats.errors.NoRespondersError):
                    await nc.request(subj, b"{}", timeout=2)
            for subj, typ in CLUSTER_REQUIRED.items():
                r = json.loads((await nc.request(subj, b'{"peer": "x"}', timeout=3)).data)
                assert r == {"type": "io.nats.jetstream.api.v1." + typ, "error": {
                    "code": 503, "err_code": 10010, "description": "JetStream clustering support required"}}, r
        finally:
            await nc.close()
