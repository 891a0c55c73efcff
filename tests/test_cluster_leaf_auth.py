"""Leaf nodes with authentication that binds them to more than an account: operator mode (user JWTs in a
remote's ``credentials`` file, checked by the hub against its trusted operator and resolver) and leaf users
with permissions (applied by the hub, sent to the leaf in INFO ``import``/``export`` and enforced there).
Each case against Rillet and the Go nats-server in both roles; raw fake leafs check the error texts."""
from __future__ import annotations

import asyncio
import json
import tempfile
import time

import pytest

from rillet import jwt as J
from test_cluster_leaf import (GO_SERVER, Inbox, _both_ways, _go, _until, clients, hub_port, leaf_interest, leaf_ready,
                               needs_go, rillet)
from test_operator import Operator, creds


# ==== helpers =====================================================================================================

def op_conf(op: Operator, resolver: str = "resolver: MEMORY") -> str:
    """The operator-mode part of a server config (no listen line: the test helpers add theirs)."""
    lines = [f"operator: {op.jwt()}", resolver, f"system_account: {op.sys[1]}", "resolver_preload {"]
    lines += [f'  {pub}: "{token}"' for _kp, pub, token in op.accounts.values()]
    lines.append("}")
    return "\n".join(lines) + "\n"


class RawLeaf:
    """A fake leaf over a plain socket: reads the hub's INFO, sends a leaf CONNECT (signing the nonce when
    given a key pair), then whatever the test writes; ``until`` reads until a text arrives or EOF."""

    def __init__(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.r, self.w = r, w
        self.buf = b""
        self.info: dict = {}

    @classmethod
    async def open(cls, port: int, name: str = "fake", kp=None, token: str = "", **fields) -> "RawLeaf":
        r, w = await asyncio.open_connection("127.0.0.1", port)
        self = cls(r, w)
        line = await asyncio.wait_for(r.readline(), 5)
        self.info = json.loads(line[5:])
        co = {"name": name, "server_id": "N" + name.upper(), "headers": True, "version": "2.15.1",
              "remote_account": "$G", **fields}
        if kp is not None:
            import base64
            co["jwt"] = token
            co["sig"] = base64.urlsafe_b64encode(kp.sign(self.info["nonce"].encode())).rstrip(b"=").decode()
        self.send(b"CONNECT " + json.dumps(co).encode() + b"\r\nPING\r\n")
        return self

    def send(self, data: bytes) -> None:
        self.w.write(data)

    async def until(self, text: bytes, timeout: float = 5.0) -> bytes:
        """Reads until ``text`` has arrived (AssertionError at EOF or timeout without it)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while text not in self.buf:
            left = end - loop.time()
            assert left > 0, f"no {text!r} in {self.buf[-500:]!r}"
            try:
                data = await asyncio.wait_for(self.r.read(65536), left)
            except asyncio.TimeoutError:
                continue
            assert data, f"closed without {text!r}: {self.buf[-500:]!r}"
            self.buf += data
        return self.buf

    async def closed(self, timeout: float = 5.0) -> bool:
        try:
            while True:
                data = await asyncio.wait_for(self.r.read(65536), timeout)
                if not data:
                    return True
                self.buf += data
        except (asyncio.TimeoutError, ConnectionError):
            return False

    def close(self) -> None:
        self.w.close()


def first_info_after_connect(buf: bytes) -> dict:
    """The INFO with connect_info (the hub's answer to CONNECT) in what a fake leaf read."""
    for line in buf.split(b"\r\n"):
        if line.startswith(b"INFO ") and b'"connect_info":true' in line:
            return json.loads(line[5:])
    raise AssertionError(f"no connect_info INFO in {buf[:800]!r}")


# ==== leaf users with permissions =================================================================================

PERMS = ('accounts { A { users [ {user: a, password: a}, {user: p, password: p, permissions: { publish: { allow: ["up.>"] }, '
         'subscribe: { allow: ["down.>", "svc"], deny: ["down.secret"] } } } ] } }')


async def _perm_violations(port: int) -> list[bytes]:
    """A fake leaf authenticated as user p: what the hub answers to a literal LS+ outside the user's
    subscribe permission and to an LMSG outside its publish permission (then it closes the connection)."""
    out = []
    for name, frames in (("f1", b"LS+ secret\r\nPING\r\n"), ("f2", b"LS+ down.*\r\nLMSG other.x 2\r\nhi\r\n")):
        f = await RawLeaf.open(port, name, user="p", **{"pass": "p"})
        buf = await f.until(b"PONG")
        if name == "f1":
            out.append(buf)
        f.send(frames)
        await f.until(b"-ERR")
        assert await f.closed()
        out.append(f.buf.rsplit(b"PONG\r\n", 1)[-1].strip())
        f.close()
    return out


async def test_leaf_user_permissions_are_applied_and_sent_to_the_leaf():
    """The hub applies the leaf user's permissions, reversed as nats-server: the user's publish permission
    is what the leaf may send (its LMSG), its subscribe permission what the hub sends it (and the literal
    LS+ it may announce). The INFO that accepts the CONNECT carries them as import (subscribe) and export
    (publish), and a Rillet leaf enforces them: it announces and sends nothing else."""
    async with rillet(f'{PERMS}\nleafnodes {{ listen: "127.0.0.1:-1" }}', "hub") as hub:
        port = hub_port(hub)
        infobuf, sub_err, pub_err = await _perm_violations(port)
        info = first_info_after_connect(infobuf)
        assert info["import"] == {"allow": ["down.>", "svc"], "deny": ["down.secret"]}
        assert info["export"] == {"allow": ["up.>"]} and info["remote_account"] == "A"
        assert sub_err == b"-ERR 'Permissions Violation for Subscription to \"secret\"'"
        assert pub_err == b"-ERR 'Permissions Violation for Publish to \"other.x\"'"
        log = hub._test_log.getvalue()
        assert 'Subscription Violation on "secret" - Check other side configuration' in log
        assert 'Publish Violation on "other.x" - Check other side configuration' in log
        conf = f'leafnodes {{ remotes [ {{ url: "nats://p:p@127.0.0.1:{port}" }} ] }}'
        async with rillet(conf, "leaf") as leaf:
            await _until(lambda: leaf_ready(hub) and leaf_ready(leaf))
            await _check_directions(hub, leaf)


async def _check_directions(hub, leaf, hub_creds=None) -> None:
    """With the PERMS user: up.> crosses from the leaf, down.> (not down.secret) from the hub, nothing
    else, and the leaf connection stays up (the leaf itself never sends what the hub would refuse)."""
    kw = {"user_credentials": hub_creds} if hub_creds else {"user": "a", "password": "a"}
    first = None if isinstance(leaf, str) else set(leaf.leafs)
    hub_url = hub if isinstance(hub, str) else hub.client_url
    async with clients(hub_url, **kw) as (nh,), clients(leaf if isinstance(leaf, str) else leaf.client_url) as (nl,):
        on_hub, on_leaf = Inbox(), Inbox()
        await nh.subscribe("up.*", cb=on_hub.cb)
        await nh.subscribe("other.*", cb=on_hub.cb)
        await nl.subscribe("down.*", cb=on_leaf.cb)
        await nl.subscribe("zzz", cb=on_leaf.cb)
        await nh.flush()
        await nl.flush()
        if not isinstance(leaf, str):
            await _until(lambda: leaf_interest(leaf, "up.1", "$G") == 1, what="the hub's up.* interest")
            # the hub's interest in other.* is not announced to the leaf (the user may not publish there)
            assert leaf_interest(leaf, "other.1", "$G") == 0
        for i in range(60):  # (interest crossing)
            await nl.publish("up.1", b"u")
            await nh.publish("down.1", b"d")
            await nh.flush()
            await nl.flush()
            await asyncio.sleep(0.05)
            if on_hub.msgs and on_leaf.msgs:
                break
        n_hub, n_leaf = len(on_hub.msgs), len(on_leaf.msgs)
        assert n_hub and n_leaf
        await nl.publish("other.1", b"no")  # the leaf does not send it (nor would the hub take it)
        await nh.publish("down.secret", b"no")  # denied to the leaf's user
        await nh.publish("zzz", b"no")  # outside its subscribe permission: the leaf did not announce it
        await nl.publish("up.2", b"u2")
        await nh.publish("down.2", b"d2")
        await _until(lambda: len(on_hub.msgs) == n_hub + 1 and len(on_leaf.msgs) == n_leaf + 1)
        await asyncio.sleep(0.15)
        assert [m.subject for m in on_hub.msgs[n_hub:]] == ["up.2"]
        assert [m.subject for m in on_leaf.msgs[n_leaf:]] == ["down.2"]
    if first is not None:
        assert set(leaf.leafs) == first and leaf_ready(leaf)  # never closed: still the first connection
        assert "Leafnode Error" not in leaf._test_log.getvalue()


@needs_go
async def test_leaf_user_permissions_with_go():
    """The same user on a Go hub (same INFO permissions and -ERR texts, a Rillet leaf enforcing them), and a
    Go leaf of a Rillet hub: it enforces what our INFO told it, so it is never closed for a violation."""
    with tempfile.TemporaryDirectory() as tmp:
        lport = free_port_()
        go, port, _ = _go(f'{PERMS}\n'
                          f'leafnodes {{ listen: "127.0.0.1:{lport}" }}', tmp)
        with go:
            go.wait_ready()
            infobuf, sub_err, pub_err = await _perm_violations(lport)
            info = first_info_after_connect(infobuf)
            assert info["import"] == {"allow": ["down.>", "svc"], "deny": ["down.secret"]}
            assert info["export"] == {"allow": ["up.>"]}
            assert sub_err == b"-ERR 'Permissions Violation for Subscription to \"secret\"'"
            assert pub_err == b"-ERR 'Permissions Violation for Publish to \"other.x\"'"
            conf = f'leafnodes {{ remotes [ {{ url: "nats://p:p@127.0.0.1:{lport}" }} ] }}'
            async with rillet(conf, "leaf") as leaf:
                await _until(lambda: leaf_ready(leaf), what="connected to the Go hub")
                await _check_directions(f"nats://127.0.0.1:{port}", leaf)
        hubconf = f'{PERMS}\nleafnodes {{ listen: "127.0.0.1:-1" }}'
        async with rillet(hubconf, "hub") as hub:
            go, port, _ = _go(f'leafnodes {{ remotes [ {{ url: "nats://p:p@127.0.0.1:{hub_port(hub)}" }} ] }}', tmp)
            with go:
                go.wait_ready()
                await _until(lambda: leaf_ready(hub), what="the Go leaf")
                (lc,) = hub.leafs.values()
                await _check_directions(hub, f"nats://127.0.0.1:{port}")
                assert not lc.closed and "Violation" not in hub._test_log.getvalue()


def free_port_() -> int:
    from helpers import free_port
    return free_port()
