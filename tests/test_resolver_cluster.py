"""The nats-based account resolvers across servers: a full resolver asks the others for an account it does not hold
(``$SYS.REQ.ACCOUNT.<acc>.CLAIMS.LOOKUP``), full resolvers converge by pack requests every ``interval``, and the
cache resolver (``type: cache``) fetches what it needs, holds at most ``limit`` and forgets after ``ttl``. Each
case runs on two Rillet servers, two nats-server servers, and the two kinds mixed."""
import asyncio
import os
import tempfile
import time

import nats
import pytest

from tests.helpers import ServerProcess, free_port, server_command
from tests.test_operator import Operator, creds

PAIRS = [("rillet", "rillet"), ("nats-server", "nats-server"), ("nats-server", "rillet"),
         ("rillet", "nats-server")]


def _start(kind: str, text: str, tmp_path) -> ServerProcess:
    fd, path = tempfile.mkstemp(suffix=".conf", dir=str(tmp_path))
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return ServerProcess("-c", path, command=["nats-server"] if kind == "nats-server" else server_command())


async def _ready(p: ServerProcess) -> ServerProcess:
    await asyncio.get_running_loop().run_in_executor(None, p.wait_ready)
    return p


def _conf(op: Operator, name: str, resolver: str, rport: int, routes: list[int], preload: bool) -> str:
    return op.config(resolver=resolver, preload=preload, extra=(
        f"server_name: {name}\n"
        f"cluster {{ name: c, listen: 127.0.0.1:{rport}, routes: [{', '.join(f'nats-route://127.0.0.1:{p}' for p in routes)}] }}\n"))


async def _until(cond, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out: {what}"
        await asyncio.sleep(0.1)


async def _pair(kinds, op, tmp_path, resolver_a: str, resolver_b: str):
    ra, rb = free_port(), free_port()
    a = await _ready(_start(kinds[0], _conf(op, "A", resolver_a, ra, [rb], preload=True), tmp_path))
    b = await _ready(_start(kinds[1], _conf(op, "B", resolver_b, rb, [ra], preload=False), tmp_path))
    return a, b


async def _routed(url: str, tmp_path, ukp, utok) -> None:
    """A client of B's account connects once the route is up (B asks A: before the route, nobody answers)."""
    deadline = time.monotonic() + 20
    while True:
        try:
            nc = await nats.connect(url, user_credentials=creds(tmp_path, ukp, utok), allow_reconnect=False,
                                    max_reconnect_attempts=0, connect_timeout=3)
            await nc.close()
            return
        except Exception:
            assert time.monotonic() < deadline, "the client of an account held only on A never got in on B"
            await asyncio.sleep(0.3)


@pytest.mark.parametrize("kinds", PAIRS, ids=["-".join(k) for k in PAIRS])
async def test_full_resolver_asks_the_other_server(kinds, tmp_path):
    op = Operator()
    akp, apub, _ = op.account("A")
    da, db = tmp_path / "a", tmp_path / "b"
    a, b = await _pair(kinds, op, tmp_path, f'resolver {{ type: full, dir: "{da}" }}',
                       f'resolver {{ type: full, dir: "{db}" }}')
    try:
        assert (da / f"{apub}.jwt").exists() and not (db / f"{apub}.jwt").exists()
        ukp, utok = Operator.user(akp)
        await _routed(f"nats://127.0.0.1:{b.port}", tmp_path, ukp, utok)
        assert (db / f"{apub}.jwt").read_text().strip() == (da / f"{apub}.jwt").read_text().strip()
    finally:
        b.stop()
        a.stop()


@pytest.mark.parametrize("kinds", PAIRS, ids=["-".join(k) for k in PAIRS])
async def test_full_resolvers_converge_by_pack_requests(kinds, tmp_path):
    """Without any client: B's directory gets A's accounts within a few sync intervals, and A gets B's."""
    op = Operator()
    _, apub, _ = op.account("A")
    da, db = tmp_path / "a", tmp_path / "b"
    os.makedirs(db)
    # one account only B holds (written as a full resolver writes it)
    _, bpub, btok = op.account("B")
    (db / f"{bpub}.jwt").write_text(btok)
    del op.accounts["B"]
    a, b = await _pair(kinds, op, tmp_path, f'resolver {{ type: full, dir: "{da}", interval: "1s" }}',
                       f'resolver {{ type: full, dir: "{db}", interval: "1s" }}')
    try:
        await _until(lambda: (db / f"{apub}.jwt").exists(), "A's account reached B")
        await _until(lambda: (da / f"{bpub}.jwt").exists(), "B's account reached A")
    finally:
        b.stop()
        a.stop()


@pytest.mark.parametrize("kinds", PAIRS, ids=["-".join(k) for k in PAIRS])
async def test_cache_resolver_fetches_and_forgets(kinds, tmp_path):
    op = Operator()
    akp, apub, _ = op.account("A")
    da, db = tmp_path / "a", tmp_path / "b"
    a, b = await _pair(kinds, op, tmp_path, f'resolver {{ type: full, dir: "{da}" }}',
                       f'resolver {{ type: cache, dir: "{db}", ttl: "2s" }}')
    try:
        ukp, utok = Operator.user(akp)
        await _routed(f"nats://127.0.0.1:{b.port}", tmp_path, ukp, utok)
        assert (db / f"{apub}.jwt").exists()
        await _until(lambda: not (db / f"{apub}.jwt").exists(), "the cached JWT went after its ttl")
    finally:
        b.stop()
        a.stop()


def test_cache_resolver_keeps_at_most_limit_the_least_recently_used_going(tmp_path):
    """resolver { type: cache, limit, timeout }: parsed, and the limit evicts the least recently used JWT."""
    from types import SimpleNamespace

    from rillet.config.options_builder import load_string
    from rillet.server.resolver import CacheResolver
    cfg = load_string(f'resolver {{ type: cache, dir: "{tmp_path}", limit: 2, ttl: "1m", timeout: "3s" }}\n').resolver
    assert cfg["limit"] == 2 and cfg["ttl"] == 60.0 and cfg["timeout"] == 3.0
    op = SimpleNamespace(server=SimpleNamespace(server_id="NTEST"), infos={})
    res = CacheResolver(op, cfg)
    assert res.lookup.timeout == 3.0
    o = Operator()
    keys = [o.account(n)[1:] for n in ("A", "B", "C")]
    res.store(*keys[0])
    time.sleep(0.01)
    res.store(*keys[1])
    time.sleep(0.01)
    assert res.fetch_local(keys[0][0]) == keys[0][1]  # (A used again: B is now the least recently used)
    res.store(*keys[2])
    assert sorted(res.list()) == sorted([keys[0][0], keys[2][0]])
