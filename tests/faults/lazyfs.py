"""A filesystem that loses, at a "power cut", exactly what was not made durable (the idea of Jepsen's LazyFS).

Mounted with FUSE over a server's store directory, it serves every read and write at once (the volatile view, a
real directory ``<work>/cache``) and keeps apart what a power cut would leave (``<work>/durable``):

* file data becomes durable by ``fsync``/``fdatasync`` of that file: the ranges written since, and its size;
* a directory's entries (files created, renamed, unlinked, directories made or removed in it) become durable
  by ``fsync`` of that directory (``fsyncdir``); a file whose entry was never made durable is gone after a cut
  even if its data was synced, and a rename that was not is undone;
* ``sync()``-like "everything" happens only through the control path below, never by itself.

At a power cut (``stat`` of ``<mount>/.lazyfs-cut``, after the processes using the mount were killed) the
volatile view is thrown away and rebuilt from the durable state: unsynced writes, sizes, new files, renames
and removals are lost, as on a machine whose page cache vanished. ``<mount>/.lazyfs-sync`` makes everything
durable (a clean shutdown). Hard links, symbolic links and memory maps are not modelled (refused: ``EPERM``).

Run it as a process (one per server), e.g. ``python -m tests.faults.lazyfs WORK MOUNT``; it mounts in the
foreground and unmounts on SIGTERM/SIGINT. Needs ``/dev/fuse``, libfuse 2 (Debian: ``libfuse2 fuse``) and
``fusepy``. ``mount_lazyfs(work, mount)`` starts it and waits for the mount.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any

CUT = "/.lazyfs-cut"
SYNC = "/.lazyfs-sync"
ROOT = 1


class LazyFS:
    """The filesystem's state and operations (fusepy's ``Operations`` interface, by duck typing)."""

    def __init__(self, work: str) -> None:
        self.work = os.path.abspath(work)
        self.cache = os.path.join(self.work, "cache")
        self.durable = os.path.join(self.work, "durable")
        self.data = os.path.join(self.durable, "data")
        os.makedirs(self.data, exist_ok=True)
        os.makedirs(self.cache, exist_ok=True)
        self.ns_path = os.path.join(self.durable, "ns.json")
        # durable namespace: directory inode -> {name: inode}; inode kinds ("f" / "d")
        self.dns: dict[int, dict[str, int]] = {ROOT: {}}
        self.dkind: dict[int, str] = {ROOT: "d"}
        if os.path.exists(self.ns_path):
            with open(self.ns_path) as f:
                doc = json.load(f)
            self.dns = {int(k): dict(v) for k, v in doc["dirs"].items()}
            self.dkind = {int(k): v for k, v in doc["kinds"].items()}
        # volatile: path -> inode, inode -> kind, dirty ranges per file inode
        self.ino: dict[str, int] = {}
        self.kind: dict[int, str] = {}
        self.dirty: dict[int, list[tuple[int, int]]] = {}
        self.fds: dict[int, int] = {}
        self.next_ino = max(self.dkind) + 1
        self.cuts = 0
        self._rebuild()

    # ---- the durable state --------------------------------------------------------------------------

    def _save_ns(self) -> None:
        tmp = self.ns_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"dirs": {str(k): v for k, v in self.dns.items()},
                       "kinds": {str(k): v for k, v in self.dkind.items()}}, f)
        os.replace(tmp, self.ns_path)

    def _dpath(self, ino: int) -> str:
        return os.path.join(self.data, str(ino))

    def _rebuild(self) -> None:
        """The volatile view := the durable state (at start and at a power cut)."""
        for fd in self.fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds.clear()
        shutil.rmtree(self.cache, ignore_errors=True)
        os.makedirs(self.cache)
        self.ino = {"/": ROOT}
        self.kind = {ROOT: "d"}
        self.dirty = {}
        reachable = {ROOT}

        def walk(dino: int, path: str) -> None:
            for name, child in sorted(self.dns.get(dino, {}).items()):
                p = path.rstrip("/") + "/" + name
                k = self.dkind.get(child, "f")
                reachable.add(child)
                self.ino[p] = child
                self.kind[child] = k
                if k == "d":
                    os.mkdir(self.cache + p)
                    walk(child, p)
                else:
                    src = self._dpath(child)
                    if os.path.exists(src):
                        shutil.copyfile(src, self.cache + p)
                    else:
                        open(self.cache + p, "wb").close()
        walk(ROOT, "/")
        # inodes no durable directory names any more: their data goes
        for name in os.listdir(self.data):
            if int(name) not in reachable:
                os.unlink(os.path.join(self.data, name))
        self.dns = {d: e for d, e in self.dns.items() if d in reachable}
        self.dkind = {i: k for i, k in self.dkind.items() if i in reachable}
        self._save_ns()

    def _sync_file(self, ino: int, path: str) -> None:
        dst = self._dpath(ino)
        src = self.cache + path
        size = os.path.getsize(src)
        fresh = not os.path.exists(dst)
        with open(src, "rb") as s, open(dst, "r+b" if not fresh else "w+b") as d:
            ranges = [(0, size)] if fresh else self.dirty.get(ino, [])
            for off, n in ranges:
                s.seek(off)
                chunk = s.read(n)
                d.seek(off)
                d.write(chunk)
            d.truncate(size)
        self.dirty.pop(ino, None)

    def _sync_dir(self, dino: int, path: str) -> None:
        entries: dict[str, int] = {}
        for name in os.listdir(self.cache + path):
            p = path.rstrip("/") + "/" + name
            child = self.ino.get(p)
            if child is None:
                continue
            entries[name] = child
            k = self.kind[child]
            self.dkind[child] = k
            if k == "d":
                self.dns.setdefault(child, {})
            elif not os.path.exists(self._dpath(child)):
                open(self._dpath(child), "wb").close()  # its entry is durable, its unsynced data is not
        self.dns[dino] = entries
        self._save_ns()

    def sync_all(self) -> None:
        for path, ino in sorted(self.ino.items(), key=lambda kv: kv[0].count("/")):
            if self.kind[ino] == "d":
                self._sync_dir(ino, path)
        for path, ino in list(self.ino.items()):
            if self.kind[ino] == "f":
                if not os.path.exists(self._dpath(ino)):
                    open(self._dpath(ino), "wb").close()
                self.dirty[ino] = [(0, os.path.getsize(self.cache + path))]
                self._sync_file(ino, path)

    def power_cut(self) -> None:
        self.cuts += 1
        self._rebuild()

    # ---- FUSE operations ----------------------------------------------------------------------------

    def _full(self, path: str) -> str:
        return self.cache + path

    def _new(self, path: str, kind: str) -> None:
        i = self.next_ino
        self.next_ino += 1
        self.ino[path] = i
        self.kind[i] = kind
        if kind == "f":
            self.dirty[i] = []

    def __call__(self, op: str, *args: Any) -> Any:
        fn = getattr(self, op, None)
        if fn is None:
            raise _err(errno.ENOSYS)
        return fn(*args)

    def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
        if path == CUT:
            self.power_cut()
            raise _err(errno.ENOENT)
        if path == SYNC:
            self.sync_all()
            raise _err(errno.ENOENT)
        try:
            st = os.lstat(self._full(path))
        except OSError as e:
            raise _err(e.errno or errno.EIO) from None
        return {k: getattr(st, k) for k in ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink",
                                            "st_size", "st_uid", "st_blocks")}

    def readdir(self, path: str, fh: Any) -> list[str]:
        return [".", ".."] + os.listdir(self._full(path))

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._full(path), amode):
            raise _err(errno.EACCES)
        return 0

    def statfs(self, path: str) -> dict[str, Any]:
        st = os.statvfs(self.cache)
        return {k: getattr(st, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree",
                                            "f_files", "f_flag", "f_frsize", "f_namemax")}

    def mkdir(self, path: str, mode: int) -> None:
        os.mkdir(self._full(path), mode)
        self._new(path, "d")

    def rmdir(self, path: str) -> None:
        os.rmdir(self._full(path))
        self.ino.pop(path, None)

    def unlink(self, path: str) -> None:
        os.unlink(self._full(path))
        self.ino.pop(path, None)

    def rename(self, old: str, new: str) -> None:
        os.rename(self._full(old), self._full(new))
        moved = {p: i for p, i in self.ino.items() if p == old or p.startswith(old + "/")}
        for p in moved:
            del self.ino[p]
        for p in [p for p in self.ino if p == new or p.startswith(new + "/")]:
            del self.ino[p]
        for p, i in moved.items():
            self.ino[new + p[len(old):]] = i

    def link(self, target: str, source: str) -> None:
        raise _err(errno.EPERM)

    def symlink(self, target: str, source: str) -> None:
        raise _err(errno.EPERM)

    def readlink(self, path: str) -> str:
        raise _err(errno.EINVAL)

    def chmod(self, path: str, mode: int) -> None:
        os.chmod(self._full(path), mode)

    def chown(self, path: str, uid: int, gid: int) -> None:
        os.chown(self._full(path), uid, gid)

    def utimens(self, path: str, times: Any = None) -> None:
        os.utime(self._full(path), times)

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        fd = os.open(self._full(path), os.O_RDWR | os.O_CREAT, mode)
        if path not in self.ino:
            self._new(path, "f")
        self.fds[fd] = self.ino[path]
        return fd

    def open(self, path: str, flags: int) -> int:
        fd = os.open(self._full(path), flags & ~(os.O_APPEND | getattr(os, "O_DIRECT", 0)))
        ino = self.ino[path]
        if flags & os.O_TRUNC:
            self.dirty.setdefault(ino, []).append((0, 0))
        self.fds[fd] = ino
        return fd

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        n = os.pwrite(fh, data, offset)
        self._mark(self.fds.get(fh, self.ino.get(path, 0)), offset, n)
        return n

    def _mark(self, ino: int, offset: int, n: int) -> None:
        ranges = self.dirty.setdefault(ino, [])
        if ranges and ranges[-1][0] + ranges[-1][1] == offset:
            ranges[-1] = (ranges[-1][0], ranges[-1][1] + n)
        else:
            ranges.append((offset, n))
        if len(ranges) > 4096:  # (merge into one span)
            lo = min(o for o, _ in ranges)
            hi = max(o + m for o, m in ranges)
            self.dirty[ino] = [(lo, hi - lo)]

    def truncate(self, path: str, length: int, fh: Any = None) -> None:
        if fh is not None:
            os.ftruncate(fh, length)
        else:
            os.truncate(self._full(path), length)
        self.dirty.setdefault(self.ino[path], [])

    def flush(self, path: str, fh: int) -> int:
        return 0

    def release(self, path: str, fh: int) -> int:
        self.fds.pop(fh, None)
        os.close(fh)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        ino = self.ino.get(path)
        if ino is None:  # (unlinked while open: nothing a cut could find)
            return 0
        self._sync_file(ino, path)
        return 0

    def opendir(self, path: str) -> int:
        return 0

    def releasedir(self, path: str, fh: int) -> int:
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        ino = self.ino.get(path)
        if ino is not None:
            self._sync_dir(ino, path)
        return 0


def _err(code: int) -> OSError:
    from fuse import FuseOSError
    return FuseOSError(code)


def main(argv: list[str]) -> int:
    import signal

    from fuse import FUSE
    work, mount = argv[0], argv[1]
    os.makedirs(mount, exist_ok=True)
    fs = LazyFS(work)

    def stop(*_: Any) -> None:
        subprocess.run(["fusermount", "-u", "-z", mount], check=False)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    FUSE(fs, mount, foreground=True, nothreads=True, direct_io=True, attr_timeout=0, entry_timeout=0,
         negative_timeout=0, default_permissions=False)
    return 0


def fuse_available() -> str | None:
    """None when this machine can mount a LazyFS, else why not."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which("fusermount") is None:
        return "no fusermount (Debian: apt-get install fuse libfuse2)"
    try:
        import fuse  # noqa: F401
    except (ImportError, OSError, EnvironmentError) as e:
        return f"fusepy or libfuse 2 missing ({e})"
    return None


class Mounted:
    """A LazyFS process over ``mount`` (its state in ``work``): ``cut()`` is a power cut, ``sync()`` a clean
    flush, ``close()`` unmounts."""

    def __init__(self, work: str, mount: str, timeout: float = 10.0) -> None:
        self.work, self.mount = work, mount
        os.makedirs(mount, exist_ok=True)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.faults.lazyfs", work, mount], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while not os.path.ismount(mount):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                self.close()
                raise RuntimeError(f"lazyfs did not mount {mount}: {err.strip()[-500:]}")
            time.sleep(0.02)

    def cut(self) -> None:
        """A power cut: what was not made durable is gone (kill the processes using the mount first)."""
        try:
            os.stat(self.mount + CUT)
        except FileNotFoundError:
            pass

    def sync(self) -> None:
        try:
            os.stat(self.mount + SYNC)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        subprocess.run(["fusermount", "-u", "-z", self.mount], check=False, stderr=subprocess.DEVNULL)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> "Mounted":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
