"""Reloading a cluster block (``Cluster``'s part, as a mixin): what nats-server applies on a reload (the
name, the authorization, the permissions, the pool size and pinned accounts, compression, the route URLs)
and ``check_reload``, what it refuses (host and port, bad advertise addresses, missing pinned accounts)."""
from __future__ import annotations

import asyncio
from typing import Any

from rillet import compression as cc
from rillet.cluster import info as ci
from rillet.cluster import protocol as cp
from rillet.cluster.interest import frame_for
from rillet.cluster.route import EXPLICIT, RouteConn
from rillet.cluster.route_urls import DEFAULT_ROUTE_POOL_SIZE, parse_route_url, pinned_names
from rillet.compression import CompressionConfig
from rillet.server.auth import PermChecker, compare_secret


class ClusterReload:
    """The reload half of ``rillet.cluster.cluster.Cluster`` (every attribute it uses is the cluster's)."""

    # ---- pinned accounts added by a reload (nats-server's route_acc_add_reqid exchange) ----------------------

    def _acc_add_info(self, rc: RouteConn, info: ci.Info) -> None:
        srv = self.server
        an = info.route_account
        if not an:  # a peer's answer to our announcement
            if info.route_acc_add_reqid == self._acc_add_reqid and self._acc_add_done is not None:
                self._acc_add_left -= 1
                if self._acc_add_left <= 0:
                    self._acc_add_done.set()
            return
        an_b = an.encode("utf-8", "surrogateescape")
        if self.route_account(an_b) is None:
            srv.log.error(f'Error looking up account "{an}": account missing')
            return
        if an not in self.pinned:  # the peer moved the account to dedicated routes first
            self.pinned[an] = {}
            self.transitioning.add(an_b)
            self._acc_idx.clear()
        # the account's interest of every server leaves the pool connection of its index (under the
        # announcing server's pool size); it comes again over the dedicated routes
        rpi = ci.route_pool_index(max(info.route_pool_size, 1), an)
        for conns in self.pools.values():
            r = conns[rpi] if rpi < len(conns) else None
            if r is not None and not r.no_pool:
                r.drop_interest(lambda acc, _subject: acc != an_b)
        info.route_account = ""
        rc.send(cp.info_frame(ci.encode_info(info)))
        srv.schedule_flush()

    def _announce_added(self, added: list[str]) -> int:
        """Accounts pinned by a reload: each peer is told on the pool connection that carried the account
        (its interest there is dropped); returns how many answers to wait for."""
        import secrets
        self._acc_add_reqid = secrets.token_hex(11).upper()
        sent = 0
        for an in added:
            an_b = an.encode("utf-8", "surrogateescape")
            rpi = ci.route_pool_index(self.routes_pool_size, an)  # (its index before the move)
            self.pinned.setdefault(an, {})
            self.transitioning.discard(an_b)
            frame = cp.info_frame(ci.encode_info(ci.Info(route_pool_size=self.routes_pool_size, route_account=an,
                                                         route_acc_add_reqid=self._acc_add_reqid)))
            for conns in self.pools.values():
                r = conns[rpi] if rpi < len(conns) else None
                if r is None or r.closed or r.no_pool:
                    continue
                rr = r  # the peer announced the account's interest on the connection of its own index
                if r.remote_pool_size and r.remote_pool_size != self.routes_pool_size:
                    i = ci.route_pool_index(r.remote_pool_size, an)
                    rr = conns[i] if i < len(conns) and conns[i] is not None else r
                rr.drop_interest(lambda acc, _subject: acc != an_b)
                r.send(frame)
                sent += 1
        self._acc_idx.clear()
        self.server.schedule_flush()
        return sent

    def reloaded(self, old: Any) -> None:
        """The configuration was reloaded (``old``: the previous cluster options), as nats-server applies a
        cluster block: the name, the authorization (accepted routes whose credentials no longer match are
        closed), the permissions, the pool size and pinned accounts, and the route URLs (removed ones closed
        for good, new ones dialled); advertise and the rest apply to new connections."""
        srv = self.server
        new = self.opts
        if new.name and new.name != self.name:
            srv.log.notice(f"Cluster name updated to {new.name}")
            self.name = new.name
            self.dynamic = False
        if new.username:  # (routes we dialled are not checked: we do not have the peer's credentials)
            for rc in list(self.conns):
                if not rc.solicited and rc.parser is not None and not rc.parser.awaiting_connect and \
                        (rc.connect_user != new.username or not compare_secret(new.password, rc.connect_pass)):
                    srv.log.error(f"{rc.log_prefix()} - authentication error")
                    rc.close("Authentication Failure", cp.AUTH_VIOLATION, no_reconnect=True)
        if new.permissions != old.permissions:
            self._reload_permissions(old.permissions)
        if CompressionConfig(old.compression or cc.ROUTE_DEFAULT, old.compression_rtts) != self.comp_config():
            self._reload_compression()
        self._reload_routes(old)
        names = pinned_names(srv.opts)
        added = [a for a in names if a not in self.pinned_config]
        removed = [a for a in self.pinned_config if a not in names]
        if new.pool_size < 0 <= old.pool_size:  # (pooling turned off: the system account leaves too)
            removed += [a for a in self.pinned if a not in removed and a not in names]
        self.pinned_config = names
        new_size = DEFAULT_ROUTE_POOL_SIZE if new.pool_size == 0 else new.pool_size
        if added or removed or new_size != self.pool_size:
            self._reload_pool(new.pool_size, added, removed)

    def _reload_compression(self) -> None:
        """A new compression setting, applied to the routes as nats-server does: a route that does not
        support compression or already uses the new mode is left alone; one that was off, or a new mode
        off or accept (which need a negotiation), is closed (dialled again: negotiated anew); s2_auto picks
        the level for the route's RTT; another level replaces the route's writer."""
        cfg = self.comp_config()
        new = cfg.mode
        for rc in list(self.conns):
            if not rc.registered or rc.compression in (cc.NOT_SUPPORTED, new, ""):
                continue
            if rc.compression == cc.OFF or new in (cc.OFF, cc.ACCEPT):
                rc.close("Client Closed")
            elif new == cc.S2_AUTO:
                rc.set_s2(cc.level_for_rtt(rc.rtt, cfg.thresholds()), cfg.thresholds())
            else:
                rc.set_s2(new, None)

    def _reload_routes(self, old: Any) -> None:
        srv = self.server
        new = self.opts
        # (URLs compared whole, credentials too, as nats-server: new credentials replace the route)
        old_keys = {parse_route_url(r): r for r in old.routes}
        new_keys = {parse_route_url(r): r for r in new.routes}
        removed = [k for k in old_keys if k not in new_keys]
        added = [k for k in new_keys if k not in old_keys]
        for key in removed:
            url = parse_route_url(old_keys[key])
            for rc in list(self.conns):
                if rc.url is not None and rc.url.key == url.key:
                    rc.close("Route Removed", no_reconnect=True)
                    srv.log.notice(f"Removed route {url.redacted()}")
        for key in added:
            url = parse_route_url(new_keys[key])
            self.solicit(url, EXPLICIT, 0, first=True)
            for acc in pinned_names(srv.opts):
                self.solicit(url, EXPLICIT, 0, first=True, account=acc)
        if removed or added:
            srv.log.notice("Reloaded: cluster routes")

    def _reload_permissions(self, old_perms: Any) -> None:
        """New cluster permissions (nats-server's reloadClusterPermissions): interest the import permission
        now allows is sent, what it now denies withdrawn, routed interest the export permission now denies
        dropped, and every route gets our INFO with the new permissions."""
        old = None if old_perms is None else PermChecker(old_perms)
        self._set_permissions(self.opts.permissions)
        new = self.route_perms
        info = cp.info_frame(ci.encode_info(self.route_info()))
        for rc in list(self.conns):
            if rc.closed or not rc.registered:
                continue
            out = [info]
            for u in self._interest_of(rc):
                then = old is None or old.can_publish(u.subject)
                now = new is None or new.can_publish(u.subject)
                if now and not then:
                    out.append(frame_for(u, pinned=bool(rc.pinned_acc), lnoc=rc.lnoc, lnocu=rc.lnocu))
                elif then and not now:
                    out.append(frame_for(u._replace(weight=0), pinned=bool(rc.pinned_acc), lnoc=rc.lnoc,
                                         lnocu=rc.lnocu))
            if new is not None:
                rc.drop_interest(lambda _acc, subject: new.can_subscribe(subject))
            rc.send(b"".join(out))
        self.server.schedule_flush()

    def _reload_pool(self, new_ps: int, added: list[str], removed: list[str]) -> None:
        """Pinned accounts added or removed, or a new pool size (nats-server's reloadClusterPoolAndAccounts):
        the peers are told of the added accounts first; once they answered (at most 2 s) the dedicated routes
        of removed accounts are closed for good, a new pool size closes every pooled connection (the dialling
        sides form the pools again), and the configured routes are dialled for the new pools and accounts."""
        sent = self._announce_added(added) if added else 0
        if not sent:
            self._apply_pool(new_ps, added, removed)
            return
        self._acc_add_left = sent
        self._acc_add_done = done = asyncio.Event()

        async def wait_then_apply() -> None:
            try:
                await asyncio.wait_for(done.wait(), 2.0)
            except asyncio.TimeoutError:
                self.server.log.warn("Timed out waiting for confirmation from all routes regarding per-account "
                                     "routes changes")
            if self._acc_add_done is done:
                self._acc_add_done = None
                self._acc_add_reqid = ""
            if self.running:
                self._apply_pool(new_ps, added, removed)
        self._spawn(wait_then_apply())

    def _apply_pool(self, new_ps: int, added: list[str], removed: list[str]) -> None:
        for an in removed:
            for rc in list(self.pinned.get(an, {}).values()):
                rc.close("Route Removed", no_reconnect=True)
        old_size = self.pool_size
        new_size = DEFAULT_ROUTE_POOL_SIZE if new_ps == 0 else new_ps
        if new_size != old_size:
            for conns in list(self.pools.values()):
                for rc in list(conns):
                    if rc is not None:
                        rc.close("Route Removed")
        for an in removed:
            self.pinned.pop(an, None)
            self.transitioning.discard(an.encode("utf-8", "surrogateescape"))
        self._set_pool_size(new_ps)
        self._acc_idx.clear()
        if new_size == old_size:
            for an in removed:  # the account's interest on its pool connection again
                an_b = an.encode("utf-8", "surrogateescape")
                idx = self.pool_index(an_b) if self.pooling else 0
                frames = [frame_for(u) for u in self.local.snapshot(an_b) if self.can_import(u.subject)]
                for conns in self.pools.values():  # (a server without pooling had it all along)
                    rc = conns[idx] if idx < len(conns) else None
                    if frames and rc is not None and not rc.closed and not rc.no_pool:
                        rc.send(b"".join(frames))
        for r in self.opts.routes:
            url = parse_route_url(r)
            if new_size != old_size:
                self.solicit(url, EXPLICIT, 0, first=True)
            for an in added:
                if an in self.pinned:
                    self.solicit(url, EXPLICIT, 0, first=True, account=an)
        self.server.schedule_flush()


def check_reload(server: Any, new_opts: Any) -> None:
    """What nats-server refuses to reload in a cluster block, with its errors: its host and port (so
    clustering cannot be turned on or off by a reload either), an advertise address that does not parse,
    and a pinned account that does not exist; route URLs that do not parse. ValueError: reload refused."""
    old, new = server.opts.cluster, new_opts.cluster
    if old.host != new.host:
        raise ValueError(f"config reload not supported for cluster host: old={old.host}, new={new.host}")
    if old.port != new.port:
        raise ValueError(f"config reload not supported for cluster port: old={old.port}, new={new.port}")
    if new.advertise:
        from rillet.config.builder_base import split_host_port
        try:
            _, p = split_host_port(new.advertise)
            if p:
                int(p)
        except ValueError as e:
            raise ValueError(f"invalid Cluster.Advertise value of {new.advertise}, err={e}") from None
    cl = server.cluster
    if cl is None:
        return
    for r in new.routes:
        parse_route_url(r)
    new_names = {a.name if hasattr(a, "name") else a for a in (getattr(new_opts, "accounts", None) or ())}
    for an in pinned_names(new_opts):
        if an in cl.pinned_config:
            continue
        known = an in server.accounts or an in new_names or (an == "$SYS" and not new_opts.no_system_account)
        if not known and server.operator is not None:
            known = server.operator.lookup_account(an) is not None
        if not known:
            raise ValueError(f'unable to add account "{an}" to the list of dedicated routes: account missing')
