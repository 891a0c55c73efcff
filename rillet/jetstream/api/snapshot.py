"""The API side of STREAM.SNAPSHOT and STREAM.RESTORE, with nats-server's chunking and flow control.

Snapshot: the answer carries the stream's config and state; then chunks go to the request's
``deliver_subject``, each with a reply ``$JS.SNAPSHOT.ACK.<stream>.<id>.<size>.<index>`` the client answers
to open the window; an empty message with a ``204`` status ends it (``408``/``500`` statuses on failure).
The archive is nats-server 2.15's backup form (ADR-63, ``rillet.jetstream.backup``): an S2 stream of the
stream state, each consumer's config and delivery state (``no_consumers`` leaves them out) and the messages,
in plaintext whatever the encryption at rest; nats-server restores it and Rillet restores nats-server's. It
is made from the view of the request's moment in short slices on the event loop, as the flow-control window
opens, never whole in memory.

Restore: the answer names a ``$JS.SNAPSHOT.RESTORE.<stream>.<id>`` subject; the client sends chunks there,
each with a reply that gets an empty acknowledgement, and an empty chunk to finish, which is answered
with the stream's info once it is open. The chunks are spooled to a temporary file; a worker thread reads
them into a new store (sealed under this server's key, if it has one) before the stream opens; the backup's
consumers are then made again with their states. The older archive form, Rillet's own tar (the store's
files: ``rillet.jetstream.snapshot``), is still restored.
"""
from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING, Any, Iterator

from rillet.durable import fsync_dir, make_dirs_durable, sync_tree
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
    # nats-server 2.15's backup form (ADR-63, rillet.jetstream.backup): the consumers' states and the message
    # range are taken here, in this callback; the archive is then made from them a slice at a time as the
    # client's window opens (_send_chunks), never whole in memory. A message removed meanwhile is left out
    # (nats-server too reads each message only when its turn comes).
    from rillet.jetstream import backup
    _, parts = backup.snapshot_parts(stream, not req.get("no_consumers"))
    router.respond(reply, {"type": T + "stream_snapshot_response", "config": info["config"],
                           "state": info["state"]})
    router.js.loop.create_task(_send_chunks(router, stream.name, deliver.encode(), parts, chunk, inflight))


SLICE = 0.002  # seconds of archive making at most before the event loop runs its other callbacks


async def _send_chunks(router: "ApiRouter", name: str, deliver: bytes, parts: Iterator[bytes], chunk: int,
                       inflight: int) -> None:
    import asyncio
    import time
    ic = router.jsa.ic
    ack_base = f"$JS.SNAPSHOT.ACK.{name}.{os.urandom(8).hex()}"
    slots = asyncio.Semaphore(inflight)
    sub = ic.subscribe(ack_base + ".>", lambda *a: slots.release())
    status = b"NATS/1.0 204\r\n\r\n"
    buf = bytearray()
    more = True
    try:
        index = 1
        while True:
            t0 = time.monotonic()
            while more and len(buf) < chunk:
                try:
                    buf += next(parts)
                except StopIteration:
                    more = False
                    break
                if time.monotonic() - t0 > SLICE:
                    await asyncio.sleep(0)
                    t0 = time.monotonic()
            if not buf:
                break
            try:
                await asyncio.wait_for(slots.acquire(), ACK_TIMEOUT)
            except asyncio.TimeoutError:
                status = b"NATS/1.0 408 No Flow Response\r\n\r\n"
                break
            if not router.jsa.account.sublist.has_interest(deliver.decode()):
                status = b"NATS/1.0 408 No Interest\r\n\r\n"
                break
            piece = bytes(buf[:chunk])
            del buf[:chunk]
            ic.publish(deliver, f"{ack_base}.{len(piece)}.{index}".encode(), piece)
            index += 1
    except Exception as e:  # the store failed under the snapshot: the client is told, and the log says why
        router.js.log.error(f"JetStream snapshot of stream '{name}' failed: {e}")
        status = f"NATS/1.0 500 {str(e).splitlines()[0][:200] if str(e) else 'Snapshot Failed'}\r\n\r\n".encode()
    finally:
        ic.remove_sub(sub)
        close = getattr(parts, "close", None)
        if close is not None:
            close()
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
    import tempfile
    # the chunks go to an unnamed temporary file as they come (a chunk is at most 1 MiB: a short write),
    # not into memory; the archive is unpacked from it in a worker thread (_finish)
    spool = tempfile.TemporaryFile(prefix="rillet-restore-")

    def on_chunk(sub: Any, client: Any, subject: bytes, rp: bytes | None, h: int, msg: bytes) -> None:
        data = msg[h:] if h >= 0 else msg
        if not rp:
            ic.remove_sub(sub)
            spool.close()
            return
        if data:
            spool.write(data)
            ic.publish(rp, None, b"")
            return
        ic.remove_sub(sub)
        router.js.loop.create_task(_complete(router, cfg, spool, rp))

    ic.subscribe(subj, on_chunk)
    router.respond(reply, {"type": T + "stream_restore_response", "deliver_subject": subj})


async def _complete(router: "ApiRouter", cfg: Any, spool: Any, rp: bytes) -> None:
    from rillet.jetstream.api.common import T, stream_info_dict
    try:
        stream = await _finish(router, cfg, spool)
    except ApiError as e:
        router.respond(rp, {"type": T + "stream_create_response", "error": e.to_dict()})
        return
    except Exception as e:
        router.js.log.error(f"JetStream restore of stream '{cfg.name}' failed: {e}")
        err = ApiError.make("STREAM_RESTORE", err=str(e))
        router.respond(rp, {"type": T + "stream_create_response", "error": err.to_dict()})
        return
    finally:
        spool.close()
    router.respond(rp, {"type": T + "stream_create_response", **stream_info_dict(stream)})


def _unpack(spool: Any, dest: str) -> None:
    """In a worker thread: unpack the archive into ``dest``, a new directory beside the stream's."""
    import tarfile
    spool.seek(0)
    make_dirs_durable(dest)
    with tarfile.open(fileobj=spool, mode="r|") as tar:
        for ti in tar:
            name = ti.name
            if not (ti.isfile() or ti.isdir()) or name.startswith("/") or ".." in name.split("/"):
                raise ApiError.make("STREAM_RESTORE", err="invalid snapshot archive")
            if name == "meta.json" or name.endswith(".tmp"):
                continue  # (the stream's meta.json is written for the restored config)
            if hasattr(tarfile, "data_filter"):  # (checked above too; the filter refuses what escapes dest)
                tar.extract(ti, dest, filter="data")
            else:
                tar.extract(ti, dest)
    sync_tree(dest)  # a restore that was answered survives a power cut


def _install(router: "ApiRouter", cfg: Any, staging: str, sdir: str, created: str) -> Any:
    """In a worker thread: the unpacked directory becomes the stream's, with its meta.json, and its store is
    opened (a plaintext archive is sealed under this server's key here, if it has one; the scan of the
    blocks an open makes is done here, not on the event loop)."""
    from rillet.jetstream.storeopen import open_store
    if os.path.exists(sdir):
        shutil.rmtree(sdir)
    os.rename(staging, sdir)
    fsync_dir(os.path.dirname(sdir))
    router.jsa.write_meta_of(cfg, created)
    store = open_store(cfg, sdir, router.js)
    try:
        if getattr(store, "_keys", None) is not None:
            # consumer states that came in plaintext: both slots rewritten, sealed
            for cs in list(store._consumers.values()):
                cs.flush(durable=True)
                cs.flush(durable=True)
    except BaseException:
        store.stop()
        raise
    return store


def _fill_memory(router: "ApiRouter", cfg: Any, spool: Any, sdir: str) -> Any:
    """In a worker thread: a new memory store with the archive's messages and consumer states."""
    from rillet.jetstream.storeopen import open_store
    from rillet.jetstream.store.filestore import restore_into
    spool.seek(0)
    store = open_store(cfg, sdir, router.js)
    restore_into(store, iter(lambda: spool.read(1 << 20), b""))
    return store


def _fill_v2(router: "ApiRouter", cfg: Any, spool: Any, where: str) -> tuple[Any, list[Any]]:
    """In a worker thread: a new store holding a v2 backup's messages (a file stream's in the staging
    directory ``where``, stopped once filled: _install makes it the stream's), with the backup's consumers
    (name, config, state), made once the stream is open."""
    from rillet.jetstream import backup
    from rillet.jetstream.storeopen import open_store
    src = backup.V2Source(spool, cfg, int(router.js.server.opts.max_payload))
    try:
        src.open()
        if cfg.storage != "memory":
            make_dirs_durable(where)
        store = open_store(cfg, where, router.js)
        try:
            backup.fill_store(store, src)
            store.flush()
            if cfg.storage != "memory":
                store.stop()  # (synced: reopened by _install where it belongs)
        except BaseException:
            store.stop()
            raise
    except backup.ArchiveError as e:
        raise ApiError.make("STREAM_RESTORE", err=str(e)) from None
    return store, src.consumers


async def _finish(router: "ApiRouter", cfg: Any, spool: Any) -> Any:
    import asyncio
    from rillet.jetstream import backup
    jsa = router.jsa
    if cfg.name in jsa.streams:
        raise ApiError.make("STREAM_NAME_EXIST_RESTORE_FAILED")
    created = format_time(now_ns())
    sdir = jsa.stream_dir(cfg.name)
    spool.seek(0)
    from rillet.cluster.s2 import STREAM_IDENTIFIER
    v2 = backup.is_v2(spool.read(len(STREAM_IDENTIFIER)))
    consumers: list[Any] = []
    if v2 and cfg.storage == "memory":
        store, consumers = await asyncio.to_thread(_fill_v2, router, cfg, spool, sdir)
    elif cfg.storage == "memory":
        # the memory store is made and filled in the worker thread: nothing else holds it yet
        store = await asyncio.to_thread(_fill_memory, router, cfg, spool, sdir)
    else:
        staging = f"{sdir}.restoring-{os.urandom(4).hex()}"
        try:
            if v2:
                _, consumers = await asyncio.to_thread(_fill_v2, router, cfg, spool, staging)
            else:
                await asyncio.to_thread(_unpack, spool, staging)
            if cfg.name in jsa.streams:  # created meanwhile
                raise ApiError.make("STREAM_NAME_EXIST_RESTORE_FAILED")
            store = await asyncio.to_thread(_install, router, cfg, staging, sdir, created)
        finally:
            if os.path.exists(staging):
                shutil.rmtree(staging, ignore_errors=True)
    if cfg.name in jsa.streams:
        await asyncio.to_thread(store.stop)
        raise ApiError.make("STREAM_NAME_EXIST_RESTORE_FAILED")
    # what JSAccount.open_stream does after opening the store (here opened in the worker thread; the
    # meta.json of a file stream was written there too)
    from rillet.jetstream.stream import Stream
    stream = Stream(jsa, cfg, created, store)
    jsa.streams[cfg.name] = stream
    stream.start()
    from rillet.jetstream.consumer.engine import recover_consumers
    recover_consumers(stream)
    if consumers:
        try:
            backup.restore_consumers(stream, consumers)
        except BaseException:
            # (as nats-server: the restore fails; the stream made for it is removed again)
            jsa.delete_stream(stream)
            raise
    return stream
