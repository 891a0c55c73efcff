"""``rillet object``: JetStream object store buckets (nats-py's ObjectStore API), with progress bars."""
from __future__ import annotations

import os
import sys
from typing import Any, Optional

import typer

from rillet.cli.common import (CliError, confirm, connect, format_duration, human_bytes, human_count, limit,
                               parse_duration, parse_size, print_fields, print_json, run, table, ProgressBar)
from rillet.cli.jsapi import api, bucket_api

HELP = """Manage JetStream object store buckets.

\b
Examples:
  rillet object add FILES
  rillet object put FILES ./video.mp4
  rillet object get FILES video.mp4 --output /tmp/video.mp4
  rillet object ls FILES
  rillet object seal FILES
"""

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None)
JSON_OPT = typer.Option(False, "--json", help="Produce JSON output")
FORCE_OPT = typer.Option(False, "--force", "-f", help="Act without a prompt")
BUCKET_ARG = typer.Argument(..., help="Bucket name")
PROGRESS_MIN = 1 << 20  # show a progress bar for transfers from this size on (on a terminal)


async def _bucket(bucket: str) -> tuple[Any, Any]:
    conn = await connect()
    js = conn.nc.jetstream(domain=conn.settings.js_domain or None)
    try:
        await bucket_api(conn, f"STREAM.INFO.OBJ_{bucket}", bucket)
    except CliError:
        await conn.nc.close()
        raise
    return conn, await js.object_store(bucket)


class _CountingReader:
    """A file wrapper nats-py reads chunks from with readinto(); each read moves the bar."""

    def __init__(self, f: Any, bar: ProgressBar) -> None:
        self.f, self.bar = f, bar

    def readinto(self, b: Any) -> int:
        n = self.f.readinto(b)
        self.bar.advance(n or 0)
        return n


class _CountingWriter:
    def __init__(self, f: Any, bar: ProgressBar) -> None:
        self.f, self.bar = f, bar

    def write(self, data: bytes) -> int:
        n = self.f.write(data)
        self.bar.advance(len(data))
        return n


@app.command("add")
def add(bucket: str = BUCKET_ARG,
        ttl: Optional[str] = typer.Option(None, "--ttl", help="How long objects live, e.g. 7d"),
        max_bucket_size: Optional[str] = typer.Option(None, "--max-bucket-size", help="Largest bucket size"),
        storage: str = typer.Option("file", "--storage", help="file or memory"),
        replicas: int = typer.Option(1, "--replicas", help="Number of replicas"),
        description: Optional[str] = typer.Option(None, "--description", help="Description"),
        as_json: bool = JSON_OPT) -> None:
    """Create an object store bucket.

    \b
    Examples:
      rillet object add FILES
      rillet object add TMP --ttl 1d --storage memory
    """
    if storage not in ("file", "memory"):
        raise CliError(f"invalid storage {storage!r}: use file or memory")
    run(_add, bucket, parse_duration(ttl) if ttl else None, parse_size(max_bucket_size) if max_bucket_size else None,
        storage, replicas, description, as_json)


async def _add(bucket: str, ttl: float | None, mbs: int | None, storage: str, replicas: int,
               description: str | None, as_json: bool) -> None:
    from nats.js.api import ObjectStoreConfig, StorageType
    conn = await connect()
    js = conn.nc.jetstream(domain=conn.settings.js_domain or None)
    await js.create_object_store(bucket, ObjectStoreConfig(bucket=bucket, ttl=ttl, max_bytes=mbs,
                                                           storage=StorageType(storage), replicas=replicas,
                                                           description=description))
    info = await api(conn, f"STREAM.INFO.OBJ_{bucket}")
    await conn.nc.close()
    _show_bucket(info, as_json)


def _bucket_dict(info: dict[str, Any]) -> dict[str, Any]:
    c, s = info["config"], info["state"]
    return {"bucket": c["name"][4:], "description": c.get("description", ""), "ttl": (c.get("max_age") or 0) / 1e9,
            "max_bucket_size": c.get("max_bytes", -1), "storage": c.get("storage"),
            "replicas": c.get("num_replicas", 1), "sealed": c.get("sealed", False), "size": s.get("bytes", 0),
            "backing_store": c["name"], "created": info.get("created")}


def _show_bucket(info: dict[str, Any], as_json: bool) -> None:
    d = _bucket_dict(info)
    if as_json:
        print_json(d)
        return
    print(f"Information for Object Store Bucket {d['bucket']} created {(d['created'] or '')[:19].replace('T', ' ')}\n")
    print_fields([("Configuration", [("Bucket Name", d["bucket"]), ("Description", d["description"] or None),
                                     ("Replicas", d["replicas"]),
                                     ("TTL", format_duration(d["ttl"]) if d["ttl"] else "unlimited"),
                                     ("Sealed", d["sealed"]),
                                     ("Size", human_bytes(d["size"])),
                                     ("Maximum Bucket Size", limit(d["max_bucket_size"], human_bytes)),
                                     ("Backing Store Kind", "JetStream"),
                                     ("JetStream Stream", d["backing_store"]),
                                     ("Storage", (d["storage"] or "").capitalize())])])


@app.command("put")
def put(bucket: str = BUCKET_ARG, file: str = typer.Argument(..., help="File to store (- for stdin)"),
        name: Optional[str] = typer.Option(None, "--name", help="Object name (default: the file's base name)"),
        description: Optional[str] = typer.Option(None, "--description", help="Object description"),
        progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bar for large files"),
        force: bool = FORCE_OPT, as_json: bool = JSON_OPT) -> None:
    """Store a file as an object.

    \b
    Examples:
      rillet object put FILES ./report.pdf
      tar c dir | rillet object put FILES - --name dir.tar
    """
    if file == "-" and not name:
        raise CliError("give --name when reading from stdin")
    if file != "-" and not os.path.isfile(file):
        raise CliError(f"{file}: no such file")
    run(_put, bucket, file, name or os.path.basename(file), description, progress, force, as_json)


async def _put(bucket: str, file: str, name: str, description: str | None, progress: bool, force: bool,
               as_json: bool) -> None:
    from nats.js.api import ObjectMeta
    conn, obs = await _bucket(bucket)
    try:
        try:
            existing = await obs.get_info(name)
        except Exception:
            existing = None
        if existing is not None and not existing.deleted:
            confirm(f"Replace existing object {bucket} > {name}?", force)
        size = os.path.getsize(file) if file != "-" else 0
        bar = ProgressBar(f"Putting {name}", size, progress and size >= PROGRESS_MIN)
        f = sys.stdin.buffer if file == "-" else open(file, "rb")
        try:
            info = await obs.put(name, _CountingReader(f, bar), meta=ObjectMeta(name=name, description=description))
        finally:
            bar.close()
            if f is not sys.stdin.buffer:
                f.close()
    finally:
        await conn.nc.close()
    _show_object(info, as_json)


def _obj_dict(i: Any) -> dict[str, Any]:
    return {"name": i.name, "bucket": i.bucket, "size": i.size or 0, "chunks": i.chunks or 0,
            "digest": i.digest, "mtime": i.mtime, "description": i.description, "deleted": bool(i.deleted),
            "headers": i.headers or None}


def _show_object(i: Any, as_json: bool) -> None:
    d = _obj_dict(i)
    if as_json:
        print_json(d)
        return
    print(f"Object information for {d['bucket']} > {d['name']}\n")
    print_fields([(None, [("Description", d["description"] or None), ("Size", human_bytes(d["size"])),
                          ("Modification Time", (d["mtime"] or "")[:19].replace("T", " ")),
                          ("Chunks", human_count(d["chunks"])), ("Digest", d["digest"]),
                          ("Deleted", True if d["deleted"] else None)])])


@app.command("get")
def get(bucket: str = BUCKET_ARG, name: str = typer.Argument(..., help="Object name"),
        output: Optional[str] = typer.Option(None, "--output", "-O", help="File to write (- for stdout)"),
        progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bar for large files"),
        force: bool = FORCE_OPT) -> None:
    """Fetch an object into a file (checking its digest).

    \b
    Examples:
      rillet object get FILES report.pdf
      rillet object get FILES report.pdf -O - > copy.pdf
    """
    target = output or os.path.basename(name)
    if target != "-" and os.path.exists(target):
        confirm(f"Replace existing file {target}?", force)
    run(_get, bucket, name, target, progress)


async def _get(bucket: str, name: str, target: str, progress: bool) -> None:
    conn, obs = await _bucket(bucket)
    try:
        info = await obs.get_info(name)
        size = info.size or 0
        bar = ProgressBar(f"Getting {name}", size, progress and target != "-" and size >= PROGRESS_MIN)
        tmp = target + ".rillet-partial" if target != "-" else None
        f = sys.stdout.buffer if tmp is None else open(tmp, "wb")
        try:
            await obs.get(name, writeinto=_CountingWriter(f, bar))
        except BaseException:
            if tmp:
                f.close()
                os.unlink(tmp)
            raise
        finally:
            bar.close()
        if tmp:
            f.close()
            os.replace(tmp, target)
    finally:
        await conn.nc.close()
    if target != "-":
        print(f"Wrote: {human_bytes(info.size or 0)} to {target}")


@app.command("ls")
def ls(bucket: Optional[str] = typer.Argument(None, help="Bucket (default: list the buckets)"),
       names: bool = typer.Option(False, "--names", "-n", help="Show just the names"),
       as_json: bool = JSON_OPT) -> None:
    """List the objects of a bucket, or the buckets.

    \b
    Examples:
      rillet object ls
      rillet object ls FILES --json
    """
    run(_ls, bucket, names, as_json)


async def _ls(bucket: str | None, names: bool, as_json: bool) -> None:
    if bucket is None:
        from rillet.cli.jsapi import stream_list
        conn = await connect()
        infos = sorted((i for i in await stream_list(conn) if i["config"]["name"].startswith("OBJ_")),
                       key=lambda i: i["config"]["name"])
        await conn.nc.close()
        if as_json:
            print_json([_bucket_dict(i) for i in infos])
        elif names:
            for i in infos:
                print(i["config"]["name"][4:])
        elif not infos:
            print("No Object Store buckets found")
        else:
            table("Object Store Buckets", ["Bucket", "Description", "Created", "Size", "Sealed"],
                  [[d["bucket"], d["description"], (d["created"] or "")[:19].replace("T", " "),
                    human_bytes(d["size"]), d["sealed"]] for d in map(_bucket_dict, infos)])
        return
    conn, obs = await _bucket(bucket)
    try:
        try:
            objs = await obs.list()
        except Exception as e:
            if type(e).__name__ == "NotFoundError" or "no objects" in str(e).lower():
                objs = []
            else:
                raise
    finally:
        await conn.nc.close()
    objs = sorted((o for o in objs if not o.deleted), key=lambda o: o.name)
    if as_json:
        print_json([_obj_dict(o) for o in objs])
    elif names:
        for o in objs:
            print(o.name)
    elif not objs:
        print("No entries found")
    else:
        table(f"Bucket Contents ({bucket})", ["Name", "Size", "Time"],
              [[o.name, human_bytes(o.size or 0), (o.mtime or "")[:19].replace("T", " ")] for o in objs])


@app.command("info")
def info(bucket: str = BUCKET_ARG, name: Optional[str] = typer.Argument(None, help="Object (default: the bucket)"),
         as_json: bool = JSON_OPT) -> None:
    """Show a bucket's or an object's information.

    \b
    Examples:
      rillet object info FILES
      rillet object info FILES report.pdf
    """
    run(_info, bucket, name, as_json)


async def _info(bucket: str, name: str | None, as_json: bool) -> None:
    conn, obs = await _bucket(bucket)
    try:
        if name is None:
            _show_bucket(await api(conn, f"STREAM.INFO.OBJ_{bucket}"), as_json)
        else:
            _show_object(await obs.get_info(name), as_json)
    finally:
        await conn.nc.close()


@app.command("rm")
def rm(bucket: str = BUCKET_ARG, name: Optional[str] = typer.Argument(None, help="Object (default: the whole bucket)"),
       force: bool = FORCE_OPT) -> None:
    """Delete an object, or a whole bucket.

    \b
    Examples:
      rillet object rm FILES report.pdf -f
      rillet object rm FILES -f
    """
    confirm(f"Really delete {'object ' + bucket + ' > ' + name if name else 'bucket ' + bucket}?", force)
    run(_rm, bucket, name)


async def _rm(bucket: str, name: str | None) -> None:
    conn, obs = await _bucket(bucket)
    try:
        if name is None:
            await api(conn, f"STREAM.DELETE.OBJ_{bucket}")
            print(f"Deleted bucket {bucket}")
        else:
            await obs.get_info(name)
            await obs.delete(name)
            print(f"Deleted object {bucket} > {name}")
    finally:
        await conn.nc.close()


@app.command("seal")
def seal(bucket: str = BUCKET_ARG, force: bool = FORCE_OPT) -> None:
    """Seal a bucket: no more changes are allowed.

    \b
    Example:
      rillet object seal FILES -f
    """
    confirm(f"Really seal bucket {bucket}? Sealed buckets can not be unsealed", force)
    run(_seal, bucket)


async def _seal(bucket: str) -> None:
    conn, obs = await _bucket(bucket)
    try:
        await obs.seal()
    finally:
        await conn.nc.close()
    print(f"{bucket} has been sealed")


@app.command("watch")
def watch(bucket: str = BUCKET_ARG,
          count: int = typer.Option(0, "--count", help="Quit after this many changes (0: never)")) -> None:
    """Show changes to a bucket's objects as they happen.

    \b
    Example:
      rillet object watch FILES
    """
    run(_watch, bucket, count)


async def _watch(bucket: str, count: int) -> None:
    conn, obs = await _bucket(bucket)
    w = await obs.watch(updates_only=True)
    print(f"Watching bucket {bucket}", flush=True)
    seen = 0
    while not count or seen < count:
        try:
            i = await w.updates(timeout=3600)
        except Exception as ex:
            if type(ex).__name__ == "TimeoutError":
                continue
            raise
        if i is None:
            continue
        seen += 1
        op = "DEL" if i.deleted else "PUT"
        print(f"[{(i.mtime or '')[:19].replace('T', ' ')}] {op} {bucket} > {i.name}"
              + ("" if i.deleted else f": {human_bytes(i.size or 0)} bytes in {i.chunks or 0} chunks"), flush=True)
    await w.stop()
    await conn.nc.close()
