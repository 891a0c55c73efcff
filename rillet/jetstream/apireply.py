"""The reply subjects of the API requests a mirror or source sends to its origin (consumer create, consumer reset),
as nats-server 2.15 forms them, chosen by ``feature_flags { js_api_reply_v2 }`` on the server that holds the
sourcing stream (the origin's server does not read them):

- v1 (the default): ``$JSC.R.<uid>``;
- v2: ``$JSC.R.<domain>.<account hash>.<origin stream>.<origin consumer>.<uid>``: ``<domain>`` the second token of
  the source's ``external.api`` prefix (``HUB`` for ``$JS.HUB.API``), ``_`` without an ``external`` block;
  ``<account hash>`` the 8-character hash of the sourcing stream's account (as in v2 ack subjects);
  ``<origin consumer>`` the consumer the request is for. A leafnode or import permission can then name one origin
  stream (``$JSC.R.HUB.*.EVENTS.>``) instead of ``$JSC.R.>``.

``<uid>``: 8 random characters of ``0-9A-Za-z``. With v2 the consumer's name must be known before its create is
answered, so an ephemeral mirror or source consumer is named by the requester (``consumer_name``), not by the
origin: ``JS_MIRROR_<id>_<uid>`` / ``JS_SRC_<id>_<uid>``, ``<id>`` the hash nats-server gives its sourcing
consumers (stream, account and domain), ``<uid>`` new at each attempt (a retried create never meets the consumer of
an attempt given up, which is left to its inactivity threshold)."""
from __future__ import annotations

import hashlib
import os
from typing import Any

_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def uid() -> str:
    return "".join(_DIGITS[b % 62] for b in os.urandom(8))


def _hash8(text: str) -> str:
    d = hashlib.sha256(text.encode()).digest()
    return "".join(_DIGITS[b % 62] for b in d[:8])


def v2(stream: Any) -> bool:
    from rillet.config.features import enabled
    return enabled(stream.js.server.opts, "js_api_reply_v2")


def domain_token(api: str | None) -> str:
    """The ``<domain>`` token: ``_`` without an ``external`` API prefix, else its second token."""
    if not api:
        return "_"
    toks = api.split(".")
    return toks[1] if len(toks) > 1 and toks[1] else "_"


def reply_subject(stream: Any, ext_api: str | None, origin: str, consumer: str) -> str:
    """The reply subject of a request of ``stream``'s mirror or source about ``origin``'s consumer ``consumer``."""
    if not v2(stream):
        return f"$JSC.R.{uid()}"
    from rillet.jetstream.consumer.common import account_hash
    return f"$JSC.R.{domain_token(ext_api)}.{account_hash(stream.jsa.account.name)}.{origin}.{consumer}.{uid()}"


def consumer_name(stream: Any, mirror: bool, src: Any = None) -> str:
    """A name for an attempt's ephemeral consumer on the origin ``src`` (the mirror's or source's config; v2 only:
    see the module docstring)."""
    ident = f"{stream.name} {stream.jsa.account.name}"
    if stream.js.domain:
        ident += f" {stream.js.domain}"
    cid = _hash8(ident)
    if not mirror:  # (a source's: hashed again, with the source's index name when the origin is sourced twice)
        if src is not None and sum(1 for s in (stream.cfg.sources or []) if s.name == src.name) > 1:
            cid = f"{cid} {index_name(src)}"
        cid = _hash8(cid)
    return f"{'JS_MIRROR' if mirror else 'JS_SRC'}_{cid}_{_hash8(uid())}"


def index_name(src: Any) -> str:
    """nats-server's index name of a source: ``<name>[:<api hash>][:C=<consumer hash>] <filters> <destinations>``
    (filters and destinations of its subject transforms joined by form feeds; ``>`` for an empty one)."""
    name = src.name
    ext = src.external
    if ext is not None:
        name += ":" + _hash8(ext.api or "")
    if src.consumer is not None:
        name += ":C=" + _hash8(src.consumer.name)
    trs = src.subject_transforms or []
    if trs:
        f = "\f".join(t.src or ">" for t in trs)
        d = "\f".join(t.dest or ">" for t in trs)
    else:
        f, d = src.filter_subject or ">", ">"
    return f"{name} {f} {d}"
