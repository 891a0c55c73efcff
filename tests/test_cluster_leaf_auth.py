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
        except ConnectionError:
            return True  # (reset: closed with our bytes unread)
        except asyncio.TimeoutError:
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


# ==== operator mode ===============================================================================================

def _operator(tmp_path, user_fields: dict | None = None):
    """An operator with the hub's account A (users u and, for clients, c) and the leaf's account L."""
    op = Operator()
    lim = {"subs": -1, "conn": -1, "payload": -1, "data": -1, "imports": -1, "exports": -1, "wildcards": True,
           "leaf": -1}
    akp, apub, _ = op.account("A", limits=lim)
    lkp, lpub, _ = op.account("L", limits=lim)
    ukp, utoken = Operator.user(akp, "u", **(user_fields or {}))
    ckp, ctoken = Operator.user(akp, "c")
    lckp, lctoken = Operator.user(lkp, "lc")
    return op, {"A": apub, "L": lpub, "akp": akp, "lkp": lkp, "leaf": creds(tmp_path, ukp, utoken, "leaf"),
                "hub_client": creds(tmp_path, ckp, ctoken, "c"), "leaf_client": creds(tmp_path, lckp, lctoken, "lc"),
                "ukp": ukp, "utoken": utoken}


@pytest.mark.parametrize("resolver", ["memory", "full"])
async def test_operator_mode_rillet_leaf_to_rillet_hub(tmp_path, resolver):
    """Both in operator mode: the leaf's remote binds its local account L (a public key, from its
    resolver) and authenticates with a credentials file; the hub checks the user JWT against its trusted
    operator and resolver (memory or full directory) and binds the connection to the JWT's account."""
    op, k = _operator(tmp_path)
    res = "resolver: MEMORY" if resolver == "memory" else \
        f'resolver: {{ type: full, dir: "{tmp_path / "jwt"}" }}'
    async with rillet(op_conf(op, res) + 'leafnodes { listen: "127.0.0.1:-1" }', "hub") as hub:
        conf = (op_conf(op) + f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{hub_port(hub)}", '
                f'account: {k["L"]}, credentials: "{k["leaf"]}" }} ] }}')
        async with rillet(conf, "leaf") as leaf:
            await _until(lambda: leaf_ready(hub) and leaf_ready(leaf), what="the leaf connection")
            (lc,) = hub.leafs.values()
            assert lc.acc_name == k["A"] and lc.jwt_user is not None
            assert [c.acc_name for c in leaf.leafs.values()] == [k["L"]]
            await _both_ways_creds(hub.client_url, k["hub_client"], leaf.client_url, k["leaf_client"])


async def _both_ways_creds(hub_url: str, hub_creds: str, leaf_url: str, leaf_creds: str) -> None:
    async with clients(hub_url, user_credentials=hub_creds) as (nh,), \
            clients(leaf_url, user_credentials=leaf_creds) as (nl,):
        on_hub, on_leaf = Inbox(), Inbox()
        await nh.subscribe("to.hub", cb=on_hub.cb)
        await nl.subscribe("to.leaf", cb=on_leaf.cb)
        await nh.flush()
        await nl.flush()
        for _ in range(100):
            await nl.publish("to.hub", b"up")
            await nh.publish("to.leaf", b"down")
            await nh.flush()
            await nl.flush()
            await asyncio.sleep(0.05)
            if on_hub.msgs and on_leaf.msgs:
                break
        n_h, n_l = len(on_hub.msgs), len(on_leaf.msgs)
        assert n_h and n_l, "no message crossed the leaf connection"
        for i in range(10):
            await nl.publish("to.hub", b"%d" % i)
            await nh.publish("to.leaf", b"%d" % i)
        await _until(lambda: len(on_hub.msgs) == n_h + 10 and len(on_leaf.msgs) == n_l + 10)
        await asyncio.sleep(0.1)
        assert [m.data for m in on_hub.msgs[n_h:]] == [b"%d" % i for i in range(10)]
        assert [m.data for m in on_leaf.msgs[n_l:]] == [b"%d" % i for i in range(10)]


async def _refusal(port: int, kp, token: str) -> bytes:
    f = await RawLeaf.open(port, "bad", kp=kp, token=token)
    try:
        buf = await f.until(b"-ERR")
        assert await f.closed()
        return buf[buf.index(b"-ERR"):].split(b"\r\n")[0]
    finally:
        f.close()


async def test_operator_mode_refuses_bad_expired_and_revoked_credentials(tmp_path):
    """A user JWT signed by an unknown account, expired, revoked by its account, without a valid nonce
    signature or not allowed on leaf connections is refused with nats-server's 'Authorization Violation'
    (compared with a Go hub of the same operator); a JWT that expires while connected closes the
    connection with 'User Authentication Expired'; the hub and its other clients keep working."""
    op, k = _operator(tmp_path)
    stranger = J.new_keypair("A")
    bad = {
        "unknown account": Operator.user(stranger, "x"),
        "expired": Operator.user(k["akp"], "x", exp=int(time.time()) - 10),
        "not for leafs": Operator.user(k["akp"], "x", allowed_connection_types=["STANDARD"]),
    }
    rkp, rtoken = Operator.user(k["akp"], "revoked")
    apub = k["A"]
    op.account("A", kp=k["akp"], revocations={J.public_key(rkp): int(time.time()) + 5},
               limits={"conn": -1, "subs": -1, "payload": -1, "leaf": -1})
    bad["revoked"] = (rkp, rtoken)
    other = J.new_keypair("U")
    bad["wrong signature"] = (other, k["utoken"])
    bad["not a JWT"] = (other, "eyJnot.a.jwt")
    bad["an account JWT"] = (k["akp"], op.accounts["L"][2])
    zkp, _, _ = op.account("Z")  # (its JWT limits leave "leaf" out: no leaf connection, as nats-server)
    bad["no leafs in the account"] = Operator.user(zkp, "z")
    answers: dict[str, dict[str, bytes]] = {}
    async with rillet(op_conf(op) + 'leafnodes { listen: "127.0.0.1:-1" }', "hub") as hub, \
            clients(hub.client_url, user_credentials=k["hub_client"]) as (nh,):
        answers["rillet"] = {what: await _refusal(hub_port(hub), kp, tok) for what, (kp, tok) in bad.items()}
        assert not hub.leafs
        assert (await nh.request("$SYS.REQ.USER.INFO", b"", timeout=2)).data  # the hub still serves
        # a user JWT valid for one more second: connected, then closed at its expiry
        ekp, etoken = Operator.user(k["akp"], "soon", exp=int(time.time()) + 2)
        f = await RawLeaf.open(hub_port(hub), "soon", kp=ekp, token=etoken)
        await f.until(b"PONG")
        assert leaf_ready(hub)
        await f.until(b"-ERR 'User Authentication Expired'", timeout=4)
        assert await f.closed()
        f.close()
        assert apub in hub.accounts
    if GO_SERVER is not None:
        with tempfile.TemporaryDirectory() as tmp:
            lport = free_port_()
            go, _, _ = _go(op_conf(op) + f'leafnodes {{ listen: "127.0.0.1:{lport}" }}', tmp)
            with go:
                go.wait_ready()
                answers["go"] = {what: await _refusal(lport, kp, tok) for what, (kp, tok) in bad.items()}
        assert answers["rillet"] == answers["go"]
    assert answers["rillet"].pop("no leafs in the account") == b"-ERR 'maximum account active connections exceeded'"
    assert set(answers["rillet"].values()) == {b"-ERR 'Authorization Violation'"}


@needs_go
async def test_operator_mode_with_go(tmp_path):
    """A Rillet leaf (operator mode, credentials) of a Go operator-mode hub, and a Go leaf (credentials)
    of a Rillet operator-mode hub: bound to the JWT's account, with messages both ways; the user JWT's
    permissions travel in the INFO and are enforced by the Rillet leaf."""
    op, k = _operator(tmp_path, {"pub": {"allow": ["to.hub", "up.>"]}, "sub": {"allow": ["to.leaf", "down.>"]}})
    with tempfile.TemporaryDirectory() as tmp:
        lport = free_port_()
        go, port, http = _go(op_conf(op) + f'leafnodes {{ listen: "127.0.0.1:{lport}" }}', tmp)
        with go:
            go.wait_ready()
            conf = (op_conf(op) + f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{lport}", '
                    f'account: {k["L"]}, credentials: "{k["leaf"]}" }} ] }}')
            async with rillet(conf, "leaf") as leaf:
                try:
                    await _until(lambda: leaf_ready(leaf), what="connected to the Go hub")
                except AssertionError:
                    print(leaf._test_log.getvalue()[-3000:], go.output[-3000:])
                    raise
                (lc,) = leaf.leafs.values()
                assert lc.remote_account == k["A"]
                assert lc.deny_out.allow == ["to.hub", "up.>"] and lc.deny_in.allow == ["to.leaf", "down.>"]
                await _both_ways_creds(f"nats://127.0.0.1:{port}", k["hub_client"], leaf.client_url,
                                       k["leaf_client"])
        async with rillet(op_conf(op) + 'leafnodes { listen: "127.0.0.1:-1" }', "hub") as hub:
            go, port, _ = _go(f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{hub_port(hub)}", '
                              f'credentials: "{k["leaf"]}" }} ] }}', tmp)
            with go:
                go.wait_ready()
                await _until(lambda: leaf_ready(hub), what="the Go leaf")
                (lc,) = hub.leafs.values()
                assert lc.acc_name == k["A"]
                async with clients(hub.client_url, user_credentials=k["hub_client"]) as (nh,), \
                        clients(f"nats://127.0.0.1:{port}") as (nl,):
                    on_hub, on_leaf = Inbox(), Inbox()
                    await nh.subscribe("to.hub", cb=on_hub.cb)
                    await nl.subscribe("to.leaf", cb=on_leaf.cb)
                    await nh.flush()
                    await nl.flush()
                    for _ in range(100):
                        await nl.publish("to.hub", b"up")
                        await nh.publish("to.leaf", b"down")
                        await nl.publish("elsewhere", b"x")  # outside the user's publish permission
                        await nh.flush()
                        await nl.flush()
                        await asyncio.sleep(0.05)
                        if on_hub.msgs and on_leaf.msgs:
                            break
                    assert on_hub.msgs and on_leaf.msgs
                assert not lc.closed and "Violation" not in hub._test_log.getvalue()


def test_operator_mode_leafnodes_config_checks(tmp_path):
    """nats-server's operator-mode checks of the leafnodes block, at start."""
    from rillet.config.options_builder import load_string
    from rillet.app.compose import build_server
    from rillet.server.logging import Logger
    import io
    op, k = _operator(tmp_path)
    for block, err in [
        ('leafnodes { remotes [ { url: "nats://127.0.0.1:1" } ] }', "operator mode requires account nkeys in remotes"),
        ('leafnodes { listen: "127.0.0.1:-1", authorization { user: a, password: b, account: X } }',
         "operator mode and non account nkeys are incompatible"),
        ('leafnodes { listen: "127.0.0.1:-1", authorization { users [ { user: a, password: b } ] } }',
         "operator mode does not allow specifying users in leafnode config"),
    ]:
        o = load_string("listen: 127.0.0.1:-1\n" + op_conf(op) + block, "x.conf")
        with pytest.raises(ValueError, match=err):
            build_server(o, Logger(out=io.StringIO()))


async def test_operator_mode_revocation_closes_a_connected_leaf(tmp_path):
    """An account JWT update that revokes the leaf's user closes the leaf connection with 'User
    Authentication Revoked' (as nats-server does for clients and leafs); the leaf's next attempt is
    refused, and the hub's clients are untouched."""
    op, k = _operator(tmp_path)
    async with rillet(op_conf(op) + 'leafnodes { listen: "127.0.0.1:-1" }', "hub") as hub, \
            clients(hub.client_url, user_credentials=k["hub_client"]) as (nh,):
        f = await RawLeaf.open(hub_port(hub), "victim", kp=k["ukp"], token=k["utoken"])
        await f.until(b"PONG")
        assert leaf_ready(hub)
        skp = op.sys[0]
        sys_creds = creds(tmp_path, *Operator.user(skp, "sys"), name="sys")
        _, _, tok = op.account("A", kp=k["akp"], iat=int(time.time()) + 1,
                               revocations={J.public_key(k["ukp"]): int(time.time()) + 1},
                               limits={"conn": -1, "subs": -1, "payload": -1, "leaf": -1})
        async with clients(hub.client_url, user_credentials=sys_creds) as (ns,):
            r = await ns.request(f"$SYS.REQ.ACCOUNT.{k['A']}.CLAIMS.UPDATE", tok.encode(), timeout=2)
            assert json.loads(r.data)["data"]["message"] == "jwt updated"
        await f.until(b"-ERR 'User Authentication Revoked'")
        assert await f.closed()
        f.close()
        assert await _refusal(hub_port(hub), k["ukp"], k["utoken"]) == b"-ERR 'Authorization Violation'"
        await nh.flush()
        assert nh.is_connected


async def test_operator_mode_user_limits_on_a_leaf(tmp_path):
    """The user JWT's subscription and payload limits apply to its leaf connection as nats-server applies
    them: an LS+ over the limit gets 'maximum subscriptions exceeded' (the connection stays), an LMSG over
    the payload limit 'Maximum Payload Violation' (closed). Compared with a Go hub."""
    op, k = _operator(tmp_path)
    lkp, ltoken = Operator.user(k["akp"], "limited", subs=2, payload=10)

    async def probe(port: int) -> list[bytes]:
        f = await RawLeaf.open(port, "limited", kp=lkp, token=ltoken)
        await f.until(b"PONG")
        f.buf = b""
        f.send(b"LS+ a\r\nLS+ b\r\nLS+ c\r\nPING\r\n")
        await f.until(b"PONG")
        subs = [line for line in f.buf.split(b"\r\n") if line.startswith(b"-ERR")]
        f.buf = b""
        f.send(b"LMSG a 20\r\n" + b"x" * 20 + b"\r\nPING\r\n")
        await f.until(b"-ERR")
        closed = await f.closed()
        f.close()
        return subs + [f.buf[f.buf.index(b"-ERR"):].split(b"\r\n")[0], b"closed" if closed else b"open"]
    async with rillet(op_conf(op) + 'leafnodes { listen: "127.0.0.1:-1" }', "hub") as hub:
        ours = await probe(hub_port(hub))
    assert ours == [b"-ERR 'maximum subscriptions exceeded'", b"-ERR 'Maximum Payload Violation'", b"closed"]
    if GO_SERVER is not None:
        with tempfile.TemporaryDirectory() as tmp:
            lport = free_port_()
            go, _, _ = _go(op_conf(op) + f'leafnodes {{ listen: "127.0.0.1:{lport}" }}', tmp)
            with go:
                go.wait_ready()
                assert await probe(lport) == ours


async def test_operator_mode_leafnodes_authorization_user_binds_an_account_key(tmp_path):
    """In operator mode a leafnodes authorization user (taking precedence over JWTs, as nats-server) binds
    its account public key, loaded from the resolver; messages cross to that account's clients."""
    op, k = _operator(tmp_path)
    hub_conf = op_conf(op) + f'leafnodes {{ listen: "127.0.0.1:-1", authorization {{ user: l, password: l, ' \
                             f'account: {k["A"]} }} }}'
    async with rillet(hub_conf, "hub") as hub:
        conf = f'leafnodes {{ remotes [ {{ url: "nats://l:l@127.0.0.1:{hub_port(hub)}" }} ] }}'
        async with rillet(conf, "leaf") as leaf:
            await _until(lambda: leaf_ready(hub) and leaf_ready(leaf))
            assert [c.acc_name for c in hub.leafs.values()] == [k["A"]]
            async with clients(hub.client_url, user_credentials=k["hub_client"]) as (nh,), \
                    clients(leaf.client_url) as (nl,):
                got = Inbox()
                await nh.subscribe("in.a", cb=got.cb)
                await nh.flush()
                await _until(lambda: leaf_interest(leaf, "in.a"), what="account A's interest on the leaf")
                await nl.publish("in.a", b"x")
                await _until(lambda: got.msgs)
