"""TLS terminated by pyOpenSSL for the listeners that staple an OCSP response.

Python's ssl module has no server-side OCSP status callback, pyOpenSSL has one. Instead of a second TLS
code path for connections, ``OpenSSLContext`` is an ``ssl.SSLContext`` whose ``wrap_bio`` hands asyncio's
(and uvloop's) SSL protocol an object that behaves as ``ssl.SSLObject`` over a pyOpenSSL ``Connection``
with memory BIOs: the records the event loop reads go into pyOpenSSL, what pyOpenSSL writes goes back to
the loop's outgoing BIO. ``start_tls``, ``create_server(ssl=...)`` and ``connect_accepted_socket`` take
it unchanged, so clients, websocket and MQTT connections are the same code with or without stapling;
``get_extra_info("ssl_object")`` gives ``BIOObject`` with the methods this server reads (``version``,
``cipher``, ``getpeercert``, ``get_verified_chain``).

pyOpenSSL is an optional dependency (``pip install 'rillet[ocsp]'``): it is imported only when a
configuration staples.
"""
from __future__ import annotations

import datetime as dt
import ssl
from typing import Any, Callable

from rillet.config.options import TLSConfig
from rillet.config.ocsp_section import PYOPENSSL_MISSING as MISSING
from rillet.config.tls_names import TLS_VERSIONS, check_curve, cipher_available, parse_min_version



def openssl() -> Any:
    """The pyOpenSSL SSL module; ValueError (with what to install) when it is not there."""
    try:
        from OpenSSL import SSL
    except ImportError:
        raise ValueError(MISSING) from None
    return SSL


def available() -> bool:
    try:
        openssl()
    except ValueError:
        return False
    return True


# ---- the SSLObject look-alike -----------------------------------------------------------------------------

class BIOObject:
    """What the event loop's SSL protocol calls on an ``ssl.SSLObject``, over a pyOpenSSL connection.

    pyOpenSSL's errors become the ssl module's (want-read, zero-return, EOF, SSLError) so the protocol's own
    handling applies. Data are fed to pyOpenSSL only when it asks for more; ``pending`` reports 1 while
    records fed earlier may still be waiting inside it (the protocol then calls ``read``, which says
    want-read when there is nothing)."""

    def __init__(self, conn: Any, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO, server_side: bool,
                 server_hostname: str | None, verified: bool) -> None:
        self._SSL = openssl()
        self._conn = conn
        self._in = incoming
        self._out = outgoing
        self._more = False
        self._eof_fed = False
        self._verified = verified
        self.server_side = server_side
        self.server_hostname = server_hostname

    def _feed(self) -> bool:
        data = self._in.read()
        if data:
            self._conn.bio_write(data)
            self._more = True
            return True
        if self._in.eof and not self._eof_fed:
            self._conn.bio_shutdown()
            self._eof_fed = True
            return True
        return False

    def _flush(self) -> None:
        SSL = self._SSL
        while True:
            try:
                data = self._conn.bio_read(65536)
            except SSL.WantReadError:
                return
            if not data:
                return
            self._out.write(data)

    def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        SSL = self._SSL
        try:
            while True:
                try:
                    return fn(*args)
                except SSL.WantReadError:
                    if self._feed():
                        continue
                    self._more = False
                    raise ssl.SSLWantReadError(ssl.SSL_ERROR_WANT_READ,
                                               "The operation did not complete (read)") from None
        except SSL.WantWriteError:
            raise ssl.SSLWantWriteError(ssl.SSL_ERROR_WANT_WRITE,
                                        "The operation did not complete (write)") from None
        except SSL.ZeroReturnError:
            raise ssl.SSLZeroReturnError(ssl.SSL_ERROR_ZERO_RETURN, "TLS/SSL connection has been closed") from None
        except SSL.SysCallError as e:
            raise ssl.SSLEOFError(ssl.SSL_ERROR_EOF, f"EOF occurred in violation of protocol ({e})") from None
        except SSL.Error as e:
            raise _ssl_error(e) from None
        finally:
            self._flush()

    # -- the SSLObject interface the protocol uses
    def do_handshake(self) -> None:
        self._run(self._conn.do_handshake)

    def read(self, n: int = 1024, buffer: Any = None) -> Any:
        try:
            if buffer is not None:
                return self._run(self._conn.recv_into, buffer, min(n, len(buffer)) or len(buffer))
            return self._run(self._conn.recv, n)
        except ssl.SSLZeroReturnError:  # the peer's close_notify: end of data, as SSLObject.read says it
            return 0 if buffer is not None else b""

    def write(self, data: Any) -> int:
        return int(self._run(self._conn.send, data))

    def pending(self) -> int:
        n = int(self._conn.pending())
        return n if n else (1 if self._more else 0)

    def unwrap(self) -> None:
        """Our close_notify goes out; the peer's is not waited for (the transport closes next)."""
        try:
            self._run(self._conn.shutdown)
        except ssl.SSLWantReadError:
            pass

    # -- what the server reads after the handshake
    def version(self) -> str | None:
        return self._conn.get_protocol_version_name()

    def cipher(self) -> tuple[str, str, int] | None:
        name = self._conn.get_cipher_name()
        if name is None:
            return None
        return name, self._conn.get_cipher_version(), self._conn.get_cipher_bits()

    def compression(self) -> None:
        return None

    def selected_alpn_protocol(self) -> str | None:
        p = self._conn.get_alpn_proto_negotiated()
        return p.decode() if p else None

    def shared_ciphers(self) -> None:
        return None

    def get_channel_binding(self, cb_type: str = "tls-unique") -> None:
        return None

    def _peer(self) -> Any:
        c = self._conn.get_peer_certificate()
        return c.to_cryptography() if c is not None else None

    def getpeercert(self, binary_form: bool = False) -> Any:
        """As ``SSLObject.getpeercert``: DER bytes, or the decoded dict (empty when the certificate was not
        verified, as the ssl module gives it)."""
        from cryptography.hazmat.primitives.serialization import Encoding
        cert = self._peer()
        if cert is None:
            return None
        if binary_form:
            return cert.public_bytes(Encoding.DER)
        if not self._verified:
            return {}
        return decoded_cert(cert)

    def get_verified_chain(self) -> list[bytes]:
        from cryptography.hazmat.primitives.serialization import Encoding
        chain = self._conn.get_verified_chain() or []
        return [c.to_cryptography().public_bytes(Encoding.DER) for c in chain]


def _ssl_error(e: Exception) -> ssl.SSLError:
    """An ssl.SSLError with OpenSSL's reason, as the ssl module words it ("[SSL: REASON] text")."""
    reason = ""
    detail = str(e)
    args = e.args[0] if e.args else None
    if isinstance(args, list) and args and isinstance(args[0], tuple) and len(args[0]) >= 3:
        lib, text = args[0][0], args[0][-1]
        reason = str(text).upper().replace(" ", "_")
        detail = f"[{str(lib).upper().replace(' ', '_')[:16] or 'SSL'}: {reason}] {text}"
    err = ssl.SSLError(1, detail)
    err.reason = reason or None  # type: ignore[attr-defined]
    err.library = "SSL"  # type: ignore[attr-defined]
    return err


# names as OpenSSL's long names (what ssl.getpeercert() shows)
_LONG_NAMES = {"2.5.4.3": "commonName", "2.5.4.6": "countryName", "2.5.4.7": "localityName",
               "2.5.4.8": "stateOrProvinceName", "2.5.4.9": "streetAddress", "2.5.4.10": "organizationName",
               "2.5.4.11": "organizationalUnitName", "2.5.4.5": "serialNumber", "2.5.4.17": "postalCode",
               "2.5.4.4": "surname", "2.5.4.42": "givenName", "2.5.4.12": "title",
               "1.2.840.113549.1.9.1": "emailAddress", "0.9.2342.19200300.100.1.25": "domainComponent",
               "0.9.2342.19200300.100.1.1": "userId"}


def _name(name: Any) -> tuple:
    return tuple(tuple((_LONG_NAMES.get(a.oid.dotted_string, a.oid.dotted_string), str(a.value)) for a in rdn)
                 for rdn in name.rdns)


def _asn1_time(t: dt.datetime) -> str:
    return f"{t:%b} {t.day:2d} {t:%H:%M:%S %Y} GMT"


def decoded_cert(cert: Any) -> dict[str, Any]:
    """A cryptography certificate in the form of ``ssl.SSLSocket.getpeercert()``."""
    from cryptography import x509
    out: dict[str, Any] = {
        "subject": _name(cert.subject), "issuer": _name(cert.issuer), "version": cert.version.value + 1,
        "serialNumber": f"{cert.serial_number:X}",
        "notBefore": _asn1_time(cert.not_valid_before_utc), "notAfter": _asn1_time(cert.not_valid_after_utc)}
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return out
    alt: list[tuple[str, Any]] = []
    for g in san:
        if isinstance(g, x509.DNSName):
            alt.append(("DNS", g.value))
        elif isinstance(g, x509.RFC822Name):
            alt.append(("email", g.value))
        elif isinstance(g, x509.UniformResourceIdentifier):
            alt.append(("URI", g.value))
        elif isinstance(g, x509.IPAddress):
            alt.append(("IP Address", str(g.value).upper() if g.value.version == 6 else str(g.value)))
        elif isinstance(g, x509.DirectoryName):
            alt.append(("DirName", _name(g.value)))
        elif isinstance(g, x509.RegisteredID):
            alt.append(("Registered ID", g.value.dotted_string))
    out["subjectAltName"] = tuple(alt)
    return out


# ---- the context --------------------------------------------------------------------------------------------

class OpenSSLContext(ssl.SSLContext):
    """An ``ssl.SSLContext`` (so the event loop accepts it) whose connections pyOpenSSL runs."""

    ossl: Any
    peer_verified: bool

    def wrap_bio(self, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO, server_side: bool = False,
                 server_hostname: str | None = None, session: Any = None) -> Any:
        SSL = openssl()
        conn = SSL.Connection(self.ossl, None)
        if server_side:
            conn.set_accept_state()
        else:
            conn.set_connect_state()
            if server_hostname:
                conn.set_tlsext_host_name(server_hostname.encode("idna"))
        return BIOObject(conn, incoming, outgoing, server_side, server_hostname, self.peer_verified)

    def wrap_socket(self, *a: Any, **kw: Any) -> Any:  # pragma: no cover - the loop only uses wrap_bio
        raise NotImplementedError("OpenSSLContext serves event-loop transports only (wrap_bio)")


_CURVES = {"prime256v1": "SECP256R1", "secp384r1": "SECP384R1", "secp521r1": "SECP521R1"}


def stapling_context(cfg: TLSConfig, staple: Callable[[], bytes]) -> OpenSSLContext:
    """A server context for the tls {} block ``cfg`` (the same settings as rillet.server.tls's
    make_server_context) that staples what ``staple()`` returns (no staple when it returns b"")."""
    SSL = openssl()
    if not cfg.cert_file or not cfg.key_file:
        raise ValueError("missing 'cert_file' or 'key_file' in TLS configuration")
    ctx = SSL.Context(SSL.TLS_SERVER_METHOD)
    ctx.set_options(SSL.OP_NO_COMPRESSION | SSL.OP_CIPHER_SERVER_PREFERENCE)
    versions = {ssl.TLSVersion.TLSv1_2: SSL.TLS1_2_VERSION, ssl.TLSVersion.TLSv1_3: SSL.TLS1_3_VERSION}
    minimum = ssl.TLSVersion.TLSv1_2
    if cfg.min_version:
        minimum = TLS_VERSIONS[parse_min_version(cfg.min_version)][0]
    try:
        ctx.use_certificate_chain_file(cfg.cert_file)
        ctx.use_privatekey_file(cfg.key_file)
        ctx.check_privatekey()
        ctx.set_mode(0x8)  # SSL_MODE_NO_AUTO_CHAIN: only cert_file's chain (rillet.server.tls.send_configured_chain_only)
    except (OSError, SSL.Error) as e:
        raise ValueError(f"error parsing X509 certificate/key pair: {e}") from e
    if cfg.ca_file:
        try:
            ctx.load_verify_locations(cfg.ca_file)
        except (OSError, SSL.Error) as e:
            raise ValueError(f"failed reading root CA file: {e}") from e
    verified = bool(cfg.verify or cfg.verify_and_map)
    if verified:
        ctx.set_verify(SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT, lambda *a: bool(a[-1]))
    else:
        ctx.set_verify(SSL.VERIFY_NONE, None)
    if cfg.ciphers:
        names = [ossl for ossl in map(cipher_available, cfg.ciphers) if ossl is not None]
        if names:
            ctx.set_cipher_list(":".join(names).encode())
        else:
            minimum = ssl.TLSVersion.TLSv1_3
    ctx.set_min_proto_version(versions.get(minimum, SSL.TLS1_2_VERSION))
    if cfg.curve_preferences:
        if len(cfg.curve_preferences) > 1:
            raise ValueError("curve_preferences: only one curve can be configured")
        group = check_curve(cfg.curve_preferences[0])
        if group not in _CURVES:
            raise ValueError(f"curve_preferences: {cfg.curve_preferences[0]} cannot be set with OCSP stapling "
                             f"(pyOpenSSL sets only the NIST curves)")
        from cryptography.hazmat.primitives.asymmetric import ec
        ctx.set_tmp_ecdh(getattr(ec, _CURVES[group])())

    def status(_conn: Any, _data: Any) -> bytes:
        try:
            return staple()
        except Exception as e:  # (no status to staple: the handshake fails with why, as an SSL error)
            raise SSL.Error(str(e)) from e

    ctx.set_ocsp_server_callback(status)
    out = OpenSSLContext(ssl.PROTOCOL_TLS_SERVER)
    out.ossl = ctx
    out.peer_verified = verified
    return out
