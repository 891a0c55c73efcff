"""JetStream request bodies through the Go JSON codec (``rillet.gocompat.jsoncodec``).

The codec raises ``GoJSONError`` with Go's message; the JetStream API answers that as nats-server does, with
its ``INVALID_JSON`` error (400/10025, "invalid JSON: ..."). These three entry points are the codec's with
that translation; encoding (``to_go``, ``go_json``) needs none and is the codec's own.
"""
from __future__ import annotations

from typing import Any

from rillet.gocompat import jsoncodec as _codec
from rillet.gocompat.jsoncodec import GoJSONError as GoJSONError, go_json as go_json, to_go as to_go  # (JetStream's encoders)
from rillet.jetstream import errors as jserr

_json_default = _codec._json_default


def go_decode(data: bytes | str | None, cls: type, top: str | None = None, *, strict: bool = True) -> Any:
    """``jsoncodec.go_decode``; a decode failure is the API's ``INVALID_JSON``."""
    try:
        return _codec.go_decode(data, cls, top, strict=strict)
    except GoJSONError as e:
        raise jserr.INVALID_JSON(err=str(e)) from None


def parse_json(data: bytes | str | None) -> Any:
    """``jsoncodec.parse_json``; a syntax error is the API's ``INVALID_JSON``."""
    try:
        return _codec.parse_json(data)
    except GoJSONError as e:
        raise jserr.INVALID_JSON(err=str(e)) from None


def from_dict(d: dict[str, Any], cls: type, top: str | None = None) -> Any:
    """``jsoncodec.from_dict``; a decode failure is the API's ``INVALID_JSON``."""
    try:
        return _codec.from_dict(d, cls, top)
    except GoJSONError as e:
        raise jserr.INVALID_JSON(err=str(e)) from None
