"""JetStream on a server: enablement, per-account state, the ``$JS.API`` listener, usage and /jsz.

Layout on disk: ``<store_dir>/jetstream/<account>/streams/<stream>/`` holds ``meta.json`` (config and
creation time) and the stream's store (with its consumers' state under ``obs/``).
"""
from __future__ import annotations

import asyncio
import errno
import os
import time
from typing import TYPE_CHECKING, Any

from rillet import JS_API_LEVEL as API_LEVEL  # nats-server 2.15: 5
from rillet.gocompat.gotime import format_time
from rillet.durable import make_dirs_durable

if TYPE_CHECKING:
    from rillet.jetstream.api.router import ApiRouter
    from rillet.jetstream.cluster.peers import PeerRegistry
    from rillet.jetstream.seams import ApiRoute, ServerServices
    from rillet.jetstream.stream import Stream
    from rillet.server.accounts import Account

# A server started with JetStream and no stream loads none of the stream, consumer, store and API machinery
# (msgspec with it, ~4 MB of an idle server's memory, issue 20): the API router is made by the first $JS.API
# request (JSAccount.router), a stream's modules with the first stream opened (open_stream), the limits
# structs when first read.



_RETENTION: Any = None  # rillet.jetstream.retention: loaded with the first interest stream's message, not by an
# idle server (it loads the store package, msgspec with it: issue 20's idle RSS), then held (not per message)


def _load_retention() -> Any:
    global _RETENTION
    from rillet.jetstream import retention
    _RETENTION = retention
    return retention

class JSAccount:
    """One account's JetStream: its streams, its API listener and its limits."""

    def __init__(self, js: "JetStream", account: "Account", limits: Any = None) -> None:
        self.js = js
        self.account = account
        self.ic = js.server.internal_client(account, f"jetstream-{account.name}")
        self.streams: dict[str, Stream] = {}
        self.dir = os.path.join(js.store_dir, account.name, "streams")
        self.api_total = 0
        self.api_errors = 0
        # None: no limits (AccountLimits() when read, see the property)
        self._limits = limits
        # account storage caps checked on every publish (only when the account has them)
        self.limited = limits is not None and (limits.max_memory >= 0 or limits.max_storage >= 0)
        # "R1" when the limits are an account JWT's tiered_limits (reported per tier, as nats-server)
        self.tier = ""
        self._api_subs: list[Any] = []
        self._router: ApiRouter | None = None

    @property
    def limits(self) -> Any:
        """The account's JetStream limits (``rillet.jetstream.configtypes.AccountLimits``)."""
        lim = self._limits
        if lim is None:
            from rillet.jetstream.configtypes import AccountLimits
            lim = self._limits = AccountLimits()
        return lim

    @limits.setter
    def limits(self, lim: Any) -> None:
        self._limits = lim

    @property
    def router(self) -> "ApiRouter":
        """The account's ``$JS.API`` router, made when first needed (the first API request, a direct get)."""
        r = self._router
        if r is None:
            from rillet.jetstream.api.router import ApiRouter
            r = self._router = ApiRouter(self)
        return r

    @router.setter
    def router(self, r: "ApiRouter") -> None:
        self._router = r

    def start(self) -> None:
        from rillet.jetstream.api.endpoints import subscription_patterns
        make_dirs_durable(self.dir)  # (its entries survive a power cut: the account's streams are found again)
        # the endpoints' subjects, from the table the router's handlers are checked against when it is made
        for p in self.api_prefixes():
            for pattern in subscription_patterns(self.js.cluster is not None):
                self._api_subs.append(self.ic.subscribe(f"{p}.{pattern}", self._on_api_request))
        self.add_domain_mappings()
        self._recover()

    def _on_api_request(self, sub: Any, client: Any, subject: bytes, reply: bytes | None, hdr: int,
                        msg: bytes) -> None:
        r = self._router
        if r is None:
            js = self.js
            if not js.api_modules_loaded():
                # the first requests: the API's modules come in over several loop passes, the requests wait
                # in the API queue meanwhile (held: see JetStream.api_modules_loaded) and are served in order
                from rillet.jetstream.api.queue import is_info
                js.api_queue.submit(is_info(subject), self._serve_first, (subject, reply, hdr, bytes(msg)),
                                    client)
                return
            r = self._make_router(reply)
            if r is None:
                return
        r.on_request(sub, client, subject, reply, hdr, msg)

    def _make_router(self, reply: bytes | None) -> "ApiRouter | None":
        try:
            return self.router
        except Exception as e:
            # an API module that fails to import or register its endpoints (a broken install): logged,
            # and the request answered with the error rather than left to time out (the next request
            # tries again)
            self.js.log.error(f"JetStream API unavailable: {e!r}")
            if reply:
                self.ic.publish(reply, None, _api_unavailable(e))
            return None

    def _serve_first(self, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        """A request that arrived while the API's modules were loading, served from the API queue (where it
        would have gone anyway: ``ApiRouter.on_request`` queues what it cannot serve at once)."""
        r = self._router if self._router is not None else self._make_router(reply)
        if r is not None:
            r.serve(subject, reply, hdr, msg)

    def add_domain_mappings(self) -> None:
        """With a JetStream domain, the account maps ``$JS.<domain>.API.$KV.>`` to ``$KV.>`` and
        ``$JS.<domain>.API.$OBJ.>`` to ``$OBJ.>``, as nats-server's JetStream mapping table does, so that a
        KV or object store put reaches the bucket through the domain prefix (a KV mirror's writes go to its
        origin that way, through a leaf node). The API's own endpoints under the domain prefix are
        subscribed directly (``api_prefixes``). Mappings the account already has for these sources are
        kept; called again after the account's mappings were set anew (reload, JWT update)."""
        dom = self.js.domain
        if not dom:
            return
        from rillet.subjects.mapping import parse_mappings
        acc = self.account
        have = {m.src for m in acc.mappings}
        for kind in ("$KV", "$OBJ"):
            src = f"$JS.{dom}.API.{kind}.>"
            if src not in have:
                acc.mappings = acc.mappings + parse_mappings({src: f"{kind}.>"}, self.js.server.opts.cluster.name)

    def api_prefixes(self) -> list[str]:
        prefixes = ["$JS.API"]
        if self.js.domain:
            prefixes.append(f"$JS.{self.js.domain}.API")
        return prefixes

    def _recover(self) -> None:
        """Load every stream (and its consumers) found on disk."""
        if self.js.cluster is not None:
            return  # clustered: the streams come from the meta group's assignments
        for name in sorted(os.listdir(self.dir)):
            sdir = os.path.join(self.dir, name)
            meta = os.path.join(sdir, "meta.json")
            if not os.path.isfile(meta):
                continue
            import json
            from rillet.cipher import CipherError
            try:
                from rillet.jetstream import metafile  # (sealed under jetstream { key })
                m = json.loads(metafile.read(meta, metafile.stream_keys(self.js, self.account.name),
                                             metafile.stream_context(name)))
                from rillet.jetstream.api.common import stream_config_from_dict
                cfg = stream_config_from_dict(m["config"])
                if cfg.storage == "memory":
                    continue  # (written by an older Rillet: nats-server restores no memory stream)
                stream = self.open_stream(cfg, m.get("created") or format_time(time.time_ns()), write_meta=False)
                from rillet.jetstream.consumer.engine import recover_consumers
                recover_consumers(stream)
                self.js.log.notice(f"  Restored {stream.store.state().msgs:,} messages for stream "
                                   f"'{self.account.name} > {name}'")
            except CipherError as e:
                # a wrong key (or a key missing): as nats-server, the stream is skipped, its files untouched
                self.js.log.warn(f"  Error decrypting our stream metafile: {e}")
            except Exception as e:
                self.js.log.error(f"  Error recovering stream '{self.account.name} > {name}': {e}")
        # mirrors and sources start once every stream (their origins included) is back
        for stream in self.streams.values():
            if stream.cfg.mirror is not None or stream.cfg.sources:
                from rillet.jetstream.sources import attach_sources
                attach_sources(stream)

    def stream_dir(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def open_stream(self, cfg: Any, created: str, write_meta: bool = True) -> "Stream":
        from rillet.jetstream.storeopen import open_store
        from rillet.jetstream.stream import Stream
        sdir = self.stream_dir(cfg.name)
        if cfg.storage != "memory":
            make_dirs_durable(sdir)
        store = open_store(cfg, sdir, self.js)
        stream = Stream(self, cfg, created, store)
        if write_meta:
            self.write_meta(stream)
        self.streams[cfg.name] = stream
        stream.start()
        return stream

    def write_meta(self, stream: "Stream") -> None:
        self.write_meta_of(stream.cfg, stream.created)

    def write_meta_of(self, cfg: Any, created: str) -> None:
        """The stream's meta.json (config and creation time), written and synced: blocking file I/O (the
        API's stream create calls it from a worker thread, before the stream opens). A memory stream has
        nothing on disk and is not restored at a restart, as with nats-server."""
        if cfg.storage == "memory":
            return
        import json
        from rillet.jetstream import metafile
        from rillet.jetstream.api.common import encode_config
        sdir = self.stream_dir(cfg.name)
        make_dirs_durable(sdir)
        # written and synced, the rename too; sealed under jetstream { key } (rillet.jetstream.metafile)
        metafile.write(os.path.join(sdir, "meta.json"),
                       json.dumps({"config": json.loads(encode_config(cfg)), "created": created}).encode(),
                       metafile.stream_keys(self.js, self.account.name), metafile.stream_context(cfg.name))

    def delete_stream(self, stream: "Stream") -> None:
        self.streams.pop(stream.name, None)
        stream.stop(delete=True)
        import shutil  # (with bz2, lzma, zlib: not loaded by an idle server)
        shutil.rmtree(self.stream_dir(stream.name), ignore_errors=True)

    def after_stream_msg(self, stream: "Stream", seq: int, subject: str) -> None:
        """Hook after a message is stored (interest retention with no interested consumer drops it)."""
        if stream.cfg.retention == "interest":
            r = _RETENTION
            if r is None:
                r = _load_retention()
            r.on_new_msg(stream, seq, subject)

    def over_limit(self, storage: str, size: int) -> bool:
        """Would storing ``size`` more bytes of this storage kind exceed the account's cap?"""
        cap = self.limits.max_memory if storage == "memory" else self.limits.max_storage
        if cap < 0:
            return False
        used = 0
        for s in self.streams.values():
            if s.cfg.storage == storage:
                used += s.store.state().bytes
        return used + size > cap

    def usage(self) -> tuple[int, int, int, int]:
        """(memory bytes, storage bytes, streams, consumers)."""
        mem = sto = cons = 0
        for s in self.streams.values():
            b = s.store.state().bytes
            if s.cfg.storage == "memory":
                mem += b
            else:
                sto += b
            cons += len(s.consumers)
        return mem, sto, len(self.streams), cons

    def stop(self) -> None:
        for sub in self._api_subs:
            self.ic.remove_sub(sub)
        for s in list(self.streams.values()):
            s.stop()
        self.streams.clear()


class JetStream:
    """The server's JetStream subsystem (``server.jetstream``)."""

    def __init__(self, server: "ServerServices", clustered: bool = False) -> None:
        """``clustered``: the server has a cluster port (the meta group and replicated streams)."""
        self.server = server
        self.clustered = clustered
        self.log = server.log
        o = server.opts.jetstream
        if o.store_dir:
            base = o.store_dir
        else:
            import tempfile
            base = os.path.join(tempfile.gettempdir(), "nats")
        self.store_dir = os.path.abspath(os.path.join(base, "jetstream"))
        self.domain = o.domain
        self.sync_interval = o.sync_interval
        self.sync_always = o.sync_interval == "always"
        self.max_memory = o.max_memory_store
        self.max_store = o.max_file_store
        # jetstream { limits { ... } }: stream/consumer config checks, batch publishing (rillet.config gives a
        # dict, its keys checked): ServerLimits when first read (server_limits)
        self._limits_conf: dict = o.extra.get("limits") or {}
        self._server_limits: Any = None
        # jetstream { strict: false } (nats-server 2.12+): unknown fields in create/update requests tolerated
        self.strict = o.extra.get("strict") is not False
        self.accounts: dict[str, JSAccount] = {}
        self._disabled: dict[str, Any] = {}  # accounts without JetStream: rillet.jetstream.disabled.NotEnabled
        self.loop: asyncio.AbstractEventLoop = server.loop
        self._sync_task: asyncio.Task | None = None
        self.started = 0.0
        # clustered JetStream (rillet.jetstream.cluster.meta.JetStreamCluster), with a cluster port
        self.cluster: Any = None
        # who answers a $JS.API request (rillet.jetstream.api.routing): None on a single server (here), the
        # meta layer's MetaApi in a cluster
        self.api_route: ApiRoute | None = None
        # the cluster's servers, by peer id (rillet.jetstream.cluster.peers.PeerRegistry): the streams layer
        # names peers with it
        self.peer_registry: PeerRegistry | None = None
        self._advisories: Any = None  # (made when first sent: advisories)
        from rillet.jetstream.api.queue import ApiQueue
        # $JS.API requests: bounded queues (jetstream { request_queue_limit, info_queue_limit }), see apiqueue
        self.api_queue = ApiQueue(self, o.extra.get("request_queue_limit", 0), o.extra.get("info_queue_limit", 0))
        self._api_loading: Any = None  # the API's modules being imported (rillet.jetstream.api.staged)

    def api_modules_loaded(self) -> bool:
        """Whether the API router's modules are imported (an account makes its router at once then). If not,
        their import is started: a few modules per loop pass (imported at once they held the loop 70-170 ms,
        issue 20), with the API queue held until it is done."""
        from rillet.jetstream.api.endpoints import ROUTER_MODULES
        if self._api_loading is None:
            import sys
            if all(m in sys.modules for m in ROUTER_MODULES):
                return True
            from rillet.jetstream.api.staged import StagedImport
            self.api_queue.hold()
            self._api_loading = StagedImport(self.loop, list(ROUTER_MODULES), self._api_modules_done)
            return False
        return self._api_loading.finished

    def _api_modules_done(self) -> None:
        from rillet.server.gcpolicy import policy
        policy.freeze_loaded()  # (the server command's collector pacing: the new modules are not walked again)
        self.api_queue.release()

    @property
    def advisories(self) -> Any:
        """The advisories this server sends (``rillet.jetstream.advisories.Advisories``)."""
        adv = self._advisories
        if adv is None:
            from rillet.jetstream.advisories import Advisories
            adv = self._advisories = Advisories(self)
        return adv

    @property
    def server_limits(self) -> Any:
        """``jetstream { limits }`` as ``rillet.jetstream.configtypes.ServerLimits``."""
        lim = self._server_limits
        if lim is None:
            from rillet.jetstream.configtypes import ServerLimits
            lim = self._server_limits = ServerLimits(**self._limits_conf)
        return lim

    @server_limits.setter
    def server_limits(self, lim: Any) -> None:
        self._server_limits = lim

    def is_enabled(self) -> bool:
        return True

    async def start(self) -> None:
        self.loop = self.server.loop
        log = self.log
        make_dirs_durable(self.store_dir)
        # the store directory must be writable (a permission error refuses to start, as nats-server); a full
        # disk does not: the server starts, serves what is stored and refuses new writes with 503/10023
        probe = os.path.join(self.store_dir, ".rillet-write-test")
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
            os.unlink(probe)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
            log.warn(f"JetStream store directory {self.store_dir!r} is full: new messages will be refused")
        n_io = self.server.opts.jetstream.extra.get("max_concurrent_io", 0)
        if n_io:  # (jetstream { max_concurrent_io }: rillet.jetstream.diskio)
            from rillet.jetstream import diskio
            diskio.limit(self.loop, n_io)
        log.notice("Starting JetStream")
        log.notice("---------------- JETSTREAM ----------------")
        log.notice(f"  Max Memory:      {_human(self.max_memory)}")
        log.notice(f"  Max Storage:     {_human(self.max_store)}")
        log.notice(f"  Store Directory: \"{self.store_dir}\"")
        if self.domain:
            log.notice(f"  Domain:          {self.domain}")
        log.notice(f"  API Level:       {API_LEVEL}")
        log.notice("-------------------------------------------")
        self.started = time.time()
        if self.clustered:
            from rillet.jetstream.cluster.meta import JetStreamCluster
            self.cluster = JetStreamCluster(self)  # (the accounts below see it: no single-server recovery)
            self.api_route = self.cluster.api
            self.peer_registry = self.cluster.registry
        # accounts that configure JetStream get it (with their limits); with none, the global account does
        configured = account_js_config(self.server.opts.accounts)
        operator = self.server.operator
        if operator is not None:
            operator.jetstream_started(self)  # accounts whose JWT gives JetStream limits
        elif configured:
            for name, limits in configured.items():
                self.enable_account(self.server.lookup_account(name), limits)
        else:
            self.enable_account(self.server.global_account)
        for acc in list(self.server.accounts.values()):
            self.account_added(acc)
        if not self.sync_always and isinstance(self.sync_interval, (int, float)) and self.sync_interval > 0:
            self._sync_task = self.loop.create_task(self._periodic_sync())
        if self.cluster is not None:
            await self.cluster.start()

    def account_added(self, account: "Account") -> None:
        """An account without JetStream still gets the API: every request answers 10039 (as nats-server)."""
        if account.name not in self.accounts and account.name not in self._disabled:
            from rillet.jetstream.disabled import NotEnabled
            self._disabled[account.name] = NotEnabled(self, account)

    @staticmethod
    def account_limits(**limits: Any) -> Any:
        """An account's JetStream limits (the fields of ``rillet.jetstream.configtypes.AccountLimits``): what
        the server's operator mode makes of an account JWT's limits (the server knows JetStream only through
        its ``server.jetstream`` object, rillet/server/subsystems.py)."""
        from rillet.jetstream.configtypes import AccountLimits
        return AccountLimits(**limits)

    @staticmethod
    def configured_accounts(accounts: dict) -> dict[str, Any]:
        """{account name: limits} for the configured ``accounts`` whose ``jetstream`` entry enables JetStream
        (a configuration reload enables those it adds)."""
        return account_js_config(accounts)

    def enable_account(self, account: "Account", limits: Any = None) -> JSAccount:
        off = self._disabled.pop(account.name, None)
        if off is not None:
            off.close()
        jsa = self.accounts.get(account.name)
        if jsa is None:
            jsa = JSAccount(self, account, limits)
            self.accounts[account.name] = jsa
            jsa.start()
        return jsa

    async def _periodic_sync(self) -> None:
        while True:
            await asyncio.sleep(float(self.sync_interval))
            for jsa in list(self.accounts.values()):
                for s in list(jsa.streams.values()):
                    from rillet.jetstream.store.base import ErrSyncFailed  # (loaded with the stream)
                    try:
                        await self.loop.run_in_executor(None, s.store.sync)
                    except ErrSyncFailed as e:  # (what was written since the last sync may be lost: no more acks)
                        s.fail_store(str(e))
                    except Exception as e:
                        self.log.error(f"JetStream sync of stream '{s.name}' failed: {e}")

    def signal_pull_requests(self) -> int:
        """First thing at server shutdown: waiting pull requests of one-replica consumers are answered
        409 Server Shutdown (rillet.jetstream.shutdown)."""
        if not any(jsa.streams for jsa in self.accounts.values()):
            return 0  # (no consumer: nothing to load)
        from rillet.jetstream.shutdown import signal_pull_requests
        return signal_pull_requests(self)

    async def shutdown(self) -> None:
        if self._sync_task is not None:
            self._sync_task.cancel()
        if self.cluster is not None:
            await self.cluster.stop()
        for jsa in self.accounts.values():
            jsa.stop()
        self.log.notice("JetStream shutdown")

    # ---- monitoring -------------------------------------------------------------------------------

    def totals(self) -> dict[str, int]:
        mem = sto = streams = cons = msgs = byts = 0
        for jsa in self.accounts.values():
            m, s, n, c = jsa.usage()
            mem += m
            sto += s
            streams += n
            cons += c
            for st in jsa.streams.values():
                state = st.store.state()
                msgs += state.msgs
                byts += state.bytes
        return {"memory": mem, "storage": sto, "streams": streams, "consumers": cons, "messages": msgs,
                "bytes": byts}

    def config_dict(self) -> dict:
        d: dict[str, Any] = {"max_memory": self.max_memory, "max_storage": self.max_store,
                             "store_dir": self.store_dir, "sync_interval": _sync_ns(self.sync_interval)}
        if self.sync_always:
            d["sync_always"] = True
        if self.domain:
            d["domain"] = self.domain
        return d

    def stats_dict(self) -> dict:
        t = self.totals()
        total = sum(j.api_total for j in self.accounts.values())
        errs = sum(j.api_errors for j in self.accounts.values())
        return {"memory": t["memory"], "storage": t["storage"], "reserved_memory": 0, "reserved_storage": 0,
                "accounts": len(self.accounts), "ha_assets": 0, "api": {"level": API_LEVEL, "total": total,
                                                                        "errors": errs}}

    def healthz(self, o: dict) -> dict:
        """/healthz past the JetStream-enabled checks: a clustered server checks its meta group, streams
        and consumers (rillet.jetstream.cluster.meta); a single server has nothing more to check."""
        if self.cluster is not None:
            return self.cluster.mon.healthz(o)
        return {"status": "ok"}

    def statsz_section(self) -> dict | None:
        """The ``jetstream`` section of this server's statsz (the meta layer's, in a cluster; else None)."""
        return self.cluster.statsz_section() if self.cluster is not None else None

    def limits_dict(self) -> dict:
        from rillet.jetstream.api.codec import to_go
        return to_go(self.server_limits)

    def jsz(self, opts: dict) -> dict:
        t = self.totals()
        d = {"config": self.config_dict(), **self.stats_dict(), "streams": t["streams"],
             "consumers": t["consumers"], "messages": t["messages"], "bytes": t["bytes"]}
        if self.cluster is not None:
            d["meta_cluster"] = self.cluster.mon.jsz_meta()
        if opts.get("accounts") or opts.get("streams") or opts.get("consumers"):
            d["account_details"] = [self._account_detail(j, opts) for j in self.accounts.values()]
        if self.cluster is not None:  # (replicas, raft groups, streams led: rillet.jetstream.cluster.meta)
            self.cluster.mon.jsz_details(d, opts)
        return d

    def _account_detail(self, jsa: JSAccount, opts: dict) -> dict:
        mem, sto, n, c = jsa.usage()
        d: dict[str, Any] = {"name": jsa.account.name, "id": jsa.account.name, "memory": mem, "storage": sto,
                             "reserved_memory": 0, "reserved_storage": 0, "accounts": 1, "ha_assets": 0,
                             "api": {"level": API_LEVEL, "total": jsa.api_total, "errors": jsa.api_errors}}
        if opts.get("streams") or opts.get("consumers"):
            d["stream_detail"] = [self._stream_detail(s, opts) for s in jsa.streams.values()]
        return d

    @staticmethod
    def _stream_detail(s: Any, opts: dict) -> dict:
        """A stream of ``/jsz?streams=true`` as nats-server's StreamDetail: name, created, cluster (the
        leader: this server), config (``config=true``), state, mirror and sources; with ``consumers=true``
        its ``consumer_detail`` (each consumer's info, its config only with ``config=true``)."""
        from rillet.jetstream.api.common import stream_info_dict
        info = stream_info_dict(s, include_config=bool(opts.get("config")))
        sd: dict[str, Any] = {"name": s.name, "created": info["created"], "cluster": {"leader": s.js.server.name}}
        if "config" in info:
            sd["config"] = info["config"]
        sd["state"] = info["state"]
        for k in ("mirror", "sources"):
            if k in info:
                sd[k] = info[k]
        if opts.get("consumers") and s.consumers:
            cons = []
            for name in sorted(s.consumers):
                ci = s.consumers[name].info()
                if not opts.get("config"):
                    ci = {k: v for k, v in ci.items() if k != "config"}
                cons.append(ci)
            sd["consumer_detail"] = cons
        return sd


def account_js_config(accounts: dict) -> dict[str, Any]:
    """{account name: AccountLimits} for the accounts whose configuration enables JetStream."""
    out: dict[str, Any] = {}
    for name, acc in (accounts or {}).items():
        if not isinstance(acc, dict) or "jetstream" not in acc:
            continue
        v = acc["jetstream"]
        if v in (False, "disabled", "false", "disable"):
            continue
        from rillet.jetstream.configtypes import AccountLimits
        lim = AccountLimits()
        if isinstance(v, dict):
            def num(*keys: str) -> int:
                for k in keys:
                    if k in v:
                        return int(v[k])
                return -1
            lim = AccountLimits(max_memory=num("max_mem", "max_memory"), max_storage=num("max_file", "max_store",
                                                                                       "max_storage"),
                                max_streams=num("max_streams"), max_consumers=num("max_consumers"),
                                max_ack_pending=num("max_ack_pending"),
                                memory_max_stream_bytes=num("memory_max_stream_bytes", "mem_max_stream_bytes"),
                                storage_max_stream_bytes=num("store_max_stream_bytes", "disk_max_stream_bytes"),
                                max_bytes_required=bool(v.get("max_stream_bytes", v.get("max_bytes_required",
                                                                                         False))))
        out[name] = lim
    return out


def _api_unavailable(e: Exception) -> bytes:
    """The answer to an API request when the API's modules failed to load: nats-server's general error
    (10000), written here as the JetStream error modules may be what failed."""
    import json
    return json.dumps({"error": {"code": 500, "err_code": 10000,
                                 "description": f"jetstream api unavailable: {e!r}"}}).encode()


def _human(n: int) -> str:
    if n is None or n < 0:
        return "-1"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024:
            return f"{n:.2f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return f"{n:.2f} PB"


def _sync_ns(v: Any) -> int:
    if v == "always":
        return 0
    return int(float(v) * 1e9)
