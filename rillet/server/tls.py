"""TLS for the client port: contexts built from a tls {} block (Go cipher/curve names translated by
rillet.config.tls_names), certificate pinning, the TLS connection rate limit, and the client listener that
handles handshake_first and its fallback delay."""
from __future__ import annotations

import asyncio
import socket
import ssl
import time
from typing import TYPE_CHECKING, Any, Callable

from rillet.digest import sha256
from rillet.config.options import TLSConfig
from rillet.config.tls_names import TLS_VERSIONS, check_curve, cipher_available, parse_min_version
from rillet.server.listen import peer_hostport

if TYPE_CHECKING:  # pragma: no cover
    from rillet.server.server import Server

THROTTLED = "Connection throttling is active. Please try again later."


def make_server_context(cfg: TLSConfig, staple: Any = None) -> ssl.SSLContext:
    """A server-side context: certificate and key, client-certificate verification when asked, the
    minimum version, the allowed TLS 1.2 cipher suites and the curve. ValueError when one is unusable.
    With ``staple`` (a rillet.server.ocsp_staple.StapleMonitor) the listener staples its OCSP status:
    the context is then pyOpenSSL's (rillet.server.tls_openssl)."""
    if staple is not None:
        if cfg.certs:
            raise ValueError("OCSP stapling with a 'certs' list in the tls block is not supported: Rillet "
                             "staples the status of one certificate (cert_file)")
        from rillet.server.tls_openssl import stapling_context
        return stapling_context(cfg, staple.staple)
    if cfg.certs:
        # several certificates: the first by default, another when the client's SNI names one of its names
        # (as nats-server, which hands Go's TLS all of them)
        pairs = cfg.certs
        ctxs = [_server_context(cfg, c, k, f" {i + 1}/{len(pairs)}") for i, (c, k) in enumerate(pairs)]
        names = [(_cert_names(c), ctx) for (c, _), ctx in zip(pairs, ctxs)]

        def pick(sslobj: ssl.SSLObject, server_name: str | None, _ctx: ssl.SSLContext) -> None:
            if server_name:
                want = server_name.lower().rstrip(".")
                for pats, other in names:
                    if any(_name_matches(p, want) for p in pats):
                        if other is not ctxs[0]:
                            sslobj.context = other
                        return
        ctxs[0].sni_callback = pick  # type: ignore[assignment]
        return ctxs[0]
    return _server_context(cfg, cfg.cert_file, cfg.key_file, "")


def _cert_names(cert_file: str) -> list[str]:
    """The DNS names a certificate is for (its SANs, else its common name), lower case."""
    from cryptography import x509
    with open(cert_file, "rb") as f:
        cert = x509.load_pem_x509_certificate(f.read())
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = [str(n).lower() for n in san.get_values_for_type(x509.DNSName)]
        if dns:
            return dns
    except x509.ExtensionNotFound:
        pass
    return [str(a.value).lower() for a in cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)]


def _name_matches(pattern: str, name: str) -> bool:
    if pattern.startswith("*."):
        head, _, rest = name.partition(".")
        return bool(head) and rest == pattern[2:]
    return pattern == name


def _server_context(cfg: TLSConfig, cert_file: str, key_file: str, which: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if not cert_file or not key_file:
        raise ValueError("missing 'cert_file' or 'key_file' in TLS configuration")
    try:
        ctx.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"error parsing X509 certificate/key pair{which}: {e}") from e
    send_configured_chain_only(ctx)
    if cfg.ca_file:
        try:
            ctx.load_verify_locations(cafile=cfg.ca_file)
        except (OSError, ssl.SSLError) as e:
            raise ValueError(f"failed reading root CA file: {e}") from e
    if cfg.verify or cfg.verify_and_map:
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:
        ctx.verify_mode = ssl.CERT_NONE
    if cfg.min_version:
        ctx.minimum_version = TLS_VERSIONS[parse_min_version(cfg.min_version)][0]
    if cfg.ciphers:
        _set_ciphers(ctx, cfg)
    if cfg.curve_preferences:
        groups = [check_curve(n) for n in cfg.curve_preferences]
        if len(groups) == 1:
            ctx.set_ecdh_curve(groups[0])
        else:
            set_groups(ctx, groups)
    return ctx


_SSL_CTRL_SET_GROUPS_LIST = 92  # (openssl/ssl.h: SSL_CTX_set1_groups_list)


def set_groups(ctx: ssl.SSLContext, groups: list[str]) -> None:
    """Limit ``ctx``'s key exchange to ``groups`` (OpenSSL names), in that order of preference: Python's ssl
    module sets one group only (set_ecdh_curve), so the list is given to libssl's SSL_CTX_ctrl as
    SSL_CTX_set1_groups_list does (see send_configured_chain_only for how the SSL_CTX is reached)."""
    import sys
    if sys.implementation.name != "cpython":
        raise ValueError("curve_preferences: more than one curve needs CPython's ssl module")
    fn, ssl_ctx = _ctrl_of(ctx)
    import ctypes
    if fn(ssl_ctx, _SSL_CTRL_SET_GROUPS_LIST, 0, ctypes.c_char_p(":".join(groups).encode())) != 1:
        raise ValueError(f"curve_preferences: the TLS library refused the groups {', '.join(groups)}")


def _ctrl_of(ctx: ssl.SSLContext) -> tuple[Any, int]:
    """libssl's SSL_CTX_ctrl and the SSL_CTX of CPython context ``ctx``."""
    global _ctx_ctrl
    if _ctx_ctrl is None:
        import ctypes
        import _ssl
        fn = ctypes.CDLL(_ssl.__file__).SSL_CTX_ctrl
        fn.restype = ctypes.c_long
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_void_p]
        _ctx_ctrl = (ctypes, fn)
    ctypes_mod, fn = _ctx_ctrl
    return fn, ctypes_mod.c_void_p.from_address(id(ctx) + object.__basicsize__).value


_SSL_CTRL_MODE = 33  # (openssl/ssl.h)
_SSL_MODE_NO_AUTO_CHAIN = 0x8
_ctx_ctrl: Any = None


def client_context(cfg: Any, what: str) -> ssl.SSLContext:
    """The context of a connection this server makes (a leaf node remote, the URL account resolver) from its
    tls {} block (None: the system's roots). ValueError naming ``what`` when a file is unusable."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        if cfg is not None and (cfg.cert_file or cfg.certs):
            # (with a certs list: its first certificate, as a Go client offers when the server names no CA)
            ctx.load_cert_chain(*((cfg.cert_file, cfg.key_file) if cfg.cert_file else cfg.certs[0]))
        if cfg is not None and cfg.ca_file:
            ctx.load_verify_locations(cafile=cfg.ca_file)
        else:
            ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"{what}: {e}") from e
    if cfg is not None and cfg.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cfg is not None and cfg.min_version:
        ctx.minimum_version = TLS_VERSIONS[parse_min_version(cfg.min_version)][0]
    return ctx


def send_configured_chain_only(ctx: ssl.SSLContext) -> None:
    """Make ``ctx`` present exactly the certificates of its cert_file, as nats-server does.

    Unless told not to, OpenSSL completes the chain a server sends from its verify store, which holds the
    ca_file: a client that does not trust that CA then fails with "self-signed certificate in certificate
    chain" instead of nats-server's "unable to verify the first certificate" (nats.js's TLS tests check
    that text), and every handshake carries the CA. Python's ssl module has no setter for
    SSL_MODE_NO_AUTO_CHAIN, so it is set with libssl's SSL_CTX_ctrl (found through the ``_ssl`` extension
    that links it) on the context's SSL_CTX, which CPython's context object holds right after its object
    header. Other Python implementations keep OpenSSL's default."""
    import sys
    if sys.implementation.name != "cpython":
        return
    fn, ssl_ctx = _ctrl_of(ctx)
    mode = fn(ssl_ctx, _SSL_CTRL_MODE, _SSL_MODE_NO_AUTO_CHAIN, None)
    if not mode & _SSL_MODE_NO_AUTO_CHAIN:
        raise RuntimeError(f"TLS: could not stop OpenSSL from completing the certificate chain (mode {mode:#x})")


def _set_ciphers(ctx: ssl.SSLContext, cfg: TLSConfig) -> None:
    names = [ossl for ossl in map(cipher_available, cfg.ciphers) if ossl is not None]
    if names:
        ctx.set_ciphers(":".join(names))
    else:
        # only TLS 1.3 suites named: Go then has no TLS 1.2 suite to offer, so only TLS 1.3 connects
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3


# ---- certificate pinning -----------------------------------------------------------------------------

def _der_item(buf: bytes, i: int) -> tuple[int, int, int]:
    """(tag, content start, content end) of the DER item at ``i``."""
    tag = buf[i]
    n = buf[i + 1]
    i += 2
    if n & 0x80:
        count = n & 0x7F
        n = int.from_bytes(buf[i:i + count], "big")
        i += count
    if i + n > len(buf):
        raise ValueError("truncated DER")
    return tag, i, i + n


def spki_of(cert_der: bytes) -> bytes:
    """The DER SubjectPublicKeyInfo of a DER X.509 certificate (what pinned_certs hashes)."""
    _, start, _ = _der_item(cert_der, 0)       # Certificate
    _, i, _ = _der_item(cert_der, start)       # tbsCertificate
    tag, _, end = _der_item(cert_der, i)
    if tag == 0xA0:                             # [0] version
        i = end
    for _ in range(5):                          # serial, signature, issuer, validity, subject
        _, _, i = _der_item(cert_der, i)
    tag, _, end = _der_item(cert_der, i)
    if tag != 0x30:
        raise ValueError("no SubjectPublicKeyInfo")
    return cert_der[i:end]


def pin_of(cert_der: bytes) -> str:
    """The pinned_certs form of a certificate: hex SHA-256 of its DER SubjectPublicKeyInfo."""
    return sha256(spki_of(cert_der)).hexdigest()


def pinned_error(ssl_obj: Any, pinned: list[str]) -> tuple[str, str] | None:
    """None when the peer passes ``pinned`` (or nothing is pinned); else (error, debug detail)."""
    if not pinned:
        return None
    der = ssl_obj.getpeercert(binary_form=True) if ssl_obj is not None else None
    if not der:
        return "certificate not pinned", "Failed pinned cert test as client did not provide a certificate"
    try:
        key_id = pin_of(der)
    except (ValueError, IndexError):
        return "certificate not pinned", "Failed pinned cert test: unreadable certificate"
    if key_id not in pinned:
        return "certificate not pinned", f"Failed pinned cert test for key id: {key_id}"
    return None


# ---- connection rate limit -----------------------------------------------------------------------------

class RateCounter:
    """``limit`` TLS connections per second (nats-server's connection_rate_limit); counts the refused."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0
        self.blocked = 0
        self.end = 0.0

    def allow(self) -> bool:
        now = time.monotonic()
        if now > self.end:
            self.count = 0
            self.end = now + 1.0
        else:
            self.count += 1
        if self.count < self.limit:
            return True
        self.blocked += 1
        return False


# ---- the client port when TLS is configured -----------------------------------------------------------

class TLSClientListener:
    """The client port of a server with a tls {} block: it accepts, then decides per connection (from the
    options in force, so a reload applies to the next connection):

    * ``handshake_first`` without a delay: the TLS handshake, then the INFO;
    * ``handshake_first`` with a delay: a client that sends within the delay is TLS-first; a silent one
      gets the INFO in the clear and then the usual TLS upgrade;
    * otherwise INFO first and the upgrade (``Server.register_client``).

    The socket is not handed to a transport until that decision is made, so a TLS-first ClientHello stays
    in the kernel for the TLS layer. Duck-types the parts of ``asyncio.Server`` the server uses.
    """

    def __init__(self, server: "Server", sock: socket.socket, *, tls_opts: Callable[[], Any] | None = None,
                 context: Callable[[], ssl.SSLContext | None] | None = None,
                 factory: Callable[[], asyncio.Protocol] | None = None, what: str = "client") -> None:
        """The client port's by default; a leafnode listener (``leafnodes { tls { handshake_first } }``) gives its
        tls options, context and protocol factory (and ``what`` for the log); the TLS connection rate limit is
        the client port's only."""
        self.server = server
        self._tls_opts = tls_opts if tls_opts is not None else (lambda: server.opts.tls)
        self._context = context if context is not None else (lambda: server.tls_context)
        self._factory = factory if factory is not None else server._new_client
        self._what = what
        self._socks = [sock]
        self._tasks: list[asyncio.Task] = []
        self._waiting: dict[int, tuple[socket.socket, asyncio.TimerHandle]] = {}
        # proxy_protocol with handshake_first: the address in the PROXY header read off each socket
        self._proxied: dict[int, tuple[str, int] | None] = {}
        self._closed = False
        self._done = asyncio.Event()

    @property
    def sockets(self) -> list[socket.socket]:
        return list(self._socks)

    async def start_serving(self) -> None:
        loop = self.server.loop
        for s in self._socks:
            self._tasks.append(loop.create_task(self._accept_loop(s)))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for t in self._tasks:
            t.cancel()
        loop = self.server.loop
        for fd, (conn, timer) in list(self._waiting.items()):
            timer.cancel()
            loop.remove_reader(fd)
            conn.close()
        self._waiting.clear()
        self._proxied.clear()
        for s in self._socks:
            s.close()
        self._done.set()

    async def wait_closed(self) -> None:
        await self._done.wait()

    async def _accept_loop(self, lsock: socket.socket) -> None:
        loop = self.server.loop
        while True:
            try:
                conn, _ = await loop.sock_accept(lsock)
            except asyncio.CancelledError:
                raise
            except OSError as e:
                if self._closed:
                    return
                self.server.log.error(f"Temporary accept error: {e}")
                await asyncio.sleep(0.01)
                continue
            conn.setblocking(False)
            self._accepted(conn)

    def _accepted(self, conn: socket.socket) -> None:
        tls = self._tls_opts()
        if tls is None or not tls.handshake_first:
            self._serve(conn, tls_first=False)
            return
        if self._what == "client" and self.server.opts.proxy_protocol:
            # the PROXY header comes first, in the clear, before the ClientHello (as nats-server reads it)
            self.server.loop.create_task(self._proxy_header_first(conn))
            return
        self._handshake_first(conn, tls)

    async def _proxy_header_first(self, conn: socket.socket) -> None:
        from rillet.server import proxyproto
        srv = self.server
        why = ""
        try:
            found = await proxyproto.take_header(srv.loop, conn)
        except proxyproto.ProxyProtoError as e:
            why = str(e)
        except asyncio.TimeoutError:
            why = "timeout reading PROXY protocol header"
        except OSError:
            conn.close()
            return
        if why:
            srv.log.warn(f"Error reading PROXY protocol header from {peer_hostport(conn)}: {why}")
            conn.close()
            return
        if self._closed:
            conn.close()
            return
        self._proxied[conn.fileno()] = found.addr
        tls = self._tls_opts()
        if tls is None or not tls.handshake_first:  # (a reload meanwhile)
            self._serve(conn, tls_first=False)
        else:
            self._handshake_first(conn, tls)

    def _handshake_first(self, conn: socket.socket, tls: Any) -> None:
        delay = tls.handshake_first_fallback
        if delay <= 0:
            self._serve(conn, tls_first=True)
            return
        # wait for the client's first bytes without reading them
        loop = self.server.loop
        fd = conn.fileno()
        timer = loop.call_later(delay, self._decided, fd, False)
        self._waiting[fd] = (conn, timer)
        loop.add_reader(fd, self._decided, fd, True)

    def _decided(self, fd: int, sent_first: bool) -> None:
        entry = self._waiting.pop(fd, None)
        if entry is None:
            return
        conn, timer = entry
        timer.cancel()
        self.server.loop.remove_reader(fd)
        self._serve(conn, tls_first=sent_first)

    def _serve(self, conn: socket.socket, tls_first: bool) -> None:
        srv = self.server
        if not tls_first:
            srv.loop.create_task(self._connect(conn, None))
            return
        if self._what == "client" and not srv.tls_rate_allow():
            self._proxied.pop(conn.fileno(), None)
            _refuse(conn, THROTTLED)
            return
        srv.loop.create_task(self._connect(conn, self._context()))

    async def _connect(self, conn: socket.socket, ctx: ssl.SSLContext | None) -> None:
        srv = self.server
        peer = peer_hostport(conn)
        factory = self._factory
        fd = conn.fileno()
        if fd in self._proxied:  # (its PROXY header was read: the client takes its address, reads no other)
            addr = self._proxied.pop(fd)

            def factory() -> asyncio.Protocol:
                c: Any = self._factory()
                c.proxy_taken, c.proxy_addr = True, addr
                return c  # type: ignore[no-any-return]
        try:
            if ctx is None:
                await srv.loop.connect_accepted_socket(factory, conn)
            else:
                tls = self._tls_opts()
                timeout = tls.timeout if tls is not None else 2.0
                await srv.loop.connect_accepted_socket(factory, conn, ssl=ctx,
                                                       ssl_handshake_timeout=timeout or None)
        except (ssl.SSLError, ConnectionError, OSError, asyncio.TimeoutError) as e:
            # like nats-server, a timeout or a peer that does not speak TLS at all (a probe, a load
            # balancer's health check) is logged at debug level; other failures are errors
            log = srv.log.debug if _is_probe(e) else srv.log.error
            log(f"{peer} - TLS handshake error: {e or type(e).__name__}")
            conn.close()


async def start_tls_after_info(c: Any, holder: asyncio.Protocol, ctx: ssl.SSLContext, timeout: float,
                               server_side: bool = True, hostname: str | None = None) -> Any:
    """TLS over connection ``c``'s transport once its INFO went out in the clear (a client's or a leaf's):
    ``holder`` keeps what arrives before the handshake is done. The TLS transport, set as ``c.transport``; or
    None when the handshake failed or took longer than ``timeout`` (+0.5 s: logged) or ``c`` closed meanwhile,
    ``c`` closed then with "TLS Handshake Failure"."""
    try:
        new_t = await asyncio.wait_for(c.server.loop.start_tls(c.transport, holder, ctx, server_side=server_side,
                                                               server_hostname=hostname), timeout + 0.5)
    except (asyncio.TimeoutError, ssl.SSLError, ConnectionError, OSError) as e:
        c.server.log.error(f"{c.log_prefix()} - TLS handshake error: {e}")
        c.close("TLS Handshake Failure")
        return None
    if new_t is None or c.closed:
        c.close("TLS Handshake Failure")
        return None
    c.transport = new_t
    return new_t


def _is_probe(e: BaseException) -> bool:
    if isinstance(e, asyncio.TimeoutError) or "taking longer than" in str(e):
        return True
    return isinstance(e, ssl.SSLError) and e.reason in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "HTTPS_PROXY_REQUEST")


def _refuse(conn: socket.socket, err: str) -> None:
    try:
        conn.send(f"-ERR '{err}'\r\n".encode())
    except OSError:
        pass  # the connection is being refused anyway; nothing to tell a client that is gone
    conn.close()


# ---- reload ---------------------------------------------------------------------------------------------

def reload_context(server: "Server", new: Any) -> ssl.SSLContext | None:
    """The client TLS context for reloaded options (ValueError refuses the reload); None without TLS.

    The client port's listener is chosen at start (rillet.server.tls for TLS), so TLS cannot be switched
    on or off by a reload; everything else in the tls {} block applies to the next connections.
    """
    old = server.opts
    if (old.tls is None) != (new.tls is None):
        state = "enabled" if new.tls is not None else "disabled"
        raise ValueError(f"config reload not supported for TLS: it cannot be {state} without a restart")
    if new.tls is None:
        return None
    if stapling_reload_needed(server, new):
        make_server_context(new.tls)  # (checked now; Server._restage_stapling makes the stapling one)
        return server.tls_context
    return make_server_context(new.tls, server.staples.get("client"))


def stapling_reload_needed(server: "Server", new: Any) -> bool:
    """Whether a reload to ``new`` changes OCSP stapling (the ``ocsp`` block, a stapled certificate, or a
    certificate that asks for stapling): the monitors are then made again (as nats-server restarts them),
    and until they are ready the client port keeps its context."""
    from rillet.config.ocsp_section import stapling_wanted
    old = server.opts
    if getattr(old, "ocsp", None) != getattr(new, "ocsp", None):
        return True
    if any(not mon.same_certificate(mon.cert_file) for mon in server.staples.values()):
        return True  # (new contents under the same file name)
    blocks = {"client": new.tls, "websocket": new.websocket.tls,
              "mqtt": new.mqtt.get("tls") if isinstance(new.mqtt, dict) else None}
    for listener, mon in server.staples.items():
        block = blocks.get(listener)
        if block is None or block.cert_file != mon.cert_file:
            return True
    return not server.staples and stapling_wanted(new)


def _ssl_object_of(c: Any) -> Any:
    ws = getattr(c, "ws", None)  # a websocket client: TLS is on the websocket connection's transport
    t = getattr(ws, "t", None) if ws is not None else c.transport
    return t.get_extra_info("ssl_object") if t is not None else None


def recheck_pinned(server: "Server", old: Any, new: Any) -> None:
    """After a reload that changed pinned_certs: connected clients whose certificate is no longer pinned go
    (nats-server's recheckPinnedCerts; it closes them as a TLS handshake failure)."""
    def pins(tls: TLSConfig | None) -> list[str]:
        return list(tls.pinned_certs) if tls is not None else []
    changed: dict[str, list[str]] = {}
    if pins(old.tls) != pins(new.tls):
        changed["STANDARD"] = pins(new.tls)
    if pins(old.websocket.tls) != pins(new.websocket.tls):
        changed["WEBSOCKET"] = pins(new.websocket.tls)
    if not changed:
        return
    gone = [c for c in list(server.clients.values())
            if c.conn_type in changed and not c.closed
            and pinned_error(_ssl_object_of(c), changed[c.conn_type]) is not None]
    if gone:
        server.log.notice(f"Disconnect {len(gone)} clients due to pinned certs reload")
        for c in gone:
            c.close("TLS Handshake Failure")
