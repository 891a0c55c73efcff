"""``rillet auth`` (nsc): a store in nsc's layout whose JWTs a Go nats-server accepts in operator mode
(users, permissions, account limits, JetStream limits), and bad input refused in one line, nothing written."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import nats
import nkeys
import pytest

from helpers import ServerProcess
from rillet import jwt as J
from rillet.cli.main import main


def auth(capsys, home: Path, *args: str) -> tuple[int, str, str]:
    rc = main(["auth", "-H", str(home), *args])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def ok(capsys, home: Path, *args: str) -> str:
    rc, out, err = auth(capsys, home, *args)
    assert rc == 0, (args, out, err)
    return out


def snapshot(home: Path) -> dict[str, bytes]:
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file()}


async def request_when_served(nc: Any, subject: str, timeout: float = 5.0) -> Any:
    """A request, repeated while the server answers "no responders" (the responder's subscription reaching
    the importing account can lag under load), until ``timeout``."""
    from nats.errors import NoRespondersError
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            return await nc.request(subject, b"", timeout=timeout)
        except NoRespondersError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.05)


def make_store(capsys, home: Path) -> None:
    ok(capsys, home, "add", "operator", "--name", "OP", "--sys")
    ok(capsys, home, "add", "account", "--name", "APP")
    ok(capsys, home, "edit", "account", "--name", "APP", "--js-disk-storage", "64MiB", "--js-mem-storage", "16M",
       "--conns", "2")
    ok(capsys, home, "add", "account", "--name", "NOJS")
    ok(capsys, home, "add", "user", "--account", "APP", "--name", "alice", "--deny-pub", "secret.>")
    ok(capsys, home, "add", "user", "--account", "NOJS", "--name", "bob")


def test_store_layout_and_keys(capsys, tmp_path):
    make_store(capsys, tmp_path)
    cfg = json.loads((tmp_path / "nsc.json").read_text())
    assert cfg == {"store_root": str(tmp_path), "operator": "OP", "account": "NOJS"}
    op_jwt = (tmp_path / "OP" / "OP.jwt").read_text().strip()
    op = J.decode(op_jwt)
    assert op["iss"] == op["sub"] and op["sub"].startswith("O") and op["name"] == "OP"
    assert json.loads((tmp_path / "OP" / ".nsc").read_text())["version"] == "1"
    sys_acc = J.decode((tmp_path / "OP/accounts/SYS/SYS.jwt").read_text())
    assert op["nats"]["system_account"] == sys_acc["sub"] and sys_acc["iss"] == op["sub"]
    app = J.decode((tmp_path / "OP/accounts/APP/APP.jwt").read_text())
    lim = app["nats"]["limits"]
    assert lim["disk_storage"] == 64 * 1024 ** 2 and lim["mem_storage"] == 16_000_000 and lim["conn"] == 2
    assert lim["streams"] == -1 and lim["consumer"] == -1
    alice = J.decode((tmp_path / "OP/accounts/APP/users/alice.jwt").read_text())
    assert alice["iss"] == app["sub"] and alice["nats"]["pub"] == {"deny": ["secret.>"]}
    # every key is in keys/<kind>/<2 letters>/<public>.nk, and is the seed of that key (nkeys library)
    for claims in (op, sys_acc, app, alice):
        pub = claims["sub"]
        seed = (tmp_path / "keys" / pub[0] / pub[1:3] / f"{pub}.nk").read_text().strip()
        assert nkeys.from_seed(seed.encode()).public_key.decode() == pub
    creds = (tmp_path / "creds/OP/APP/alice.creds").read_text()
    jwt_part, seed_part = J.parse_creds(creds)
    assert J.decode(jwt_part)["sub"] == alice["sub"]
    assert nkeys.from_seed(seed_part.encode()).public_key.decode() == alice["sub"]
    # generate creds: the same user, on stdout
    out = ok(capsys, tmp_path, "generate", "creds", "--account", "APP", "--name", "alice")
    assert J.parse_creds(out) == (jwt_part, seed_part)
    # describe: table and JSON of the same claims
    out = ok(capsys, tmp_path, "describe", "account", "--name", "APP")
    assert "Max Connections" in out and "| 2" in out and "JetStream" in out and "Enabled" in out
    out = ok(capsys, tmp_path, "describe", "user", "--account", "APP", "--name", "alice", "--json")
    assert json.loads(out)["sub"] == alice["sub"]
    out = ok(capsys, tmp_path, "describe", "jwt", "--file", str(tmp_path / "creds/OP/APP/alice.creds"), "--json")
    assert json.loads(out)["name"] == "alice"


def test_environment_variables_and_dir_flags(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("NSC_HOME", str(tmp_path / "conf"))
    monkeypatch.setenv("NKEYS_PATH", str(tmp_path / "nkeys"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert main(["auth", "add", "operator", "--name", "E"]) == 0
    capsys.readouterr()
    assert (tmp_path / "conf" / "nsc.json").exists()
    assert (tmp_path / "xdg/nats/nsc/stores/E/E.jwt").exists()
    assert list((tmp_path / "nkeys" / "keys" / "O").rglob("*.nk"))
    # the flags win over the variables and go anywhere on the line
    assert main(["auth", "add", "operator", "--config-dir", str(tmp_path / "c2"), "--name", "F",
                 "--data-dir", str(tmp_path / "d2"), "--keystore-dir", str(tmp_path / "k2")]) == 0
    capsys.readouterr()
    assert (tmp_path / "d2/F/F.jwt").exists() and list((tmp_path / "k2/keys/O").rglob("*.nk"))
    assert json.loads((tmp_path / "c2/nsc.json").read_text())["store_root"] == str(tmp_path / "d2")


def _server_conf(capsys, home: Path, tmp_path: Path) -> Path:
    conf = tmp_path / "server.conf"
    ok(capsys, home, "generate", "config", "--mem-resolver", "--config-file", str(conf))
    text = conf.read_text()
    assert "resolver: MEMORY" in text and "resolver_preload" in text
    conf.write_text('listen: "127.0.0.1:-1"\n' f'jetstream {{ store_dir: "{tmp_path / "js"}" }}\n' + text)
    return conf


async def _expect_error(coro: Any) -> str:
    try:
        nc = await coro
    except Exception as e:  # the server refused the connection
        return str(e)
    await nc.close()
    return ""


@pytest.mark.parametrize("server", ["nats-server", "rillet"])
async def test_servers_accept_the_store(capsys, tmp_path, server):
    home = tmp_path / "nsc"
    make_store(capsys, home)
    conf = _server_conf(capsys, home, tmp_path)
    srv = ServerProcess("-c", str(conf), command=["nats-server"] if server == "nats-server" else
                        [sys.executable, "-m", "rillet.server"])
    try:
        await asyncio.get_running_loop().run_in_executor(None, srv.wait_ready)
        url = f"nats://127.0.0.1:{srv.port}"
        creds = home / "creds/OP"
        errors: list[Exception] = []

        async def on_err(e: Exception) -> None:
            errors.append(e)

        alice = await nats.connect(url, user_credentials=str(creds / "APP/alice.creds"), error_cb=on_err,
                                   allow_reconnect=False)
        try:
            # a publish the JWT allows goes through; one it denies is a permissions violation
            got: list[bytes] = []

            async def on_msg(m: Any) -> None:
                got.append(m.data)

            sub = await alice.subscribe("open.>", cb=on_msg)
            await alice.publish("open.x", b"hello")
            await alice.publish("secret.x", b"nope")
            await alice.flush()
            for _ in range(50):
                if got and errors:
                    break
                await asyncio.sleep(0.05)
            assert got == [b"hello"]
            assert any("permissions violation" in str(e).lower() and "secret.x" in str(e) for e in errors), errors
            await sub.unsubscribe()
            # the account's JetStream limits: a stream is created in APP
            js = alice.jetstream()
            await js.add_stream(name="S", subjects=["open.>"])
            info = await js.account_info()
            assert info.limits.max_storage == 64 * 1024 ** 2
            # --conns 2: a third connection of the account is refused
            second = await nats.connect(url, user_credentials=str(creds / "APP/alice.creds"), allow_reconnect=False)
            try:
                err = await _expect_error(nats.connect(url, user_credentials=str(creds / "APP/alice.creds"),
                                                       allow_reconnect=False, max_reconnect_attempts=0))
                assert "maximum account active connections exceeded" in err, err
            finally:
                await second.close()
        finally:
            await alice.close()
        # an account without JetStream limits has no JetStream
        bob = await nats.connect(url, user_credentials=str(creds / "NOJS/bob.creds"), allow_reconnect=False)
        try:
            with pytest.raises(Exception, match="(?i)jetstream not enabled|503|no responders"):
                await bob.jetstream().add_stream(name="T", subjects=["t"])
        finally:
            await bob.close()
        # the system account's user works ($SYS requests)
        sysnc = await nats.connect(url, user_credentials=str(creds / "SYS/sys.creds"), allow_reconnect=False)
        try:
            r = await sysnc.request("$SYS.REQ.SERVER.PING", b"", timeout=5)
            assert json.loads(r.data)["server"]["id"].startswith("N")
        finally:
            await sysnc.close()
        # a user signed by another account's key is refused
        rogue_kp = nkeys.from_seed(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_ACCOUNT))
        user_kp = nkeys.from_seed(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER))
        token = J.encode({"sub": user_kp.public_key.decode(), "name": "rogue",
                          "nats": {"pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1, "type": "user",
                                   "version": 2}}, rogue_kp)
        rogue = tmp_path / "rogue.creds"
        rogue.write_text(J.format_creds(token, user_kp.seed))
        err = await _expect_error(nats.connect(url, user_credentials=str(rogue), allow_reconnect=False,
                                               max_reconnect_attempts=0))
        assert "authorization" in err.lower(), err
    finally:
        srv.proc.terminate()
        srv.proc.wait(10)


def test_bad_input_one_line_status_1_nothing_written(capsys, tmp_path):
    home = tmp_path / "nsc"
    make_store(capsys, home)
    before = snapshot(home)

    def refused(text: str, *args: str) -> None:
        rc, out, err = auth(capsys, home, *args)
        assert rc == 1, (args, out, err)
        assert len(err.strip().splitlines()) == 1 and err.startswith("rillet: error: ") and text in err, (args, err)

    refused("already exists", "add", "operator", "--name", "OP")
    refused("already exists", "add", "account", "--name", "APP")
    refused("already exists", "add", "user", "--account", "APP", "--name", "alice")
    refused("does not exist", "add", "user", "--account", "NOPE", "--name", "x")
    refused("invalid value", "edit", "account", "--name", "APP", "--conns", "lots")
    refused("invalid subject", "add", "user", "--account", "APP", "--name", "x", "--allow-pub", "a..b")
    assert snapshot(home) == before
    # a truncated creds file, a file that is not a JWT
    bad = tmp_path / "bad.creds"
    bad.write_text((home / "creds/OP/APP/alice.creds").read_text()[:150])
    refused("bad.creds", "describe", "jwt", "--file", str(bad))
    junk = tmp_path / "junk.jwt"
    junk.write_text("eyJhbGciOiJub25lIn0.e30.AAAA\n")
    refused("not a valid JWT", "describe", "jwt", "--file", str(junk))
    # a malformed account JWT in the store: every command reading it says which file
    app_jwt = home / "OP/accounts/APP/APP.jwt"
    good = app_jwt.read_text()
    app_jwt.write_text(good[: len(good) // 2])
    refused("APP.jwt: not a valid JWT", "describe", "account", "--name", "APP")
    refused("APP.jwt", "generate", "creds", "--account", "APP", "--name", "alice")
    refused("APP.jwt", "generate", "config", "--mem-resolver", "--config-file", str(tmp_path / "never.conf"))
    assert not (tmp_path / "never.conf").exists()
    # an account JWT signed by a key that is not the operator's
    claims = J.decode(good)
    other = nkeys.from_seed(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_OPERATOR))
    app_jwt.write_text(J.encode({k: v for k, v in claims.items() if k not in ("iss", "jti")}, other))
    refused("neither operator OP's key nor one of its signing keys", "describe", "account", "--name", "APP")
    app_jwt.write_text(good)
    # an expired user
    ok(capsys, home, "add", "user", "--account", "APP", "--name", "old", "--expiry", "1s")
    import time
    time.sleep(2.1)
    refused("expired", "generate", "creds", "--account", "APP", "--name", "old")
    # a store of another version
    nsc = home / "OP/.nsc"
    nsc.write_text(json.dumps({"name": "OP", "kind": "operator", "version": "9"}))
    refused("store version '9'", "describe", "operator")
    after = snapshot(home)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    # only what the test itself did: the "old" user added, the .nsc rewritten
    assert changed <= {"OP/.nsc", "OP/accounts/APP/users/old.jwt", "creds/OP/APP/old.creds", "nsc.json"} | \
        {k for k in after if k.startswith("keys/U/")}, changed


def test_command_line_subprocess(tmp_path):
    r = subprocess.run([sys.executable, "-m", "rillet.cli", "auth", "-H", str(tmp_path), "add", "operator",
                        "--name", "P"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert '[ OK ] added operator "P"' in r.stderr
    r = subprocess.run([sys.executable, "-m", "rillet.cli", "auth", "-H", str(tmp_path), "describe", "operator"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Operator Details" in r.stdout


@pytest.mark.parametrize("server", ["nats-server", "rillet"])
async def test_push_to_a_full_resolver(capsys, tmp_path, server):
    from helpers import free_port
    home = tmp_path / "nsc"
    port = free_port()
    ok(capsys, home, "add", "operator", "--name", "OP", "--sys")
    ok(capsys, home, "edit", "operator", "--account-jwt-server-url", f"nats://127.0.0.1:{port}")
    ok(capsys, home, "add", "account", "--name", "LATE")
    ok(capsys, home, "add", "user", "--account", "LATE", "--name", "carol")
    conf = tmp_path / "full.conf"
    ok(capsys, home, "generate", "config", "--nats-resolver", "--config-file", str(conf),
       "--dir", str(tmp_path / "jwt"))
    text = conf.read_text()
    assert "type: full" in text and "LATE" not in text  # only the system account is preloaded
    conf.write_text(f'listen: "127.0.0.1:{port}"\n' + text)
    srv = ServerProcess("-c", str(conf), command=["nats-server"] if server == "nats-server" else
                        [sys.executable, "-m", "rillet.server"])
    creds = str(home / "creds/OP/LATE/carol.creds")
    try:
        await asyncio.get_running_loop().run_in_executor(None, srv.wait_ready)
        url = f"nats://127.0.0.1:{port}"
        err = await _expect_error(nats.connect(url, user_credentials=creds, allow_reconnect=False,
                                               max_reconnect_attempts=0))
        assert "authorization" in err.lower(), err  # the server does not know the account yet

        def push(*args: str) -> tuple[int, str, str]:
            return auth(capsys, home, "push", *args)

        rc, out, errtext = await asyncio.get_running_loop().run_in_executor(None, push, "--all")
        assert rc == 0, errtext
        assert '[ OK ] pushed "LATE" to nats-server' in errtext and "jwt updated" in errtext
        nc = await nats.connect(url, user_credentials=creds, allow_reconnect=False)
        try:
            # an edit pushed again takes effect: one connection only
            ok(capsys, home, "edit", "account", "--name", "LATE", "--conns", "1")
            rc, _, errtext = await asyncio.get_running_loop().run_in_executor(None, push, "--account", "LATE")
            assert rc == 0, errtext
            await asyncio.sleep(0.2)
            err = await _expect_error(nats.connect(url, user_credentials=creds, allow_reconnect=False,
                                                   max_reconnect_attempts=0))
            assert "maximum account active connections exceeded" in err, err
        finally:
            await nc.close()
        assert (tmp_path / "jwt").is_dir() and any((tmp_path / "jwt").iterdir())  # the resolver stored it
        # pull: another copy of the store pushes an edit; this one pulls it
        import shutil
        other = tmp_path / "nsc2"
        shutil.copytree(home, other)
        (other / "nsc.json").write_text(json.dumps({"store_root": str(other), "operator": "OP", "account": "LATE"}))
        import time
        time.sleep(1.1)  # a later issue time (seconds)
        ok(capsys, other, "edit", "account", "--name", "LATE", "--conns", "7")
        rc, _, errtext = await asyncio.get_running_loop().run_in_executor(
            None, lambda: auth(capsys, other, "push", "-a", "LATE"))
        assert rc == 0, errtext
        rc, _, errtext = await asyncio.get_running_loop().run_in_executor(
            None, lambda: auth(capsys, home, "pull", "-a", "LATE"))
        assert rc == 0 and 'pulled account "LATE"' in errtext, errtext
        assert J.decode((home / "OP/accounts/LATE/LATE.jwt").read_text())["nats"]["limits"]["conn"] == 7
        # a local edit not pushed is newer than the server's: refused unless --overwrite-newer
        time.sleep(1.1)
        ok(capsys, home, "edit", "account", "--name", "LATE", "--conns", "9")
        local = (home / "OP/accounts/LATE/LATE.jwt").read_text()
        rc, _, errtext = await asyncio.get_running_loop().run_in_executor(
            None, lambda: auth(capsys, home, "pull", "-a", "LATE"))
        assert rc == 1 and "newer than the server's" in errtext, errtext
        assert (home / "OP/accounts/LATE/LATE.jwt").read_text() == local
        rc, _, errtext = await asyncio.get_running_loop().run_in_executor(
            None, lambda: auth(capsys, home, "pull", "-a", "LATE", "--overwrite-newer"))
        assert rc == 0, errtext
        assert J.decode((home / "OP/accounts/LATE/LATE.jwt").read_text())["nats"]["limits"]["conn"] == 7
    finally:
        srv.proc.terminate()
        srv.proc.wait(10)
    # no server: one line, status 1
    rc, _, errtext = await asyncio.get_running_loop().run_in_executor(None, lambda: auth(capsys, home, "push", "-A"))
    assert rc == 1 and len(errtext.strip().splitlines()) == 1 and "could not connect" in errtext, errtext


def test_vstream_jwt_updates_the_store(capsys, tmp_path):
    home = tmp_path / "nsc"
    make_store(capsys, home)
    before = J.decode((home / "OP/accounts/APP/APP.jwt").read_text())
    assert main(["vstream", "jwt", "foo", "--regions", "west,east", "--auth-account", "APP",
                 "--auth-dir", str(home)]) == 0
    capsys.readouterr()
    after = J.decode((home / "OP/accounts/APP/APP.jwt").read_text())
    op = J.decode((home / "OP/OP.jwt").read_text())
    assert after["iss"] == op["sub"] and after["sub"] == before["sub"] and after["iat"] > before["iat"]
    assert "foo.>" in after["nats"]["mappings"]
    assert after["nats"]["limits"] == before["nats"]["limits"]  # the rest of the claims kept
    out = ok(capsys, home, "describe", "account", "--name", "APP", "--json")  # the store still checks out
    assert json.loads(out)["nats"]["mappings"] == after["nats"]["mappings"]
    rc = main(["vstream", "jwt", "foo", "--regions", "west", "--auth-account", "NOPE", "--auth-dir", str(home)])
    err = capsys.readouterr().err
    assert rc == 1 and "does not exist" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("server", ["nats-server", "rillet"])
async def test_revoked_user_refused(capsys, tmp_path, server):
    home = tmp_path / "nsc"
    make_store(capsys, home)
    ok(capsys, home, "add", "user", "--account", "APP", "--name", "dave")
    import time
    time.sleep(1.1)  # a revocation covers the JWTs issued up to its time, to the second
    ok(capsys, home, "revocations", "add-user", "--account", "APP", "--name", "alice")
    out = ok(capsys, home, "revocations", "list-users", "--account", "APP")
    alice = J.decode((home / "OP/accounts/APP/users/alice.jwt").read_text())
    assert out.startswith(f"alice\t{alice['sub']}\t")
    rc, _, err = auth(capsys, home, "generate", "creds", "--account", "APP", "--name", "alice")
    assert rc == 1 and "is revoked" in err
    ok(capsys, home, "describe", "user", "--account", "APP", "--name", "alice")  # still described
    conf = _server_conf(capsys, home, tmp_path)
    srv = ServerProcess("-c", str(conf), command=["nats-server"] if server == "nats-server" else
                        [sys.executable, "-m", "rillet.server"])
    try:
        await asyncio.get_running_loop().run_in_executor(None, srv.wait_ready)
        url = f"nats://127.0.0.1:{srv.port}"
        creds = home / "creds/OP/APP"
        err = await _expect_error(nats.connect(url, user_credentials=str(creds / "alice.creds"),
                                               allow_reconnect=False, max_reconnect_attempts=1))
        assert "authorization" in err.lower(), err
        # dave's JWT was issued before the revocation too, but only alice's key is revoked
        nc = await nats.connect(url, user_credentials=str(creds / "dave.creds"), allow_reconnect=False)
        await nc.close()
    finally:
        srv.proc.terminate()
        srv.proc.wait(10)
    ok(capsys, home, "revocations", "delete-user", "--account", "APP", "--name", "alice")
    ok(capsys, home, "generate", "creds", "--account", "APP", "--name", "alice")


@pytest.mark.parametrize("server", ["nats-server", "rillet"])
async def test_exports_and_imports(capsys, tmp_path, server):
    home = tmp_path / "nsc"
    ok(capsys, home, "add", "operator", "--name", "OP", "--sys")
    ok(capsys, home, "add", "account", "--name", "SVC")
    ok(capsys, home, "add", "export", "--account", "SVC", "--subject", "time.now", "--service")
    ok(capsys, home, "add", "export", "--account", "SVC", "--subject", "news.>")
    ok(capsys, home, "add", "user", "--account", "SVC", "--name", "svc")
    ok(capsys, home, "add", "account", "--name", "APP")
    ok(capsys, home, "add", "import", "--account", "APP", "--src-account", "SVC", "--remote-subject", "time.now",
       "--service")
    ok(capsys, home, "add", "import", "--account", "APP", "--src-account", "SVC", "--remote-subject", "news.>",
       "--local-subject", "svc.news.>")
    ok(capsys, home, "add", "user", "--account", "APP", "--name", "app")
    before = snapshot(home)
    rc, _, err = auth(capsys, home, "add", "import", "--account", "APP", "--src-account", "SVC",
                      "--remote-subject", "secret.x")
    assert rc == 1 and "no stream export covering secret.x" in err
    assert snapshot(home) == before
    conf = _server_conf(capsys, home, tmp_path)
    srv = ServerProcess("-c", str(conf), command=["nats-server"] if server == "nats-server" else
                        [sys.executable, "-m", "rillet.server"])
    try:
        await asyncio.get_running_loop().run_in_executor(None, srv.wait_ready)
        url = f"nats://127.0.0.1:{srv.port}"
        svc = await nats.connect(url, user_credentials=str(home / "creds/OP/SVC/svc.creds"), allow_reconnect=False)
        app = await nats.connect(url, user_credentials=str(home / "creds/OP/APP/app.creds"), allow_reconnect=False)
        try:
            async def answer(m: Any) -> None:
                await m.respond(b"noon")

            await svc.subscribe("time.now", cb=answer)
            await svc.flush()
            r = await request_when_served(app, "time.now")
            assert r.data == b"noon"
            got: list[tuple[str, bytes]] = []

            async def on_news(m: Any) -> None:
                got.append((m.subject, m.data))

            await app.subscribe("svc.news.>", cb=on_news)
            await app.flush()
            await asyncio.sleep(0.1)
            await svc.publish("news.sports", b"goal")
            await svc.flush()
            for _ in range(50):
                if got:
                    break
                await asyncio.sleep(0.05)
            assert got == [("svc.news.sports", b"goal")]
        finally:
            await svc.close()
            await app.close()
    finally:
        srv.proc.terminate()
        srv.proc.wait(10)


@pytest.mark.parametrize("server", ["nats-server", "rillet"])
async def test_signing_keys_and_scopes(capsys, tmp_path, server):
    home = tmp_path / "nsc"
    ok(capsys, home, "add", "operator", "--name", "OP", "--sys")
    ok(capsys, home, "add", "account", "--name", "APP")
    ok(capsys, home, "edit", "account", "--name", "APP", "--sk", "generate", "--sk", "generate")
    app = J.decode((home / "OP/accounts/APP/APP.jwt").read_text())
    sk_plain, sk_scoped = app["nats"]["signing_keys"]
    ok(capsys, home, "edit", "signing-key", "--account", "APP", "--sk", sk_scoped, "--role", "worker",
       "--allow-pub", "{{name()}}.>", "--allow-sub", "_INBOX.>")
    ok(capsys, home, "add", "user", "--account", "APP", "--name", "signed", "-K", sk_plain, "--deny-pub", "x.>")
    ok(capsys, home, "add", "user", "--account", "APP", "--name", "w1", "-K", "worker")
    rc, _, err = auth(capsys, home, "add", "user", "--account", "APP", "--name", "w2", "-K", "worker",
                      "--allow-pub", "y")
    assert rc == 1 and "takes its permissions from the scope" in err
    w1 = J.decode((home / "OP/accounts/APP/users/w1.jwt").read_text())
    assert w1["iss"] == sk_scoped and w1["nats"]["issuer_account"] == app["sub"]
    app = J.decode((home / "OP/accounts/APP/APP.jwt").read_text())
    scope = app["nats"]["signing_keys"][1]
    assert scope["kind"] == "user_scope" and scope["role"] == "worker"
    assert scope["template"]["pub"] == {"allow": ["{{name()}}.>"]}
    conf = _server_conf(capsys, home, tmp_path)
    srv = ServerProcess("-c", str(conf), command=["nats-server"] if server == "nats-server" else
                        [sys.executable, "-m", "rillet.server"])
    try:
        await asyncio.get_running_loop().run_in_executor(None, srv.wait_ready)
        url = f"nats://127.0.0.1:{srv.port}"
        errors: list[Exception] = []

        async def on_err(e: Exception) -> None:
            errors.append(e)

        nc = await nats.connect(url, user_credentials=str(home / "creds/OP/APP/w1.creds"), error_cb=on_err,
                                allow_reconnect=False)
        try:
            await nc.publish("w1.ok", b"")  # the template: w1's own subjects
            await nc.publish("w2.no", b"")
            await nc.flush()
            for _ in range(50):
                if errors:
                    break
                await asyncio.sleep(0.05)
            assert len(errors) == 1 and "w2.no" in str(errors[0]), errors
        finally:
            await nc.close()
        nc = await nats.connect(url, user_credentials=str(home / "creds/OP/APP/signed.creds"), allow_reconnect=False)
        await nc.close()
    finally:
        srv.proc.terminate()
        srv.proc.wait(10)


def test_edit_user(capsys, tmp_path):
    home = tmp_path / "nsc"
    make_store(capsys, home)
    before = J.decode((home / "OP/accounts/APP/users/alice.jwt").read_text())
    ok(capsys, home, "edit", "user", "--account", "APP", "--name", "alice", "--rm", "secret.>",
       "--allow-pub", "a.>,b.>", "--deny-sub", "c.>", "--bearer")
    after = J.decode((home / "OP/accounts/APP/users/alice.jwt").read_text())
    assert after["sub"] == before["sub"] and after["iss"] == before["iss"] and after["iat"] > before["iat"] - 1
    assert after["nats"]["pub"] == {"allow": ["a.>", "b.>"]} and after["nats"]["sub"] == {"deny": ["c.>"]}
    assert after["nats"]["bearer_token"] is True
    creds_jwt, _ = J.parse_creds((home / "creds/OP/APP/alice.creds").read_text())
    assert J.decode(creds_jwt) == after  # the creds file follows
    rc, _, err = auth(capsys, home, "edit", "user", "--account", "APP", "--name", "alice")
    assert rc == 1 and "nothing to edit" in err


@pytest.mark.parametrize("server", ["nats-server", "rillet"])
async def test_user_connection_limits(capsys, tmp_path, server):
    import datetime
    home = tmp_path / "nsc"
    ok(capsys, home, "add", "operator", "--name", "OP", "--sys")
    ok(capsys, home, "add", "account", "--name", "APP")
    now = datetime.datetime.now(datetime.timezone.utc)
    window = f"{now.hour + 2:02d}:00:00-{now.hour + 3:02d}:00:00" if now.hour <= 20 else "01:00:00-02:00:00"
    ok(capsys, home, "add", "user", "--account", "APP", "--name", "net", "--source-network", "10.99.0.0/16")
    ok(capsys, home, "add", "user", "--account", "APP", "--name", "ws", "--conn-type", "WEBSOCKET")
    ok(capsys, home, "add", "user", "--account", "APP", "--name", "later", "--time", window, "--locale", "UTC")
    ok(capsys, home, "add", "user", "--account", "APP", "--name", "fine", "--conn-type", "STANDARD",
       "--source-network", "127.0.0.0/8", "--time", "00:00:00-23:59:59", "--locale", "UTC")
    fine = J.decode((home / "OP/accounts/APP/users/fine.jwt").read_text())["nats"]
    assert fine["src"] == ["127.0.0.0/8"] and fine["allowed_connection_types"] == ["STANDARD"]
    assert fine["times"] == [{"start": "00:00:00", "end": "23:59:59"}] and fine["times_location"] == "UTC"
    out = ok(capsys, home, "describe", "user", "--account", "APP", "--name", "fine")
    assert "Source Network" in out and "127.0.0.0/8" in out and "STANDARD" in out
    before = snapshot(home)
    for args, text in ((["--source-network", "10.0.0.300/8"], "not a network"),
                       (["--conn-type", "CARRIER_PIGEON"], "one of STANDARD"),
                       (["--time", "25:00:00-26:00:00"], "not a time of day"),
                       (["--locale", "Mars/Olympus"], "not a time zone")):
        rc, _, err = auth(capsys, home, "add", "user", "--account", "APP", "--name", "bad", *args)
        assert rc == 1 and text in err, (args, err)
    assert snapshot(home) == before
    conf = _server_conf(capsys, home, tmp_path)
    srv = ServerProcess("-c", str(conf), command=["nats-server"] if server == "nats-server" else
                        [sys.executable, "-m", "rillet.server"])
    try:
        await asyncio.get_running_loop().run_in_executor(None, srv.wait_ready)
        url = f"nats://127.0.0.1:{srv.port}"
        for user in ("net", "ws", "later"):
            err = await _expect_error(nats.connect(url, user_credentials=str(home / f"creds/OP/APP/{user}.creds"),
                                                   allow_reconnect=False, max_reconnect_attempts=1))
            assert "authorization" in err.lower(), (user, err)
        nc = await nats.connect(url, user_credentials=str(home / "creds/OP/APP/fine.creds"), allow_reconnect=False)
        await nc.close()
    finally:
        srv.proc.terminate()
        srv.proc.wait(10)


@pytest.mark.parametrize("server", ["nats-server", "rillet"])
async def test_private_export_with_activation_token(capsys, tmp_path, server):
    home = tmp_path / "nsc"
    ok(capsys, home, "add", "operator", "--name", "OP", "--sys")
    ok(capsys, home, "add", "account", "--name", "SVC")
    ok(capsys, home, "add", "export", "--account", "SVC", "--subject", "vault.>", "--service", "--private")
    ok(capsys, home, "add", "user", "--account", "SVC", "--name", "svc")
    ok(capsys, home, "add", "account", "--name", "APP")
    ok(capsys, home, "add", "user", "--account", "APP", "--name", "app")
    ok(capsys, home, "add", "account", "--name", "OTHER")
    rc, _, err = auth(capsys, home, "add", "import", "--account", "APP", "--src-account", "SVC",
                      "--remote-subject", "vault.>", "--service")
    assert rc == 1 and "private" in err and "--token" in err
    tok = tmp_path / "app.tok"
    ok(capsys, home, "generate", "activation", "--account", "SVC", "--subject", "vault.>", "--service",
       "--target-account", "APP", "--output-file", str(tok))
    act = J.decode(tok.read_text())
    app = J.decode((home / "OP/accounts/APP/APP.jwt").read_text())
    svc = J.decode((home / "OP/accounts/SVC/SVC.jwt").read_text())
    assert act["sub"] == app["sub"] and act["iss"] == svc["sub"]
    assert act["nats"] == {"subject": "vault.>", "kind": "service", "type": "activation", "version": 2}
    # the token is for APP: OTHER cannot use it
    rc, _, err = auth(capsys, home, "add", "import", "--account", "OTHER", "--token", str(tok), "--service")
    assert rc == 1 and "not this one" in err
    ok(capsys, home, "add", "import", "--account", "APP", "--token", str(tok), "--service")
    imp = J.decode((home / "OP/accounts/APP/APP.jwt").read_text())["nats"]["imports"][0]
    assert imp["token"] == tok.read_text().strip() and imp["account"] == svc["sub"] and imp["subject"] == "vault.>"
    conf = _server_conf(capsys, home, tmp_path)
    srv = ServerProcess("-c", str(conf), command=["nats-server"] if server == "nats-server" else
                        [sys.executable, "-m", "rillet.server"])
    try:
        await asyncio.get_running_loop().run_in_executor(None, srv.wait_ready)
        url = f"nats://127.0.0.1:{srv.port}"
        svc_nc = await nats.connect(url, user_credentials=str(home / "creds/OP/SVC/svc.creds"), allow_reconnect=False)
        app_nc = await nats.connect(url, user_credentials=str(home / "creds/OP/APP/app.creds"), allow_reconnect=False)
        try:
            async def answer(m: Any) -> None:
                await m.respond(b"secret:" + m.subject.encode())

            await svc_nc.subscribe("vault.>", cb=answer)
            await svc_nc.flush()
            r = await request_when_served(app_nc, "vault.gold")
            assert r.data == b"secret:vault.gold"
        finally:
            await svc_nc.close()
            await app_nc.close()
    finally:
        srv.proc.terminate()
        srv.proc.wait(10)


@pytest.mark.parametrize("server", ["nats-server", "rillet"])
async def test_mappings(capsys, tmp_path, server):
    home = tmp_path / "nsc"
    ok(capsys, home, "add", "operator", "--name", "OP", "--sys")
    ok(capsys, home, "add", "account", "--name", "APP")
    ok(capsys, home, "add", "user", "--account", "APP", "--name", "u")
    ok(capsys, home, "add", "mapping", "--account", "APP", "--from", "old.*", "--to", "new.{{wildcard(1)}}")
    ok(capsys, home, "add", "mapping", "--account", "APP", "--from", "gone", "--to", "x")
    ok(capsys, home, "delete", "mapping", "--account", "APP", "--from", "gone")
    before = snapshot(home)
    rc, _, err = auth(capsys, home, "add", "mapping", "--account", "APP", "--from", "old.*", "--to", "b",
                      "--weight", "50")
    assert rc == 1 and "more than 100" in err
    assert snapshot(home) == before
    m = J.decode((home / "OP/accounts/APP/APP.jwt").read_text())["nats"]["mappings"]
    assert m == {"old.*": [{"subject": "new.{{wildcard(1)}}", "weight": 100}]}
    conf = _server_conf(capsys, home, tmp_path)
    srv = ServerProcess("-c", str(conf), command=["nats-server"] if server == "nats-server" else
                        [sys.executable, "-m", "rillet.server"])
    try:
        await asyncio.get_running_loop().run_in_executor(None, srv.wait_ready)
        nc = await nats.connect(f"nats://127.0.0.1:{srv.port}", user_credentials=str(home / "creds/OP/APP/u.creds"),
                                allow_reconnect=False)
        try:
            sub = await nc.subscribe("new.>")
            await nc.flush()
            await nc.publish("old.thing", b"moved")
            msg = await sub.next_msg(timeout=5)
            assert (msg.subject, msg.data) == ("new.thing", b"moved")
        finally:
            await nc.close()
    finally:
        srv.proc.terminate()
        srv.proc.wait(10)


@pytest.mark.parametrize("server", ["nats-server", "rillet"])
async def test_tiers_tags_and_response_permissions(capsys, tmp_path, server):
    home = tmp_path / "nsc"
    ok(capsys, home, "add", "operator", "--name", "OP", "--sys")
    ok(capsys, home, "add", "account", "--name", "APP")
    ok(capsys, home, "edit", "account", "--name", "APP", "--js-tier", "1", "--js-disk-storage", "1MiB",
       "--js-mem-storage", "1MiB", "--tag", "Team:Blue")
    before = snapshot(home)
    rc, _, err = auth(capsys, home, "edit", "account", "--name", "APP", "--js-disk-storage", "1G")
    assert rc == 1 and "per tier (R1)" in err
    assert snapshot(home) == before
    app = J.decode((home / "OP/accounts/APP/APP.jwt").read_text())["nats"]
    assert app["limits"]["tiered_limits"] == {"R1": {"disk_storage": 1024 ** 2, "mem_storage": 1024 ** 2,
                                                     "streams": -1, "consumer": -1, "max_ack_pending": -1}}
    assert "disk_storage" not in app["limits"] and app["tags"] == ["team:blue"]
    ok(capsys, home, "add", "user", "--account", "APP", "--name", "responder", "--allow-pub", "nothing.here",
       "--allow-sub", "svc", "--allow-pub-response", "1", "--response-ttl", "2s", "--tag", "Role:Svc")
    ok(capsys, home, "add", "user", "--account", "APP", "--name", "mute", "--allow-pub", "nothing.here",
       "--allow-sub", "svc")
    ok(capsys, home, "add", "user", "--account", "APP", "--name", "client")
    r = J.decode((home / "OP/accounts/APP/users/responder.jwt").read_text())["nats"]
    assert r["resp"] == {"max": 1, "ttl": 2_000_000_000} and r["tags"] == ["role:svc"]
    conf = _server_conf(capsys, home, tmp_path)
    srv = ServerProcess("-c", str(conf), command=["nats-server"] if server == "nats-server" else
                        [sys.executable, "-m", "rillet.server"])
    try:
        await asyncio.get_running_loop().run_in_executor(None, srv.wait_ready)
        url = f"nats://127.0.0.1:{srv.port}"
        creds = home / "creds/OP/APP"
        client = await nats.connect(url, user_credentials=str(creds / "client.creds"), allow_reconnect=False)
        try:
            # the tier: R1 streams have JetStream
            js = client.jetstream()
            await js.add_stream(name="T1", subjects=["t1"], num_replicas=1)
            for user, answers in (("responder", True), ("mute", False)):
                errors: list[Exception] = []

                async def on_err(e: Exception, errors: list[Exception] = errors) -> None:
                    errors.append(e)

                nc = await nats.connect(url, user_credentials=str(creds / f"{user}.creds"), allow_reconnect=False,
                                        error_cb=on_err)
                try:
                    async def reply(m: Any) -> None:
                        await m.respond(b"pong")

                    sub = await nc.subscribe("svc", cb=reply)
                    await nc.flush()
                    if answers:  # (nats-server under load once answered "no responders" right after the flush:
                        got = None  # asked again for up to 5 s)
                        for _ in range(50):
                            try:
                                got = await client.request("svc", b"ping", timeout=5)
                                break
                            except nats.errors.NoRespondersError:
                                await asyncio.sleep(0.1)
                        assert got is not None and got.data == b"pong"
                    else:  # no response permission: its reply is a publish it may not make
                        with pytest.raises(Exception):
                            await client.request("svc", b"ping", timeout=1)
                        assert any("permissions violation for publish" in str(e).lower() for e in errors), errors
                    await sub.unsubscribe()
                finally:
                    await nc.close()
        finally:
            await client.close()
    finally:
        srv.proc.terminate()
        srv.proc.wait(10)

