"""``rillet kv``: JetStream key-value buckets (nats-py's KeyValue API)."""
from __future__ import annotations

import sys
from datetime import datetime, timezone
from typing import Any, Optional

import typer

from rillet.cli.common import (CliError, confirm, connect, format_duration, human_bytes, human_count, limit,
                               parse_duration, parse_size, print_fields, print_json, run, table)
from rillet.cli.jsapi import api, bucket_api, stream_list

HELP = """Manage JetStream key-value buckets.

\b
Examples:
  rillet kv add CONFIG --history 5 --ttl 1h
  rillet kv put CONFIG color blue
  rillet kv get CONFIG color
  rillet kv history CONFIG color
  rillet kv watch CONFIG 'color.>'
  rillet kv ls
"""

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None)
JSON_OPT = typer.Option(False, "--json", help="Produce JSON output")
FORCE_OPT = typer.Option(False, "--force", "-f", help="Act without a prompt")
BUCKET_ARG = typer.Argument(..., help="Bucket name")
KEY_ARG = typer.Argument(..., help="Key")


async def _bucket(bucket: str) -> tuple[Any, Any]:
    conn = await connect()
    js = conn.nc.jetstream(domain=conn.settings.js_domain or None)
    try:
        kv = await js.key_value(bucket)
    except Exception as e:
        await conn.nc.close()
        if type(e).__name__ in ("BucketNotFoundError", "NotFoundError"):
            raise CliError(f"bucket {bucket} not found") from None
        raise
    return conn, kv


def _when(ns: Any) -> str:
    if not ns:
        return ""
    if isinstance(ns, datetime):
        return ns.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    t = ns if isinstance(ns, (int, float)) else 0
    return datetime.fromtimestamp(t / 1e9 if t > 1e12 else t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _read_value(value: Optional[str]) -> bytes:
    if value is not None:
        return value.encode()
    if sys.stdin.isatty():
        raise CliError("give a value, or pipe it on stdin")
    return sys.stdin.buffer.read()


@app.command("add")
def add(bucket: str = BUCKET_ARG,
        history: int = typer.Option(1, "--history", help="Values kept per key"),
        ttl: Optional[str] = typer.Option(None, "--ttl", help="How long values live, e.g. 1h"),
        max_value_size: Optional[str] = typer.Option(None, "--max-value-size", help="Largest value"),
        max_bucket_size: Optional[str] = typer.Option(None, "--max-bucket-size", help="Largest bucket size"),
        storage: str = typer.Option("file", "--storage", help="file or memory"),
        replicas: int = typer.Option(1, "--replicas", help="Number of replicas"),
        description: Optional[str] = typer.Option(None, "--description", help="Description"),
        as_json: bool = JSON_OPT) -> None:
    """Create a bucket.

    \b
    Examples:
      rillet kv add CONFIG
      rillet kv add SESSIONS --ttl 30m --history 1 --storage memory
    """
    if storage not in ("file", "memory"):
        raise CliError(f"invalid storage {storage!r}: use file or memory")
    run(_add, bucket, history, parse_duration(ttl) if ttl else None,
        parse_size(max_value_size) if max_value_size else None,
        parse_size(max_bucket_size) if max_bucket_size else None, storage, replicas, description, as_json)


async def _add(bucket: str, history: int, ttl: float | None, mvs: int | None, mbs: int | None, storage: str,
               replicas: int, description: str | None, as_json: bool) -> None:
    from nats.js.api import KeyValueConfig, StorageType
    conn = await connect()
    js = conn.nc.jetstream(domain=conn.settings.js_domain or None)
    await js.create_key_value(KeyValueConfig(bucket=bucket, history=history, ttl=ttl, max_value_size=mvs,
                                             max_bytes=mbs, storage=StorageType(storage), replicas=replicas,
                                             description=description))
    info = await api(conn, f"STREAM.INFO.KV_{bucket}")
    await conn.nc.close()
    _show_status(info, as_json)


def _status_dict(info: dict[str, Any]) -> dict[str, Any]:
    c, s = info["config"], info["state"]
    return {"bucket": c["name"][3:], "description": c.get("description", ""), "values": s.get("messages", 0),
            "history": c.get("max_msgs_per_subject", 1), "ttl": (c.get("max_age") or 0) / 1e9,
            "max_value_size": c.get("max_msg_size", -1), "max_bucket_size": c.get("max_bytes", -1),
            "storage": c.get("storage"), "replicas": c.get("num_replicas", 1), "bytes": s.get("bytes", 0),
            "backing_store": c["name"], "created": info.get("created"), "last_ts": s.get("last_ts")}


def _show_status(info: dict[str, Any], as_json: bool) -> None:
    d = _status_dict(info)
    if as_json:
        print_json(d)
        return
    print(f"Information for Key-Value Store Bucket {d['bucket']} created {(d['created'] or '')[:19].replace('T', ' ')}\n")
    print_fields([
        ("Configuration", [("Bucket Name", d["bucket"]), ("Description", d["description"] or None),
                           ("History Kept", d["history"]),
                           ("Values Stored", human_count(d["values"])),
                           ("Backing Store Kind", "JetStream"),
                           ("Maximum Bucket Size", limit(d["max_bucket_size"], human_bytes)),
                           ("Maximum Value Size", limit(d["max_value_size"], human_bytes)),
                           ("Maximum Age", format_duration(d["ttl"]) if d["ttl"] else "unlimited"),
                           ("JetStream Stream", d["backing_store"]),
                           ("Storage", (d["storage"] or "").capitalize())]),
        ("State", [("Size", human_bytes(d["bytes"])), ("Replicas", d["replicas"])]),
    ])


@app.command("put")
def put(bucket: str = BUCKET_ARG, key: str = KEY_ARG,
        value: Optional[str] = typer.Argument(None, help="Value (default: stdin)")) -> None:
    """Store a value.

    \b
    Examples:
      rillet kv put CONFIG color blue
      cat settings.json | rillet kv put CONFIG settings
    """
    data = _read_value(value)
    run(_write, "put", bucket, key, data, None)


@app.command("create")
def create(bucket: str = BUCKET_ARG, key: str = KEY_ARG,
           value: Optional[str] = typer.Argument(None, help="Value (default: stdin)")) -> None:
    """Store a value only if the key does not exist (or was deleted).

    \b
    Example:
      rillet kv create CONFIG lock me
    """
    data = _read_value(value)
    run(_write, "create", bucket, key, data, None)


@app.command("update")
def update(bucket: str = BUCKET_ARG, key: str = KEY_ARG,
           value: str = typer.Argument(..., help="New value"),
           revision: int = typer.Argument(..., help="The revision the key must be at")) -> None:
    """Store a value only if the key is at the given revision (compare and set).

    \b
    Example:
      rillet kv update CONFIG color red 3
    """
    run(_write, "update", bucket, key, value.encode(), revision)


async def _write(op: str, bucket: str, key: str, data: bytes, revision: int | None) -> None:
    conn, kv = await _bucket(bucket)
    try:
        if op == "put":
            await kv.put(key, data)
        elif op == "create":
            await kv.create(key, data)
        else:
            await kv.update(key, data, last=revision)
    finally:
        await conn.nc.close()
    sys.stdout.buffer.write(data + b"\n")


@app.command("get")
def get(bucket: str = BUCKET_ARG, key: str = KEY_ARG,
        revision: Optional[int] = typer.Option(None, "--revision", help="A specific revision"),
        raw: bool = typer.Option(False, "--raw", help="Show only the value"),
        as_json: bool = JSON_OPT) -> None:
    """Show a value.

    \b
    Examples:
      rillet kv get CONFIG color
      rillet kv get CONFIG color --raw --revision 2
    """
    run(_get, bucket, key, revision, raw, as_json)


async def _get(bucket: str, key: str, revision: int | None, raw: bool, as_json: bool) -> None:
    conn, kv = await _bucket(bucket)
    try:
        e = await kv.get(key, revision=revision)
    finally:
        await conn.nc.close()
    value = e.value or b""
    if as_json:
        print_json(_entry_json(e))
    elif raw:
        sys.stdout.buffer.write(value + b"\n")
    else:
        when = f" created @ {_when(e.created)}" if e.created else ""
        print(f"{bucket} > {key} revision: {e.revision}{when}\n")
        sys.stdout.buffer.write(value + b"\n\n")


def _entry_json(e: Any) -> dict[str, Any]:
    v = e.value or b""
    try:
        value: Any = v.decode()
    except UnicodeDecodeError:
        value = None
    return {"bucket": e.bucket, "key": e.key, "value": value, "revision": e.revision,
            "created": _when(e.created), "operation": e.operation or "PUT"}


def _delete_command(purge: bool):  # -> the del (purge False) or purge command function
    def cmd(bucket: str = BUCKET_ARG, key: str = KEY_ARG, force: bool = FORCE_OPT) -> None:
        confirm(f"Really {'purge' if purge else 'delete'} key {bucket} > {key}?", force)
        run(_delop, bucket, key, purge)
    return cmd


DEL_HELP = """Delete a key (a delete marker is kept in the history).

\b
Example:
  rillet kv del CONFIG color -f
"""
PURGE_HELP = """Remove a key and all its history.

\b
Example:
  rillet kv purge CONFIG color -f
"""
app.command("del", help=DEL_HELP)(_delete_command(False))
app.command("purge", help=PURGE_HELP)(_delete_command(True))


async def _delop(bucket: str, key: str, purge_: bool) -> None:
    conn, kv = await _bucket(bucket)
    try:
        if purge_:
            await kv.purge(key)
        else:
            await kv.delete(key)
    finally:
        await conn.nc.close()
    print(f"{'Purged' if purge_ else 'Deleted'} key {key} in bucket {bucket}")


@app.command("history")
def history(bucket: str = BUCKET_ARG, key: str = KEY_ARG, as_json: bool = JSON_OPT) -> None:
    """Show all the kept revisions of a key.

    \b
    Example:
      rillet kv history CONFIG color
    """
    run(_history, bucket, key, as_json)


async def _history(bucket: str, key: str, as_json: bool) -> None:
    conn, kv = await _bucket(bucket)
    try:
        entries = await kv.history(key)
    finally:
        await conn.nc.close()
    if as_json:
        print_json([_entry_json(e) for e in entries])
        return
    rows = [[e.key, e.revision, e.operation or "PUT", _when(e.created), len(e.value or b""),
             (e.value or b"").decode("utf-8", "replace")[:40]] for e in entries]
    table(f"History for {bucket} > {key}", ["Key", "Revision", "Op", "Created", "Length", "Value"], rows)


@app.command("keys")
def keys(bucket: str = BUCKET_ARG, as_json: bool = JSON_OPT) -> None:
    """List the keys of a bucket.

    \b
    Example:
      rillet kv keys CONFIG
    """
    run(_keys, bucket, as_json)


async def _keys(bucket: str, as_json: bool) -> None:
    conn, kv = await _bucket(bucket)
    try:
        try:
            ks = await kv.keys()
        except Exception as e:
            if type(e).__name__ == "NoKeysError":
                ks = []
            else:
                raise
    finally:
        await conn.nc.close()
    ks = sorted(ks)
    if as_json:
        print_json(ks)
    elif not ks:
        print("No keys found in bucket")
    else:
        for k in ks:
            print(k)


@app.command("watch")
def watch(bucket: str = BUCKET_ARG, key: str = typer.Argument(">", help="Keys to watch (wildcards allowed)"),
          count: int = typer.Option(0, "--count", help="Quit after this many updates (0: never)"),
          history_: bool = typer.Option(False, "--history", help="Start with all the kept history")) -> None:
    """Show updates to a bucket as they happen (starting with the current values).

    \b
    Examples:
      rillet kv watch CONFIG
      rillet kv watch CONFIG 'users.*'
    """
    run(_watch, bucket, key, count, history_)


async def _watch(bucket: str, key: str, count: int, include_history: bool) -> None:
    conn, kv = await _bucket(bucket)
    w = await kv.watch(key, include_history=include_history)
    seen = 0
    print(f"Watching bucket {bucket} for {key}", flush=True)
    while not count or seen < count:
        try:
            e = await w.updates(timeout=3600)
        except Exception as ex:
            if type(ex).__name__ == "TimeoutError":
                continue
            raise
        if e is None:
            continue
        seen += 1
        op = e.operation or "PUT"
        value = (e.value or b"").decode("utf-8", "replace")
        sys.stdout.write(f"[{_when(e.created)}] {op} {bucket} > {e.key}"
                         + (f": {value}" if op == "PUT" else "") + "\n")
        sys.stdout.flush()
    await w.stop()
    await conn.nc.close()


@app.command("ls")
def ls(names: bool = typer.Option(False, "--names", "-n", help="Show just the names"), as_json: bool = JSON_OPT) -> None:
    """List the buckets.

    \b
    Example:
      rillet kv ls
    """
    run(_ls, names, as_json)


async def _ls(names: bool, as_json: bool) -> None:
    conn = await connect()
    infos = [i for i in await stream_list(conn) if i["config"]["name"].startswith("KV_")]
    await conn.nc.close()
    infos.sort(key=lambda i: i["config"]["name"])
    if as_json:
        print_json([_status_dict(i) for i in infos])
        return
    if names:
        for i in infos:
            print(i["config"]["name"][3:])
        return
    if not infos:
        print("No Key-Value buckets found")
        return
    rows = [[d["bucket"], d["description"], (d["created"] or "")[:19].replace("T", " "), human_bytes(d["bytes"]),
             human_count(d["values"]), (d["last_ts"] or "")[:19].replace("T", " ")]
            for d in map(_status_dict, infos)]
    table("Key-Value Buckets", ["Bucket", "Description", "Created", "Size", "Values", "Last Update"], rows)


@app.command("status")
def status(bucket: str = BUCKET_ARG, as_json: bool = JSON_OPT) -> None:
    """Show a bucket's configuration and state.

    \b
    Example:
      rillet kv status CONFIG --json
    """
    run(_status, bucket, as_json)


app.command("info", hidden=True)(status)


async def _status(bucket: str, as_json: bool) -> None:
    conn = await connect()
    info = await bucket_api(conn, f"STREAM.INFO.KV_{bucket}", bucket)
    await conn.nc.close()
    _show_status(info, as_json)


@app.command("rm")
def rm(bucket: str = BUCKET_ARG, force: bool = FORCE_OPT) -> None:
    """Delete a bucket and all its values.

    \b
    Example:
      rillet kv rm CONFIG -f
    """
    confirm(f"Really delete bucket {bucket}?", force)
    run(_rm, bucket)


async def _rm(bucket: str) -> None:
    conn = await connect()
    await bucket_api(conn, f"STREAM.DELETE.KV_{bucket}", bucket)
    await conn.nc.close()
    print(f"Deleted bucket {bucket}")

