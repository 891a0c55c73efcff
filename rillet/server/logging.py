"""Logging in nats-server's format: ``[pid] 2006/01/02 15:04:05.000000 [INF] text``.

Scripts and test harnesses wait for lines such as ``[INF] Server is ready``, so the words matter.

Where the lines go follows nats-server's order of precedence: a log file (``-l``), else a remote
syslog (``-r udp://host:port``, ``tcp://host:port`` or ``unix:///path``), else the local syslog
(``-s``), else stderr. Syslog messages carry no level label; the level is the syslog severity
(INF and TRC notice, WRN warning, ERR error, FTL critical, DBG debug), with the daemon facility
locally and facility 0 remotely, as nats-server sends them.
"""
from __future__ import annotations

import logging
import os
import socket
import sys
import time
from typing import Any, TextIO

# where the local syslog daemon listens, tried in this order (as Go's log/syslog does)
LOCAL_SYSLOG_PATHS = ("/dev/log", "/var/run/syslog", "/var/run/log")

_SEVERITY = {"[INF]": "notice", "[TRC]": "notice", "[WRN]": "warning", "[ERR]": "error",
             "[FTL]": "critical", "[DBG]": "debug"}


class SyslogError(Exception):
    """The syslog destination cannot be used; the text reads like nats-server's."""


def syslog_tag() -> str:
    """The program name syslog lines carry: the executable's base name, as nats-server uses."""
    name = os.path.basename(sys.argv[0] or "")
    if not name or name in ("__main__.py", "-c", "-m"):
        return "rillet-server"
    return name


class _GoSyslogFormatter(logging.Formatter):
    """The message layout of Go's log/syslog: ``<pri>`` is added by the handler, then
    ``RFC3339 host tag[pid]: msg`` (remote) or ``Jan _2 15:04:05 tag[pid]: msg`` (local socket)."""

    def __init__(self, remote: bool, tag: str) -> None:
        super().__init__()
        self.remote = remote
        self.tag = tag
        self.host = socket.gethostname()

    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        nl = "" if msg.endswith("\n") else "\n"
        head = f"{self.tag}[{os.getpid()}]: "
        if self.remote:
            import datetime  # (remote syslog only)
            now = datetime.datetime.now().astimezone().replace(microsecond=0)
            stamp = now.isoformat()
            if stamp.endswith("+00:00"):
                stamp = stamp[:-6] + "Z"
            return f"{stamp} {self.host} {head}{msg}{nl}"
        stamp = time.strftime("%b %d %H:%M:%S")
        if stamp[4] == "0":  # Go's time.Stamp pads the day with a space
            stamp = stamp[:4] + " " + stamp[5:]
        return f"{stamp} {head}{msg}{nl}"


def _remote_address(url: str) -> tuple[Any, int]:
    """(address, socket type) for ``udp://host:port``, ``tcp://host:port`` or ``unix:///path``."""
    from urllib.parse import urlsplit  # (with ipaddress, ~0.4 MB: remote syslog only)
    parts = urlsplit(url)
    scheme = parts.scheme
    if scheme in ("udp", "tcp"):
        netloc = parts.netloc
        if netloc.startswith("["):
            end = netloc.find("]")
            host, port = netloc[1:end], netloc[end + 2:] if netloc[end + 1:end + 2] == ":" else ""
        else:
            host, _, port = netloc.rpartition(":") if ":" in netloc else (netloc, "", "")
        if not port:
            raise SyslogError(f'error connecting to syslog: "dial {scheme}: address {netloc}: '
                              'missing port in address"')
        try:
            number = int(port)
        except ValueError:
            raise SyslogError(f'error connecting to syslog: "dial {scheme}: lookup {netloc}: '
                              'invalid port"') from None
        kind = socket.SOCK_DGRAM if scheme == "udp" else socket.SOCK_STREAM
        return (host, number), kind
    if scheme == "unix":
        return parts.path, socket.SOCK_DGRAM
    raise SyslogError(f'error invalid network type: "{scheme}"')


def open_syslog(remote: str = "", local_paths: tuple[str, ...] = LOCAL_SYSLOG_PATHS,
                tag: str = "") -> logging.handlers.SysLogHandler:
    """A SysLogHandler for ``remote`` (a URL) or, when empty, for the local syslog socket."""
    # (loaded here, with syslog: logging.handlers brings queue and pickle, ~0.3 MB a server without
    # syslog would hold for nothing)
    import logging.handlers
    tag = tag or syslog_tag()
    if remote:
        address, kind = _remote_address(remote)
        try:
            handler = logging.handlers.SysLogHandler(address, facility=logging.handlers.SysLogHandler.LOG_KERN,
                                                     socktype=kind)
        except OSError as e:
            where = address if isinstance(address, str) else f"{address[0]}:{address[1]}"
            net = "unix" if isinstance(address, str) else ("udp" if kind == socket.SOCK_DGRAM else "tcp")
            reason = (e.strerror or str(e)).lower()
            raise SyslogError(f'error connecting to syslog: "dial {net} {where}: connect: {reason}"') from None
        formatter = _GoSyslogFormatter(True, tag)
    else:
        handler = None
        for path in local_paths:
            if not _unix_socket_reachable(path):
                continue
            handler = logging.handlers.SysLogHandler(path, facility=logging.handlers.SysLogHandler.LOG_DAEMON)
            if handler.socket is not None:
                break
            handler.close()
            handler = None
        if handler is None:
            raise SyslogError('error connecting to syslog: "Unix syslog delivery error"')
        formatter = _GoSyslogFormatter(False, tag)
    handler.append_nul = False
    handler.setFormatter(formatter)
    # our level labels are the record's level names; each maps to the syslog severity nats-server uses
    handler.priority_map = dict(_SEVERITY)
    return handler


class Logger:
    __slots__ = ("debug_on", "trace_on", "logtime", "utc", "_out", "_pid", "_path", "size_limit",
                 "max_files", "_syslog")

    def __init__(self, *, debug: bool = False, trace: bool = False, logtime: bool = True, utc: bool = False,
                 log_file: str = "", size_limit: int = 0, out: TextIO | None = None, max_files: int = 0,
                 syslog: bool = False, remote_syslog: str = "",
                 syslog_paths: tuple[str, ...] = LOCAL_SYSLOG_PATHS) -> None:
        """``SyslogError`` when a syslog destination is asked for (and no log file) but cannot be used."""
        self.debug_on = debug
        self.trace_on = trace
        self.logtime = logtime
        self.utc = utc
        self.size_limit = size_limit
        self.max_files = max_files
        self._pid = f"[{os.getpid()}] "
        self._path = log_file
        self._out: TextIO = out if out is not None else sys.stderr
        self._syslog: logging.handlers.SysLogHandler | None = None
        if log_file:
            self._out = open(log_file, "a", buffering=1, encoding="utf-8")
        elif remote_syslog or syslog:
            self._syslog = open_syslog(remote_syslog, syslog_paths)

    @classmethod
    def from_options(cls, o: Any) -> "Logger":
        return cls(debug=o.debug, trace=o.trace, logtime=o.logtime, utc=o.logtime_utc, log_file=o.log_file,
                   size_limit=o.log_size_limit, max_files=o.log_max_files, syslog=o.syslog,
                   remote_syslog=o.remote_syslog)

    def reopen(self) -> None:
        """Reopen the log file (for log rotation, `--signal reopen` / SIGUSR1)."""
        if self._path:
            try:
                self._out.close()
            except OSError as e:
                self._report(f"Error closing the log file for reopening: {e}")
            self._out = open(self._path, "a", buffering=1, encoding="utf-8")

    def close(self) -> None:
        if self._syslog is not None:
            self._syslog.close()
            self._syslog = None
        if self._path:
            try:
                self._out.close()
            except OSError as e:
                self._report(f"Error closing the log file: {e}")

    @staticmethod
    def _report(msg: str) -> None:
        """Trouble with the log destination itself: said on stderr (where else)."""
        try:
            sys.stderr.write(f"[{os.getpid()}] [ERR] {msg}\n")
        except (OSError, ValueError):
            pass  # stderr itself is gone: nothing left to tell

    def _emit(self, level: str, msg: str) -> None:
        if self._syslog is not None:
            record = logging.LogRecord("rillet", logging.INFO, "", 0, msg, None, None)
            record.levelname = level
            self._syslog.emit(record)  # a failed send goes to the handler's handleError (stderr)
            return
        if self._write(level, msg) and self._path and self.size_limit and self._out.tell() > self.size_limit:
            self._rotate()

    def _write(self, level: str, msg: str) -> bool:
        """One line to the stream (no rotation check); False when the write failed."""
        if self.logtime:
            now = time.time()
            tm = time.gmtime(now) if self.utc else time.localtime(now)
            stamp = time.strftime("%Y/%m/%d %H:%M:%S", tm) + f".{int((now % 1) * 1_000_000):06d} "
            line = f"{self._pid}{stamp}{level} {msg}\n"
        else:
            line = f"{self._pid}{level} {msg}\n"
        try:
            self._out.write(line)
            self._out.flush()
        except (OSError, ValueError) as e:
            if self._out is not sys.stderr:
                self._report(f"Error writing the log: {e}")
            return False
        return True

    def _rotate(self) -> None:
        self._out.close()
        now = time.time_ns()
        stamp = time.strftime("%Y.%m.%d.%H.%M.%S", time.localtime(now / 1e9))
        backup = f"{self._path}.{stamp}.{now % 1_000_000_000:09d}"
        try:
            os.rename(self._path, backup)
        except OSError as e:
            self._report(f"Unable to rename the log file for rotation: {e}")
        self._out = open(self._path, "a", buffering=1, encoding="utf-8")
        self._write("[INF]", f'Rotated log, backup saved as "{backup}"')
        if self.max_files > 0:
            self._purge()

    def _purge(self) -> None:
        """Keep ``max_files - 1`` rotated backups besides the live file (logfile_max_num), oldest go first."""
        folder = os.path.dirname(self._path) or "."
        base = os.path.basename(self._path) + "."
        try:
            names = sorted(n for n in os.listdir(folder) if n.startswith(base) and _is_backup_stamp(n[len(base):]))
        except OSError as e:
            self._write("[ERR]", f'Unable to read directory "{folder}" for log purge ({e}), will attempt next rotation')
            return
        for name in names[:max(len(names) - (self.max_files - 1), 0)]:
            try:
                os.remove(os.path.join(folder, name))
            except OSError as e:
                self._write("[ERR]", f'Unable to remove backup log file "{name}" ({e}), will attempt next rotation')
                return
            self._write("[INF]", f'Purged log file "{name}"')

    def notice(self, msg: str) -> None:
        self._emit("[INF]", msg)

    info = notice

    def warn(self, msg: str) -> None:
        self._emit("[WRN]", msg)

    def error(self, msg: str) -> None:
        self._emit("[ERR]", msg)

    def fatal(self, msg: str) -> None:
        self._emit("[FTL]", msg)

    def debug(self, msg: str) -> None:
        if self.debug_on:
            self._emit("[DBG]", msg)

    def trace(self, msg: str) -> None:
        if self.trace_on:
            self._emit("[TRC]", msg)


def _unix_socket_reachable(path: str) -> bool:
    """Whether a syslog daemon answers on the unix socket ``path`` (datagram or stream)."""
    for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
        with socket.socket(socket.AF_UNIX, kind) as probe:
            try:
                probe.connect(path)
                return True
            except OSError:
                continue
    return False


def _is_backup_stamp(text: str) -> bool:
    """``2006.01.02.15.04.05.000000000``: the suffix a rotated log file gets."""
    parts = text.split(".")
    return len(parts) == 7 and all(p.isdigit() for p in parts)
