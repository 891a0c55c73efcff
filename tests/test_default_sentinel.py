"""``default_sentinel`` (operator mode): a client that presents no user JWT (or something that is not one) is taken as
the sentinel's user — a bearer token, so no signature — with its permissions; side by side with nats-server, and
the configuration errors nats-server gives."""
from __future__ import annotations

import pytest

from rillet.app.compose import build_server
from rillet.config.flags import parse_command_line
from tests.difftarget import both
from tests.helpers import RawClient
from tests.test_operator import Operator


async def _session(target, connect: dict) -> list[bytes]:
    c = await RawClient.open(target, connect=False)
    try:
        c.connect(**connect)
        c.send(b"SUB allowed.x 1\r\nSUB denied.x 2\r\nPUB allowed.x 2\r\nhi\r\nPING\r\n")
        data = await c.read_until(b"PONG\r\n", 5.0)
    except Exception as e:  # (closed after -ERR: what was read is the answer)
        data = c.buf + f"<{type(e).__name__}>".encode()
    finally:
        c.writer.close()
    out = [ln for ln in data.split(b"\r\n") if ln and not ln.startswith(b"INFO ")]
    return sorted(set(out))


@pytest.fixture(scope="module")
def sentinel_conf():
    op = Operator()
    akp, _, _ = op.account("A")
    _ukp, token = op.user(akp, name="sentinel", bearer_token=True,
                          pub={"allow": ["allowed.>"]}, sub={"allow": ["allowed.>"]})
    text = op.config(f'default_sentinel: "{token}"').replace("listen: 127.0.0.1:-1", 'listen: "127.0.0.1:{port}"')
    _ukp2, other = op.user(akp, name="other")
    return text, other


@pytest.mark.parametrize("connect", [{}, {"jwt": "not-a-jwt"}, {"user": "x", "pass": "y"}])
async def test_clients_without_a_user_jwt_get_the_sentinel(sentinel_conf, connect):
    text, _ = sentinel_conf
    async with both(text) as servers:
        got = {name: await _session(srv, {"verbose": False, **connect}) for name, srv in servers.items()}
    assert got["rillet"] == got["go"], got
    assert b"MSG allowed.x 1 2" in got["rillet"] and any(b"Permissions Violation" in ln for ln in got["rillet"])


async def test_a_real_user_jwt_is_not_replaced(sentinel_conf):
    text, other = sentinel_conf
    async with both(text) as servers:
        # a user JWT that is not a bearer token and comes without a signature: refused, not taken as the sentinel
        got = {name: await _session(srv, {"verbose": False, "jwt": other}) for name, srv in servers.items()}
    assert got["rillet"] == got["go"], got
    assert any(b"Authorization Violation" in ln for ln in got["rillet"]), got


@pytest.mark.parametrize("kind,msg", [("no_operator", "default sentinel requires operators and accounts"),
                                      ("bad", "default sentinel JWT not valid"),
                                      ("not_bearer", "default sentinel must be a bearer token")])
def test_configuration_errors(tmp_path, kind, msg):
    op = Operator()
    akp, _, _ = op.account("A")
    if kind == "no_operator":
        text = 'listen: 127.0.0.1:-1\ndefault_sentinel: "x"\n'
    else:
        token = "eyJ0eXAiOiJKV1QifQ.e30.bad" if kind == "bad" else op.user(akp)[1]
        text = op.config(f'default_sentinel: "{token}"')
    p = tmp_path / "s.conf"
    p.write_text(text)
    with pytest.raises(ValueError, match=msg):
        build_server(parse_command_line(["-c", str(p)]).options)
