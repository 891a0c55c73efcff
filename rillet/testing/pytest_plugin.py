"""pytest fixtures that run Rillet in the test process (registered as the ``rillet`` pytest plugin by the
package's ``pytest11`` entry point: installing rillet is enough).

* ``rillet_server``: a core NATS server; ``rillet_js_server``: one with JetStream, its store in a fresh
  directory; ``rillet_cluster``: three routed JetStream servers with a meta leader; ``rillet_super_cluster``:
  two clusters of one server joined by gateways. Each is a ``rillet.testing.Servers``: ``.url`` (the
  first server's client URL), ``.urls``, ``.servers``, ``.monitor_url()``, ``.log_text()``.
* ``rillet_server_factory``: ``rillet_server_factory(jetstream=True, max_payload=1024)`` or
  ``rillet_server_factory(config="jetstream {}\\naccounts {...}")`` for servers made to measure.

Every fixture is function-scoped: each test gets its own servers and an empty store, stopped after it.
The servers run on their own event loop in a background thread, so tests may be sync or async (any
pytest-asyncio mode) and connect with any client::

    async def test_publish(rillet_js_server):
        nc = await nats.connect(rillet_js_server.url)
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest

from rillet.testing import Servers


@pytest.fixture
def rillet_server() -> Iterator[Servers]:
    """A Rillet server (core NATS) on a free port."""
    with Servers.single() as s:
        yield s


@pytest.fixture
def rillet_js_server(tmp_path: Any) -> Iterator[Servers]:
    """A Rillet server with JetStream, storing under the test's ``tmp_path``."""
    with Servers.single(jetstream=True, store_dir=str(tmp_path / "jetstream")) as s:
        yield s


@pytest.fixture
def rillet_cluster(tmp_path: Any) -> Iterator[Servers]:
    """Three Rillet servers in one JetStream cluster (routes, a meta leader known to all)."""
    with Servers.cluster(3, store_dir=str(tmp_path / "cluster")) as s:
        yield s


@pytest.fixture
def rillet_super_cluster() -> Iterator[Servers]:
    """Two clusters of one Rillet server each, joined by gateways (``.clusters``: the servers of each)."""
    with Servers.super_cluster(2, 1) as s:
        yield s


@pytest.fixture
def rillet_server_factory(tmp_path: Any) -> Iterator[Callable[..., Servers]]:
    """``make(**options)`` or ``make(config=text)``: a started server, stopped after the test. Options are
    ``rillet.config.options.Options`` fields (``jetstream=True`` with a store under ``tmp_path``)."""
    started: list[Servers] = []

    def make(**kw: Any) -> Servers:
        kw.setdefault("store_dir", str(tmp_path / f"server-{len(started)}"))
        s = Servers.single(**kw).start()
        started.append(s)
        return s
    yield make
    errors = []
    for s in reversed(started):
        try:
            s.stop()
        except Exception as e:  # (every server is stopped; the first failure is reported)
            errors.append(e)
    if errors:
        raise errors[0]
