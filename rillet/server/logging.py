"""Logging in nats-server's format: ``[pid] 2006/01/02 15:04:05.000000 [INF] text``.

Scripts and test harnesses wait for lines such as ``[INF] Server is ready``, so the words matter.
"""
from __future__ import annotations

import os
import sys
import time
from typing import TextIO


class Logger:
    __slots__ = ("debug_on", "trace_on", "logtime", "utc", "_out", "_pid", "_path", "size_limit")

    def __init__(self, *, debug: bool = False, trace: bool = False, logtime: bool = True, utc: bool = False,
                 log_file: str = "", size_limit: int = 0, out: TextIO | None = None) -> None:
        self.debug_on = debug
        self.trace_on = trace
        self.logtime = logtime
        self.utc = utc
        self.size_limit = size_limit
        self._pid = f"[{os.getpid()}] "
        self._path = log_file
        self._out: TextIO = out if out is not None else sys.stderr
        if log_file:
            self._out = open(log_file, "a", buffering=1, encoding="utf-8")

    def reopen(self) -> None:
        """Reopen the log file (for log rotation, `--signal reopen` / SIGUSR1)."""
        if self._path:
            try:
                self._out.close()
            except OSError:
                pass
            self._out = open(self._path, "a", buffering=1, encoding="utf-8")

    def close(self) -> None:
        if self._path:
            try:
                self._out.close()
            except OSError:
                pass

    def _emit(self, level: str, msg: str) -> None:
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
        except (OSError, ValueError):
            pass
        if self._path and self.size_limit and self._out.tell() > self.size_limit:
            self._rotate()

    def _rotate(self) -> None:
        self._out.close()
        stamp = time.strftime("%Y.%m.%d.%H.%M.%S")
        try:
            os.rename(self._path, f"{self._path}.{stamp}.{int(time.time_ns() % 1_000_000_000)}")
        except OSError:
            pass
        self._out = open(self._path, "a", buffering=1, encoding="utf-8")

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
