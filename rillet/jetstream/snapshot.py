"""Stream archives: a snapshot's tar read back into a store (``load_into``) and the receiving half of a
restore on a replicated stream's leader (``ArchiveReceiver``). The ``$JS.API`` side: ``rillet.jetstream.api.snapshot``."""
from __future__ import annotations

import io
import os
import shutil
from typing import TYPE_CHECKING, Any

from rillet.jetstream.errors import ApiError

if TYPE_CHECKING:
    import tarfile



# ---- for a replicated stream (rillet.jetstream.cluster.streams): receive an archive, load it into a live store

RESTORE_IDLE = 5.0  # seconds without a chunk before a restore is given up (nats-server's activity interval)


class ArchiveReceiver:
    """The receiving half of STREAM.RESTORE on a replicated stream's leader (nats-server: the stream
    group's preferred peer takes the archive): ``start(request_reply)`` subscribes a
    ``$JS.SNAPSHOT.RESTORE.<stream>.<id>`` subject and answers the original request with it; each chunk
    there is acknowledged with an empty message; the empty chunk that ends the transfer calls
    ``on_done(archive, final_reply)``; a chunk without a reply or ``RESTORE_IDLE`` seconds without a chunk
    call ``on_fail(reason)``. ``cancel()`` stops it."""

    def __init__(self, jsa: Any, name: str, on_done: Any, on_fail: Any) -> None:
        self.jsa = jsa
        self.name = name
        self.on_done = on_done
        self.on_fail = on_fail
        self.subject = f"$JS.SNAPSHOT.RESTORE.{name}.{os.urandom(8).hex()}"
        self.chunks: list[bytes] = []
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
            self.chunks.append(bytes(data))
            self.size += len(data)
            self._arm()
            self.jsa.ic.publish(rp, None, b"")
            return
        self._end()
        archive = b"".join(self.chunks)
        self.chunks = []
        self.on_done(archive, rp)

    def _end(self) -> None:
        self.finished = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._sub is not None:
            self.jsa.ic.remove_sub(self._sub)
            self._sub = None

    def cancel(self) -> None:
        self._end()


def _safe_members(tar: tarfile.TarFile) -> None:
    for ti in tar:
        if not (ti.isfile() or ti.isdir()) or ti.name.startswith("/") or ".." in ti.name.split("/"):
            raise ApiError.make("STREAM_RESTORE", err="invalid snapshot archive")


def load_into(store: Any, cfg: Any, data: bytes) -> None:
    """Load a STREAM.SNAPSHOT archive into the empty live ``store`` of stream config ``cfg``, whatever the
    storage it was taken from: the store's own snapshot form (a memory stream's) with ``restore_into``; a
    tar of a file stream's directory by opening its ``store/`` in a temporary directory and copying every
    message at its sequence, with the skipped sequences before, between (deleted) and after (the last)."""
    import tarfile
    import tempfile
    from rillet.jetstream.store.base import ErrStoreCorrupt, StoreConfig
    from rillet.jetstream.store.filestore import FileStore, restore_into
    tmp = tempfile.mkdtemp(prefix="rillet-restore-")
    try:
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
                _safe_members(tar)
                if not any(n == "store" or n.startswith("store/") for n in tar.getnames()):
                    tar = None  # the store's own snapshot form (a memory stream's archive)
                else:
                    tar.extractall(tmp)  # (members checked above)
        except tarfile.TarError as e:
            raise ApiError.make("STREAM_RESTORE", err=f"invalid snapshot archive: {e}") from None
        if tar is None:
            restore_into(store, [data])
            return
        sdir = os.path.join(tmp, "store")
        if not os.path.isdir(sdir):
            raise ApiError.make("STREAM_RESTORE", err="invalid snapshot archive: no store")
        src = FileStore(sdir, StoreConfig(name=cfg.name, storage="file"))
        try:
            st = src.state()
            if st.first_seq > 1 and store.last_seq + 1 < st.first_seq:
                store.skip_msgs(store.last_seq + 1, st.first_seq - 1 - store.last_seq)
            seq = st.first_seq
            while seq <= st.last_seq:
                try:
                    m = src.load_next_msg(">", seq)
                except ErrStoreCorrupt as e:
                    if not e.seq:
                        raise
                    seq = e.seq + 1
                    continue
                if m is None or m.seq > st.last_seq:
                    break
                store.store_raw(m.seq, m.subject, m.hdr, m.data, m.ts, ttl=src.ttl_of(m.seq))
                seq = m.seq + 1
            if st.last_seq > store.last_seq:
                store.skip_msgs(store.last_seq + 1, st.last_seq - store.last_seq)
        finally:
            src.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
