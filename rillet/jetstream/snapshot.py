"""Stream archives on a replicated stream's leader (``rillet.jetstream.cluster.streams``): the receiving half
of a restore (``ArchiveReceiver``, which spools the chunks to a temporary file) and the archive read back into
the live store (``load_archive``: unpacked and read in a worker thread, applied in bounded batches on the
event loop). The single-server ``$JS.API`` side: ``rillet.jetstream.api.snapshot``."""
from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from typing import Any, Callable

from rillet.jetstream.errors import ApiError

# ---- for a replicated stream (rillet.jetstream.cluster.streams): receive an archive, load it into a live store

RESTORE_IDLE = 5.0  # seconds without a chunk before a restore is given up (nats-server's activity interval)


class ArchiveReceiver:
    """The receiving half of STREAM.RESTORE on a replicated stream's leader (nats-server: the stream
    group's preferred peer takes the archive): ``start(request_reply)`` subscribes a
    ``$JS.SNAPSHOT.RESTORE.<stream>.<id>`` subject and answers the original request with it; each chunk
    there is acknowledged with an empty message and written to a temporary file (the archive is never whole
    in memory); the empty chunk that ends the transfer calls ``on_done(spool, final_reply)``, handing the
    file (``size`` bytes, to be closed by the callee) over; a chunk without a reply or ``RESTORE_IDLE`` seconds without a chunk
    call ``on_fail(reason)``. ``cancel()`` stops it."""

    def __init__(self, jsa: Any, name: str, on_done: Any, on_fail: Any) -> None:
        self.jsa = jsa
        self.name = name
        self.on_done = on_done
        self.on_fail = on_fail
        self.subject = f"$JS.SNAPSHOT.RESTORE.{name}.{os.urandom(8).hex()}"
        self.spool: Any = tempfile.TemporaryFile(prefix="rillet-restore-")
        self.size = 0
        self._sub: Any = None
        self._timer: Any = None
        self.finished = False

    def start(self, reply: bytes) -> None:
        from rillet.jetstream.api import codec as apijson
        from rillet.jetstream.api.common import T
        self._sub = self.jsa.ic.subscribe(self.subject, self._on_chunk)
        self._arm()
        self.jsa.ic.publish(reply, None, apijson.go_json({"type": T + "stream_restore_response",
                                                         "deliver_subject": self.subject}))

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.jsa.js.loop.call_later(RESTORE_IDLE, self._idle)

    def _idle(self) -> None:
        self._timer = None
        if not self.finished:
            self._end()
            self.on_fail(f"restore for stream '{self.jsa.account.name} > {self.name}' is stalled")

    def _on_chunk(self, sub: Any, client: Any, subject: bytes, rp: bytes | None, h: int, msg: bytes) -> None:
        if self.finished:
            return
        data = msg[h:] if h >= 0 else msg
        if not rp:
            self._end()
            self.on_fail(f"restore for stream '{self.jsa.account.name} > {self.name}' requires reply subject "
                         f"for each chunk")
            return
        if data:
            self.spool.write(data)  # (a chunk is at most 1 MiB: a short write)
            self.size += len(data)
            self._arm()
            self.jsa.ic.publish(rp, None, b"")
            return
        spool, self.spool = self.spool, None
        self._end()
        self.on_done(spool, rp)

    def _end(self) -> None:
        self.finished = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._sub is not None:
            self.jsa.ic.remove_sub(self._sub)
            self._sub = None
        if self.spool is not None:
            self.spool.close()
            self.spool = None

    def cancel(self) -> None:
        self._end()


BATCH_MSGS = 256  # messages read from the archive in the worker thread, then stored on the event loop at once
BATCH_BYTES = 1 << 20


class _ArchiveSource:
    """A restore's archive opened in worker threads: ``open`` unpacks the spooled tar into a temporary
    directory and opens it as a file store, whatever the storage it was taken from (a file stream's archive
    holds its directory under ``store/``, a memory stream's is the store's own snapshot form: the same
    layout at the top); ``batch`` reads the next messages; ``close`` removes it all."""

    def __init__(self, spool: Any, name: str) -> None:
        self.spool = spool
        self.name = name
        self.tmp = ""
        self.src: Any = None
        self.first = self.last = 0
        self.seq = 0
        self.memory_form = False

    def open(self) -> None:
        import tarfile
        from rillet.jetstream.store.base import StoreConfig
        from rillet.jetstream.store.filestore import FileStore
        self.tmp = tempfile.mkdtemp(prefix="rillet-restore-")
        root = os.path.join(self.tmp, "a")
        os.makedirs(root)
        self.spool.seek(0)
        form_file = False
        try:
            with tarfile.open(fileobj=self.spool, mode="r|") as tar:
                for ti in tar:
                    name = ti.name
                    if not (ti.isfile() or ti.isdir()) or name.startswith("/") or ".." in name.split("/"):
                        raise ApiError.make("STREAM_RESTORE", err="invalid snapshot archive")
                    if name == "store" or name.startswith("store/"):
                        form_file = True
                    if hasattr(tarfile, "data_filter"):  # (checked above too; the filter refuses what escapes)
                        tar.extract(ti, root, filter="data")
                    else:
                        tar.extract(ti, root)
        except tarfile.TarError as e:
            raise ApiError.make("STREAM_RESTORE", err=f"invalid snapshot archive: {e}") from None
        if form_file:
            sdir = os.path.join(root, "store")
            if not os.path.isdir(sdir):
                raise ApiError.make("STREAM_RESTORE", err="invalid snapshot archive: no store")
        else:
            sdir = root
            self.memory_form = True
            for d in ("msgs", "consumers"):
                os.makedirs(os.path.join(sdir, d), exist_ok=True)
        self.src = FileStore(sdir, StoreConfig(name=self.name, storage="file"))
        st = self.src.state()
        self.first, self.last = st.first_seq, st.last_seq
        self.seq = self.first

    def batch(self) -> list[tuple]:
        """The next messages (at most ``BATCH_MSGS``, about ``BATCH_BYTES``), in sequence order; [] at the end.
        A message that fails its checksum is left out (its sequence is skipped)."""
        from rillet.jetstream.store.base import ErrStoreCorrupt
        src, out, size = self.src, [], 0
        while self.seq <= self.last and len(out) < BATCH_MSGS and size < BATCH_BYTES:
            try:
                m = src.load_next_msg(">", self.seq)
            except ErrStoreCorrupt as e:
                if not e.seq:
                    raise
                self.seq = e.seq + 1
                continue
            if m is None or m.seq > self.last:
                self.seq = self.last + 1
                break
            out.append((m.seq, m.subject, m.hdr, m.data, m.ts, src.ttl_of(m.seq)))
            size += len(m.subject) + len(m.hdr) + len(m.data)
            self.seq = m.seq + 1
        return out

    def consumer_states(self) -> list[tuple[str, Any]]:
        out = []
        for name, cs in self.src._consumers.items():
            state = cs.state()
            if state is not None:
                out.append((name, state))
        return out

    def close(self) -> None:
        try:
            if self.src is not None:
                self.src.stop()
        finally:
            if self.tmp:
                shutil.rmtree(self.tmp, ignore_errors=True)


async def load_archive(store: Any, cfg: Any, spool: Any, alive: Callable[[], bool], max_payload: int = 0,
                       consumers: list[Any] | None = None) -> bool:
    """Load a STREAM.SNAPSHOT archive (spooled in the file ``spool``) into the empty live ``store`` of stream
    config ``cfg``: unpacked, opened and read in worker threads; each batch of messages stored at its
    sequence on the event loop (the store is the stream's: only the loop writes it), with the skipped
    sequences before, between (deleted) and after (the last). ``alive()`` is asked before each batch is
    stored: False (the restore was given up meanwhile) stops the load and returns False."""
    spool.seek(0)
    from rillet.jetstream import backup
    from rillet.cluster.s2 import STREAM_IDENTIFIER
    if backup.is_v2(spool.read(len(STREAM_IDENTIFIER))):
        return await _load_v2(store, cfg, spool, alive, max_payload, consumers)
    src = _ArchiveSource(spool, cfg.name)
    try:
        if not await _store_all(store, src, alive):
            return False
        if src.memory_form:  # (as restore_into: the archive's consumer states come along)
            for name, state in await asyncio.to_thread(src.consumer_states):
                store.consumer_store(name).update(state)
        return alive()
    finally:
        await asyncio.to_thread(src.close)


async def _store_all(store: Any, src: Any, alive: Callable[[], bool], *batch: int) -> bool:
    """An archive source's messages (v1 or v2) into ``store``: opened and read in worker threads, each batch
    stored at its sequences on the loop, the sequences before, between and after skipped. False when ``alive()``
    says the restore was given up."""
    await asyncio.to_thread(src.open)
    if not alive():
        return False
    if src.first > 1 and store.last_seq + 1 < src.first:
        store.skip_msgs(store.last_seq + 1, src.first - 1 - store.last_seq)
    while True:
        msgs = await asyncio.to_thread(src.batch, *batch)
        if not alive():
            return False
        if not msgs:
            break
        for seq, subj, hdr, data, ts, ttl in msgs:
            store.store_raw(seq, subj, hdr, data, ts, ttl=ttl)
    if src.last > store.last_seq:
        store.skip_msgs(store.last_seq + 1, src.last - store.last_seq)
    return True


async def _load_v2(store: Any, cfg: Any, spool: Any, alive: Callable[[], bool], max_payload: int,
                   consumers: list[Any] | None) -> bool:
    """load_archive of a v2 backup (rillet.jetstream.backup): read in worker threads, stored in batches on the
    event loop. The backup's consumers (name, config, state) are added to ``consumers``: a replicated
    stream's leader makes them again once the restore committed (``recreate_consumers``)."""
    from rillet.jetstream import backup
    src = backup.V2Source(spool, cfg, max_payload or (64 << 20))
    try:
        if not await _store_all(store, src, alive, BATCH_MSGS, BATCH_BYTES):
            return False
    except backup.ArchiveError as e:
        raise ApiError.make("STREAM_RESTORE", err=str(e)) from None
    if consumers is not None:
        consumers.extend(src.consumers)
    return alive()


RESET_TRIES = 40  # (1 s apart) a new replicated consumer's leader answers its reset once elected


def _reset(jsa: Any, api: str, stream: str, name: str, seq: int, warn: Any, tries: int) -> None:
    """CONSUMER.RESET of a consumer just made again, asked again each second until its leader answers
    (a reset nobody leads yet is left unanswered, as nats-server does)."""
    import json
    rr = f"$JS.SNAPSHOT.C.{os.urandom(8).hex()}"
    state = {"done": False}

    def on_reset(sub: Any, client: Any, subject: bytes, rp: Any, h: int, msg: bytes) -> None:
        body = msg[h:] if h >= 0 else msg
        if state["done"] or not body.strip():  # (a status: asked again when the second is up)
            return
        state["done"] = True
        jsa.ic.remove_sub(sub)
        timer.cancel()
        try:
            err = json.loads(body).get("error")
        except (ValueError, AttributeError):
            err = body[:200]
        if err is not None:
            warn(name, f"its state: {err}")

    def no_answer() -> None:
        if state["done"]:
            return
        state["done"] = True
        jsa.ic.remove_sub(sub)
        if tries > 1:
            _reset(jsa, api, stream, name, seq, warn, tries - 1)
        else:
            warn(name, "its state: the consumer never answered its reset")
    sub = jsa.ic.subscribe(rr, on_reset)
    timer = jsa.js.loop.call_later(1.0, no_answer)
    jsa.ic.publish(f"{api}.CONSUMER.RESET.{stream}.{name}".encode(), rr.encode(), json.dumps({"seq": seq}).encode())


def recreate_consumers(jsa: Any, stream: str, consumers: list[Any]) -> None:
    """A replicated stream restored from a v2 backup: each of the backup's consumers is created again
    through the JetStream API (the meta leader assigns it, as any consumer), then reset to just after its
    ack floor: what it had delivered and not had acknowledged is delivered again (nats-server's clustered
    backup holds no pending list either: it rolls such a consumer back to its ack floor). A consumer that
    cannot be made again is logged."""
    import json
    log = jsa.js.log
    api = jsa.api_prefixes()[0]

    def warn(name: str, what: Any) -> None:
        log.warn(f"Stream restore for '{jsa.account.name} > {stream}': consumer '{name}' not made again: {what}")

    for name, cfg, state in consumers:
        floor = int(((state.get("ack_floor") or {}).get("stream_seq")) or 0)
        reply = f"$JS.SNAPSHOT.C.{os.urandom(8).hex()}"

        def on_created(sub: Any, client: Any, subject: bytes, rp: Any, h: int, msg: bytes, name: str = name,
                       floor: int = floor, dp: str = str(cfg.get("deliver_policy") or "all")) -> None:
            jsa.ic.remove_sub(sub)
            body = msg[h:] if h >= 0 else msg
            try:
                resp = json.loads(body)
            except ValueError:
                resp = {"error": body[:200]}
            if not isinstance(resp, dict) or resp.get("error") is not None or "name" not in resp:
                warn(name, resp.get("error") if isinstance(resp, dict) else resp)
                return
            if floor > 0 and dp in ("all", "by_start_sequence", "by_start_time"):
                _reset(jsa, api, stream, name, floor + 1, warn, RESET_TRIES)
        jsa.ic.subscribe(reply, on_created)
        req = {"stream_name": stream, "config": {**cfg, "name": cfg.get("name") or name}, "action": "create"}
        jsa.ic.publish(f"{api}.CONSUMER.CREATE.{stream}.{name}".encode(), reply.encode(), json.dumps(req).encode())
