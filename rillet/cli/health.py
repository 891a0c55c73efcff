"""``rillet health``: the health of a whole super-cluster, gathered over the ``$SYS`` API.

The same view as the monitoring endpoint ``/superz`` (``rillet.monitor.superz``), gathered by the CLI
itself from a connection of a system account user, so it works against Rillet and Go servers alike.
"""
from __future__ import annotations

import json
from typing import Any

import typer

from rillet.cli.common import CliError, Conn, connect, parse_duration, print_json, run

HELP = """Health of the whole super-cluster: per cluster, servers, gateways, meta leader,
streams without leader or quorum, mirror and source lag.

\b
Needs a user of the system account. Exit status: 0 healthy, 1 unhealthy,
2 when the view could not be gathered.

\b
Examples:
  rillet health --context sys
  rillet health --max-lag 100 --json
"""

SYS_GUIDANCE = ("no servers answered on the $SYS API: this command needs a user of the system account "
                "(for example --context sys, or --user/--password of a system account user)")


def health(max_lag: int = typer.Option(1000, "--max-lag", help="A mirror or source lagging more messages is unhealthy"),
           max_inactive: str = typer.Option("30s", "--max-inactive",
                                            help="A mirror or source not heard from its origin for longer is unhealthy"),
           wait: str = typer.Option("", "--wait", help="Wait at most this long for answers (default: --timeout)"),
           as_json: bool = typer.Option(False, "--json", help="Produce JSON output")) -> None:
    """Health of the whole super-cluster (exit status 1 when unhealthy).

    \b
    Examples:
      rillet health --context sys
      rillet health --max-lag 100 --json
    """
    from rillet.monitor.superz import Thresholds
    if max_lag < 0:
        raise CliError("--max-lag must not be negative", 2)
    try:
        inactive = parse_duration(max_inactive)
        limit = parse_duration(wait) if wait else None
    except CliError as e:
        raise CliError(str(e), 2) from None
    th = Thresholds(max_lag=max_lag, max_inactive_ns=int(inactive * 1e9))
    raise typer.Exit(run(_health, th, limit, as_json))


async def _health(th: Any, limit: float | None, as_json: bool) -> int:
    from rillet.monitor.superz import aggregate, text_view
    try:
        conn = await connect()
    except CliError as e:
        raise CliError(str(e), 2) from None
    try:
        col = await gather(conn, limit if limit is not None else conn.settings.timeout)
    finally:
        await conn.nc.close()
    view = aggregate(col.replies, thresholds=th)
    if as_json:
        print_json(view)
    else:
        print(text_view(view), end="")
    return 0 if view["healthy"] else 1


async def gather(conn: Conn, timeout: float) -> Any:
    """Send the ``$SYS.REQ.SERVER.PING.<KIND>`` requests and collect the answers (``superz.Collector``)."""
    from rillet.monitor.superz import KINDS, PING, REQUEST_BODIES, Collector
    nc = conn.nc
    col = Collector()
    inbox = nc.new_inbox()
    refused = []

    async def on_reply(msg: Any) -> None:
        if msg.headers and msg.headers.get("Status") == "503":
            refused.append(msg.subject)
            if len(refused) == len(KINDS):  # no responders for any request: not the system account
                col.finished = True
                col.event.set()
            return
        col.add(msg.subject.rsplit(".", 1)[-1], msg.data)

    sub = await nc.subscribe(inbox + ".*", cb=on_reply)
    for kind in KINDS:
        body = json.dumps(REQUEST_BODIES[kind]).encode() if kind in REQUEST_BODIES else b""
        await nc.publish(PING + kind, body, reply=f"{inbox}.{kind}")
    await nc.flush()
    await col.wait(timeout)
    await sub.unsubscribe()
    if not col.answered:
        raise CliError(conn.last_permission_error() or SYS_GUIDANCE, 2)
    return col
