"""A client's CONNECT (and INFO) JSON, decoded with msgspec: loaded with the first client connection, not when the
server starts (issue 20: an idle server that no client has reached has not loaded msgspec, ~1.8 MB with what it
imports). ``rillet.server.client`` reaches it through its ``_connect_json()``."""
from __future__ import annotations

import msgspec

__all__ = ["ConnectOpts", "decode", "DecodeError", "PARSE_ERRORS", "redact"]

decode = msgspec.json.decode
DecodeError = msgspec.DecodeError
PARSE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError)


class ConnectOpts(msgspec.Struct, omit_defaults=True):
    # nats-server's defaults for fields a client leaves out: verbose and pedantic are on
    verbose: bool = True
    pedantic: bool = True
    tls_required: bool = False
    auth_token: str = ""
    user: str = ""
    # "pass" is a Python keyword: renamed on the wire
    password: str = msgspec.field(default="", name="pass")
    name: str = ""
    lang: str = ""
    version: str = ""
    protocol: int = 0
    echo: bool = True
    headers: bool = False
    no_responders: bool = False
    sig: str = ""
    jwt: str = ""
    nkey: str = ""


def redact(arg: bytes) -> str:
    """A CONNECT's JSON for the trace, its secrets replaced by ``[REDACTED]``."""
    try:
        d = decode(arg)
    except msgspec.DecodeError:
        return arg.decode(errors="replace")
    if isinstance(d, dict):
        for k in ("pass", "auth_token", "sig", "jwt"):
            if k in d:
                d[k] = "[REDACTED]"
        return msgspec.json.encode(d).decode()
    return arg.decode(errors="replace")
