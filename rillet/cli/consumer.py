"""``rillet consumer``: JetStream consumers through the raw ``$JS.API``."""
from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any, List, Optional

import typer

from rillet.cli.common import (CliError, Conn, confirm, connect, format_duration, human_count, limit,
                               load_json_file, next_msg, parse_duration, print_fields, print_json, run, table,
                               to_nanos)
from rillet.cli.jsapi import api, consumer_list, strip_response
from rillet.cli.stream import _ago, _complete_streams, _ts

HELP = """Manage JetStream consumers.

\b
Examples:
  rillet consumer add ORDERS NEW --filter orders.new --ack explicit --pull
  rillet consumer add ORDERS --config consumer.json   (the CONSUMER.CREATE config JSON)
  rillet consumer ls ORDERS
  rillet consumer next ORDERS NEW --count 10
  rillet consumer report ORDERS
"""

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None)
JSON_OPT = typer.Option(False, "--json", help="Produce JSON output")
STREAM_ARG = typer.Argument(..., help="Stream name", autocompletion=_complete_streams)
CONSUMER_ARG = typer.Argument(..., help="Consumer name")


def _deliver(cfg: dict[str, Any], value: str) -> None:
    v = value.strip().lower()
    for key in ("opt_start_seq", "opt_start_time"):
        cfg.pop(key, None)
    if v in ("all", "new", "last"):
        cfg["deliver_policy"] = v
    elif v in ("last-per-subject", "last_per_subject", "subject"):
        cfg["deliver_policy"] = "last_per_subject"
    elif v.isdigit():
        cfg["deliver_policy"] = "by_start_sequence"
        cfg["opt_start_seq"] = int(v)
    else:
        since = parse_duration(value)
        from datetime import datetime, timedelta, timezone
        cfg["deliver_policy"] = "by_start_time"
        cfg["opt_start_time"] = (datetime.now(timezone.utc) - timedelta(seconds=since)).isoformat().replace(
            "+00:00", "Z")


def build_config(base: dict[str, Any], f: dict[str, Any]) -> dict[str, Any]:
    cfg = dict(base)
    filters = [s.strip() for item in (f["filter"] or []) for s in item.split(",") if s.strip()]
    if f["filter"] is not None:
        cfg.pop("filter_subject", None)
        cfg.pop("filter_subjects", None)
        if len(filters) == 1:
            cfg["filter_subject"] = filters[0]
        elif filters:
            cfg["filter_subjects"] = filters
    if f["ack"] is not None:
        if f["ack"] not in ("none", "all", "explicit"):
            raise CliError(f"invalid ack policy {f['ack']!r}: use none, all or explicit")
        cfg["ack_policy"] = f["ack"]
    if f["target"] is not None:
        cfg["deliver_subject"] = f["target"]
    if f["pull"]:
        if f["target"]:
            raise CliError("--pull and --target can not be used together")
        cfg.pop("deliver_subject", None)
    if f["deliver"] is not None:
        _deliver(cfg, f["deliver"])
    if f["replay"] is not None:
        if f["replay"] not in ("instant", "original"):
            raise CliError(f"invalid replay policy {f['replay']!r}: use instant or original")
        cfg["replay_policy"] = f["replay"]
    for key, flag in (("max_deliver", "max_deliver"), ("max_ack_pending", "max_pending"),
                      ("max_waiting", "max_waiting"), ("max_batch", "max_pull_batch")):
        if f[flag] is not None:
            cfg[key] = f[flag]
    for key, flag in (("ack_wait", "wait"), ("idle_heartbeat", "heartbeat"),
                      ("inactive_threshold", "inactive_threshold")):
        if f[flag] is not None:
            cfg[key] = to_nanos(parse_duration(f[flag]))
    if f["backoff"] is not None:
        cfg["backoff"] = [to_nanos(parse_duration(x)) for x in f["backoff"].split(",") if x.strip()]
    for key, flag in (("flow_control", "flow_control"), ("headers_only", "headers_only")):
        if f[flag] is not None:
            cfg[key] = f[flag]
    if f["deliver_group"] is not None:
        cfg["deliver_group"] = f["deliver_group"]
    if f["description"] is not None:
        cfg["description"] = f["description"]
    cfg.setdefault("ack_policy", "explicit")
    cfg.setdefault("deliver_policy", "all")
    cfg.setdefault("replay_policy", "instant")
    return cfg


def _config_from_file(path: str) -> dict[str, Any]:
    data = load_json_file(path)
    if not isinstance(data, dict):
        raise CliError(f"invalid consumer configuration in {path}: not a JSON object")
    if isinstance(data.get("config"), dict):  # the whole CONSUMER.CREATE request or a CONSUMER.INFO answer
        data = data["config"]
    return data


def _config_command(update: bool):  # -> the add/edit command function
    def cmd(stream: str = STREAM_ARG,
            name: Optional[str] = typer.Argument(None, help="Consumer name (durable)"),
            config: Optional[str] = typer.Option(None, "--config", help="JSON file with the consumer configuration"),
            filter: Optional[List[str]] = typer.Option(None, "--filter", help="Filter subjects (comma separated or repeated)"),
            ack: Optional[str] = typer.Option(None, "--ack", help="Ack policy: none, all or explicit"),
            pull: bool = typer.Option(False, "--pull", help="A pull consumer (the default without --target)"),
            target: Optional[str] = typer.Option(None, "--target", help="Push consumer delivering to this subject"),
            deliver: Optional[str] = typer.Option(None, "--deliver",
                                                  help="Start: all, new, last, last-per-subject, a sequence or a duration"),
            replay: Optional[str] = typer.Option(None, "--replay", help="instant or original"),
            max_deliver: Optional[int] = typer.Option(None, "--max-deliver", help="Maximum deliveries of a message"),
            max_pending: Optional[int] = typer.Option(None, "--max-pending", help="Maximum unacknowledged messages"),
            max_waiting: Optional[int] = typer.Option(None, "--max-waiting", help="Maximum waiting pull requests"),
            max_pull_batch: Optional[int] = typer.Option(None, "--max-pull-batch", help="Maximum pull batch"),
            wait: Optional[str] = typer.Option(None, "--wait", help="Acknowledgement waiting time, e.g. 30s"),
            heartbeat: Optional[str] = typer.Option(None, "--heartbeat", help="Idle heartbeat interval (push)"),
            inactive_threshold: Optional[str] = typer.Option(None, "--inactive-threshold",
                                                             help="Remove the consumer after this long idle"),
            backoff: Optional[str] = typer.Option(None, "--backoff", help="Redelivery backoff, e.g. 1s,5s,30s"),
            flow_control: Optional[bool] = typer.Option(None, "--flow-control/--no-flow-control",
                                                        help="Flow control (push)"),
            headers_only: Optional[bool] = typer.Option(None, "--headers-only/--no-headers-only",
                                                        help="Deliver only headers"),
            deliver_group: Optional[str] = typer.Option(None, "--deliver-group", help="Queue group (push)"),
            description: Optional[str] = typer.Option(None, "--description", help="Description"),
            defaults: bool = typer.Option(False, "--defaults", help="Accept defaults (this tool never prompts)"),
            as_json: bool = JSON_OPT) -> None:
        flags = dict(filter=filter, ack=ack, pull=pull, target=target, deliver=deliver, replay=replay,
                     max_deliver=max_deliver, max_pending=max_pending, max_waiting=max_waiting,
                     max_pull_batch=max_pull_batch, wait=wait, heartbeat=heartbeat,
                     inactive_threshold=inactive_threshold, backoff=backoff, flow_control=flow_control,
                     headers_only=headers_only, deliver_group=deliver_group, description=description)
        base = _config_from_file(config) if config else None
        run(_add_or_edit, update, stream, name, base, flags, as_json)
    return cmd


async def _add_or_edit(update: bool, stream: str, name: str | None, base: dict | None, flags: dict,
                       as_json: bool) -> None:
    if base is not None:
        name = name or base.get("durable_name") or base.get("name")
    conn = await connect()
    if update:
        if not name:
            raise CliError("a consumer name is required")
        if base is None:
            base = (await api(conn, f"CONSUMER.INFO.{stream}.{name}"))["config"]
        cfg = build_config(base, flags)
        req = {"stream_name": stream, "config": cfg, "action": "update"}
        resp = await api(conn, f"CONSUMER.CREATE.{stream}.{cfg.get('name') or name}", req)
        verb = "updated"
    else:
        cfg = build_config(base or {}, flags)
        if name:
            cfg["durable_name"] = name
            cfg["name"] = name
        req = {"stream_name": stream, "config": cfg}
        if base is None or "action" not in (base or {}):
            req["action"] = "create"
        subject = f"CONSUMER.CREATE.{stream}.{name}" if name else f"CONSUMER.CREATE.{stream}"
        resp = await api(conn, subject, req)
        verb = "created"
    await conn.nc.close()
    if as_json:
        print_json(strip_response(resp))
        return
    print(f"Consumer {resp.get('name')} on stream {stream} was {verb}\n")
    show_info(resp)


def _ns(v: Any) -> str | None:
    return format_duration(v / 1e9) if v else None


def show_info(i: dict[str, Any]) -> None:
    c = i.get("config", {})
    d, a = i.get("delivered", {}), i.get("ack_floor", {})
    print(f"Information for Consumer {i.get('stream_name')} > {i.get('name')} created "
          f"{_ts(i.get('created'))}\n")
    dp = c.get("deliver_policy", "all")
    start = {"all": "All", "new": "New", "last": "Last", "last_per_subject": "Last Per Subject",
             "by_start_sequence": f"Start Sequence {c.get('opt_start_seq')}",
             "by_start_time": f"Since {c.get('opt_start_time')}"}.get(dp, dp)
    filters = c.get("filter_subjects") or ([c["filter_subject"]] if c.get("filter_subject") else [])
    print_fields([
        ("Configuration", [
            ("Name", i.get("name")), ("Durable Name", c.get("durable_name")),
            ("Description", c.get("description") or None),
            ("Delivery Subject", c.get("deliver_subject")), ("Deliver Queue Group", c.get("deliver_group")),
            ("Pull Mode", not c.get("deliver_subject")),
            ("Filter Subject", ", ".join(filters) or None),
            ("Deliver Policy", start),
            ("Ack Policy", (c.get("ack_policy") or "").capitalize()),
            ("Ack Wait", _ns(c.get("ack_wait"))),
            ("Replay Policy", (c.get("replay_policy") or "").capitalize()),
            ("Maximum Deliveries", c.get("max_deliver") if c.get("max_deliver", -1) > 0 else None),
            ("Backoff", ", ".join(format_duration(x / 1e9) for x in c["backoff"]) if c.get("backoff") else None),
            ("Max Ack Pending", human_count(c.get("max_ack_pending")) if c.get("max_ack_pending") else None),
            ("Max Waiting Pulls", human_count(c.get("max_waiting")) if c.get("max_waiting") else None),
            ("Idle Heartbeat", _ns(c.get("idle_heartbeat"))),
            ("Flow Control", c.get("flow_control") or None),
            ("Inactive Threshold", _ns(c.get("inactive_threshold")))]),
        ("State", [
            ("Last Delivered Message", f"Consumer sequence: {d.get('consumer_seq', 0)} "
                                       f"Stream sequence: {d.get('stream_seq', 0)}"),
            ("Acknowledgment Floor", f"Consumer sequence: {a.get('consumer_seq', 0)} "
                                     f"Stream sequence: {a.get('stream_seq', 0)}"),
            ("Outstanding Acks", f"{i.get('num_ack_pending', 0)} out of maximum "
                                 f"{limit(c.get('max_ack_pending'))}"),
            ("Redelivered Messages", human_count(i.get("num_redelivered", 0))),
            ("Unprocessed Messages", human_count(i.get("num_pending", 0))),
            ("Waiting Pulls", f"{i.get('num_waiting', 0)} of maximum {limit(c.get('max_waiting'))}"
             if not c.get("deliver_subject") else None),
            ("Active Interest", ("Active" if i.get("push_bound") else "No interest")
             if c.get("deliver_subject") else None)]),
    ])


@app.command("info")
def info(stream: str = STREAM_ARG, consumer: str = CONSUMER_ARG, as_json: bool = JSON_OPT) -> None:
    """Show a consumer's configuration and state.

    \b
    Example:
      rillet consumer info ORDERS NEW --json
    """
    resp = run(_call, f"CONSUMER.INFO.{stream}.{consumer}", None)
    if as_json:
        print_json(strip_response(resp))
    else:
        show_info(resp)


async def _call(subject: str, payload: Any) -> dict:
    conn = await connect()
    try:
        return await api(conn, subject, payload)
    finally:
        await conn.nc.close()


async def _list(stream: str) -> list[dict]:
    conn = await connect()
    await api(conn, f"STREAM.INFO.{stream}")
    out = await consumer_list(conn, stream)
    await conn.nc.close()
    return sorted(out, key=lambda i: i["name"])


@app.command("ls")
def ls(stream: str = STREAM_ARG, names: bool = typer.Option(False, "--names", "-n", help="Show just the names"),
       as_json: bool = JSON_OPT) -> None:
    """List the consumers of a stream.

    \b
    Example:
      rillet consumer ls ORDERS
    """
    infos = run(_list, stream)
    if as_json:
        print_json([i["name"] for i in infos])
        return
    if names:
        for i in infos:
            print(i["name"])
        return
    if not infos:
        print(f"No Consumers defined on stream {stream}")
        return
    rows = [[i["name"], i["config"].get("description", ""), _ts(i.get("created")),
             human_count(i.get("num_ack_pending", 0)), human_count(i.get("num_pending", 0)),
             _ago((i.get("delivered") or {}).get("last_active"))] for i in infos]
    table(f"Consumers ({len(infos)})", ["Name", "Description", "Created", "Ack Pending", "Unprocessed",
                                         "Last Delivery"], rows)


@app.command("report")
def report(stream: str = STREAM_ARG, as_json: bool = JSON_OPT) -> None:
    """A table of a stream's consumers with their mode, acks, pending and redelivered counts.

    \b
    Example:
      rillet consumer report ORDERS
    """
    infos = run(_list, stream)
    data, rows = [], []
    for i in infos:
        c = i["config"]
        mode = "Push" if c.get("deliver_subject") else "Pull"
        data.append({"consumer": i["name"], "mode": mode.lower(), "ack_policy": c.get("ack_policy"),
                     "ack_wait": c.get("ack_wait"), "ack_pending": i.get("num_ack_pending", 0),
                     "redelivered": i.get("num_redelivered", 0), "unprocessed": i.get("num_pending", 0),
                     "ack_floor": (i.get("ack_floor") or {}).get("stream_seq", 0),
                     "waiting": i.get("num_waiting", 0)})
        rows.append([i["name"], mode, (c.get("ack_policy") or "").capitalize(),
                     _ns(c.get("ack_wait")) or "", human_count(i.get("num_ack_pending", 0)),
                     human_count(i.get("num_redelivered", 0)), human_count(i.get("num_pending", 0)),
                     human_count((i.get("ack_floor") or {}).get("stream_seq", 0))])
    if as_json:
        print_json(data)
        return
    if not infos:
        print(f"No Consumers defined on stream {stream}")
        return
    table(f"Consumer report for {stream} with {len(infos)} consumers",
          ["Consumer", "Mode", "Ack Policy", "Ack Wait", "Ack Pending", "Redelivered", "Unprocessed",
           "Ack Floor"], rows)


@app.command("rm")
def rm(stream: str = STREAM_ARG, consumer: str = CONSUMER_ARG,
       force: bool = typer.Option(False, "--force", "-f", help="Act without a prompt")) -> None:
    """Delete a consumer.

    \b
    Example:
      rillet consumer rm ORDERS NEW -f
    """
    confirm(f"Really delete Consumer {stream} > {consumer}?", force)
    run(_call, f"CONSUMER.DELETE.{stream}.{consumer}", None)
    print(f"Deleted consumer {consumer} from stream {stream}")


def _show(msg: Any, raw: bool) -> None:
    if raw:
        sys.stdout.buffer.write(msg.data + b"\n")
        sys.stdout.flush()
        return
    meta = _meta(msg.reply)
    info = f" / stream seq {meta[0]} / consumer seq {meta[1]}" if meta else ""
    print(f"[{time.strftime('%H:%M:%S')}] subj: {msg.subject}{info}")
    hdrs = dict(msg.headers or {})
    for k, v in hdrs.items():
        print(f"{k}: {v}")
    print()
    sys.stdout.buffer.write(msg.data + b"\n\n")
    sys.stdout.flush()


def _meta(reply: str | None) -> tuple[int, int] | None:
    """Stream and consumer sequence from a ``$JS.ACK`` reply subject."""
    if not reply or not reply.startswith("$JS.ACK."):
        return None
    t = reply.split(".")
    try:
        if len(t) == 9:
            return int(t[5]), int(t[6])
        if len(t) >= 12:
            return int(t[7]), int(t[8])
    except ValueError:
        return None
    return None


async def _next_batch(conn: Conn, stream: str, consumer: str, batch: int, expires: float,
                      q: asyncio.Queue, inbox: str) -> list[Any]:
    """One pull request; the messages it brings (stops at a 404/408 status or the deadline)."""
    req = {"batch": batch, "expires": to_nanos(expires)}
    subj = f"{conn.settings.js_prefix}.CONSUMER.MSG.NEXT.{stream}.{consumer}"
    await conn.nc.publish(subj, json.dumps(req).encode(), reply=inbox)
    out: list[Any] = []
    deadline = time.monotonic() + expires + 0.5
    while len(out) < batch:
        msg = await next_msg(q, deadline - time.monotonic())
        if msg is None:
            break
        status = (msg.headers or {}).get("Status")
        if status:
            if status in ("404", "408", "409"):
                if status == "409" and not out:
                    raise CliError(f"pull request failed: {(msg.headers or {}).get('Description', status)}")
                break
            if status == "100":
                continue
            if status == "503":
                raise CliError("JetStream not enabled (no responders)")
            continue
        out.append(msg)
    return out


@app.command("next")
def next_(stream: str = STREAM_ARG, consumer: str = CONSUMER_ARG,
          count: int = typer.Option(1, "--count", help="Number of messages to fetch"),
          ack: bool = typer.Option(True, "--ack/--no-ack", help="Acknowledge the messages"),
          raw: bool = typer.Option(False, "--raw", "-r", help="Show only the bodies"),
          wait: Optional[str] = typer.Option(None, "--wait", help="How long to wait for messages (default: --timeout)"),
          ) -> None:
    """Fetch messages from a pull consumer (and acknowledge them).

    \b
    Examples:
      rillet consumer next ORDERS NEW
      rillet consumer next ORDERS NEW --count 10 --no-ack --raw
    """
    run(_next, stream, consumer, count, ack, raw, parse_duration(wait) if wait else None)


async def _next(stream: str, consumer: str, count: int, ack: bool, raw: bool, wait: float | None) -> None:
    conn = await connect()
    nc = conn.nc
    info = await api(conn, f"CONSUMER.INFO.{stream}.{consumer}")
    if info["config"].get("deliver_subject"):
        raise CliError(f"consumer {consumer} is a push consumer: use 'rillet consumer sub'")
    expires = wait or conn.settings.timeout
    q: asyncio.Queue = asyncio.Queue()
    inbox = nc.new_inbox()
    await nc.subscribe(inbox, cb=q.put)
    got = 0
    while got < count:
        msgs = await _next_batch(conn, stream, consumer, count - got, expires, q, inbox)
        if not msgs:
            break
        for m in msgs:
            got += 1
            _show(m, raw)
            if ack and m.reply and info["config"].get("ack_policy") != "none":
                await nc.request(m.reply, b"+ACK", timeout=conn.settings.timeout)
                if not raw:
                    print("Acknowledged message\n")
    await nc.close()
    if got == 0:
        raise CliError("no message received: timeout")


@app.command("sub")
def sub(stream: str = STREAM_ARG, consumer: str = CONSUMER_ARG,
        count: int = typer.Option(0, "--count", help="Quit after this many messages (0: never)"),
        ack: bool = typer.Option(True, "--ack/--no-ack", help="Acknowledge the messages"),
        raw: bool = typer.Option(False, "--raw", "-r", help="Show only the bodies"),
        ) -> None:
    """Receive messages from a consumer: push consumers by subscribing, pull consumers by pulling.

    \b
    Examples:
      rillet consumer sub ORDERS MONITOR
      rillet consumer sub ORDERS NEW --count 100 --raw
    """
    run(_sub, stream, consumer, count, ack, raw)


async def _sub(stream: str, consumer: str, count: int, ack: bool, raw: bool) -> None:
    conn = await connect(reconnect=True)
    nc = conn.nc
    info = await api(conn, f"CONSUMER.INFO.{stream}.{consumer}")
    cfg = info["config"]
    acking = ack and cfg.get("ack_policy") != "none"
    q: asyncio.Queue = asyncio.Queue()
    got = 0
    if cfg.get("deliver_subject"):
        await nc.subscribe(cfg["deliver_subject"], queue=cfg.get("deliver_group") or "", cb=q.put)
        await nc.flush()
        if not raw:
            print(f"Consuming from push consumer {consumer} on subject {cfg['deliver_subject']}")
        while not count or got < count:
            msg = await q.get()
            status = (msg.headers or {}).get("Status")
            if status:
                if status == "100" and msg.reply:  # flow control request
                    await nc.publish(msg.reply, b"")
                continue
            got += 1
            _show(msg, raw)
            if acking and msg.reply:
                await nc.publish(msg.reply, b"+ACK")
    else:
        inbox = nc.new_inbox()
        await nc.subscribe(inbox, cb=q.put)
        if not raw:
            print(f"Consuming from pull consumer {consumer}")
        while not count or got < count:
            want = min(100, count - got) if count else 100
            for m in await _next_batch(conn, stream, consumer, want, 5.0, q, inbox):
                got += 1
                _show(m, raw)
                if acking and m.reply:
                    await nc.publish(m.reply, b"+ACK")
    await nc.flush()
    await nc.close()


ADD_HELP = """Create a consumer from flags or from a JSON configuration.

\b
--config takes the consumer configuration JSON (the "config" object of the
$JS.API.CONSUMER.CREATE request, or the whole request). Without --target the
consumer is a pull consumer. This tool never prompts.

\b
Examples:
  rillet consumer add ORDERS NEW --filter orders.new --ack explicit --max-deliver 5
  rillet consumer add ORDERS MONITOR --target monitor.orders --deliver last
  rillet consumer add ORDERS --config consumer.json
"""

EDIT_HELP = """Change a consumer's configuration (fields the server allows to change).

\b
Examples:
  rillet consumer edit ORDERS NEW --max-deliver 10
  rillet consumer edit ORDERS NEW --config consumer.json
"""

app.command("add", help=ADD_HELP)(_config_command(False))
app.command("edit", help=EDIT_HELP)(_config_command(True))
