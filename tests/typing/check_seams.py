"""Static conformance of JetStream's seams (``rillet.jetstream.seams``): every implementation assigned to its
protocol. Not a test module: ``mypy --strict`` checks it (``.ci/run``, tests/test_typing.py); a member missing
or with another signature in an implementation is a type error here."""
from __future__ import annotations

from rillet.jetstream.api.cluster import MetaApi
from rillet.jetstream.cluster.log import RaftLog, SubLog
from rillet.jetstream.cluster.streams import StreamReplica
from rillet.jetstream.cluster.transport import RaftTransport as RouteRaftTransport
from rillet.jetstream.log import DeferredLog, SingleNodeLog
from rillet.jetstream.manager import JetStream
from rillet.jetstream.seams import (ApiRoute, ConsumerStore, RaftTransport, ReplicatedLog, ServerServices,
                                   StreamReplication, StreamStore)
from rillet.jetstream.store._query import StoreIndex
from rillet.jetstream.store.filestore import FileConsumerStore, FileStore
from rillet.jetstream.store.memstore import MemConsumerStore, MemStore
from rillet.server.server import Server
from rillet.server.subsystems import JetStreamService


def server(s: Server) -> ServerServices:
    return s


def stores(m: MemStore, f: FileStore) -> list[StreamStore]:
    return [m, f]


def store_indexes(m: MemStore, f: FileStore) -> list[StoreIndex]:
    # the shared queries' interface (rillet/jetstream/store/_query.py), which both stores implement
    return [m, f]


def consumer_stores(m: MemConsumerStore, f: FileConsumerStore) -> list[ConsumerStore]:
    return [m, f]


def logs(a: SingleNodeLog, b: DeferredLog, c: RaftLog, d: SubLog) -> list[ReplicatedLog]:
    return [a, b, c, d]


def transport(t: RouteRaftTransport) -> RaftTransport:
    return t


def api_route(m: MetaApi) -> ApiRoute:
    return m


def stream_replication(r: StreamReplica) -> StreamReplication:
    return r


def jetstream_service(j: JetStream) -> JetStreamService:
    return j
