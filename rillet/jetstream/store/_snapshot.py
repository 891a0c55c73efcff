"""Snapshots of any store in the file store's format (a tar of ``meta.json``, ``state.log``,
``msgs/*.blk`` and ``consumers/<name>/state``), and restoring them."""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import time
import zlib
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from .base import ErrStoreCorrupt, LogFn, StoreConfig, StoredMsg, StoreError
from ._fsformat import (
    _CRC,
    _LAST,
    _OVERHEAD,
    _REC,
    _U64,
    BLOCK_MAGIC,
    CONSUMER_MAGIC,
    FORMAT_VERSION,
    L_DEL,
    L_FIRST,
    L_LAST,
    LOG_MAGIC,
    T_MSG,
    _encode_log,
    _safe_name,
)
from .filestore import FileStore

if TYPE_CHECKING:
    import tarfile

# tarfile (~0.3 MB once loaded) is imported by the two functions that write and read a snapshot, not with
# the file store: a server that never snapshots a stream does not hold it.

__all__ = ["restore", "restore_into", "snapshot_from_store"]


class _Sink(io.RawIOBase):
    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.chunks.append(bytes(b))
        return len(b)

    def take(self) -> list[bytes]:
        out, self.chunks = self.chunks, []
        return out


def _tar_add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    ti = tar.tarinfo(name)  # (the TarInfo class of this archive)
    ti.size = len(data)
    ti.mtime = int(time.time())
    ti.mode = 0o644
    tar.addfile(ti, io.BytesIO(data))


def _live_msgs(store: Any, last: int) -> Iterator[StoredMsg]:
    """The store's messages up to ``last``, in order, read one at a time (none is held for long);
    a message that fails its checksum is left out."""
    seq = 0
    while True:
        try:
            sm = store.load_next_msg(">", seq)
        except ErrStoreCorrupt as e:
            if not e.seq:
                raise
            seq = e.seq + 1
            continue
        if sm is None or sm.seq > last:
            return
        yield sm
        seq = sm.seq + 1


# messages encoded between two empty yields of snapshot_from_store (a pause point for a caller that produces
# the archive in slices on the event loop: ~64 messages are well under a millisecond)
PAUSE_EVERY = 64


def snapshot_from_store(store: Any, include_consumers: bool = True, prefix: str = "",
                        extra: Iterable[tuple[str, bytes]] = ()) -> Iterator[bytes]:
    """Snapshot any store in the file store's format: a tar stream of ``meta.json``,
    ``state.log``, ``msgs/*.blk`` and ``consumers/<name>/state``, each name under ``prefix``, then the
    ``extra`` (name, contents) entries as given. Content is plaintext whatever the store's encryption.
    The set of messages and the consumer states are taken when this is called; messages removed
    meanwhile are left out. The iterator yields an empty chunk every ``PAUSE_EVERY`` messages, so that
    each step is short."""
    st = store.fast_state()
    # blocks of at most 1 MiB in the archive: each is built and written in one step of the iterator
    bsize = min(max(int(getattr(store.cfg, "block_size", 0) or 0), 4096), 1 << 20)
    cons: list[tuple[str, bytes]] = []
    if include_consumers:
        for name, cs in store._consumers.items():
            enc = cs._enc
            if enc is not None:
                cons.append((name, enc))
    ttl_of = getattr(store, "ttl_of")
    extra = list(extra)

    def gen() -> Iterator[bytes]:
        import tarfile
        sink = _Sink()
        tar = tarfile.open(fileobj=sink, mode="w|")  # type: ignore[arg-type]
        _tar_add(tar, prefix + "meta.json", json.dumps({"format": FORMAT_VERSION, "name": store.cfg.name}).encode())
        yield from sink.take()
        index = 1
        parts: list[bytes] = [BLOCK_MAGIC]
        size = len(BLOCK_MAGIC)
        have: list[int] = []
        for sm in _live_msgs(store, st.last_seq):
            seq = sm.seq
            ttl = ttl_of(seq)
            rec = _encode_record(sm, int(ttl * 1e9) if ttl else 0)
            if size + len(rec) > bsize and size > len(BLOCK_MAGIC):
                _tar_add(tar, f"{prefix}msgs/{index:010d}.blk", b"".join(parts))
                yield from sink.take()
                index += 1
                parts = [BLOCK_MAGIC]
                size = len(BLOCK_MAGIC)
            parts.append(rec)
            size += len(rec)
            have.append(seq)
            if len(have) % PAUSE_EVERY == 0:
                yield b""
        if size > len(BLOCK_MAGIC):
            _tar_add(tar, f"{prefix}msgs/{index:010d}.blk", b"".join(parts))
            yield from sink.take()
        # Sequence state: first/last markers and the interior gaps as tombstones.
        first = have[0] if have else st.last_seq + 1
        logp = [
            LOG_MAGIC,
            _encode_log(L_FIRST, _U64.pack(first)),
            _encode_log(L_LAST, _LAST.pack(st.last_seq, st.last_ts)),
        ]
        dels: list[int] = []
        prev = first - 1
        for s in have:
            if s > prev + 1:
                dels.extend(range(prev + 1, s))
            prev = s
        for i in range(0, len(dels), 8192):
            chunk = dels[i : i + 8192]
            logp.append(_encode_log(L_DEL, struct.pack(f"<{len(chunk)}Q", *chunk)))
        _tar_add(tar, prefix + "state.log", b"".join(logp))
        for name, enc in cons:
            data = CONSUMER_MAGIC + _CRC.pack(zlib.crc32(enc)) + enc
            _tar_add(tar, f"{prefix}consumers/{_safe_name(name)}/name", name.encode("utf-8", "surrogateescape"))
            _tar_add(tar, f"{prefix}consumers/{_safe_name(name)}/state", data)
        for name, data in extra:
            _tar_add(tar, name, data)
        tar.close()
        yield from sink.take()

    return gen()


def _encode_record(sm: StoredMsg, ttl_ns: int) -> bytes:
    sb = sm.subject.encode("utf-8", "surrogateescape")
    total = _OVERHEAD + len(sb) + len(sm.hdr) + len(sm.data)
    head = _REC.pack(T_MSG, 0, len(sb), total, sm.seq, sm.ts, ttl_ns, len(sm.hdr), len(sm.data))
    body = b"".join((head, sb, sm.hdr, sm.data))
    return body + _CRC.pack(zlib.crc32(body))


class _ChunkReader(io.RawIOBase):
    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._it = iter(chunks)
        self._buf = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._buf:
            try:
                self._buf = memoryview(bytes(next(self._it)))
            except StopIteration:
                return 0
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]  # (a view: no copy of the rest, however big the chunk)
        return n


def restore(path: str, chunks: Iterable[bytes]) -> None:
    """Unpack a snapshot (from ``snapshot_stream``) into the store directory ``path``;
    open it with ``FileStore(path, cfg)``."""
    if os.path.exists(path) and os.listdir(path):
        raise StoreError(f"restore target {path} is not empty")
    os.makedirs(os.path.join(path, "msgs"), exist_ok=True)
    os.makedirs(os.path.join(path, "consumers"), exist_ok=True)
    import tarfile
    reader = io.BufferedReader(_ChunkReader(chunks), 1 << 16)
    try:
        with tarfile.open(fileobj=reader, mode="r|") as tar:
            for ti in tar:
                name = ti.name
                parts = name.split("/")
                ok = ti.isfile() and (
                    name in ("meta.json", "state.log")
                    or (len(parts) == 2 and parts[0] == "msgs" and parts[1].endswith(".blk"))
                    or (
                        len(parts) == 3
                        and parts[0] == "consumers"
                        and parts[2] in ("state", "name")
                        and parts[1] not in ("", ".", "..")
                    )
                )
                if not ok:
                    raise StoreError(f"unexpected entry {name!r} in snapshot")
                f = tar.extractfile(ti)
                assert f is not None
                dest = os.path.join(path, *parts)
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                with open(dest, "wb") as out:
                    shutil.copyfileobj(f, out)
    except (tarfile.TarError, OSError) as e:
        raise StoreError(f"bad snapshot: {e}") from e


def restore_into(store: Any, chunks: Iterable[bytes], log: LogFn | None = None) -> None:
    """Load a snapshot into an empty store of any kind (e.g. a MemStore)."""
    import tempfile

    tmp = tempfile.mkdtemp(prefix="rillet-restore-")
    try:
        restore(os.path.join(tmp, "s"), chunks)
        cfg = StoreConfig(name=store.cfg.name, storage="file")
        fs = FileStore(os.path.join(tmp, "s"), cfg, log)
        try:
            st = fs.fast_state()
            for sm in _live_msgs(fs, st.last_seq):
                ttl = fs.ttl_of(sm.seq)
                store.store_raw(sm.seq, sm.subject, sm.hdr, sm.data, sm.ts, ttl=ttl)
            if st.last_seq > store._last:
                store.skip_msgs(store._last + 1, st.last_seq - store._last)
            if not store.msgs and st.first_seq > store._first:
                store.compact(st.first_seq)
            for name, cs in fs._consumers.items():
                state = cs.state()
                if state is not None:
                    store.consumer_store(name).update(state)
        finally:
            fs.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

