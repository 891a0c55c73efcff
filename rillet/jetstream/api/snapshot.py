"""The API side of STREAM.SNAPSHOT and STREAM.RESTORE (the archive itself: ``rillet.jetstream.snapshot``), with nats-server's chunking and flow control.

Snapshot: the answer carries the stream's config and state; then chunks go to the request's
``deliver_subject``, each with a reply ``$JS.SNAPSHOT.ACK.<stream>.<id>.<size>.<index>`` the client answers
to open the window; an empty message with a ``204`` status ends it (``408``/``500`` statuses on failure).
The archive is a tar of the stream's directory (file storage: store and consumers) or of the memory
store's snapshot; it is only ever read back by RESTORE.

Restore: the answer names a ``$JS.SNAPSHOT.RESTORE.<stream>.<id>`` subject; the client sends chunks there,
each with a reply that gets an empty acknowledgement, and an empty chunk to finish, which is answered
with the stream's info once it is open.
"""
from __future__ import annotations

import io
import os
import shutil
from typing import TYPE_CHECKING, Any, Iterator

from rillet.durable import make_dirs_durable, sync_tree
from rillet.gocompat.gotime import format_time
from rillet.jetstream.api import types as A
from rillet.jetstream import streamconfig as C
from rillet.jetstream.errors import ApiError
from rillet.jetstream.stream import now_ns
from rillet.subjects.validate import is_valid_literal_subject

if TYPE_CHECKING:
    from rillet.jetstream.api.router import ApiRouter

# tarfile (~0.3 MB once loaded) is imported by the functions that write or read an archive, when a stream
# is first snapshotted or restored, not when JetStream registers these endpoints at start.

DEFAULT_CHUNK = 128 * 1024
DEFAULT_WINDOW = 8 * 1024 * 1024
ACK_TIMEOUT = 5.0


def register(router: "ApiRouter") -> None:
    def stream_snapshot(a: list[str], r: bytes | None, h: bytes, b: bytes) -> None:
        snapshot(router, a, r, h, b)

    def stream_restore(a: list[str], r: bytes | None, h: bytes, b: bytes) -> None:
        restore(router, a, r, h, b)

    router.handlers["STREAM.SNAPSHOT"] = stream_snapshot
    router.handlers["STREAM.RESTORE"] = stream_restore


def _tar_dir(path: str) -> Iterator[bytes]:
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w|") as tar:
        for root, _dirs, files in os.walk(path):
            for f in sorted(files):
                full = os.path.join(root, f)
                rel = os.path.relpath(full, path)
                if rel == "meta.json" or rel.endswith(".tmp"):
                    continue
                tar.add(full, arcname=rel, recursive=False)
                if buf.tell() > 1 << 20:
                    yield buf.getvalue()
                    buf.seek(0)
                    buf.truncate()
    yield buf.getvalue()


def snapshot(router: "ApiRouter", args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
    from rillet.jetstream.api.common import T, stream_info_dict
    from rillet.jetstream.api.common import is_empty_request
    if is_empty_request(body):  # (nats-server's order: this, the stream, then the body's types)
        raise ApiError.make("BAD_REQUEST")
    stream = router.stream(args[0] if args else "")
    req = router.parse(body, A.JSApiStreamSnapshotRequest)
    if not isinstance(req, dict):
        raise ApiError.make("BAD_REQUEST")
    deliver = req.get("deliver_subject") or ""
    if not deliver or not is_valid_literal_subject(deliver):
        raise ApiError.make("SNAPSHOT_DELIVER_SUBJECT_INVALID")
    chunk = min(max(1024, int(req.get("chunk_size") or DEFAULT_CHUNK)), 1024 * 1024)
    window = min(max(1024, int(req.get("window_size") or DEFAULT_WINDOW)), 32 * 1024 * 1024)
    inflight = max(max(window, chunk) // chunk, 1)
    info = stream_info_dict(stream)
    router.respond(reply, {"type": T + "stream_snapshot_response", "config": info["config"],
                           "state": info["state"]})
    stream.store.sync()
    if stream.cfg.storage == "memory":
        data = b"".join(stream.store.snapshot_stream(not req.get("no_consumers")))
    else:
        data = b"".join(_tar_dir(router.jsa.stream_dir(stream.name)))
    router.js.loop.create_task(_send_chunks(router, stream.name, deliver.encode(), data, chunk, inflight))


async def _send_chunks(router: "ApiRouter", name: str, deliver: bytes, data: bytes, chunk: int,
                       inflight: int) -> None:
    import asyncio
    ic = router.jsa.ic
    ack_base = f"$JS.SNAPSHOT.ACK.{name}.{os.urandom(8).hex()}"
    slots = asyncio.Semaphore(inflight)
    sub = ic.subscribe(ack_base + ".>", lambda *a: slots.release())
    status = b"NATS/1.0 204\r\n\r\n"
    try:
        index = 1
        for off in range(0, len(data), chunk):
            try:
                await asyncio.wait_for(slots.acquire(), ACK_TIMEOUT)
            except asyncio.TimeoutError:
                status = b"NATS/1.0 408 No Flow Response\r\n\r\n"
                break
            if not router.jsa.account.sublist.has_interest(deliver.decode()):
                status = b"NATS/1.0 408 No Interest\r\n\r\n"
                break
            piece = data[off:off + chunk]
            ic.publish(deliver, f"{ack_base}.{len(piece)}.{index}".encode(), piece)
            index += 1
    finally:
        ic.remove_sub(sub)
    ic.publish(deliver, None, status, len(status))


def restore(router: "ApiRouter", args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
    from rillet.jetstream.api.common import T
    name = args[0] if args else ""
    from rillet.jetstream.api.common import is_empty_request
    req = router.parse(body, A.JSApiStreamRestoreRequest) if not is_empty_request(body) else None
    if not isinstance(req, dict):
        raise ApiError.make("BAD_REQUEST")
    raw_cfg = req["config"]
    if not raw_cfg.get("name"):
        raw_cfg["name"] = name
    if raw_cfg.get("name") != name:
        raise ApiError.make("STREAM_MISMATCH")
    cfg = C.normalize_stream_config(raw_cfg, is_create=True, subject_name=name,
                                    account_limits=router.jsa.limits, server_limits=router.jsa.js.server_limits)
    if name in router.jsa.streams:
        raise ApiError.make("STREAM_NAME_EXIST_RESTORE_FAILED")
    subj = f"$JS.SNAPSHOT.RESTORE.{name}.{os.urandom(8).hex()}"
    ic = router.jsa.ic
    chunks: list[bytes] = []
    state: dict[str, Any] = {}

    def on_chunk(sub: Any, client: Any, subject: bytes, rp: bytes | None, h: int, msg: bytes) -> None:
        data = msg[h:] if h >= 0 else msg
        if not rp:
            ic.remove_sub(sub)
            return
        if data:
            chunks.append(data)
            ic.publish(rp, None, b"")
            return
        ic.remove_sub(sub)
        state["done"] = True
        try:
            stream = _finish(router, cfg, chunks)
        except ApiError as e:
            router.respond(rp, {"type": T + "stream_create_response", "error": e.to_dict()})
            return
        except Exception as e:
            err = ApiError.make("STREAM_RESTORE", err=str(e))
            router.respond(rp, {"type": T + "stream_create_response", "error": err.to_dict()})
            return
        from rillet.jetstream.api.common import stream_info_dict
        router.respond(rp, {"type": T + "stream_create_response", **stream_info_dict(stream)})

    ic.subscribe(subj, on_chunk)
    router.respond(reply, {"type": T + "stream_restore_response", "deliver_subject": subj})


def _finish(router: "ApiRouter", cfg: Any, chunks: list[bytes]) -> Any:
    jsa = router.jsa
    if cfg.name in jsa.streams:
        raise ApiError.make("STREAM_NAME_EXIST_RESTORE_FAILED")
    sdir = jsa.stream_dir(cfg.name)
    if os.path.exists(sdir):
        shutil.rmtree(sdir)
    make_dirs_durable(sdir)
    data = b"".join(chunks)
    if cfg.storage == "memory":
        from rillet.jetstream.store.filestore import restore_into
        stream = jsa.open_stream(cfg, format_time(now_ns()))
        restore_into(stream.store, [data])
        return stream
    import tarfile
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for ti in tar:
            if not (ti.isfile() or ti.isdir()) or ti.name.startswith("/") or ".." in ti.name.split("/"):
                raise ApiError.make("STREAM_RESTORE", err="invalid snapshot archive")
        tar.extractall(sdir)
    sync_tree(sdir)  # a restore that was answered survives a power cut
    stream = jsa.open_stream(cfg, format_time(now_ns()))
    from rillet.jetstream.consumer.engine import recover_consumers
    recover_consumers(stream)
    return stream
