"""The TLS side of the server (``TLSSide``, a mixin of rillet.server.server.Server): the TLS connection rate
limit, OCSP stapling and the OCSP peer checks, pinned certificates, and the upgrade of a client connection to TLS
after its INFO. rillet.server.tls and the OCSP modules are imported only where TLS is configured or used: a server
without TLS does not load them (tests/test_idle_rss.py)."""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rillet.server.client import Client
    from rillet.server.tls import RateCounter


class TLSSide:
    """What the server does for TLS connections (the attributes are the Server's)."""

    # (set by Server.__init__)
    opts: Any
    loop: Any
    log: Any
    sysacc: Any
    clients: dict[int, Any]
    total_connections: int
    _cid: int
    tls_context: Any
    staples: dict[str, Any]
    on_shutdown: list[Any]
    _ocsp_checker: Any
    _tls_rate: RateCounter | None
    _tls_rate_log_pending: bool

    def register_client(self, c: Client) -> None:
        raise NotImplementedError

    def flush_clients(self, hold_late: bool = False) -> None:
        raise NotImplementedError

    def tls_rate_allow(self) -> bool:
        """tls connection_rate_limit: False for a TLS connection over the limit (the refusals are counted
        and logged once a second, as nats-server does)."""
        tls = self.opts.tls
        limit = tls.rate_limit if tls is not None else 0
        if limit <= 0:
            return True
        rc = self._tls_rate
        if rc is None or rc.limit != limit:
            from rillet.server.tls import RateCounter
            rc = self._tls_rate = RateCounter(limit)
        if rc.allow():
            return True
        if not self._tls_rate_log_pending:
            self._tls_rate_log_pending = True
            self.loop.call_later(1.0, self._log_tls_rate)
        return False

    def _log_tls_rate(self) -> None:
        self._tls_rate_log_pending = False
        rc = self._tls_rate
        if rc is not None and rc.blocked:
            self.log.warn(f"Rejected {rc.blocked} connections due to TLS rate limiting")
            rc.blocked = 0

    async def _prepare_stapling(self) -> None:
        """OCSP stapling for the client, websocket and MQTT listeners where the ``ocsp`` mode and the
        certificates call for it (rillet.server.ocsp_staple; not imported when no listener staples)."""
        from rillet.server.ocsp_staple import prepare
        self.staples = await prepare(self)
        for mon in self.staples.values():
            mon.start()
            self.on_shutdown.append(mon.stop)

    async def _restage_stapling(self) -> None:
        """After a reload that changes OCSP stapling (nats-server's reloadOCSP): the monitors stop and are
        made again for the new options; when that fails the reload stands without stapling, with
        nats-server's warning. The client port's context follows (websocket and MQTT keep theirs until a
        restart, as with any of their TLS settings)."""
        from rillet.config.ocsp_section import stapling_wanted
        from rillet.server.ocsp_staple import prepare
        for mon in self.staples.values():
            mon.stop()
            self.on_shutdown.remove(mon.stop)
        self.staples = {}
        try:
            staples = await prepare(self) if stapling_wanted(self.opts) else {}
        except ValueError as e:
            self.log.warn(f"Can't restart OCSP features: {e}")
            staples = {}
        self.staples = staples
        for mon in staples.values():
            mon.start()
            self.on_shutdown.append(mon.stop)
        if self.opts.tls is not None:
            from rillet.server.tls import make_server_context
            self.tls_context = make_server_context(self.opts.tls, staples.get("client"))

    def ocsp_checker(self) -> Any:
        """The server's OCSP peer checker and its response cache (created on first need; the cache is
        saved when the server shuts down). ``ocsp_codec``, set by rillet.app's make_links: the S2 codec
        of the cache file (rillet.server.ocsp has a plain fallback)."""
        if self._ocsp_checker is None:
            from rillet.server.ocsp import PeerChecker  # (only with ocsp_peer: a plain server loads none of it)
            self._ocsp_checker = PeerChecker(self.opts.ocsp_cache, self.log, codec=getattr(self, "ocsp_codec", None))
            self._ocsp_checker.sysacc = self.sysacc
            self._ocsp_checker.start(self.loop)
            self.on_shutdown.append(self._ocsp_checker.stop)
        return self._ocsp_checker

    async def ocsp_peer_ok(self, c: Client, ssl_obj: Any, cfg: Any) -> bool:
        """ocsp_peer for a client's TLS connection: False (logged as nats-server does) when it is refused."""
        if await self.ocsp_checker().check_ssl(ssl_obj, cfg):
            return True
        from rillet.server.ocsp import CLIENT_REJECT
        self.log.error(f"{c.log_prefix()} - TLS handshake error: {CLIENT_REJECT}")
        return False

    def hold_for_ocsp(self, c: Client, ssl_obj: Any) -> bool:
        """A TLS-first client when the client port has ocsp_peer: a holding protocol keeps what it sends
        and its INFO waits until the responder has answered; then it is registered, or refused as a TLS
        handshake failure. False when there is nothing to check."""
        cfg = self.opts.tls.ocsp_peer if self.opts.tls is not None else None
        if cfg is None or not cfg.verify or c.transport is None:
            return False
        holder = _TLSHolder(c)
        c.transport.set_protocol(holder)
        self.loop.create_task(self._after_ocsp(c, ssl_obj, cfg, holder))
        return True

    async def _after_ocsp(self, c: Client, ssl_obj: Any, cfg: Any, holder: "_TLSHolder") -> None:
        ok = await self.ocsp_peer_ok(c, ssl_obj, cfg)
        t = c.transport
        if c.closed or holder.lost is not None or t is None or t.is_closing():
            return
        t.set_protocol(c)
        if not ok:
            self._cid += 1
            c.cid = self._cid
            self.total_connections += 1
            self.clients[c.cid] = c
            c.account.clients.add(c)
            c.close("TLS Handshake Failure")
            return
        self.register_client(c)
        self.flush_clients()
        if holder.data and not c.closed:
            c.data_received(b"".join(holder.data))

    def refuse_unpinned(self, c: Client, ssl_obj: Any) -> bool:
        """A TLS-first client whose certificate is not in pinned_certs: registered (so it shows among the
        closed connections) and closed as a TLS handshake failure, as nats-server does. False if it passes."""
        from rillet.server.tls import pinned_error
        refused = pinned_error(ssl_obj, self.opts.tls.pinned_certs if self.opts.tls else [])
        if refused is None:
            return False
        self._cid += 1
        c.cid = self._cid
        self.total_connections += 1
        self.clients[c.cid] = c
        c.account.clients.add(c)
        self.log.debug(f"{c.log_prefix()} - {refused[1]}")
        self.log.error(f"{c.log_prefix()} - TLS handshake error: {refused[0]}")
        c.close("TLS Handshake Failure")
        return True

    async def _upgrade_tls(self, c: Client) -> None:
        """INFO has gone out in the clear; now the client starts its TLS handshake.

        Until ``start_tls`` hands back the TLS transport, a holding protocol keeps what the client sends
        (it may arrive right after the handshake, before this coroutine resumes); then the client takes
        over the TLS transport and gets the held data.
        """
        assert c.transport is not None and self.tls_context is not None
        from rillet.server.tls import pinned_error, start_tls_after_info
        if self.opts.proxy_protocol and not await c.take_proxy_header():
            return  # (the PROXY header comes in the clear before the handshake, as nats-server reads it)
        holder = _TLSHolder(c)
        new_t = await start_tls_after_info(c, holder, self.tls_context,
                                           self.opts.tls.timeout if self.opts.tls else 2.0)
        if new_t is None:
            return
        ssl_obj = new_t.get_extra_info("ssl_object")
        if ssl_obj is not None:
            c.tls_version = ssl_obj.version() or ""
            ci = ssl_obj.cipher()
            c.tls_cipher = ci[0] if ci else ""
        refused = pinned_error(ssl_obj, self.opts.tls.pinned_certs if self.opts.tls else [])
        if refused is not None:
            self.log.debug(f"{c.log_prefix()} - {refused[1]}")
            self.log.error(f"{c.log_prefix()} - TLS handshake error: {refused[0]}")
            new_t.set_protocol(c)
            c.close("TLS Handshake Failure")
            return
        peer_cfg = self.opts.tls.ocsp_peer if self.opts.tls is not None else None
        if peer_cfg is not None and peer_cfg.verify and not await self.ocsp_peer_ok(c, ssl_obj, peer_cfg):
            new_t.set_protocol(c)  # (what the client sent meanwhile, in the holder, is dropped)
            c.close("TLS Handshake Failure")
            return
        self.log.debug(f"{c.log_prefix()} - TLS handshake complete")
        new_t.set_protocol(c)
        if holder.lost is not None:
            c.connection_lost(holder.lost[0])
            return
        if holder.data:
            c.data_received(b"".join(holder.data))


class _TLSHolder(asyncio.Protocol):
    """Stands in for a client while its TLS handshake completes (see ``Server._upgrade_tls``)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.data: list[bytes] = []
        self.lost: tuple[Exception | None] | None = None

    def data_received(self, data: bytes) -> None:
        self.data.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = (exc,)
        self.client.connection_lost(exc)

    def pause_writing(self) -> None:
        self.client.pause_writing()

    def resume_writing(self) -> None:
        self.client.resume_writing()
