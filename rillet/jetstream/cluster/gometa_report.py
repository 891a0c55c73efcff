"""What the Go servers of a nats-server JetStream cluster learn of this server's JetStream (a member of their
meta group, gometa.py): the capability flags of its server info, and the statsz ``jetstream`` section their meta
leader places stream and consumer replicas by (``JetStreamReport``)."""
from __future__ import annotations

from typing import Any, Callable


# nats-server's ServerInfo "flags" (events.go ServerCapability): JetStream enabled, binary stream snapshots (what
# gostream decodes). Not the in-account NRG bit: this server's groups speak in the system account.
CAP_JETSTREAM = 1
CAP_BINARY_SNAPSHOT = 2
STATSZ_EARLY = (0.5, 2.0, 5.0)  # seconds after the first route: statsz sent at once, not at the 10 s tick


class JetStreamReport:
    """What a Go meta leader needs to place stream and consumer replicas on this server, as nats-server's own
    servers tell it (our code, after nats-server's events.go / jetstream_cluster.go):

    * the server info of every ``$SYS`` message (statsz, shutdown) says ``"jetstream": true`` and the capability
      ``flags`` (JetStream, binary stream snapshots), with the JetStream ``domain`` when configured: the Go
      servers take a statsz of another domain as no JetStream peer;
    * the statsz's ``jetstream`` section has ``config`` (``max_memory``/``max_storage``: the jetstream block's
      ``max_memory_store``/``max_file_store``, else nats-server's defaults of 75% of the memory and 1 TB) and
      ``stats`` (bytes stored by the replicas hosted here and the bytes their ``max_bytes`` reserve, by storage
      kind; the HA assets). A Go meta leader places nothing on a peer of its meta group until it has both
      (nats-server's ``nodeInfo.selectable``), and checks a stream's ``max_bytes`` against what is free;
    * the route INFO says ``"jetstream": true`` (and the domain).
    """

    def __init__(self, server: Any, member_of: Callable[[Any], Any]) -> None:
        self.server = server
        self._member_of = member_of  # (gometa.member_of: this server's member of the Go meta group, or None)

    @property
    def domain(self) -> str:
        return self.server.opts.jetstream.domain or ""

    def limits(self) -> tuple[int, int]:
        from rillet.jetstream.cluster.meta import _default_limits
        o = self.server.opts.jetstream
        dmem, dsto = _default_limits()
        return (o.max_memory_store if o.max_memory_store >= 0 else dmem,
                o.max_file_store if o.max_file_store >= 0 else dsto)

    def _replicas(self) -> list[Any]:
        m = self._member_of(self.server)
        return list(m.replicas.values()) if m is not None else []

    def usage(self) -> dict[str, int]:
        """Bytes stored and reserved by storage kind, the HA assets (groups of more than one peer; the meta
        group counts as one, as nats-server counts it) and the accounts with a replica here."""
        u = {"memory": 0, "storage": 0, "reserved_memory": 0, "reserved_storage": 0, "ha_assets": 1}
        accounts: set[str] = set()
        for r in self._replicas():
            a = getattr(r, "assignment", None)
            if not isinstance(a, dict):
                continue
            if len(((a.get("group") or {}).get("peers")) or ()) > 1:
                u["ha_assets"] += 1
            store = getattr(r, "store", None)
            if store is None:  # (a consumer replica)
                continue
            accounts.add(r.account)
            cfg = a.get("stream") or {}
            mem = cfg.get("storage") == "memory"
            u["memory" if mem else "storage"] += store.state().bytes
            mb = cfg.get("max_bytes")
            if isinstance(mb, int) and mb > 0:
                u["reserved_memory" if mem else "reserved_storage"] += mb
        m = self._member_of(self.server)
        solo = getattr(m, "solo", None) if m is not None else None
        if solo is not None:
            mem, sto, rmem, rsto, accs = solo.usage()
            u["memory"] += mem
            u["storage"] += sto
            u["reserved_memory"] += rmem
            u["reserved_storage"] += rsto
            accounts |= accs
        u["accounts"] = len(accounts)
        return u

    def section(self) -> dict[str, Any]:
        """The statsz ``jetstream`` section (nats-server's JetStreamVarz: config and stats)."""
        mem, sto = self.limits()
        o = self.server.opts.jetstream
        cfg: dict[str, Any] = {"max_memory": mem, "max_storage": sto, "store_dir": o.store_dir,
                               "sync_interval": 120_000_000_000, "compress_ok": True}
        if self.domain:
            cfg["domain"] = self.domain
        if o.unique_tag:
            cfg["unique_tag"] = o.unique_tag
        u = self.usage()
        stats = {"memory": u["memory"], "storage": u["storage"], "reserved_memory": u["reserved_memory"],
                 "reserved_storage": u["reserved_storage"], "accounts": u["accounts"], "ha_assets": u["ha_assets"],
                 "api": {"level": 0, "total": 0, "errors": 0}}
        return {"config": cfg, "stats": stats}

    def server_info(self, d: dict[str, Any]) -> None:
        """The fields of a ``$SYS`` message's server info that say so (``d`` updated)."""
        d["jetstream"] = True
        d["flags"] = CAP_JETSTREAM | CAP_BINARY_SNAPSHOT
        if self.domain:
            d["domain"] = self.domain

    def send_statsz(self) -> None:
        """A statsz now (the Go meta leader's view of this server's usage, after a replica came or went)."""
        sa = getattr(self.server, "sysacc", None)
        if sa is not None and sa.client is not None and not self.server.shutting_down:
            sa.publish_statsz(force=True)
