"""Configuration reload of accounts and users (SIGHUP / ``server.reload()``), checked against nats-server
(``RILLET_TEST_TARGET=nats-server`` runs the same steps on the Go server, reloading it with SIGHUP)."""
from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from typing import Any, AsyncIterator

import nats
import pytest

from tests.helpers import GO, Closed, RawClient, ServerProcess, free_port

V1 = """
listen: 127.0.0.1:%d
accounts {
  A {
    users [
      {user: a, password: a, permissions: {subscribe: {allow: ["foo.>", "bar", "q.> grp"]}}}
      {user: gone, password: gone}
      {user: mover, password: mover}
      {user: pw, password: old}
    ]
  }
  B { users [{user: b, password: b}] }
}
"""

V2 = """
listen: 127.0.0.1:%d
accounts {
  A {
    users [
      {user: a, password: a, permissions: {subscribe: {allow: ["foo.>"]}, publish: {deny: ["x"]}}}
      {user: newbie, password: newbie}
      {user: pw, password: new}
    ]
    limits { max_payload: 100 }
    mappings { "m.*": "mapped.{{wildcard(1)}}" }
  }
  B { users [{user: b, password: b}, {user: mover, password: mover}], exports [{service: "svc"}] }
  C { users [{user: c, password: c}], imports [{service: {account: B, subject: "svc"}}] }
}
"""


class Running:
    def __init__(self, path: str, port: int, srv: Any) -> None:
        self.path, self.port, self.srv = path, port, srv
        self.client_url = f"nats://127.0.0.1:{port}"

    async def reload(self) -> None:
        if GO:
            mark = self.srv.mark()
            self.srv.send_signal(signal.SIGHUP)
            await self.srv.await_log("Reloaded server configuration", after=mark)
            return
        from rillet.config.flags import parse_command_line
        self.srv.reload(parse_command_line(["-c", self.path]).options)


@contextlib.asynccontextmanager
async def running(tmp_path) -> AsyncIterator[Running]:
    port = free_port()
    path = tmp_path / "acc.conf"
    path.write_text(V1 % port)
    if GO:
        proc = ServerProcess("-c", str(path), command=["nats-server"])
        try:
            await asyncio.get_running_loop().run_in_executor(None, proc.wait_ready)
            yield Running(str(path), port, proc)
        finally:
            proc.stop()
        return
    from rillet.config.flags import parse_command_line
    from rillet.app.embed import run_server
    async with run_server(parse_command_line(["-c", str(path)]).options) as srv:
        yield Running(str(path), port, srv)


def login(user: str, password: str | None = None) -> dict:
    return {"user": user, "pass": password or user}


async def test_reload_accounts_users_permissions_and_limits(tmp_path):
    async with running(tmp_path) as r:
        a = await RawClient.open(r, **login("a"))
        a.sub("foo.x", 1)
        a.sub("bar", 2)
        a.sub("q.x", 3, queue="grp")
        assert await a.ping() == b""
        gone = await RawClient.open(r, **login("gone"))
        mover = await RawClient.open(r, **login("mover"))
        pw = await RawClient.open(r, **login("pw", "old"))
        for rc in (gone, mover, pw):
            assert await rc.ping() == b""
        with pytest.raises(Exception):
            await nats.connect(r.client_url, user="c", password="c", allow_reconnect=False, connect_timeout=1)

        (tmp_path / "acc.conf").write_text(V2 % r.port)
        await r.reload()

        # subscriptions the new permissions no longer allow are removed, with nats-server's error
        errs = await a.ping()
        assert errs.split(b"\r\n") == [
            b"-ERR 'Permissions Violation for Subscription to \"bar\" (sid \"2\")'",
            b"-ERR 'Permissions Violation for Subscription to \"q.x\" using queue \"grp\" (sid \"3\")'", b""]
        a.pub("x", "denied now")
        assert await a.ping() == b"-ERR 'Permissions Violation for Publish to \"x\"'\r\n"
        # a removed user and a user moved to another account are disconnected (no error: they reconnect)
        for rc in (gone, mover):
            rest = await rc.read_until_closed(timeout=3)
            assert b"-ERR" not in rest
        # a user whose password changed no longer authenticates
        rest = await pw.read_until_closed(timeout=3)
        assert b"-ERR 'Authorization Violation'" in rest

        # the mover now lands in B; the new account C and the new user work
        nb = await nats.connect(r.client_url, user="b", password="b")
        nm = await nats.connect(r.client_url, user="mover", password="mover")
        sb = await nb.subscribe("hello")
        await nb.flush()
        await nm.publish("hello", b"from B")
        assert (await sb.next_msg(timeout=2)).data == b"from B"
        nc = await nats.connect(r.client_url, user="c", password="c")

        async def answer(m):
            await m.respond(b"from B's service")

        await nb.subscribe("svc", cb=answer)
        await nb.flush()
        if not GO:
            # the import of an account the reload added works (nats-server v2.15.1 leaves it unwired:
            # "no responders" until a restart; Rillet rebuilds every import on reload)
            assert (await nc.request("svc", b"", timeout=2)).data == b"from B's service"
        nn = await nats.connect(r.client_url, user="newbie", password="newbie")
        # A's new mapping and limits apply
        sm = await nn.subscribe("mapped.>")
        await nn.flush()
        await nn.publish("m.1", b"ok")
        assert (await sm.next_msg(timeout=2)).subject == "mapped.1"
        a2 = await RawClient.open(r, **login("newbie"))
        a2.pub("big", b"x" * 101)
        assert b"Maximum Payload Violation" in await a2.read_until_closed(timeout=3)
        # the connection that stayed still receives on what it may subscribe to
        await nn.publish("foo.x", b"still there")
        await nn.flush()
        m = await a.read_msg()
        assert (m.subject, m.sid, m.payload) == ("foo.x", "1", b"still there")
        for nc_ in (nb, nm, nc, nn):
            await nc_.close()
        for rc in (a, a2, gone, mover, pw):
            await rc.close()


async def test_reload_removes_an_account(tmp_path):
    async with running(tmp_path) as r:
        b = await RawClient.open(r, **login("b"))
        assert await b.ping() == b""
        (tmp_path / "acc.conf").write_text(V1.replace("B { users [{user: b, password: b}] }", "") % r.port)
        await r.reload()
        rest = await b.read_until_closed(timeout=3)
        assert b"-ERR" not in rest
        with pytest.raises(Exception):
            await nats.connect(r.client_url, user="b", password="b", allow_reconnect=False, connect_timeout=1)
        if not GO:
            assert "B" not in r.srv.accounts and "A" in r.srv.accounts


async def test_reload_without_users_and_token_clients(tmp_path):
    """Dropping the users disconnects the clients that logged in as one; unauthenticated ones stay."""
    async with running(tmp_path) as r:
        a = await RawClient.open(r, **login("a"))
        assert await a.ping() == b""
        (tmp_path / "acc.conf").write_text("listen: 127.0.0.1:%d\n" % r.port)
        await r.reload()
        assert b"-ERR" not in await a.read_until_closed(timeout=3)
        anon = await RawClient.open(r)
        assert await anon.ping() == b""
        (tmp_path / "acc.conf").write_text("listen: 127.0.0.1:%d\nmax_payload: 2000\n" % r.port)
        await r.reload()
        assert await anon.ping() == b""
        await anon.close()
        await a.close()


async def test_reload_lowers_account_connection_limit(tmp_path):
    """As nats-server: the connections over the new limit are closed with its error (the oldest go)."""
    async with running(tmp_path) as r:
        conns = [await RawClient.open(r, **login("a")) for _ in range(3)]
        for c in conns:
            assert await c.ping() == b""
        (tmp_path / "acc.conf").write_text(V1.replace("    ]\n  }\n  B", "    ]\n    limits { max_connections: 1 }\n  }\n  B")
                                           % r.port)
        await r.reload()
        for c in conns[:2]:
            assert b"-ERR 'maximum account active connections exceeded'" in await c.read_until_closed(timeout=3)
        assert await conns[2].is_open()
        for c in conns:
            await c.close()


JS1 = """
listen: 127.0.0.1:%d
jetstream { store_dir: "%s" }
accounts {
  A { users [{user: a, password: a}], jetstream: enabled }
}
"""

JS2 = """
listen: 127.0.0.1:%d
jetstream { store_dir: "%s" }
accounts {
  A { users [{user: a, password: a}], jetstream: enabled }
  D { users [{user: d, password: d}], jetstream: { max_streams: 3 } }
}
"""


async def test_reload_enables_jetstream_for_an_added_account(tmp_path):
    """An account a reload adds with a ``jetstream`` entry gets JetStream, with its limits (the server finds
    them through its JetStream subsystem: rillet.server does not import rillet.jetstream)."""
    store = tmp_path / "js"
    port = free_port()
    path = tmp_path / "js.conf"
    path.write_text(JS1 % (port, store))

    async def account_info(user: str) -> dict:
        import json
        nc = await nats.connect(f"nats://127.0.0.1:{port}", user=user, password=user)
        try:
            return json.loads((await nc.request("$JS.API.INFO", b"", timeout=2)).data)
        finally:
            await nc.close()

    async def steps(reload) -> None:
        assert "error" not in await account_info("a")
        path.write_text(JS2 % (port, store))
        await reload()
        info = await account_info("d")
        assert "error" not in info, info
        assert info["limits"]["max_streams"] == 3

    if GO:
        proc = ServerProcess("-c", str(path), command=["nats-server"])
        try:
            await asyncio.get_running_loop().run_in_executor(None, proc.wait_ready)
            await steps(Running(str(path), port, proc).reload)
        finally:
            proc.stop()
        return
    from rillet.app.embed import run_server
    from rillet.config.flags import parse_command_line
    async with run_server(parse_command_line(["-c", str(path)]).options) as srv:
        await steps(Running(str(path), port, srv).reload)
