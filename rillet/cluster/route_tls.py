"""TLS on routes (``cluster { tls {} }``): the accepting and the dialling side's contexts, and the listener
that upgrades accepted route connections, as nats-server does it (the peer's certificate always required)."""
from __future__ import annotations

import asyncio
import socket
import ssl
from typing import TYPE_CHECKING, Any

from rillet.cluster.conn import AcceptLoop
from rillet.cluster.route import RouteConn
from rillet.server.listen import peer_hostport

if TYPE_CHECKING:
    from rillet.cluster.cluster import Cluster


def route_tls_contexts(cfg: Any, where: str = "cluster") -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """The accepting and the dialling side's contexts for ``cluster { tls {} }`` (as nats-server: the peer's
    certificate is always required and verified, against ``ca_file`` or the system's roots)."""
    from rillet.config.tls_names import TLS_VERSIONS, check_curve, cipher_available, parse_min_version
    from rillet.server.tls import make_server_context
    srv = make_server_context(cfg)
    srv.verify_mode = ssl.CERT_REQUIRED
    if not cfg.ca_file:
        srv.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    cli = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    cli.minimum_version = srv.minimum_version
    try:
        cli.load_cert_chain(cfg.cert_file, cfg.key_file)
        if cfg.ca_file:
            cli.load_verify_locations(cafile=cfg.ca_file)
        else:
            cli.load_default_certs(ssl.Purpose.SERVER_AUTH)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"{where} tls: {e}") from e
    if cfg.insecure:
        cli.check_hostname = False
        cli.verify_mode = ssl.CERT_NONE
    if cfg.min_version:
        cli.minimum_version = TLS_VERSIONS[parse_min_version(cfg.min_version)][0]
    names = [n for n in map(cipher_available, cfg.ciphers) if n is not None]
    if names:
        cli.set_ciphers(":".join(names))
    elif cfg.ciphers:
        cli.minimum_version = ssl.TLSVersion.TLSv1_3
    if cfg.curve_preferences:
        cli.set_ecdh_curve(check_curve(cfg.curve_preferences[0]))
    return srv, cli


class _TLSRouteListener(AcceptLoop):
    """The route port with TLS: each accepted connection does the TLS handshake first (before the INFO),
    and a failed handshake is logged as nats-server does (``TLS route handshake error``)."""

    def __init__(self, cluster: Cluster, sock: socket.socket) -> None:
        self.cluster = cluster
        super().__init__(cluster.server, sock)

    async def _serve(self, conn: socket.socket) -> None:
        cl = self.cluster
        peer = peer_hostport(conn)
        try:
            await cl.server.loop.connect_accepted_socket(lambda: RouteConn(cl), conn, ssl=cl.tls_server,
                                                         ssl_handshake_timeout=cl.tls_timeout())
        except (ssl.SSLError, ConnectionError, OSError, asyncio.TimeoutError) as e:
            cl.server.log.error(f"{peer} - TLS route handshake error: "
                                f"{e or type(e).__name__}")
            conn.close()
