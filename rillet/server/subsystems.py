"""What a ``Server`` gets from outside: its links (routes, gateways, leaf nodes), JetStream and monitoring.

``rillet.server`` does not import ``rillet.cluster``, ``rillet.monitor`` or ``rillet.jetstream``, lazily or not
(tests/test_import_cycles.py):
the composition root, ``rillet.app``, builds those subsystems from the options and plugs them into the
server through the ``Subsystems`` interface below, which the server owns and calls at its few points of
contact (construction, a new account, start, a closed connection, reload, the system account's
monitoring requests). ``rillet.app.build_server(opts)`` is how a full server is made (``rillet-server``,
``python -m rillet.server``, ``rillet.app.embed``, the tests' helpers).

A ``Server`` made without one (``Server(opts)``) gets ``Core``: clients, accounts, authorization and the system
account's events; options that need links, JetStream or HTTP monitoring are refused with a clear error (at
construction and at reload), and the system account answers no monitoring data requests (``VARZ``, ``CONNZ``...).
The server reaches a running JetStream only through the object ``new_jetstream`` made (``server.jetstream``:
``start``, ``account_added``, ``enable_account``, ``configured_accounts``, ``account_limits``...).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rillet.config.options import Options
    from rillet.server.server import Server


class JetStreamService(Protocol):
    """The JetStream subsystem as the server and its monitoring use it (``server.jetstream``, made by
    ``Subsystems.new_jetstream``; implemented by ``rillet.jetstream.manager.JetStream``)."""

    accounts: dict[str, Any]  # the accounts with JetStream, by name

    async def start(self) -> None: ...

    async def shutdown(self) -> None: ...

    def signal_pull_requests(self) -> int:
        """Answer the waiting pull requests of one-replica consumers (the server is shutting down)."""

    def is_enabled(self) -> bool: ...

    def config_dict(self) -> dict[str, Any]:
        """/varz ``jetstream.config`` (and /jsz ``config``)."""

    def stats_dict(self) -> dict[str, Any]:
        """/varz ``jetstream.stats``."""

    def limits_dict(self) -> dict[str, Any]:
        """/varz ``jetstream.limits``."""

    def jsz(self, opts: dict[str, Any]) -> dict[str, Any]:
        """/jsz for the decoded query ``opts``."""

    def healthz(self, o: dict[str, Any]) -> dict[str, Any]:
        """/healthz past the JetStream-enabled checks: nats-server's HealthStatus."""

    def statsz_section(self) -> dict[str, Any] | None:
        """The ``jetstream`` section of the server's statsz in a JetStream cluster (None: not clustered)."""


class Subsystems(Protocol):
    """The server's calls into the parts the composition root wires (``rillet.app.compose.Root``)."""

    def make_links(self, server: "Server") -> None:
        """Build the route, leaf node and gateway managers the options ask for and set them on the server
        (``server.cluster``, ``server.leafnodes``, ``server.gateway``); called once while the server is
        built, before its accounts. ValueError: the server refuses to start."""

    def account_added(self, server: "Server", acc: Any) -> None:
        """Wire the links' per-account parts into an account just made (every account is the plain
        ``Account``: with gateways, ``acc.gw`` and ``acc.no_match``), before the server registers it."""

    def new_jetstream(self, server: "Server") -> JetStreamService:
        """The JetStream subsystem of the server (not started: the server awaits its ``start()``)."""

    async def start_monitor(self, server: "Server") -> None:
        """Start HTTP(S) monitoring (``http_port``/``https_port`` set): its listener goes to
        ``server.extra_listeners`` and its bound address to ``server.http_addr``/``https_addr``."""

    async def start_mqtt(self, server: "Server") -> None:
        """Start the ``mqtt {}`` listener (``server.mqtt``); ValueError/OSError: the server does not start."""

    def closed_conn_info(self, server: "Server", c: Any) -> dict[str, Any] | None:
        """What /connz?state=closed keeps of a connection that has gone (None: nothing is kept)."""

    def check_reload(self, server: "Server", new_opts: "Options") -> None:
        """Refuse (ValueError) a reload whose options the links cannot take; nothing is changed here."""

    def server_data(self, sysacc: Any, kind: str, o: dict[str, Any]) -> dict[str, Any] | None:
        """The data of a ``$SYS.REQ.SERVER.*.<kind>`` monitoring request (None: not answered);
        ValueError for bad request options (answered with a 400 error)."""

    def account_data(self, sysacc: Any, acc: str, kind: str, o: dict[str, Any]) -> dict[str, Any] | None:
        """The data of a ``$SYS.REQ.ACCOUNT.<acc>.<kind>`` monitoring request (as ``server_data``)."""


def needs_root(o: "Options") -> list[str]:
    """The options' parts that only the composition root can build (links and HTTP monitoring)."""
    out = []
    if o.cluster.port:
        out.append("cluster")
    if o.leaf is not None and (o.leaf.port or o.leaf.remotes):
        out.append("leafnodes")
    if o.gateway_opts is not None:
        out.append("gateway")
    if o.jetstream.enabled:
        out.append("jetstream")
    if o.http_port or o.https_port:
        out.append("monitoring")
    if o.mqtt.get("port"):
        out.append("mqtt")
    return out


class Core:
    """The subsystems of a server built without the composition root: none."""

    @staticmethod
    def _refuse(parts: list[str]) -> None:
        if parts:
            raise ValueError(f"{', '.join(parts)} need the composition root: build the server with "
                             f"rillet.app.build_server(opts)")

    def make_links(self, server: "Server") -> None:
        self._refuse(needs_root(server.opts))

    def account_added(self, server: "Server", acc: Any) -> None:
        return None

    def new_jetstream(self, server: "Server") -> Any:
        self._refuse(["jetstream"])

    async def start_monitor(self, server: "Server") -> None:
        self._refuse(["monitoring"])

    async def start_mqtt(self, server: "Server") -> None:
        self._refuse(["mqtt"])

    def closed_conn_info(self, server: "Server", c: Any) -> dict[str, Any] | None:
        return None

    def check_reload(self, server: "Server", new_opts: "Options") -> None:
        self._refuse(needs_root(new_opts))

    def server_data(self, sysacc: Any, kind: str, o: dict[str, Any]) -> dict[str, Any] | None:
        return None

    def account_data(self, sysacc: Any, acc: str, kind: str, o: dict[str, Any]) -> dict[str, Any] | None:
        return None
