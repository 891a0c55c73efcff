"""``rillet stream``: JetStream streams through the raw ``$JS.API``."""
from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
from typing import Any, List, Optional

import typer

from rillet.cli.common import (CliError, confirm, connect, format_duration, human_bytes, human_count, limit,
                               load_json_file, parse_duration, parse_size, print_fields, print_json, run, table,
                               to_nanos, ProgressBar)
from rillet.cli.jsapi import api, strip_response, stream_list, stream_names

HELP = """Manage JetStream streams.

\b
Examples:
  rillet stream add ORDERS --subjects 'orders.>' --storage file --max-age 1d
  rillet stream add --config orders.json          (the $JS.API.STREAM.CREATE JSON)
  rillet stream ls
  rillet stream info ORDERS --json
  rillet stream view ORDERS
  rillet stream report
"""

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None)

JSON_OPT = typer.Option(False, "--json", help="Produce JSON output")
FORCE_OPT = typer.Option(False, "--force", "-f", help="Act without a prompt")


def _complete_streams(incomplete: str) -> list[str]:
    try:
        async def names() -> list[str]:
            conn = await connect()
            try:
                return await stream_names(conn)
            finally:
                await conn.nc.close()
        return [n for n in run(names) if n.startswith(incomplete)]
    except Exception:
        return []


STREAM_ARG = typer.Argument(..., help="Stream name", autocompletion=_complete_streams)


# ---------------------------------------------------------------------------------------------------
# Configuration from flags

_RETENTION = {"limits": "limits", "interest": "interest", "work": "workqueue", "workqueue": "workqueue"}


def build_config(base: dict[str, Any], *, subjects: list[str] | None, description: str | None,
                 storage: str | None, replicas: int | None, retention: str | None, discard: str | None,
                 discard_per_subject: bool | None, max_msgs: int | None, max_msgs_per_subject: int | None,
                 max_bytes: str | None, max_age: str | None, max_msg_size: str | None, dupe_window: str | None,
                 max_consumers: int | None, allow_rollup: bool | None, deny_delete: bool | None,
                 deny_purge: bool | None, allow_direct: bool | None, no_ack: bool | None, compression: str | None,
                 first_seq: int | None, allow_msg_ttl: bool | None) -> dict[str, Any]:
    cfg = dict(base)
    if subjects is not None:
        cfg["subjects"] = [s.strip() for item in subjects for s in item.split(",") if s.strip()]
    if description is not None:
        cfg["description"] = description
    if storage is not None:
        st = storage.lower()
        if st not in ("file", "memory"):
            raise CliError(f"invalid storage {storage!r}: use file or memory")
        cfg["storage"] = st
    if replicas is not None:
        cfg["num_replicas"] = replicas
    if retention is not None:
        if retention.lower() not in _RETENTION:
            raise CliError(f"invalid retention {retention!r}: use limits, interest or work")
        cfg["retention"] = _RETENTION[retention.lower()]
    if discard is not None:
        if discard.lower() not in ("old", "new"):
            raise CliError(f"invalid discard policy {discard!r}: use old or new")
        cfg["discard"] = discard.lower()
    if discard_per_subject is not None:
        cfg["discard_new_per_subject"] = discard_per_subject
    if max_msgs is not None:
        cfg["max_msgs"] = max_msgs
    if max_msgs_per_subject is not None:
        cfg["max_msgs_per_subject"] = max_msgs_per_subject
    if max_bytes is not None:
        cfg["max_bytes"] = parse_size(max_bytes)
    if max_age is not None:
        cfg["max_age"] = to_nanos(parse_duration(max_age))
    if max_msg_size is not None:
        cfg["max_msg_size"] = parse_size(max_msg_size)
    if dupe_window is not None:
        cfg["duplicate_window"] = to_nanos(parse_duration(dupe_window))
    if max_consumers is not None:
        cfg["max_consumers"] = max_consumers
    for key, val in (("allow_rollup_hdrs", allow_rollup), ("deny_delete", deny_delete), ("deny_purge", deny_purge),
                     ("allow_direct", allow_direct), ("no_ack", no_ack), ("allow_msg_ttl", allow_msg_ttl)):
        if val is not None:
            cfg[key] = val
    if compression is not None:
        if compression.lower() not in ("none", "s2"):
            raise CliError(f"invalid compression {compression!r}: use none or s2")
        cfg["compression"] = compression.lower()
    if first_seq is not None:
        cfg["first_seq"] = first_seq
    return cfg


def _config_from_file(path: str) -> dict[str, Any]:
    data = load_json_file(path)
    if not isinstance(data, dict):
        raise CliError(f"invalid stream configuration in {path}: not a JSON object")
    if isinstance(data.get("config"), dict) and "name" not in data:  # a whole STREAM.INFO answer
        data = data["config"]
    return data


def _opts(**kw: Any) -> dict[str, Any]:
    return kw


CONFIG_HELP = "JSON file with the stream configuration (the $JS.API.STREAM.CREATE body); - for stdin"


def _config_command(update: bool):  # -> callable with the shared flags
    def cmd(name: Optional[str] = typer.Argument(None, help="Stream name (default: the name in --config)",
                                                 autocompletion=_complete_streams),
            config: Optional[str] = typer.Option(None, "--config", help=CONFIG_HELP),
            subjects: Optional[List[str]] = typer.Option(None, "--subjects", help="Subjects, comma separated or repeated"),
            description: Optional[str] = typer.Option(None, "--description", help="Description"),
            storage: Optional[str] = typer.Option(None, "--storage", help="file or memory"),
            replicas: Optional[int] = typer.Option(None, "--replicas", help="Number of replicas"),
            retention: Optional[str] = typer.Option(None, "--retention", help="limits, interest or work"),
            discard: Optional[str] = typer.Option(None, "--discard", help="Discard policy when full: old or new"),
            discard_per_subject: Optional[bool] = typer.Option(None, "--discard-per-subject/--no-discard-per-subject",
                                                               help="Discard new messages per subject"),
            max_msgs: Optional[int] = typer.Option(None, "--max-msgs", help="Maximum messages (-1 unlimited)"),
            max_msgs_per_subject: Optional[int] = typer.Option(None, "--max-msgs-per-subject",
                                                               help="Maximum messages per subject"),
            max_bytes: Optional[str] = typer.Option(None, "--max-bytes", help="Maximum size, e.g. 1GB (-1 unlimited)"),
            max_age: Optional[str] = typer.Option(None, "--max-age", help="Maximum message age, e.g. 1d (0 unlimited)"),
            max_msg_size: Optional[str] = typer.Option(None, "--max-msg-size", help="Maximum message size"),
            dupe_window: Optional[str] = typer.Option(None, "--dupe-window", help="Duplicate tracking window, e.g. 2m"),
            max_consumers: Optional[int] = typer.Option(None, "--max-consumers", help="Maximum consumers"),
            allow_rollup: Optional[bool] = typer.Option(None, "--allow-rollup/--no-allow-rollup",
                                                        help="Allow Nats-Rollup headers"),
            deny_delete: Optional[bool] = typer.Option(None, "--deny-delete/--allow-delete",
                                                       help="Deny message deletion"),
            deny_purge: Optional[bool] = typer.Option(None, "--deny-purge/--allow-purge", help="Deny purges"),
            allow_direct: Optional[bool] = typer.Option(None, "--allow-direct/--no-allow-direct",
                                                        help="Allow direct get"),
            no_ack: Optional[bool] = typer.Option(None, "--no-ack/--ack", help="Do not acknowledge publishes"),
            compression: Optional[str] = typer.Option(None, "--compression", help="none or s2"),
            first_seq: Optional[int] = typer.Option(None, "--first-sequence", help="First sequence number"),
            allow_msg_ttl: Optional[bool] = typer.Option(None, "--allow-msg-ttl/--no-allow-msg-ttl",
                                                         help="Allow per-message TTLs"),
            defaults: bool = typer.Option(False, "--defaults", help="Accept defaults (this tool never prompts)"),
            as_json: bool = JSON_OPT) -> None:
        flags = _opts(subjects=subjects, description=description, storage=storage, replicas=replicas,
                      retention=retention, discard=discard, discard_per_subject=discard_per_subject,
                      max_msgs=max_msgs, max_msgs_per_subject=max_msgs_per_subject, max_bytes=max_bytes,
                      max_age=max_age, max_msg_size=max_msg_size, dupe_window=dupe_window,
                      max_consumers=max_consumers, allow_rollup=allow_rollup, deny_delete=deny_delete,
                      deny_purge=deny_purge, allow_direct=allow_direct, no_ack=no_ack, compression=compression,
                      first_seq=first_seq, allow_msg_ttl=allow_msg_ttl)
        base = _config_from_file(config) if config else None
        run(_add_or_edit, update, name, base, flags, as_json)
    return cmd


async def _add_or_edit(update: bool, name: str | None, base: dict | None, flags: dict, as_json: bool) -> None:
    if base is not None:
        if name and base.get("name") and base["name"] != name:
            base = {**base, "name": name}
        name = name or base.get("name")
    if not name:
        raise CliError("a stream name is required (as an argument or in the --config file)")
    conn = await connect()
    if update:
        if base is None:
            cur = await api(conn, f"STREAM.INFO.{name}")
            base = cur["config"]
        cfg = build_config(base, **flags)
        cfg["name"] = name
        resp = await api(conn, f"STREAM.UPDATE.{name}", cfg)
        verb = "updated"
    else:
        cfg = build_config(base or {}, **flags)
        cfg["name"] = name
        resp = await api(conn, f"STREAM.CREATE.{name}", cfg)
        verb = "created"
    await conn.nc.close()
    if as_json:
        print_json(strip_response(resp))
        return
    print(f"Stream {name} was {verb}\n")
    show_info(resp)


# ---------------------------------------------------------------------------------------------------
# Info / ls / report


def _ns(v: Any) -> str:
    return format_duration(v / 1e9) if v else "unlimited"


def show_info(info: dict[str, Any]) -> None:
    c = info.get("config", {})
    st = info.get("state", {})
    created = info.get("created", "")
    print(f"Information for Stream {c.get('name')} created {created[:19].replace('T', ' ')}\n")
    sources = [s.get("name") for s in c.get("sources") or []]
    print_fields([
        (None, [("Description", c.get("description") or None),
                ("Subjects", ", ".join(c.get("subjects") or []) or None),
                ("Replicas", c.get("num_replicas", 1)),
                ("Storage", (c.get("storage") or "file").capitalize()),
                ("Mirror", (c.get("mirror") or {}).get("name")),
                ("Sources", ", ".join(sources) or None)]),
        ("Options", [("Retention", {"limits": "Limits", "interest": "Interest", "workqueue": "WorkQueue"}
                      .get(c.get("retention", "limits"), c.get("retention"))),
                     ("Acknowledgments", not c.get("no_ack", False)),
                     ("Discard Policy", (c.get("discard") or "old").capitalize()
                      + (" Per Subject" if c.get("discard_new_per_subject") else "")),
                     ("Duplicate Window", _ns(c.get("duplicate_window"))),
                     ("Direct Get", c.get("allow_direct", False)),
                     ("Allows Msg Delete", not c.get("deny_delete", False)),
                     ("Allows Purge", not c.get("deny_purge", False)),
                     ("Allows Rollups", c.get("allow_rollup_hdrs", False)),
                     ("Allows Per-Message TTL", c.get("allow_msg_ttl", False)),
                     ("Compression", c.get("compression") if c.get("compression") not in (None, "none") else None)]),
        ("Limits", [("Maximum Messages", limit(c.get("max_msgs"))),
                    ("Maximum Per Subject", limit(c.get("max_msgs_per_subject"))),
                    ("Maximum Bytes", limit(c.get("max_bytes"), human_bytes)),
                    ("Maximum Age", _ns(c.get("max_age"))),
                    ("Maximum Message Size", limit(c.get("max_msg_size"), human_bytes)),
                    ("Maximum Consumers", limit(c.get("max_consumers")))]),
        ("State", [("Messages", human_count(st.get("messages", 0))),
                   ("Bytes", human_bytes(st.get("bytes", 0))),
                   ("First Sequence", f"{st.get('first_seq', 0)}"
                    + (f" @ {st['first_ts'][:19].replace('T', ' ')}" if st.get("first_ts") and st.get("messages")
                       else "")),
                   ("Last Sequence", f"{st.get('last_seq', 0)}"
                    + (f" @ {st['last_ts'][:19].replace('T', ' ')}" if st.get("last_ts") and st.get("last_seq")
                       else "")),
                   ("Deleted Messages", human_count(st.get("num_deleted")) if st.get("num_deleted") else None),
                   ("Active Consumers", human_count(st.get("consumer_count", 0))),
                   ("Number of Subjects", human_count(st.get("num_subjects")) if st.get("num_subjects") else None)]),
    ])


@app.command("info")
def info(stream: str = STREAM_ARG, as_json: bool = JSON_OPT) -> None:
    """Show a stream's configuration and state.

    \b
    Examples:
      rillet stream info ORDERS
      rillet stream info ORDERS --json | jq .state.messages
    """
    run(_info, stream, as_json)


async def _info(stream: str, as_json: bool) -> None:
    conn = await connect()
    resp = await api(conn, f"STREAM.INFO.{stream}")
    await conn.nc.close()
    if as_json:
        print_json(strip_response(resp))
    else:
        show_info(resp)


@app.command("ls")
def ls(subject: Optional[str] = typer.Option(None, "--subject", help="Only streams that hold this subject"),
       names: bool = typer.Option(False, "--names", "-n", help="Show just the names"),
       as_json: bool = JSON_OPT) -> None:
    """List streams.

    \b
    Examples:
      rillet stream ls
      rillet stream ls --names --subject 'orders.>'
      rillet stream ls --json
    """
    run(_ls, subject, names, as_json)


def _ts(v: str | None) -> str:
    return (v or "")[:19].replace("T", " ")


def _ago(ts: str | None) -> str:
    if not ts or ts.startswith("0001"):
        return "never"
    from datetime import datetime, timezone
    try:
        t = datetime.fromisoformat(ts[:26].rstrip("Z") + "+00:00")
    except ValueError:
        return ts
    return format_duration(max(0, int((datetime.now(timezone.utc) - t).total_seconds())))


async def _ls(subject: str | None, names: bool, as_json: bool) -> None:
    conn = await connect()
    infos = await stream_list(conn, subject)
    await conn.nc.close()
    infos.sort(key=lambda i: i["config"]["name"])
    if as_json:
        print_json([i["config"]["name"] for i in infos])
        return
    if names:
        for i in infos:
            print(i["config"]["name"])
        return
    if not infos:
        print("No Streams defined")
        return
    rows = [[i["config"]["name"], i["config"].get("description", ""), _ts(i.get("created")),
             human_count(i["state"].get("messages", 0)), human_bytes(i["state"].get("bytes", 0)),
             _ago(i["state"].get("last_ts") if i["state"].get("last_seq") else None)] for i in infos]
    table(f"Streams ({len(infos)})", ["Name", "Description", "Created", "Messages", "Size", "Last Message"], rows)


@app.command("report")
def report(as_json: bool = JSON_OPT) -> None:
    """A table of all streams with their storage, consumers, messages and sizes.

    \b
    Example:
      rillet stream report
    """
    run(_report, as_json)


async def _report(as_json: bool) -> None:
    conn = await connect()
    infos = await stream_list(conn)
    await conn.nc.close()
    infos.sort(key=lambda i: i["config"]["name"])
    rows = []
    data = []
    for i in infos:
        c, s = i["config"], i["state"]
        lost = (s.get("lost") or {}).get("msgs") or []
        data.append({"stream": c["name"], "storage": c.get("storage"), "consumers": s.get("consumer_count", 0),
                     "messages": s.get("messages", 0), "bytes": s.get("bytes", 0), "lost": len(lost),
                     "deleted": s.get("num_deleted", 0), "replicas": c.get("num_replicas", 1)})
        rows.append([c["name"], (c.get("storage") or "file").capitalize(), human_count(s.get("consumer_count", 0)),
                     human_count(s.get("messages", 0)), human_bytes(s.get("bytes", 0)), human_count(len(lost)),
                     human_count(s.get("num_deleted", 0)), c.get("num_replicas", 1)])
    if as_json:
        print_json(data)
        return
    if not infos:
        print("No Streams defined")
        return
    table("Stream Report", ["Stream", "Storage", "Consumers", "Messages", "Bytes", "Lost", "Deleted", "Replicas"],
          rows)


@app.command("rm")
def rm(stream: str = STREAM_ARG, force: bool = FORCE_OPT) -> None:
    """Delete a stream and all its messages.

    \b
    Example:
      rillet stream rm ORDERS -f
    """
    confirm(f"Really delete Stream {stream}?", force)
    run(_simple, f"STREAM.DELETE.{stream}", None, None)


async def _simple(subject: str, payload: Any, message: str | None) -> dict:
    conn = await connect()
    resp = await api(conn, subject, payload)
    await conn.nc.close()
    if message:
        print(message)
    return resp


@app.command("purge")
def purge(stream: str = STREAM_ARG,
          subject: Optional[str] = typer.Option(None, "--subject", help="Only messages on this subject"),
          seq: Optional[int] = typer.Option(None, "--seq", help="Purge up to (not including) this sequence"),
          keep: Optional[int] = typer.Option(None, "--keep", help="Keep this many newest messages"),
          force: bool = FORCE_OPT, as_json: bool = JSON_OPT) -> None:
    """Remove messages from a stream (all, or by subject, sequence or count to keep).

    \b
    Examples:
      rillet stream purge ORDERS -f
      rillet stream purge ORDERS --subject orders.old --keep 10 -f
    """
    if seq is not None and keep is not None:
        raise CliError("--seq and --keep can not be used together")
    confirm(f"Really purge Stream {stream}?", force)
    req: dict[str, Any] = {}
    if subject:
        req["filter"] = subject
    if seq is not None:
        req["seq"] = seq
    if keep is not None:
        req["keep"] = keep
    resp = run(_simple, f"STREAM.PURGE.{stream}", req or None, None)
    if as_json:
        print_json(strip_response(resp))
    else:
        print(f"Purged {resp.get('purged', 0)} messages from stream {stream}")


@app.command("rmm")
def rmm(stream: str = STREAM_ARG, seq: int = typer.Argument(..., help="Sequence of the message to delete"),
        erase: bool = typer.Option(False, "--erase", help="Overwrite the message's data"),
        force: bool = FORCE_OPT) -> None:
    """Delete one message from a stream.

    \b
    Example:
      rillet stream rmm ORDERS 12 -f
    """
    confirm(f"Really remove message {seq} from Stream {stream}?", force)
    req: dict[str, Any] = {"seq": seq}
    if not erase:
        req["no_erase"] = True
    run(_simple, f"STREAM.MSG.DELETE.{stream}", req, f"Removed message {seq} from stream {stream}")


# ---------------------------------------------------------------------------------------------------
# Messages: get / view


def decode_msg(m: dict[str, Any]) -> tuple[bytes, dict[str, list[str]]]:
    data = base64.b64decode(m.get("data") or "")
    headers: dict[str, list[str]] = {}
    if m.get("hdrs"):
        raw = base64.b64decode(m["hdrs"]).decode("utf-8", "replace")
        lines = raw.split("\r\n")
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers.setdefault(k.strip(), []).append(v.strip())
    return data, headers


def show_msg(m: dict[str, Any], stream: str, raw: bool, ident: str | None = None) -> None:
    data, headers = decode_msg(m)
    if raw:
        sys.stdout.buffer.write(data + b"\n")
        return
    if ident:
        print(f"{ident} Received: {_ts(m.get('time'))}\n")
    else:
        print(f"Item: {stream}#{m.get('seq')} received {_ts(m.get('time'))} on Subject {m.get('subject')}\n")
    if headers:
        print("Headers:\n")
        for k, vs in headers.items():
            for v in vs:
                print(f"  {k}: {v}")
        print()
    sys.stdout.buffer.write(data + b"\n\n")
    sys.stdout.flush()


def msg_json(m: dict[str, Any]) -> dict[str, Any]:
    data, headers = decode_msg(m)
    out = {"subject": m.get("subject"), "seq": m.get("seq"), "time": m.get("time"), "headers": headers or None}
    try:
        out["data"] = data.decode()
    except UnicodeDecodeError:
        out["data_base64"] = m.get("data")
    return out


@app.command("get")
def get(stream: str = STREAM_ARG,
        seq: Optional[int] = typer.Argument(None, help="Sequence of the message"),
        last_for: Optional[str] = typer.Option(None, "--last-for", "-S", help="The last message on this subject"),
        raw: bool = typer.Option(False, "--raw", help="Show only the body"),
        as_json: bool = JSON_OPT) -> None:
    """Show one message of a stream, by sequence or as the last message of a subject.

    \b
    Examples:
      rillet stream get ORDERS 12
      rillet stream get ORDERS --last-for orders.new --json
    """
    if (seq is None) == (last_for is None):
        raise CliError("give either a sequence or --last-for SUBJECT")
    req = {"seq": seq} if seq is not None else {"last_by_subj": last_for}
    resp = run(_simple, f"STREAM.MSG.GET.{stream}", req, None)
    m = resp["message"]
    if as_json:
        print_json(msg_json(m))
    else:
        show_msg(m, stream, raw)


@app.command("view")
def view(stream: str = STREAM_ARG,
         page: int = typer.Argument(10, help="Messages per page"),
         subject: Optional[str] = typer.Option(None, "--subject", help="Only messages on this subject (wildcards ok)"),
         start: int = typer.Option(1, "--id", help="Start at this sequence"),
         count: int = typer.Option(0, "--count", help="Stop after this many messages (0: all)"),
         raw: bool = typer.Option(False, "--raw", help="Show only the bodies"),
         as_json: bool = JSON_OPT) -> None:
    """Page through a stream's messages.

    \b
    On a terminal it asks before each next page; otherwise it prints them all.

    \b
    Examples:
      rillet stream view ORDERS
      rillet stream view ORDERS 25 --subject 'orders.eu.*' --id 100
    """
    if page < 1:
        raise CliError("the page size must be at least 1")
    run(_view, stream, page, subject, start, count, raw, as_json)


async def _view(stream: str, page: int, subject: str | None, start: int, count: int, raw: bool,
                as_json: bool) -> None:
    from rillet.cli.jsapi import JSAPIError
    conn = await connect()
    await api(conn, f"STREAM.INFO.{stream}")  # a clear "stream not found" first
    seq, shown, in_page = max(1, start), 0, 0
    interactive = sys.stdin.isatty() and sys.stdout.isatty() and not as_json
    while not count or shown < count:
        try:
            resp = await api(conn, f"STREAM.MSG.GET.{stream}", {"seq": seq, "next_by_subj": subject or ">"})
        except JSAPIError as e:
            if e.err_code == 10037:  # no message found
                break
            raise
        m = resp["message"]
        shown += 1
        in_page += 1
        if as_json:
            print(json.dumps(msg_json(m)))
        else:
            show_msg(m, stream, raw, ident=f"[{shown}] Subject: {m.get('subject')} Sequence: {m.get('seq')}")
        seq = m["seq"] + 1
        if interactive and in_page >= page:
            sys.stdout.write("Next Page? [Y/n] ")
            sys.stdout.flush()
            answer = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            if answer.strip().lower() in ("n", "no", "q"):
                break
            in_page = 0
    await conn.nc.close()
    if shown == 0 and not as_json:
        print("No messages")
    elif not as_json and not raw:
        print("Reached the end of the stream" if not count or shown < count else f"Shown {shown} messages")


# ---------------------------------------------------------------------------------------------------
# Backup / restore


@app.command("backup")
def backup(stream: str = STREAM_ARG,
           directory: str = typer.Argument(..., help="Directory to write the backup into"),
           no_consumers: bool = typer.Option(False, "--no-consumers", help="Leave the consumers out"),
           progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar")) -> None:
    """Save a stream (configuration, state and data) into a directory.

    \b
    Writes backup.json (the configuration and state) and stream.tar.s2 (the
    server's snapshot archive, as the server sent it).

    \b
    Example:
      rillet stream backup ORDERS ./backups/orders
    """
    run(_backup, stream, directory, no_consumers, progress)


async def _backup(stream: str, directory: str, no_consumers: bool, progress: bool) -> None:
    conn = await connect()
    nc = conn.nc
    if os.path.exists(os.path.join(directory, "backup.json")):
        raise CliError(f"{directory} already holds a backup")
    os.makedirs(directory, exist_ok=True)
    inbox = nc.new_inbox()
    q: asyncio.Queue = asyncio.Queue()
    sub = await nc.subscribe(inbox, cb=q.put)
    resp = await api(conn, f"STREAM.SNAPSHOT.{stream}", {"deliver_subject": inbox, "no_consumers": no_consumers,
                                                         "chunk_size": 128 * 1024})
    meta = {"config": resp.get("config"), "state": resp.get("state")}
    total = 0
    bar = ProgressBar(f"Backing up {stream}", None, progress)
    with open(os.path.join(directory, "stream.tar.s2"), "wb") as f:
        while True:
            try:
                msg = await asyncio.wait_for(q.get(), max(conn.settings.timeout, 10))
            except asyncio.TimeoutError:
                raise CliError("timeout waiting for snapshot data") from None
            status = (msg.headers or {}).get("Status")
            if status:
                if status == "204":
                    break
                raise CliError(f"snapshot failed: {status} {(msg.headers or {}).get('Description', '')}".strip())
            if not msg.data and not msg.reply:
                break
            f.write(msg.data)
            total += len(msg.data)
            bar.advance(len(msg.data))
            if msg.reply:
                await nc.publish(msg.reply, b"")
    bar.close()
    await sub.unsubscribe()
    with open(os.path.join(directory, "backup.json"), "w") as f:
        json.dump(meta, f, indent=2)
    await nc.close()
    st = meta.get("state") or {}
    print(f"Backed up stream {stream}: {human_count(st.get('messages', 0))} messages, "
          f"{human_bytes(total)} of snapshot data in {directory}")


@app.command("restore")
def restore(directory: str = typer.Argument(..., help="Directory written by 'stream backup'"),
            name: Optional[str] = typer.Option(None, "--name", help="Restore under this name (default: the original)"),
            progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar"),
            as_json: bool = JSON_OPT) -> None:
    """Restore a stream from a directory written by 'stream backup'.

    \b
    Example:
      rillet stream restore ./backups/orders
    """
    run(_restore, directory, name, progress, as_json)


async def _restore(directory: str, name: str | None, progress: bool, as_json: bool) -> None:
    meta = load_json_file(os.path.join(directory, "backup.json"))
    path = os.path.join(directory, "stream.tar.s2")
    if not os.path.exists(path):
        raise CliError(f"{path}: no such file or directory")
    cfg = dict(meta.get("config") or {})
    if name:
        cfg["name"] = name
    stream = cfg.get("name")
    if not stream:
        raise CliError(f"invalid backup in {directory}: no stream name")
    conn = await connect()
    nc = conn.nc
    resp = await api(conn, f"STREAM.RESTORE.{stream}", {"config": cfg, "state": meta.get("state")})
    target = resp.get("deliver_subject")
    size = os.path.getsize(path)
    bar = ProgressBar(f"Restoring {stream}", size, progress)
    with open(path, "rb") as f:
        while True:
            chunk = f.read(128 * 1024)
            if not chunk:
                break
            await nc.request(target, chunk, timeout=max(conn.settings.timeout, 10))
            bar.advance(len(chunk))
    bar.close()
    final = await nc.request(target, b"", timeout=max(conn.settings.timeout, 30))
    await nc.close()
    out = json.loads(final.data or b"{}")
    if out.get("error"):
        raise CliError(out["error"].get("description", "restore failed"))
    if as_json:
        print_json(strip_response(out))
        return
    print(f"Restored stream {stream}\n")
    show_info(out)


ADD_HELP = """Create a stream from flags or from a JSON configuration.

\b
The --config file holds the same JSON as the $JS.API.STREAM.CREATE request
(for example {"name": "ORDERS", "subjects": ["orders.>"], "storage": "file"});
flags given with it override its fields. This tool never prompts: unset
fields take the server's defaults.

\b
Examples:
  rillet stream add ORDERS --subjects 'orders.>' --max-age 7d --dupe-window 2m
  rillet stream add ORDERS --subjects 'orders.*' --retention work --storage memory
  rillet stream add --config orders.json
"""

EDIT_HELP = """Change a stream's configuration: flags change single fields, --config replaces it.

\b
Examples:
  rillet stream edit ORDERS --max-msgs 1000000
  rillet stream edit ORDERS --subjects 'orders.>,returns.>'
  rillet stream edit --config orders.json
"""

app.command("add", help=ADD_HELP)(_config_command(False))
app.command("edit", help=EDIT_HELP)(_config_command(True))
