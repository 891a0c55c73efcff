"""The typed seams of JetStream: what it needs from the layers around it, as ``typing.Protocol``s.

Each protocol is the whole of what the other side may rely on; an implementation is any class with these
members (checked statically: ``tests/typing/check_seams.py`` assigns every implementation to its protocol and
``.ci/run`` runs ``mypy --strict`` over it and these modules).

* ``ServerServices``: what JetStream uses of the server it runs in (names, options, the loop, accounts,
  internal clients, output flushing). Implemented by ``rillet.server.server.Server``.
* ``StreamStore`` / ``ConsumerStore``: a stream's message store and a consumer's state store, as the stream,
  its consumers, the API and the replicated layer call them. Implemented by the memory store and the file
  store (``rillet.jetstream.store``) in both lanes.
* ``ReplicatedLog``: the log every change to a stream or a consumer goes through (``rillet.jetstream.log``
  explains the contract). Implemented by ``SingleNodeLog`` (R1), ``DeferredLog`` (tests) and the RAFT-backed
  log of a clustered group.
* ``StreamReplication``: what a replicated stream's replica tells its ``Stream`` (``Stream.replicate``: the
  cluster block of its info, the consumer count of its assignment). Implemented by
  ``rillet.jetstream.cluster.streams.StreamReplica``.
* ``ApiRoute``: who answers a ``$JS.API`` request (``rillet.jetstream.api.routing``). Implemented by the
  meta layer's ``rillet.jetstream.api.cluster.MetaApi`` in a cluster (a single server answers everything).
* The other way, what the server and its monitoring use of JetStream, is
  ``rillet.server.subsystems.JetStreamService`` (``rillet.server`` imports nothing of ``rillet.jetstream``).
* ``RaftTransport``: how a server's RAFT groups send and receive their messages. Implemented by
  ``rillet.jetstream.cluster.transport.RaftTransport`` (over the routes, in the system account).
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

if TYPE_CHECKING:
    from rillet.config.options import Options
    from rillet.jetstream.api.router import ApiRouter
    from rillet.jetstream.log import Completion, Entry
    from rillet.jetstream.store.base import ConsumerState, StoreConfig, StoredMsg, StreamState
    from rillet.server.accounts import Account
    from rillet.server.client import InternalClient
    from rillet.server.logging import Logger
    from rillet.server.operator import OperatorMode
    from rillet.server.sysacc import SystemAccount

__all__ = ["ApiRoute", "ConsumerStore", "RaftTransport", "ReplicatedLog", "ServerServices", "StreamReplication",
           "StreamStore"]


class ServerServices(Protocol):
    """The server as JetStream sees it."""

    name: str
    server_id: str
    opts: Options
    log: Logger
    accounts: dict[str, Account]
    global_account: Account
    system_account: Account | None
    sysacc: SystemAccount  # the system account's services ($SYS events, advisories)
    operator: OperatorMode | None  # operator (JWT) mode

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def lookup_account(self, name: str) -> Account: ...

    def internal_client(self, account: Account | None = None, name: str = "internal") -> InternalClient: ...

    def schedule_flush(self) -> None:
        """Flush the connections written to outside a read cycle (soon, once)."""

    def flush_clients(self) -> None:
        """Flush the connections written to, now."""


class ConsumerStore(Protocol):
    """A consumer's durable state (delivered and ack floors, pending and redelivered maps)."""

    def state(self) -> ConsumerState | None: ...

    def stop(self) -> None: ...

    def delete(self) -> None: ...


class StreamStore(Protocol):
    """A stream's messages: appends at the next sequence, reads by sequence and subject, limits."""

    def store_msg(self, subject: str, hdr: bytes, data: bytes, ts: int | None = None,
                  ttl: float = 0) -> tuple[int, int]: ...

    def store_raw(self, seq: int, subject: str, hdr: bytes, data: bytes, ts: int, ttl: float = 0) -> None: ...

    def store_batch(self, batch: list[tuple[str, bytes, bytes, int, float]]) -> list[tuple[int, int]]: ...

    def skip_msgs(self, seq: int, n: int) -> None: ...

    def remove_msg(self, seq: int, erase: bool = False) -> bool: ...

    def purge(self, subject: str | None = None, seq: int = 0, keep: int = 0) -> int: ...

    def compact(self, seq: int) -> int: ...

    def expire_msgs(self, now_ns: int | None = None) -> int: ...

    def next_expiry(self) -> int | None: ...

    def update_config(self, cfg: StoreConfig, now_ns: int | None = None) -> None: ...

    def load_msg(self, seq: int) -> StoredMsg | None: ...

    def load_run(self, seq: int, n: int, max_bytes: int, subject: str | None = None) -> list[StoredMsg]: ...

    def load_next_msg(self, filter: str, start_seq: int, wildcard: bool | None = None) -> StoredMsg | None: ...

    def load_next_msg_multi(self, filters: list[str], start_seq: int) -> StoredMsg | None: ...

    def load_last_msg(self, filter: str) -> StoredMsg | None: ...

    def load_prev_msg(self, start_seq: int, filter: str = "") -> StoredMsg | None: ...

    def subject_for_seq(self, seq: int) -> str | None: ...

    def last_seq_for_subject(self, subject: str) -> int: ...

    def get_seq_from_time(self, ts_ns: int) -> int: ...

    def num_pending(self, start_seq: int, filter: str = "",
                    last_per_subject: bool = False) -> tuple[int, int]: ...

    def subjects_totals(self, filter: str | None = ">") -> dict[str, int]: ...

    def multi_last_seqs(self, filters: list[str], max_seq: int = 0, max_allowed: int = 0) -> list[int]: ...

    def state(self) -> StreamState: ...

    @property
    def last_seq(self) -> int: ...

    def read_begin(self) -> None:
        """A run of reads in sequence order starts (a consumer's pass): the store may read ahead."""

    def read_done(self) -> None: ...

    def register_remove_callback(self, cb: Callable[[int, str, int], None] | None) -> None: ...

    def register_marker_callback(self, cb: Callable[[str, bytes], None] | None) -> None: ...

    def consumer_store(self, name: str) -> ConsumerStore: ...

    def consumer_names(self) -> list[str]: ...

    def snapshot_stream(self, include_consumers: bool = True) -> Iterator[bytes]: ...

    def sync(self) -> None: ...

    def stop(self) -> None: ...

    def delete(self) -> None: ...


class ReplicatedLog(Protocol):
    """The log seam (``rillet.jetstream.log`` has the contract)."""

    on_leader_change: Callable[[bool], None] | None

    @property
    def index(self) -> int:
        """The last proposed index."""

    @property
    def term(self) -> int: ...

    @property
    def is_leader(self) -> bool: ...

    def propose(self, entry: Entry, on_applied: Completion | None = None) -> None: ...


OnRaftMessage = Callable[[str, str, bytes], None]


class RaftTransport(Protocol):
    """RAFT group messages of one server: ``on_message(group, from_peer, data)`` for each one received."""

    peer: str

    @property
    def groups(self) -> list[str]: ...

    def join(self, group: str, on_message: OnRaftMessage | None = None) -> None: ...

    def leave(self, group: str) -> None: ...

    def send(self, group: str, peer: str, data: bytes) -> None: ...

    def broadcast(self, group: str, data: bytes) -> None: ...

    def close(self) -> None: ...


class ApiRoute(Protocol):
    """The routing decision of the ``$JS.API`` in a cluster, taken before any handler runs."""

    def answer_here(self, router: ApiRouter, key: str, args: list[str], reply: bytes | None, hdr: bytes,
                    body: bytes) -> bool:
        """True when this server's handler answers the request; False when the routing answered it, or
        leaves it to another server."""


class StreamReplication(Protocol):
    """A replicated stream as its ``Stream`` sees it (``Stream.replication``)."""

    def cluster_info(self) -> dict[str, Any]:
        """The ``cluster`` block of the stream's (and its consumers') info: name, RAFT group, leader,
        replicas."""

    def consumer_count(self) -> int:
        """The stream's consumers as the meta layer's assignment has them, cluster-wide (0: unknown)."""

    def refetches_damage(self, seq: int = 0) -> bool:
        """Damaged records are fetched again from another replica (``refetch_damaged``): a reader waits for them
        (``seq``, when given: that one is; not one known to be damaged on every replica)."""

    def refetch_damaged(self) -> bool:
        """The store found damaged records while running (``state().lost``): fetch them again from a healthy
        replica (True), or False when there is none to fetch from (one replica: the stream reports them)."""
