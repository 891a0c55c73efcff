"""SHA-256/SHA-512, constant-time comparison and random tokens without ``hashlib``, ``hmac`` or ``secrets``.

Importing ``hashlib`` (which ``hmac`` and ``secrets`` import) sets up OpenSSL's digest tables, ~0.6 MB of an idle
server's memory (issue 20: idle RSS) for the few hashes and tokens the core server makes: the interpreter's own
SHA-2 modules (the ``random`` module already loads SHA-512), ``_operator._compare_digest`` (what
``hmac.compare_digest`` is without OpenSSL) and ``os.urandom`` do the same work. Falls back to ``hashlib`` on an
interpreter without those built-in modules. A top-level module: every package may use it (bottom layer).
"""
from __future__ import annotations

import base64
import os
from random import SystemRandom
from typing import Any, Callable, Sequence

try:
    from _operator import _compare_digest as compare_digest
except ImportError:  # pragma: no cover - other interpreters
    from hmac import compare_digest  # noqa: F401

__all__ = ["sha256", "sha512", "compare_digest", "choice", "token_urlsafe", "token_hex"]

_system_random = SystemRandom()  # os.urandom, as secrets uses


def _builtin(name: str) -> Callable[..., Any]:
    for module in (f"_{name}", "_sha2"):  # CPython 3.11; 3.12 and later
        try:
            return getattr(__import__(module), name)
        except (ImportError, AttributeError):
            continue
    import hashlib
    return getattr(hashlib, name)


def sha256(data: bytes) -> Any:
    """A SHA-256 hash object of ``data`` (``.digest()``, ``.hexdigest()``), as ``hashlib.sha256(data)``."""
    return _builtin("sha256")(data)


def sha512(data: bytes) -> Any:
    """A SHA-512 hash object of ``data``, as ``hashlib.sha512(data)``."""
    return _builtin("sha512")(data)


def choice(seq: Sequence[Any]) -> Any:
    """A random element, from the operating system's random source (``secrets.choice``)."""
    return _system_random.choice(seq)


def token_urlsafe(nbytes: int) -> str:
    """``nbytes`` random bytes, base64url without padding (``secrets.token_urlsafe``)."""
    return base64.urlsafe_b64encode(os.urandom(nbytes)).rstrip(b"=").decode("ascii")


def token_hex(nbytes: int) -> str:
    """``nbytes`` random bytes as hex (``secrets.token_hex``)."""
    return os.urandom(nbytes).hex()
