"""HTTP monitoring compatible with nats-server's (``-m`` / ``-ms``): /varz, /connz, /subsz, /routez,
/gatewayz, /leafz, /accountz, /accstatz, /jsz, /healthz, /stacksz, /ipqueuesz, /raftz, /debug/vars; and the
Rillet-specific /superz (``superz``: the health of the whole super-cluster, gathered over ``$SYS``).

``Server.start()`` calls ``await start_monitor(server)`` when ``http_port`` or ``https_port`` is set.
The listener is added to ``server.extra_listeners`` (closed on shutdown), the bound address is put in
``server.http_addr`` / ``server.https_addr`` and the ``Monitor`` object in ``server.monitor``.

JetStream hook: when ``server.jetstream`` is set, /jsz calls its ``jsz(options: dict) -> dict`` and
/healthz its ``healthz(options: dict) -> dict`` (nats-server's HealthStatus shape, with an optional
``status_code``); /varz uses its ``varz() -> dict`` for the ``jetstream`` block, or else its
``config_dict()``, ``stats_dict()`` and ``limits_dict()``. Each method is optional; without it the
configured values and zero usage are shown. ``is_enabled()`` (optional) says whether JetStream is up.
"""
from __future__ import annotations

from typing import Any

__all__ = ["Monitor", "MonitorListener", "start_monitor"]


def __getattr__(name: str) -> Any:
    # the HTTP side (http11 and the endpoints) loads when first used, not with the formatting helpers the
    # server imports at start (rillet.gocompat.monitorfmt): the server then listens for clients sooner
    if name in ("Monitor", "MonitorListener", "start_site"):
        from rillet.monitor import httpd
        return getattr(httpd, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


async def start_monitor(server: Any) -> Any:
    from rillet.monitor.httpd import Monitor, start_site
    o = server.opts
    if o.http_port and o.https_port:
        raise ValueError(f"can't specify both HTTP ({o.http_port}) and HTTPs ({o.https_port}) ports")
    monitor = Monitor(server)
    server.monitor = monitor
    listener = await start_site(server, monitor, secure=not o.http_port)
    server.extra_listeners.append(listener)
    return monitor
