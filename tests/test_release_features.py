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
    ("2.14", "feature_flags {\n  js_raft_delete_range: false\n}",
     '2:3: feature flag "js_raft_delete_range: false" is not supported'),
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


# -- tpm (2.11): nats-server has TPM support on Windows only; elsewhere it parses the block and then does not
# start JetStream. Rillet (no TPM support anywhere) does the same, with the same words and exit status.
TPM_CASES = [
    ('keys_file: "k", encryption_password: "pw"', None, "TPM functionality is not supported on this platform"),
    ('keys_file: "k", encryption_password: "pw", cipher: "aes", srk_password: "s", pcr: 17', None,
     "TPM functionality is not supported on this platform"),
    ('keys_file: "k", encryption_password: "pw"', 'key: "abc"',
     "JetStream encryption key may not be used with TPM options"),
    ('encryption_password: "pw"', None, None),  # no keys_file: TPM is not used, JetStream starts
]


def _tpm_conf(tmp_path, body: str, extra: str | None) -> str:
    p = tmp_path / "tpm.conf"
    p.write_text(f"port: -1\njetstream {{\n  store_dir: \"{tmp_path / 'js'}\"\n"
                 f"{'  ' + extra + chr(10) if extra else ''}  tpm {{ {body} }}\n}}\n")
    return str(p)


def _run_briefly(cmd: list[str]) -> tuple[int | None, str]:
    """Run a server for up to 4 s: (its exit status, or None if it was still running; what it logged)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = p.communicate(timeout=4)
        return p.returncode, out
    except subprocess.TimeoutExpired:
        p.terminate()
        out, _ = p.communicate(timeout=10)
        return None, out


@pytest.mark.parametrize("body, extra, fatal", TPM_CASES, ids=[str(i) for i in range(len(TPM_CASES))])
def test_tpm_block_parsed_then_jetstream_refused_as_nats_server(tmp_path, body, extra, fatal):
    import sys
    conf = _tpm_conf(tmp_path, body, extra)
    runs = {"rillet": [sys.executable, "-m", "rillet.server", "-c", conf]}
    if GO_BINARY:
        runs["go"] = [GO_BINARY, "-c", conf]
    for kind, cmd in runs.items():
        rc, out = _run_briefly(cmd)
        if fatal:
            assert rc == 1 and f"[FTL] Can't start JetStream: {fatal}" in out, (kind, rc, out[-2000:])
        else:
            assert rc is None and "[FTL]" not in out, (kind, rc, out[-2000:])


@pytest.mark.parametrize("body, words", [
    ('keys_file: "k", bogus: 1', 'unknown field "bogus"'),
    ('keys_file: "k", cipher: "xx"', 'Unknown cipher type: "xx"'),
    ('keys_file: 5', "interface conversion: interface {} is int64, not string"),
    ('keys_file: "k", pcr: "a"', "interface conversion: interface {} is string, not int64"),
])
def test_tpm_block_bad_fields_refused_at_load(tmp_path, body, words):
    from rillet.config.errors import ConfigError
    from rillet.config.flags import parse_command_line
    conf = _tpm_conf(tmp_path, body, None)
    with pytest.raises(ConfigError) as e:
        parse_command_line(["-c", conf])
    assert conf + ":4:" in str(e.value) and words in str(e.value), str(e.value)
    if GO_BINARY:
        go = subprocess.run([GO_BINARY, "-t", "-c", conf], capture_output=True, text=True, timeout=10)
        assert words in go.stdout + go.stderr, (go.stdout, go.stderr)
