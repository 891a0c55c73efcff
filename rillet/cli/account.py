"""``rillet account``: what the connected account may do."""
from __future__ import annotations

from typing import Any

import typer

from rillet.cli.common import (connect, human_bytes, human_count, limit, print_fields, print_json, run)
from rillet.cli.jsapi import api, strip_response

HELP = """Account information.

\b
Examples:
  rillet account info
  rillet account info --json
"""

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None)


@app.command("info")
def info(as_json: bool = typer.Option(False, "--json", help="Produce JSON output")) -> None:
    """Show the connection and the account's JetStream usage and limits.

    \b
    Example:
      rillet --context prod account info
    """
    run(_info, as_json)


async def _info(as_json: bool) -> None:
    from rillet.cli.common import CliError
    conn = await connect()
    nc = conn.nc
    si = nc._server_info or {}
    js: dict[str, Any] | None
    js_error = None
    try:
        js = await api(conn, "INFO")
    except CliError as e:
        js, js_error = None, str(e)
    out = {"connection": {"server_name": si.get("server_name"), "server_id": si.get("server_id"),
                          "version": si.get("version"), "client_id": si.get("client_id"),
                          "client_ip": si.get("client_ip"), "url": nc.connected_url.geturl()
                          if nc.connected_url else None, "max_payload": si.get("max_payload"),
                          "jetstream": si.get("jetstream", False)},
           "jetstream": strip_response(js) if js else None}
    if js_error:
        out["jetstream_error"] = js_error
    await nc.close()
    if as_json:
        print_json(out)
        return
    c = out["connection"]
    print("Account Information\n")
    sections: list = [("Connection", [("Client ID", c["client_id"]), ("Client IP", c["client_ip"]),
                                      ("Connected URL", c["url"]),
                                      ("Connected Address", f"{si.get('host')}:{si.get('port')}"),
                                      ("Connected Server ID", c["server_id"]),
                                      ("Connected Server Name", c["server_name"]),
                                      ("Server Version", c["version"]),
                                      ("Maximum Payload", human_bytes(c["max_payload"]))])]
    if js:
        lim = js.get("limits", {})
        api_stats = js.get("api", {})
        sections.append(("JetStream Account Information", [
            ("Domain", js.get("domain") or None),
            ("Memory", f"{human_bytes(js.get('memory', 0))} of {limit(lim.get('max_memory'), human_bytes)}"),
            ("File Storage", f"{human_bytes(js.get('storage', 0))} of {limit(lim.get('max_storage'), human_bytes)}"),
            ("Streams", f"{human_count(js.get('streams', 0))} of {limit(lim.get('max_streams'))}"),
            ("Consumers", f"{human_count(js.get('consumers', 0))} of {limit(lim.get('max_consumers'))}"),
            ("Max Ack Pending", limit(lim.get("max_ack_pending"))),
            ("Max Bytes Required", lim.get("max_bytes_required", False)),
            ("API Requests", human_count(api_stats.get("total", 0))),
            ("API Errors", human_count(api_stats.get("errors", 0)))]))
    else:
        sections.append(("JetStream Account Information", [("JetStream", f"not available: {js_error}")]))
    print_fields(sections)
