"""``rillet server``: run a server (the rillet-server flags) or query servers through the ``$SYS`` API."""
from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Optional

import typer

from rillet.cli.common import (CliError, Conn, connect, format_duration, human_bytes, human_count, next_msg,
                               print_fields, print_json, run, table)

HELP = """Run a server, or inspect servers through the $SYS API.

\b
`rillet server FLAGS...` runs the server: the flags are rillet-server's
(`rillet server --help` lists them). The ping/list/info commands need a
user of the system account; check connection works for any user.

\b
Examples:
  rillet server -js -sd ./data -m 8222
  rillet server ping --context sys
  rillet server list
  rillet server info --json
  rillet server check connection
"""

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None)

SYS_GUIDANCE = ("no servers answered on the $SYS API: these commands need a user of the system account "
                "(for example --context sys, or --user/--password of a system account user)")


@app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                                      "help_option_names": []})
def run_server(ctx: typer.Context) -> None:
    """Run the server with rillet-server's flags (same as `rillet server FLAGS...`).

    \b
    Example:
      rillet server run -js -p 4333
    """
    from rillet.server.main import main as server_main
    raise typer.Exit(server_main(list(ctx.args)) or 0)


async def gather(conn: Conn, subject: str, payload: Any = None, expect: int = 0) -> list[tuple[float, dict]]:
    """Publish one request and collect every reply until the timeout (or ``expect`` replies)."""
    nc = conn.nc
    inbox = nc.new_inbox()
    q: asyncio.Queue = asyncio.Queue()
    sub = await nc.subscribe(inbox, cb=q.put)
    data = b"" if payload is None else json.dumps(payload).encode()
    start = time.perf_counter()
    await nc.publish(subject, data, reply=inbox)
    await nc.flush()
    out: list[tuple[float, dict]] = []
    timeout = conn.settings.timeout
    deadline = time.monotonic() + timeout
    # after the first answer the others come fast: stop once they pause
    while not expect or len(out) < expect:
        left = deadline - time.monotonic()
        if out:
            left = min(left, 0.3)
        msg = await next_msg(q, left)
        if msg is None:
            break
        if msg.headers and msg.headers.get("Status") == "503":
            raise CliError(SYS_GUIDANCE)
        try:
            out.append((time.perf_counter() - start, json.loads(msg.data)))
        except ValueError:
            continue
    await sub.unsubscribe()
    if not out:
        perm = conn.last_permission_error()
        raise CliError(perm or SYS_GUIDANCE)
    return out


@app.command("ping")
def ping(expect: int = typer.Option(0, "--expect", help="Stop after this many servers answered"),
         as_json: bool = typer.Option(False, "--json", help="Produce JSON output")) -> None:
    """Ping all servers and show their round trip times.

    \b
    Example:
      rillet server ping --context sys --expect 3
    """
    run(_ping, expect, as_json)


async def _ping(expect: int, as_json: bool) -> None:
    conn = await connect()
    res = await gather(conn, "$SYS.REQ.SERVER.PING", expect=expect)
    await conn.nc.close()
    if as_json:
        print_json([{"server": r.get("server", {}), "rtt_ns": int(t * 1e9)} for t, r in res])
        return
    rtts = []
    for t, r in res:
        s = r.get("server", {})
        print(f"{s.get('name', '?'):<40} rtt={format_duration(t)}")
        rtts.append(t)
    print()
    print("---- ping statistics ----")
    print(f"{len(res)} replies max: {max(rtts) * 1000:.2f} min: {min(rtts) * 1000:.2f} "
          f"avg: {sum(rtts) / len(rtts) * 1000:.2f}")


@app.command("list")
def list_(expect: int = typer.Option(0, "--expect", help="Stop after this many servers answered"),
          as_json: bool = typer.Option(False, "--json", help="Produce JSON output")) -> None:
    """List the known servers with connections, subscriptions and traffic.

    \b
    Example:
      rillet server list --context sys
    """
    run(_list, expect, as_json)


app.command("ls", hidden=True)(list_)


async def _list(expect: int, as_json: bool) -> None:
    conn = await connect()
    res = await gather(conn, "$SYS.REQ.SERVER.PING", expect=expect)
    await conn.nc.close()
    if as_json:
        print_json([r for _t, r in res])
        return
    rows = []
    for t, r in sorted(res, key=lambda x: x[1].get("server", {}).get("name", "")):
        s, st = r.get("server", {}), r.get("statsz", {})
        rows.append([s.get("name"), s.get("cluster", ""), s.get("host"), s.get("ver"),
                     "yes" if s.get("jetstream") else "no", human_count(st.get("connections", 0)),
                     human_count(st.get("subscriptions", 0)), human_count(st.get("routes") and
                                                                         len(st["routes"]) or 0),
                     human_count(st.get("slow_consumers", 0)),
                     _uptime(st.get("start")), format_duration(t)])
    table(f"Server Overview ({len(res)} servers)",
          ["Name", "Cluster", "Host", "Version", "JS", "Conns", "Subs", "Routes", "Slow", "Uptime", "RTT"], rows)


def _uptime(start: str | None) -> str:
    if not start:
        return ""
    from datetime import datetime, timezone
    try:
        t = datetime.fromisoformat(start.replace("Z", "+00:00"))
    except ValueError:
        return ""
    return format_duration(int((datetime.now(timezone.utc) - t).total_seconds()))


@app.command("info")
def info(server: Optional[str] = typer.Argument(None, help="Server ID or name (default: any one server)"),
         as_json: bool = typer.Option(False, "--json", help="Produce JSON output")) -> None:
    """Show a server's configuration and statistics (its VARZ).

    \b
    Examples:
      rillet server info
      rillet server info NDJWE4SOUJOJT2TY5Y2YQEOAHGAK5VIGXTGKWJSFHVCII4ITI3LBHBUV --json
    """
    run(_info, server, as_json)


async def _info(server: str | None, as_json: bool) -> None:
    conn = await connect()
    if server and len(server) == 56 and server.startswith("N") and server.isupper():
        res = await gather(conn, f"$SYS.REQ.SERVER.{server}.VARZ", expect=1)
    else:
        res = await gather(conn, "$SYS.REQ.SERVER.PING.VARZ", {"server_name": server} if server else None,
                           expect=1)
    await conn.nc.close()
    r = res[0][1]
    if r.get("error"):
        raise CliError(r["error"].get("description", "error"))
    v = r.get("data", {})
    if as_json:
        print_json(v)
        return
    print(f"Server information for {v.get('server_name')} ({v.get('server_id')})\n")
    js = v.get("jetstream", {}) or {}
    jcfg = js.get("config", {}) or {}
    print_fields([
        ("Process Details", [("Version", v.get("version")), ("Git Commit", v.get("git_commit") or None),
                             ("Go Version", v.get("go")), ("Start Time", v.get("start")),
                             ("Uptime", v.get("uptime"))]),
        ("Connection Details", [("Auth Required", v.get("auth_required", False)),
                                ("TLS Required", v.get("tls_required", False)),
                                ("Host", f"{v.get('host')}:{v.get('port')}"),
                                ("Client URLs", ", ".join(v.get("connect_urls") or []) or None)]),
        ("JetStream", [("Domain", jcfg.get("domain") or None),
                       ("Storage Directory", jcfg.get("store_dir") or None),
                       ("Max Memory", human_bytes(jcfg.get("max_memory")) if jcfg else None),
                       ("Max File Store", human_bytes(jcfg.get("max_storage")) if jcfg else None)]
         if jcfg else []),
        ("Limits", [("Maximum Connections", human_count(v.get("max_connections"))),
                    ("Maximum Subscriptions", human_count(v.get("max_subscriptions"))),
                    ("Maximum Payload", human_bytes(v.get("max_payload"))),
                    ("Ping Interval", f"{(v.get('ping_interval') or 0) / 1e9:g}s"
                     if isinstance(v.get("ping_interval"), int) else v.get("ping_interval")),
                    ("Maximum Pings Outstanding", v.get("ping_max"))]),
        ("Statistics", [("CPU Cores", v.get("cores")), ("CPU Usage", f"{v.get('cpu', 0)}%"),
                        ("Memory", human_bytes(v.get("mem"))),
                        ("Connections", human_count(v.get("connections"))),
                        ("Subscriptions", human_count(v.get("subscriptions"))),
                        ("Messages", f"{human_count(v.get('in_msgs'))} in {human_count(v.get('out_msgs'))} out"),
                        ("Bytes", f"{human_bytes(v.get('in_bytes'))} in {human_bytes(v.get('out_bytes'))} out"),
                        ("Slow Consumers", human_count(v.get("slow_consumers")))]),
    ])


check_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                        help="Health checks with Nagios-style output and exit codes (0 OK, 1 warning, 2 critical).")
app.add_typer(check_app, name="check")


@check_app.command("connection")
def check_connection(
        connect_warning: str = typer.Option("500ms", "--connect-warning", help="Warning threshold for connecting"),
        connect_critical: str = typer.Option("1s", "--connect-critical", help="Critical threshold for connecting"),
        rtt_warning: str = typer.Option("500ms", "--rtt-warning", help="Warning threshold for the round trip"),
        rtt_critical: str = typer.Option("1s", "--rtt-critical", help="Critical threshold for the round trip"),
        req_warning: str = typer.Option("500ms", "--req-warning", help="Warning threshold for a request"),
        req_critical: str = typer.Option("1s", "--req-critical", help="Critical threshold for a request"),
) -> None:
    """Check that a connection can be made, and measure connect, RTT and request times.

    \b
    Exit status: 0 OK, 1 warning, 2 critical.

    \b
    Example:
      rillet server check connection --connect-warning 100ms
    """
    from rillet.cli.common import parse_duration as d
    raise typer.Exit(run(_check, d(connect_warning), d(connect_critical), d(rtt_warning), d(rtt_critical),
                         d(req_warning), d(req_critical)))


async def _check(cw: float, cc: float, rw: float, rc: float, qw: float, qc: float) -> int:
    from rillet.cli.common import settings
    from rillet.cli.common import import_nats
    s = settings()
    import_nats(s.url)  # not part of the connect time
    start = time.perf_counter()
    try:
        conn = await connect()
    except CliError as e:
        print(f"CRITICAL Connection CRIT:{e}")
        return 2
    ct = time.perf_counter() - start
    nc = conn.nc
    t0 = time.perf_counter()
    await nc.flush(timeout=s.timeout)
    rtt = time.perf_counter() - t0
    inbox = nc.new_inbox()

    async def echo(m: Any) -> None:
        await nc.publish(m.reply, m.data)

    await nc.subscribe(inbox, cb=echo)
    t0 = time.perf_counter()
    try:
        await nc.request(inbox, b"ping", timeout=s.timeout)
        rq = time.perf_counter() - t0
    except Exception:
        rq = None
    await nc.close()
    level = 0
    notes = []
    for label, value, w, c in (("connected to " + s.url + " in", ct, cw, cc), ("rtt time", rtt, rw, rc),
                               ("round trip took", rq, qw, qc)):
        if value is None:
            level = 2
            notes.append(f"CRIT:{label} failed")
            continue
        st = "OK"
        if value >= c:
            st, level = "CRIT", 2
        elif value >= w:
            st, level = "WARN", max(level, 1)
        notes.append(f"{st}:{label} {format_duration(value)}")
    word = {0: "OK", 1: "WARNING", 2: "CRITICAL"}[level]
    perf = (f"connect_time={ct:.4f}s;{cw:.4f};{cc:.4f} rtt={rtt:.4f}s;{rw:.4f};{rc:.4f}"
            + (f" request_time={rq:.4f}s;{qw:.4f};{qc:.4f}" if rq is not None else ""))
    print(f"{word} Connection {' '.join(notes)} | {perf}")
    return level
