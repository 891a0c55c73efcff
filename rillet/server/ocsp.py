"""OCSP peer checks (``ocsp_peer`` in a tls {} block) and their response cache (``ocsp_cache``).

After a TLS handshake with a peer that presented a certificate, the verified chain (leaf first, root
last) is checked link by link: a certificate naming an http(s) OCSP responder in its Authority
Information Access is "eligible"; for each eligible link an OCSP request (RFC 6960) for it and its issuer
is sent to its responders (HTTP GET, the request base64 and URL-escaped in the path, as nats-server does),
the answer's signature is verified (by the issuer, or by a responder certificate the issuer signed and
marked for OCSP signing), its thisUpdate/nextUpdate must hold now within the allowed clock skew, and the
status must be good (or unknown with ``unknown_is_good``). A chain of one certificate, or one without any
eligible link, passes. ``warn_only`` and ``allow_when_ca_unreachable`` relax failures as in nats-server.

The HTTP request runs as a coroutine: callers await ``PeerChecker.check`` before they let the connection
go on (its INFO or CONNECT waits), so the event loop is never blocked.

The cache (type local) keeps responses by the SHA-256 of the certificate, in memory and in
``<local_store>/cache.json`` (saved every save_interval when changed, and at shutdown; the file has
nats-server's layout, responses S2-compressed, so either server reads the other's); an entry no longer
current is dropped unless it says revoked and ``preserve_revoked`` is set.
"""
from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import os
import ssl
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rillet.config.ocsp_section import OCSPCacheConfig, OCSPPeerConfig
from rillet.digest import sha256
from rillet.gocompat.gotime import format_time

# reasons (nats-server's words in its logs and events)
CLIENT_REJECT = "client not OCSP valid"
SERVER_REJECT = "server not OCSP valid"
FAILED_FETCH = "Failed OCSP response fetch"
NOT_EFFECTIVE = "OCSP response not in effectivity window"
FAILED_PARSE = "Failed OCSP response parse"

GOOD, REVOKED, UNKNOWN = "good", "revoked", "unknown"


class OCSPError(Exception):
    pass


_ENCODING_DER = getattr(getattr(ssl, "_ssl", None), "ENCODING_DER", 2)


# ---- chain of a TLS connection -------------------------------------------------------------------------

def verified_chain(ssl_obj: Any) -> list[bytes]:
    """The DER certificates of the peer's verified chain, leaf first (empty without a peer certificate).

    Python 3.13 has ``SSLObject.get_verified_chain``; before that the same method is on the underlying
    ``_ssl._SSLSocket``. Without either, the leaf alone."""
    getter = getattr(ssl_obj, "get_verified_chain", None)
    if getter is None:
        inner = getattr(ssl_obj, "_sslobj", None)
        getter = getattr(inner, "get_verified_chain", None)
    if getter is not None:
        chain = getter() or []
        out = []
        for c in chain:
            out.append(c if isinstance(c, bytes) else c.public_bytes(_ENCODING_DER))
        if out:
            return out
    leaf = ssl_obj.getpeercert(binary_form=True)
    return [leaf] if leaf else []


def subject_text(cert: Any) -> str:
    return cert.subject.rfc4514_string()


def fingerprint(der: bytes) -> str:
    return base64.b64encode(sha256(der).digest()).decode()


def responder_urls(cert: Any) -> list[str]:
    """The http(s) OCSP responders named by a certificate's Authority Information Access."""
    from cryptography import x509
    from cryptography.x509.oid import AuthorityInformationAccessOID
    try:
        aia = cert.extensions.get_extension_for_class(x509.AuthorityInformationAccess).value
    except x509.ExtensionNotFound:
        return []
    urls = []
    for desc in aia:
        if desc.access_method != AuthorityInformationAccessOID.OCSP:
            continue
        loc = desc.access_location
        if isinstance(loc, x509.UniformResourceIdentifier):
            u = urllib.parse.urlsplit(loc.value)
            if u.scheme in ("http", "https") and u.netloc:
                urls.append(loc.value)
    return urls


# ---- fetching --------------------------------------------------------------------------------------------

async def http_get(url: str, timeout: float) -> bytes:
    """GET ``url`` (HTTP/1.0, so the body ends with the connection); the body of a 200 answer."""
    u = urllib.parse.urlsplit(url)
    port = u.port or (443 if u.scheme == "https" else 80)
    ctx = ssl.create_default_context() if u.scheme == "https" else None
    path = u.path or "/"
    if u.query:
        path += "?" + u.query

    async def go() -> bytes:
        reader, writer = await asyncio.open_connection(u.hostname, port, ssl=ctx)
        try:
            host = u.hostname if u.port is None else f"{u.hostname}:{u.port}"
            writer.write(f"GET {path} HTTP/1.0\r\nHost: {host}\r\nAccept: application/ocsp-response\r\n"
                         f"Connection: close\r\n\r\n".encode())
            await writer.drain()
            data = await reader.read()
        finally:
            writer.close()
        head, sep, body = data.partition(b"\r\n\r\n")
        if not sep:
            raise OCSPError("malformed HTTP response")
        status_line = head.split(b"\r\n", 1)[0].split()
        if len(status_line) < 2 or not status_line[1].isdigit():
            raise OCSPError("malformed HTTP response")
        status = int(status_line[1])
        if status != 200:
            raise OCSPError(f"bad OCSP responder http status: [{status}]")
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length" and value.strip().isdigit():
                body = body[:int(value.strip())]
        return body

    return await asyncio.wait_for(go(), timeout)


def build_request(leaf: Any, issuer: Any) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509 import ocsp
    req = ocsp.OCSPRequestBuilder().add_certificate(leaf, issuer, hashes.SHA1()).build()
    from cryptography.hazmat.primitives.serialization import Encoding
    return req.public_bytes(Encoding.DER)


async def fetch_response(leaf: Any, issuer: Any, urls: list[str], timeout: float) -> bytes:
    """The raw answer of the first responder of ``urls`` that answers 200; OCSPError when none does."""
    if not urls:
        raise OCSPError("no available OCSP servers")
    enc = urllib.parse.quote(base64.b64encode(build_request(leaf, issuer)).decode(), safe="")
    last: BaseException | None = None
    for url in urls:
        try:
            return await http_get(f"{url.rstrip('/')}/{enc}", timeout)
        except TimeoutError:
            last = OCSPError(f"no answer from {url} within {timeout}s")
        except (OSError, OCSPError) as e:
            last = e
    raise OCSPError(f"exhausted OCSP responders: {last}")


# ---- checking a response ---------------------------------------------------------------------------------

@dataclass
class Status:
    status: str  # good / revoked / unknown
    this_update: dt.datetime
    next_update: dt.datetime | None


def _verify_signature(public_key: Any, signature: bytes, data: bytes, hash_alg: Any) -> None:
    from cryptography.hazmat.primitives.asymmetric import (
        ec,
        ed448,
        ed25519,
        padding,
        rsa,
    )
    if isinstance(public_key, rsa.RSAPublicKey):
        public_key.verify(signature, data, padding.PKCS1v15(), hash_alg)
    elif isinstance(public_key, ec.EllipticCurvePublicKey):
        public_key.verify(signature, data, ec.ECDSA(hash_alg))
    elif isinstance(public_key, (ed25519.Ed25519PublicKey, ed448.Ed448PublicKey)):
        public_key.verify(signature, data)
    else:
        raise OCSPError("unsupported responder key type")


def _issued_by(cert: Any, issuer: Any) -> bool:
    from cryptography.exceptions import InvalidSignature
    try:
        cert.verify_directly_issued_by(issuer)
        return True
    except (ValueError, TypeError, InvalidSignature):
        return False


def parse_response(raw: bytes, leaf: Any, issuer: Any) -> Status:
    """The status of ``leaf`` in the DER OCSP response ``raw``, checked: a successful response, signed by
    ``issuer`` or by a delegate it issued with the OCSP-signing purpose, about this certificate.
    OCSPError otherwise (with why)."""
    from cryptography import x509
    from cryptography.x509 import ocsp
    from cryptography.x509.oid import ExtendedKeyUsageOID
    try:
        resp = ocsp.load_der_ocsp_response(raw)
    except ValueError as e:
        raise OCSPError(f"malformed OCSP response: {e}") from None
    if resp.response_status != ocsp.OCSPResponseStatus.SUCCESSFUL:
        raise OCSPError(f"OCSP response status {resp.response_status.name.lower()}")
    signer = issuer
    delegates = [c for c in resp.certificates if c != issuer]
    if delegates:
        signer = delegates[0]
        if not _issued_by(signer, issuer):
            raise OCSPError("OCSP response signed by a certificate its issuer did not issue")
        try:
            eku = signer.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        except x509.ExtensionNotFound:
            eku = []
        if ExtendedKeyUsageOID.OCSP_SIGNING not in eku:
            raise OCSPError("Invalid OCSP response delegation: signer not authorized by the CA for OCSP signing")
    from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
    try:
        _verify_signature(signer.public_key(), resp.signature, resp.tbs_response_bytes,
                          resp.signature_hash_algorithm)
    except (InvalidSignature, UnsupportedAlgorithm, ValueError, TypeError) as e:
        raise OCSPError(f"bad OCSP response signature: {type(e).__name__}") from None
    for single in resp.responses:
        if single.serial_number != leaf.serial_number:
            continue
        status = {ocsp.OCSPCertStatus.GOOD: GOOD, ocsp.OCSPCertStatus.REVOKED: REVOKED}.get(
            single.certificate_status, UNKNOWN)
        return Status(status, single.this_update_utc, single.next_update_utc)
    raise OCSPError("OCSP response is not about this certificate")


def response_current(st: Status, cfg: OCSPPeerConfig, now: dt.datetime | None = None) -> bool:
    """nats-server's effectivity window: nextUpdate (or thisUpdate + cache_ttl_when_next_update_unset) not
    before now - skew, and thisUpdate not after now + skew."""
    skew = dt.timedelta(seconds=cfg.clock_skew if cfg.clock_skew >= 0 else 30.0)
    now = now or dt.datetime.now(dt.UTC)
    if st.next_update is not None:
        if st.next_update < now - skew:
            return False
    else:
        ttl = dt.timedelta(seconds=cfg.ttl_unset_next_update if cfg.ttl_unset_next_update >= 0 else 3600.0)
        if st.this_update + ttl < now - skew:
            return False
    return not st.this_update > now + skew


# ---- the cache -------------------------------------------------------------------------------------------

CACHE_FILE = "cache.json"


# nats-server keeps each response as an S2 stream. rillet.server does not import rillet.cluster (where the
# S2 codec is): the composition root passes it in (Server.ocsp_codec); without it these write a valid S2
# stream of uncompressed chunks and read only such chunks.
_S2_STREAM_ID = b"\xff\x06\x00\x00S2sTwO"


def _masked_crc(data: bytes) -> int:
    import google_crc32c
    c = google_crc32c.value(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def s2_frame(raw: bytes) -> bytes:
    out = [_S2_STREAM_ID]
    for i in range(0, len(raw), 65536):
        block = raw[i:i + 65536]
        out.append(b"\x01" + (len(block) + 4).to_bytes(3, "little") + _masked_crc(block).to_bytes(4, "little"))
        out.append(block)
    return b"".join(out)


def s2_unframe(data: bytes) -> bytes:
    out, i = [], 0
    while i < len(data):
        if i + 4 > len(data):
            raise ValueError("truncated S2 chunk header")
        kind, n = data[i], int.from_bytes(data[i + 1:i + 4], "little")
        body = data[i + 4:i + 4 + n]
        if len(body) != n:
            raise ValueError("truncated S2 chunk")
        if kind == 0x01:
            block = body[4:]
            if _masked_crc(block) != int.from_bytes(body[:4], "little"):
                raise ValueError("S2 chunk checksum mismatch")
            out.append(block)
        elif kind == 0x00:
            raise ValueError("compressed S2 chunk (no S2 codec given to this server)")
        elif kind != 0xFF and kind < 0x80:
            raise ValueError(f"unsupported S2 chunk type {kind:#x}")
        i += 4 + n
    return b"".join(out)


def go_rfc3339(t: dt.datetime) -> str:
    """RFC 3339 in UTC as Go's encoding/json writes a time.Time (``Z``, fraction only when non-zero)."""
    t = t.astimezone(dt.UTC)
    text = t.strftime("%Y-%m-%dT%H:%M:%S")
    if t.microsecond:
        text += f".{t.microsecond:06d}".rstrip("0")
    return text + "Z"


class ResponseCache:
    """``ocsp_cache``: raw responses by certificate fingerprint. Type "none" keeps nothing."""

    def __init__(self, cfg: OCSPCacheConfig, log: Any, codec: tuple[Callable, Callable] | None = None) -> None:
        self.cfg = cfg
        self.log = log
        self.codec = codec or (s2_frame, s2_unframe)
        self.items: dict[str, dict[str, Any]] = {}
        self.dirty = False
        self.hits = self.misses = 0
        self._timer: asyncio.TimerHandle | None = None
        self.online = False

    @property
    def local(self) -> bool:
        return self.cfg.type == "local"

    def path(self) -> str:
        return os.path.abspath(os.path.join(self.cfg.local_store or "_rc_", CACHE_FILE))

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.local:
            self.load()
            self._schedule(loop)
        self.online = True
        self.log.notice(f"OCSP peer cache online, type [{self.cfg.type}]")

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = loop.call_later(self.cfg.save_interval, self._timed_save, loop)

    def _timed_save(self, loop: asyncio.AbstractEventLoop) -> None:
        self.save()
        self._schedule(loop)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.online and self.local:
            self.save()
        self.online = False

    def load(self) -> None:
        path = self.path()
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except FileNotFoundError:
            self.log.debug("No OCSP peer cache found, starting with empty cache")
            return
        except (OSError, ValueError) as e:
            self.log.warn(f"Unable to load OCSP peer cache: {e}")
            self.dirty = True
            return
        if not isinstance(data, dict):
            self.log.warn("Unable to load OCSP peer cache: not a JSON object")
            self.dirty = True
            return
        self.items = {k: v for k, v in data.items() if isinstance(v, dict) and isinstance(v.get("resp"), str)}

    def save(self) -> None:
        if not self.local or not self.dirty:
            return
        path = self.path()
        d = os.path.dirname(path)
        try:
            os.makedirs(d, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix="ocsprc-", dir=d)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    json.dump(self.items, fh, indent=1)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, path)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
        except OSError as e:
            self.log.error(f"Unable to save OCSP peer cache: {e}")
            return
        self.dirty = False

    def get(self, key: str) -> bytes | None:
        if not self.online or not self.local:
            return None
        item = self.items.get(key)
        if item is None:
            self.misses += 1
            return None
        self.hits += 1
        try:
            return self.codec[1](base64.b64decode(item["resp"]))
        except Exception as e:  # noqa: BLE001 - the codec's own errors: reported; the entry counts as absent
            self.log.error(f"Unable to decompress OCSP response for key [{key}]: {e!r}")
            return None

    def put(self, key: str, raw: bytes, st: Status, subject: str) -> None:
        if not self.online or not self.local:
            return
        item: dict[str, Any] = {
            "subject": subject,
            "cached_at": go_rfc3339(dt.datetime.now(dt.UTC).replace(microsecond=0)),
            "resp_status": st.status,
        }
        if st.next_update is not None:
            item["resp_expires"] = go_rfc3339(st.next_update)
        item["resp"] = base64.b64encode(self.codec[0](raw)).decode()  # (nats-server's form: an S2 stream)
        self.items[key] = item
        self.dirty = True

    def delete(self, key: str, was_miss: bool = False) -> None:
        """Drop an entry (kept when revoked and preserve_revoked). ``was_miss``: the entry was found but
        could not be used, so the hit its lookup counted becomes a miss (as nats-server counts)."""
        item = self.items.get(key)
        if item is None:
            return
        if was_miss:
            self.hits -= 1
            self.misses += 1
        if item.get("resp_status") == REVOKED and self.cfg.preserve_revoked:
            self.log.debug(f"Revoked OCSP response for key [{key}] preserved by cache policy")
            return
        del self.items[key]
        self.dirty = True

    def stats(self) -> dict[str, Any] | None:
        """/varz ``ocsp_peer_cache`` (nats-server's field names); None until the cache is online."""
        if not self.online:
            return None
        by = {GOOD: 0, REVOKED: 0, UNKNOWN: 0}
        for item in self.items.values():
            status = item.get("resp_status")
            if status in by:
                by[status] += 1
        return {"cache_type": self.cfg.type, "cache_hits": self.hits, "cache_misses": self.misses,
                "cached_responses": len(self.items), "cached_revoked_responses": by[REVOKED],
                "cached_good_responses": by[GOOD], "cached_unknown_responses": by[UNKNOWN]}


# ---- the checker -----------------------------------------------------------------------------------------

def cert_info(der: bytes, cert: Any) -> dict[str, Any]:
    """nats-server's CertInfo of a certificate in its OCSP peer events."""
    return {"subject": subject_text(cert), "issuer": cert.issuer.rfc4514_string(), "fingerprint": fingerprint(der),
            "raw": base64.b64encode(der).decode()}


class PeerChecker:
    """One per server: checks chains for the tls blocks with ``ocsp_peer``, with one shared cache.
    ``sysacc`` (the server's system account, when set): where the peer reject and invalid chain link
    advisories go, as nats-server sends them ($SYS.SERVER.<id>.OCSP.PEER.CONN.REJECT / .LINK.INVALID)."""

    sysacc: Any = None

    def __init__(self, cache_cfg: OCSPCacheConfig | None, log: Any,
                 fetch: Callable[..., Any] = fetch_response, codec: tuple[Callable, Callable] | None = None) -> None:
        self.log = log
        self.cache = ResponseCache(cache_cfg or OCSPCacheConfig(), log, codec)
        self.fetch = fetch

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.cache.start(loop)

    def stop(self) -> None:
        self.cache.stop()

    async def check_ssl(self, ssl_obj: Any, cfg: OCSPPeerConfig, kind: str = "Client",
                        reason: str = CLIENT_REJECT) -> bool:
        """True when the peer of this TLS connection is OCSP valid (or the check only warns); else the
        reject advisory goes out (``kind``: nats-server's "Client" or "Leafnode")."""
        chain = verified_chain(ssl_obj) if ssl_obj is not None else []
        try:
            ok = await self.check_chain(chain, cfg)
        except ValueError as e:  # a certificate cryptography cannot read: refused, and said why
            self.log.error(f"OCSP peer check failed: {e}")
            ok = False
        if ok:
            return True
        if chain:
            from cryptography import x509
            self._advise("CONN.REJECT", "io.nats.server.advisory.v1.ocsp_peer_reject", {
                "kind": kind, "peer": cert_info(chain[0], x509.load_der_x509_certificate(chain[0]))}, reason)
        return False

    def _advise(self, what: str, kind: str, fields: dict[str, Any], reason: str) -> None:
        sa = self.sysacc
        if sa is None or sa.client is None:
            return
        subj = f"$SYS.SERVER.{sa.server.server_id}.OCSP.PEER.{what}"
        if not sa.interest(subj):
            return
        from rillet.server.sysacc import (
            _event_id,  # (loaded with the server's system account, not before)
        )
        msg: dict[str, Any] = {"type": kind, "id": _event_id(), "timestamp": format_time(time.time_ns())}
        msg.update(fields)
        msg["server"] = sa.server_info()
        msg["reason"] = reason
        sa.send(subj, msg)

    async def check_chain(self, chain_der: list[bytes], cfg: OCSPPeerConfig) -> bool:
        from cryptography import x509
        if not chain_der:
            self.log.error("Peer certificate is nil, rejecting OCSP peer")
            return False
        chain = [x509.load_der_x509_certificate(d) for d in chain_der]
        if len(chain) == 1:
            if chain[0].issuer == chain[0].subject:
                return True  # self-signed: nothing to ask a CA about
            # (only the leaf is known: no verified chain from this ssl module, so no issuer to ask about)
            self.log.error(f"OCSP peer check for [{subject_text(chain[0])}]: the verified chain is not available")
            return False
        for i in range(len(chain) - 1):
            urls = responder_urls(chain[i])
            if not urls:
                continue
            reason = await self.link_good(chain_der[i], chain[i], chain[i + 1], urls, cfg)
            if reason is not None:
                self.log.debug(f"OCSP peer link invalid for [{subject_text(chain[i])}]: {reason}")
                self._advise("LINK.INVALID", "io.nats.server.advisory.v1.ocsp_peer_link_invalid", {
                    "link": cert_info(chain_der[i], chain[i]), "peer": cert_info(chain_der[0], chain[0])}, reason)
                return False
        return True

    async def link_good(self, der: bytes, leaf: Any, issuer: Any, urls: list[str],
                        cfg: OCSPPeerConfig) -> str | None:
        """None when this certificate passes; else why not."""
        key = fingerprint(der)
        subj = subject_text(leaf)
        cache = self.cache
        st: Status | None = None
        cached_revocation = False
        raw = cache.get(key)
        if raw:
            try:
                cst = parse_response(raw, leaf, issuer)
            except OCSPError:
                self.log.debug(f"Invalid cached OCSP response for [{subj}] with fingerprint [{key}]")
                cache.delete(key, was_miss=True)
            else:
                if response_current(cst, cfg):
                    st = cst
                else:
                    cache.delete(key, was_miss=True)
                cached_revocation = cst.status == REVOKED
        if st is None:
            try:
                raw = await self.fetch(leaf, issuer, urls, cfg.ca_timeout if cfg.ca_timeout > 0 else 2.0)
            except (TimeoutError, OCSPError, OSError) as e:
                self.log.warn(f"Attempt to obtain OCSP response from CA responder for [{subj}] failed: {e}")
                if cfg.warn_only:
                    self.log.warn(f"OCSP verify fail for [{subj}] but WarnOnly is true so allowing")
                    return None
                if cfg.allow_when_ca_unreachable and not cached_revocation:
                    self.log.warn(f"Failed to obtain OCSP CA response for [{subj}] but AllowWhenCAUnreachable "
                                  "set; no cached revocation so allowing")
                    return None
                if cfg.allow_when_ca_unreachable:
                    self.log.warn(f"Failed to obtain OCSP CA response for [{subj}] but AllowWhenCAUnreachable "
                                  "set; cached revocation exists so rejecting")
                return FAILED_FETCH
            try:
                st = parse_response(raw, leaf, issuer)
            except OCSPError as e:
                self.log.error(f"Could not parse OCSP CA response for [{subj}]: {e}")
                if cfg.warn_only:
                    self.log.warn(f"OCSP verify fail for [{subj}] but WarnOnly is true so allowing")
                    return None
                return FAILED_PARSE
            if not response_current(st, cfg):
                self.log.warn(f"New OCSP CA response obtained for [{subj}] but not current")
                if cfg.warn_only:
                    self.log.warn(f"OCSP verify fail for [{subj}] but WarnOnly is true so allowing")
                    return None
                return NOT_EFFECTIVE
            cache.put(key, raw, st, subj)
        if st.status == REVOKED or (st.status == UNKNOWN and not cfg.unknown_is_good):
            self.log.warn(f"OCSP verify fail for [{subj}] with CA status [{st.status}]")
            if cfg.warn_only:
                self.log.warn(f"OCSP verify fail for [{subj}] but WarnOnly is true so allowing")
                return None
            return f"Invalid OCSP response status: {st.status}"
        self.log.debug(f"OCSP verify pass for [{subj}]")
        return None


class PeerGate(asyncio.Protocol):
    """Stands in front of a connection's protocol on a TLS listener whose block has ocsp_peer (websocket,
    MQTT): the handshake done, the peer is checked before ``inner`` sees the connection at all; what the
    peer sends meanwhile is kept and handed over. A refused peer's connection is aborted (nats-server
    fails its TLS handshake) and ``inner`` never hears of it."""

    def __init__(self, server: Any, inner: asyncio.Protocol, cfg: OCSPPeerConfig) -> None:
        self.server = server
        self.inner = inner
        self.cfg = cfg
        self.transport: Any = None
        self.data: list[bytes] = []
        self.lost = False

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        self.transport = transport
        self.server.loop.create_task(self._check())

    def data_received(self, data: bytes) -> None:
        self.data.append(data)

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True

    async def _check(self) -> None:
        t = self.transport
        ok = await self.server.ocsp_checker().check_ssl(t.get_extra_info("ssl_object"), self.cfg)
        if self.lost or t.is_closing():
            return
        if not ok:
            peer = t.get_extra_info("peername") or ("?", 0)
            self.server.log.error(f"{peer[0]}:{peer[1]} - TLS handshake error: {CLIENT_REJECT}")
            t.abort()
            return
        t.set_protocol(self.inner)
        self.inner.connection_made(t)
        if self.data:
            self.inner.data_received(b"".join(self.data))


def gate(server: Any, cfg: OCSPPeerConfig | None, inner: asyncio.Protocol) -> asyncio.Protocol:
    """``inner`` behind a PeerGate when ``cfg`` checks peers; else ``inner`` itself."""
    if cfg is None or not cfg.verify:
        return inner
    return PeerGate(server, inner, cfg)
