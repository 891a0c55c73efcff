"""OCSP stapling (the top-level ``ocsp { mode, urls }``): this server's certificate status, fetched from its
CA's responder, sent in the TLS handshake to clients that ask (status_request).

As nats-server: the client port, websocket and MQTT listeners staple (leafnode connections never do;
routes and gateways are refused at config load, see rillet.config.ocsp_section). Per mode:

* ``auto`` (the default): only a certificate with the must-staple feature (RFC 7633) is stapled;
* ``must``: as auto, and a certificate found revoked (or unknown) stops the server;
* ``always``: every certificate is stapled, and a bad status stops the server;
* ``never``: nothing (a warning for a must-staple certificate).

At start the status comes from memory, then from ``<store_dir>/ocsp/<sha256 of the certificate>`` (the
file nats-server keeps, so either server reads the other's), then from the responders (``urls``, else
the certificate's Authority Information Access; POST first, GET as the fallback); a status that cannot be
had, or a bad one where the server must stop on it, keeps the server from starting. Afterwards a monitor
fetches again at half the time left to nextUpdate (a day when the responder gives none, two minutes when
it is already past), logging and staying on the last answer when the responder fails; a status that
turns bad ends the monitor and, in must/always, shuts the server down. A handshake while the stapled
answer is out of date fails (nats-server fails it when it cannot fetch a fresh one) and a fetch starts.
"""
from __future__ import annotations

import asyncio
import base64
import datetime as dt
import os
import ssl
import tempfile
import urllib.parse
from typing import Any

from rillet.config.ocsp_section import OCSPStapleConfig, has_must_staple
from rillet.digest import sha256
from rillet.gocompat.gotime import format_duration

from .ocsp import GOOD, OCSPError, Status, build_request, go_rfc3339, parse_response

STORE_SUBDIR = "ocsp"
CHECK_INTERVAL = 24 * 3600.0   # when the response has no nextUpdate
MIN_CHECK_INTERVAL = 120.0     # when nextUpdate has passed
HTTP_TIMEOUT = 30.0            # nats-server's OCSP HTTP client timeout


def check_current(st: Status, now: dt.datetime | None = None) -> None:
    """nats-server's validity test of a staple: nextUpdate not past, thisUpdate not ahead (no skew)."""
    now = now or dt.datetime.now(dt.UTC)
    if st.next_update is not None and st.next_update < now:
        raise OCSPError(f"invalid ocsp NextUpdate, is past time: {go_rfc3339(st.next_update)}")
    if st.this_update > now:
        raise OCSPError(f"invalid ocsp ThisUpdate, is future time: {go_rfc3339(st.this_update)}")


async def http_exchange(method: str, url: str, body: bytes, timeout: float, reqlen: int | None = None) -> bytes:
    """One HTTP/1.0 request; the body of a 2xx answer (OCSPError with the status otherwise; ``reqlen``, the
    request's length in that text: the body's, or the encoded request's for a GET)."""
    u = urllib.parse.urlsplit(url)
    port = u.port or (443 if u.scheme == "https" else 80)
    ctx = ssl.create_default_context() if u.scheme == "https" else None
    path = (u.path or "/") + (f"?{u.query}" if u.query else "")
    host = u.hostname if u.port is None else f"{u.hostname}:{u.port}"
    head = f"{method} {path} HTTP/1.0\r\nHost: {host}\r\nAccept: application/ocsp-response\r\n"
    if method == "POST":
        head += f"Content-Type: application/ocsp-request\r\nContent-Length: {len(body)}\r\n"

    async def go() -> bytes:
        reader, writer = await asyncio.open_connection(u.hostname, port, ssl=ctx)
        try:
            writer.write(head.encode() + b"Connection: close\r\n\r\n" + body)
            await writer.drain()
            data = await reader.read()
        finally:
            writer.close()
        top, sep, rest = data.partition(b"\r\n\r\n")
        status_line = top.split(b"\r\n", 1)[0].split()
        if not sep or len(status_line) < 2 or not status_line[1].isdigit():
            raise OCSPError("malformed HTTP response")
        status = int(status_line[1])
        if status > 299:
            raise OCSPError(f"non-ok http status on {method} request "
                            f"(reqlen={len(body) if reqlen is None else reqlen}): {status}")
        for line in top.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length" and value.strip().isdigit():
                rest = rest[:int(value.strip())]
        return rest

    try:
        return await asyncio.wait_for(go(), timeout)
    except TimeoutError:
        raise OCSPError(f"{method} {url}: no answer within {timeout:g}s") from None
    except OSError as e:
        raise OCSPError(f"{method} {url}: {e.strerror or e}") from None


def _load_pem(path: str) -> list[Any]:
    from cryptography import x509
    with open(path, "rb") as f:
        return x509.load_pem_x509_certificates(f.read())


def issuer_of(ca_file: str, chain: list[Any], cert_file: str) -> Any:
    """The certificate that signs the staple: ``ca_file``'s first, else the second of the chain (as
    nats-server; it must be a CA)."""
    from cryptography import x509
    if ca_file:
        try:
            issuer = _load_pem(ca_file)[0]
        except (OSError, ValueError, IndexError) as e:
            raise ValueError(f"failed to parse PEM cert {ca_file}: {e}") from None
    elif len(chain) > 1:
        issuer = chain[1]
    else:
        raise ValueError("ocsp ca required in chain or configuration")
    try:
        is_ca = issuer.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    if not is_ca:
        raise ValueError(f"{ca_file} invalid ca basic constraints: is not ca")
    return issuer


class StapleMonitor:
    """The stapled status of one listener's certificate, kept current."""

    def __init__(self, server: Any, kind: str, cert_file: str, ca_file: str, shutdown_on_revoke: bool,
                 urls: list[str], store_dir: str) -> None:
        from cryptography.hazmat.primitives.serialization import Encoding
        self.server = server
        self.log = server.log
        self.kind = kind
        self.cert_file = cert_file
        try:
            chain = _load_pem(cert_file)
        except (OSError, ValueError) as e:
            raise ValueError(f"error parsing certificate: {e}") from None
        if not chain:
            raise ValueError("no certificate found")
        self.leaf = chain[0]
        self.issuer = issuer_of(ca_file, chain, cert_file)
        self.shutdown_on_revoke = shutdown_on_revoke
        self.urls = urls
        self.store_dir = store_dir
        self.key = sha256(self.leaf.public_bytes(Encoding.DER)).hexdigest()
        self.raw = b""
        self.status: Status | None = None
        self._task: asyncio.Task | None = None
        self._refresh: asyncio.Task | None = None
        self.handshakes_refused = 0

    def same_certificate(self, cert_file: str) -> bool:
        """Whether ``cert_file`` holds the certificate this monitor staples for (a reload that changes it,
        under the same path or another, would staple another certificate's status)."""
        from cryptography.hazmat.primitives.serialization import Encoding
        try:
            chain = _load_pem(cert_file)
        except (OSError, ValueError):
            return False
        return bool(chain) and sha256(chain[0].public_bytes(Encoding.DER)).hexdigest() == self.key

    # -- getting the status
    def _cached(self) -> bytes | None:
        if self.raw and self.status is not None:
            try:
                check_current(self.status)
                return self.raw
            except OCSPError:
                return None
        return None

    def _path(self) -> str:
        return os.path.join(self.store_dir, STORE_SUBDIR, self.key)

    def _local(self) -> bool:
        if not self.store_dir:
            return False
        try:
            with open(self._path(), "rb") as f:
                raw = f.read()
            st = parse_response(raw, self.leaf, self.issuer)
            check_current(st)
        except (OSError, OCSPError):
            return False
        self.raw, self.status = raw, st
        return True

    async def status_now(self) -> Status:
        """nats-server's getStatus: the kept answer if current, else the store's file, else the responders."""
        if self._cached() is not None and self.status is not None:
            return self.status
        if self._local() and self.status is not None:
            return self.status
        return await self.remote()

    def responders(self) -> list[str]:
        if self.urls:
            return list(self.urls)
        from .ocsp import responder_urls
        return responder_urls(self.leaf)

    async def remote(self) -> Status:
        urls = self.responders()
        if not urls:
            raise OCSPError("no available ocsp servers")
        req = build_request(self.leaf, self.issuer)
        enc = urllib.parse.quote(base64.b64encode(req).decode(), safe="")
        raw = b""
        errors: list[str] = []
        for u in urls:
            u = u.rstrip("/")
            try:
                raw = await http_exchange("POST", u, req, HTTP_TIMEOUT)
                break
            except OCSPError as post_err:
                try:
                    raw = await http_exchange("GET", f"{u}/{enc}", b"", HTTP_TIMEOUT, len(enc))
                    break
                except OCSPError as get_err:
                    errors.append(f"{post_err}\n{get_err}")
        else:
            raise OCSPError(f"exhausted ocsp servers: {errors[-1]}")
        try:
            st = parse_response(raw, self.leaf, self.issuer)
        except OCSPError as e:
            raise OCSPError(f"failed to get remote status: {e}") from None
        check_current(st)
        if self.store_dir:
            try:
                self._write(raw)
            except OSError as e:
                raise OCSPError(f"failed to write ocsp status: {e}") from None
        self.raw, self.status = raw, st
        return st

    def _write(self, raw: bytes) -> None:
        d = os.path.join(self.store_dir, STORE_SUBDIR)
        fd, tmp = tempfile.mkstemp(prefix="tmp-cert-status", dir=d)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
            os.replace(tmp, self._path())
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass  # (the write's own error is the one reported)
            raise

    def next_run(self) -> float:
        st = self.status
        if st is None or st.next_update is None:
            return CHECK_INTERVAL
        left = (st.next_update - dt.datetime.now(dt.UTC)).total_seconds() / 2
        return MIN_CHECK_INTERVAL if left < 0 else left

    # -- the TLS side
    def staple(self) -> bytes:
        """The status for a handshake. Out of date: the handshake fails and a fresh answer is fetched."""
        raw = self._cached()
        if raw is not None:
            return raw
        self.handshakes_refused += 1
        loop = getattr(self.server, "loop", None)
        if loop is not None and (self._refresh is None or self._refresh.done()):
            self._refresh = loop.create_task(self._fetch_quietly())
        raise OCSPError(f"no current OCSP status for {self.kind} certificate '{self.cert_file}'")

    async def _fetch_quietly(self) -> None:
        try:
            await self.status_now()
        except OCSPError as e:
            self.log.error(f"Bad OCSP status update for certificate '{self.cert_file}': {e}")

    # -- the monitor
    def start(self) -> None:
        self.log.notice(f"OCSP Stapling enabled for {self.kind} connections")
        self._task = self.server.loop.create_task(self.run())

    def stop(self) -> None:
        for t in (self._task, self._refresh):
            if t is not None:
                t.cancel()

    def _dur(self, seconds: float) -> str:
        return format_duration(int(seconds * 1e9))

    async def run(self) -> None:
        log = self.log
        try:
            st: Status | None = await self.status_now()
        except OCSPError:
            st = None
        if st is not None and st.status == GOOD:
            nxt = self.next_run()
            log.notice(f"Found OCSP status for {self.kind} certificate at '{self.cert_file}': good, next update "
                       f"{go_rfc3339(st.next_update) if st.next_update else '0001-01-01T00:00:00Z'}, "
                       f"checking again in {self._dur(nxt)}")
        elif st is not None and self.shutdown_on_revoke:
            log.error(f"Found OCSP status for {self.kind} certificate at '{self.cert_file}': {st.status}")
            self._shutdown()
            return
        else:
            nxt = 0.0
        while True:
            await asyncio.sleep(nxt)
            try:
                st = await self.remote()
            except OCSPError as e:
                nxt = self.next_run()
                log.error(f"Bad OCSP status update for certificate '{self.cert_file}': {e}, trying again in "
                          f"{self._dur(nxt)}")
                continue
            if st.status == GOOD:
                nxt = self.next_run()
                log.notice(f"Received OCSP status for {self.kind} certificate '{self.cert_file}': good, next "
                           f"update {go_rfc3339(st.next_update) if st.next_update else '0001-01-01T00:00:00Z'}, "
                           f"checking again in {self._dur(nxt)}")
                continue
            log.error(f"Received OCSP status for {self.kind} certificate '{self.cert_file}': {st.status}")
            if self.shutdown_on_revoke:
                self._shutdown()
            return

    def _shutdown(self) -> None:
        self.server.loop.create_task(self.server.shutdown())


def stapled_blocks(o: Any) -> list[tuple[str, str, Any]]:
    """(listener, kind, tls block) of the listeners that staple: the client port, websocket and MQTT
    (kind "client" for the three, as nats-server names them in its logs)."""
    out: list[tuple[str, str, Any]] = []
    if o.tls is not None:
        out.append(("client", "client", o.tls))
    if o.websocket.tls is not None:
        out.append(("websocket", "client", o.websocket.tls))
    mqtt_tls = o.mqtt.get("tls") if isinstance(o.mqtt, dict) else None
    if mqtt_tls is not None:
        out.append(("mqtt", "client", mqtt_tls))
    return out


async def prepare(server: Any) -> dict[str, StapleMonitor]:
    """The monitors for the listeners that staple under the server's options (nats-server's
    enableOCSP): each one's status fetched now. ValueError (the server does not start) when a status
    cannot be had, or is not good where the server must stop on it."""
    o = server.opts
    cfg: OCSPStapleConfig | None = o.ocsp
    out: dict[str, StapleMonitor] = {}
    store_dir = o.jetstream.store_dir if o.jetstream.store_dir else ""
    for listener, kind, tls in stapled_blocks(o):
        if not tls.cert_file:
            continue
        must_staple = has_must_staple(tls.cert_file)
        shutdown_on_revoke = False
        mode = cfg.mode if cfg is not None else "auto"
        if mode == "never":
            if must_staple:
                server.log.warn(f"Certificate at '{tls.cert_file}' has MustStaple but OCSP is disabled")
            continue
        if mode == "always":
            must_staple = shutdown_on_revoke = True
        elif mode == "must" and must_staple:
            shutdown_on_revoke = True
        if not must_staple:
            continue
        if store_dir:
            d = os.path.join(store_dir, STORE_SUBDIR)
            if os.path.exists(d) and not os.path.isdir(d):
                raise ValueError("OCSP storage directory is not a directory")
            try:
                os.makedirs(d, mode=0o750, exist_ok=True)
            except OSError as e:
                raise ValueError(f"could not create OCSP storage directory - {e}") from None
        mon = StapleMonitor(server, kind, tls.cert_file, tls.ca_file, shutdown_on_revoke,
                            cfg.urls if cfg is not None else [], store_dir)
        try:
            st = await mon.status_now()
        except OCSPError as e:
            raise ValueError(f"bad OCSP status update for certificate at '{tls.cert_file}': {e}") from None
        if st.status != GOOD and shutdown_on_revoke:
            raise ValueError(f"found existing OCSP status for certificate at '{tls.cert_file}': {st.status}")
        out[listener] = mon
    return out
