"""The JSON of INFO and CONNECT between servers, and the small naming rules of the cluster protocols.

``Info`` is the one INFO document nats-server sends to clients, routes, gateways and leaf nodes (route,
gateway and leaf fields are all optional). ``RouteConnect`` is the CONNECT of a route or a gateway (the
same document in nats-server; a gateway fills ``gateway``), ``LeafConnect`` the CONNECT of a leaf node.

Decoding tolerates unknown fields and refuses wrong types, as Go's encoding/json does; a document that
does not decode raises ``ProtocolError`` with no -ERR (nats-server closes with Protocol Violation).
Encoding writes the fields in nats-server's order and leaves out the empty ones that nats-server leaves
out (``omitempty``), so the bytes match what a Go server would send.

Also here: the route pool index of an account, the gateway reply prefix and hashes, the leaf node loop
detection subject, gateway command codes and gossip modes, and the error texts servers exchange.
"""
from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from rillet.protocol.parser import ProtocolError

__all__ = [
    "SubjectPermission", "Info", "RouteConnect", "LeafConnect",
    "decode_info", "encode_info", "decode_route_connect", "encode_route_connect",
    "decode_leaf_connect", "encode_leaf_connect",
    "GATEWAY_CMD_GOSSIP", "GATEWAY_CMD_ALL_SUBS_START", "GATEWAY_CMD_ALL_SUBS_COMPLETE",
    "GOSSIP_DEFAULT", "GOSSIP_DISABLED", "GOSSIP_OVERRIDE", "SERVER_PROTO", "RILLET_RAFT_OPS",
    "route_pool_index", "gateway_hash", "gateway_old_hash", "GW_REPLY_PREFIX", "OLD_GW_REPLY_PREFIX",
    "gateway_reply", "gateway_reply_origin", "LDS_PREFIX", "is_loop_detection_subject", "leaf_loop_error",
]

# Server-to-server protocol level nats-server 2.15 announces ("proto" in route/gateway INFO, "protocol"
# in leaf CONNECT): 3 = message tracing understood.
SERVER_PROTO = 3

# RAFT log entry ops this Rillet build decodes beyond those every Rillet build does ("rillet_raft_ops" in its route
# INFO; nats-server and older Rillet builds send none): 48 = several entries in one (rillet.jetstream.cluster.log
# MULTI); 49 = a consumer's C_DELIVERED for a run of messages (a list of stream sequences, log.DELIVERED_RUNS);
# 50 = a LOST entry in a consumer's group (log.CONSUMER_LOST); 51 = a consumer's C_WAITING entry (its leader's
# waiting pull requests, log.PENDING_PULLS).
# A group's leader uses such an op only when every member's route said so (RaftGroup.members_decode).
RILLET_RAFT_OPS = (48, 49, 50, 51)

GATEWAY_CMD_GOSSIP = 1
GATEWAY_CMD_ALL_SUBS_START = 2
GATEWAY_CMD_ALL_SUBS_COMPLETE = 3

GOSSIP_DEFAULT = 0
GOSSIP_DISABLED = 1
GOSSIP_OVERRIDE = 2


class SubjectPermission(msgspec.Struct, omit_defaults=True):
    allow: list[str] | None = None
    deny: list[str] | None = None


class Info(msgspec.Struct, kw_only=True):
    server_id: str = ""
    server_name: str = ""
    version: str = ""
    proto: int = 0
    git_commit: str = ""
    go: str = ""
    host: str = ""
    port: int = 0
    headers: bool = False
    auth_required: bool = False
    tls_required: bool = False
    tls_verify: bool = False
    tls_available: bool = False
    max_payload: int = 0
    jetstream: bool = False
    ip: str = ""
    client_id: int = 0
    client_ip: str = ""
    nonce: str = ""
    cluster: str = ""
    cluster_dynamic: bool = False
    domain: str = ""
    connect_urls: list[str] | None = None
    ws_connect_urls: list[str] | None = None
    ldm: bool = False
    compression: str = ""
    connect_info: bool = False
    remote_account: str = ""
    acc_is_sys: bool = False
    api_lvl: int = 0
    # routes
    import_: SubjectPermission | None = msgspec.field(default=None, name="import")
    export: SubjectPermission | None = None
    lnoc: bool = False
    lnocu: bool = False
    ln: bool = False  # sent by nats-server 2.15.1 on routes (next to lnoc/lnocu); kept as received
    info_on_connect: bool = False
    route_pool_size: int = 0
    route_pool_idx: int = 0
    route_account: str = ""
    route_acc_add_reqid: str = ""
    gossip_mode: int = 0
    # gateways
    gateway: str = ""
    gateway_urls: list[str] | None = None
    gateway_url: str = ""
    gateway_cmd: int = 0
    gateway_cmd_payload: bytes | None = None  # base64 in JSON, as Go writes a []byte
    gateway_nrp: bool = False
    gateway_iom: bool = False
    # leaf nodes
    leafnode_urls: list[str] | None = None
    xkey: str = ""
    # Rillet's own (route INFO; Go's JSON decoding ignores it): the RAFT entry ops it decodes (RILLET_RAFT_OPS)
    rillet_raft_ops: list[int] | None = None


# fields nats-server writes even when empty (no omitempty); the others are left out when empty
_INFO_ALWAYS = frozenset(("server_id", "server_name", "version", "proto", "go", "host", "port", "headers",
                          "max_payload"))


class RouteConnect(msgspec.Struct, kw_only=True):
    """CONNECT on a route or a gateway (nats-server's connectInfo, plus what its client parse reads)."""
    echo: bool = False
    verbose: bool = False
    pedantic: bool = False
    user: str = ""
    password: str = msgspec.field(default="", name="pass")
    tls_required: bool = False
    headers: bool = False
    name: str = ""
    cluster: str = ""
    cluster_dynamic: bool = False
    lnoc: bool = False
    lnocu: bool = False
    gateway: str = ""
    # read from any CONNECT by nats-server: a token for cluster authorization, and "lang", which only a
    # client sends (how a client that dialled the route port is recognised)
    auth_token: str = ""
    lang: str = ""


_ROUTE_CONNECT_ALWAYS = frozenset(("echo", "verbose", "pedantic", "tls_required", "headers", "name", "cluster"))


class LeafConnect(msgspec.Struct, kw_only=True):
    """CONNECT of a leaf node (nats-server's leafConnectInfo); every field is left out when empty."""
    version: str = ""
    nkey: str = ""
    jwt: str = ""
    sig: str = ""
    user: str = ""
    password: str = msgspec.field(default="", name="pass")
    auth_token: str = ""
    server_id: str = ""
    domain: str = ""
    name: str = ""
    is_hub: bool = False
    cluster: str = ""
    headers: bool = False
    jetstream: bool = False
    deny_pub: list[str] | None = None
    isolate: bool = False
    compress_mode: str = ""
    gateway: str = ""
    remote_account: str = ""
    protocol: int = 0


_JSON_NAME = {"import_": "import", "password": "pass"}


def _encode(obj: Any, always: frozenset[str]) -> bytes:
    d: dict[str, Any] = {}
    for f in obj.__struct_fields__:
        v = getattr(obj, f)
        if f in always or v:  # a SubjectPermission is written whenever set (a pointer in nats-server)
            d[_JSON_NAME.get(f, f)] = v
    return msgspec.json.encode(d)


def _decode(arg: bytes, typ: type, what: str) -> Any:
    try:
        return msgspec.json.decode(arg, type=typ)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise ProtocolError(None, f"{what} Parse Error: {e}") from None


def decode_info(arg: bytes) -> Info:
    return _decode(arg, Info, "processInfo")


def encode_info(info: Info) -> bytes:
    return _encode(info, _INFO_ALWAYS)


def decode_route_connect(arg: bytes) -> RouteConnect:
    return _decode(arg, RouteConnect, "processRouteConnect")


def encode_route_connect(c: RouteConnect) -> bytes:
    return _encode(c, _ROUTE_CONNECT_ALWAYS)


def decode_leaf_connect(arg: bytes) -> LeafConnect:
    return _decode(arg, LeafConnect, "processLeafNodeConnect")


def encode_leaf_connect(c: LeafConnect) -> bytes:
    return _encode(c, frozenset())


# ---- naming rules -------------------------------------------------------------------------------------------

def route_pool_index(pool_size: int, account: str) -> int:
    """The pooled route an account's traffic uses: FNV-1a (32 bit) of its name modulo the pool size.

    Every server computes the same index for the same name and pool size; 0 when pooling is off."""
    if pool_size <= 1:
        return 0
    h = 0x811C9DC5
    for b in account.encode():
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h % pool_size


_DIGITS = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

GW_REPLY_PREFIX = b"_GR_."
OLD_GW_REPLY_PREFIX = b"$GR."
GW_HASH_LEN = 6


def gateway_hash(name: str, size: int = GW_HASH_LEN) -> bytes:
    """The short hash of a cluster or server name used in gateway reply subjects (base-62 of SHA-256)."""
    d = hashlib.sha256(name.encode()).digest()
    return bytes(_DIGITS[b % 62] for b in d[:size])


def gateway_old_hash(name: str) -> bytes:
    """The 4-character hash of the old ``$GR.`` reply prefix."""
    return hashlib.sha256(name.encode()).hexdigest()[:4].encode()


def gateway_reply(cluster_hash: bytes, server_hash: bytes, reply: bytes) -> bytes:
    """``_GR_.<cluster hash>.<server hash>.<reply>``: a reply subject that crosses a gateway."""
    return b"".join((GW_REPLY_PREFIX, cluster_hash, b".", server_hash, b".", reply))


def gateway_reply_origin(subject: bytes) -> tuple[bytes, bytes, bytes] | None:
    """(cluster hash, server hash, original reply) of a ``_GR_.`` subject, or None if it is not one."""
    p = len(GW_REPLY_PREFIX)
    n = GW_HASH_LEN
    if not subject.startswith(GW_REPLY_PREFIX) or len(subject) < p + 2 * n + 3:
        return None
    if subject[p + n:p + n + 1] != b"." or subject[p + 2 * n + 1:p + 2 * n + 2] != b".":
        return None
    return subject[p:p + n], subject[p + n + 1:p + 2 * n + 1], subject[p + 2 * n + 2:]


# A leaf connection's account subscribes to $LDS.<unique id>; seeing one's own $LDS subject come back over
# a leaf connection means the topology has a loop.
LDS_PREFIX = b"$LDS."


def is_loop_detection_subject(subject: bytes) -> bool:
    return subject.startswith(LDS_PREFIX)


def leaf_loop_error(account: str, delay_seconds: int = 30) -> str:
    """The -ERR text (and log line) of nats-server when a leaf node loop is detected."""
    return f'Loop detected for leafnode account="{account}". Delaying attempt to reconnect for {delay_seconds}s'


# Error texts exchanged or logged on server connections (nats-server's words)
ERR_CLIENT_ON_ROUTE_PORT = "attempted to connect to route port"
ERR_CLIENT_ON_LEAF_PORT = "attempted to connect to leaf node port"
ERR_NOT_GATEWAY = "attempted to connect to gateway port"


def err_cluster_name_mismatch(remote: str, local: str) -> str:
    return f'Rejecting connection, cluster name "{remote}" does not match "{local}"'


def err_gateway_on_route_port(gateway: str) -> str:
    return f'Rejecting connection from gateway "{gateway}" on the Route port'


def err_gateway_rejected(local_gateway: str) -> str:
    return f'Connection to gateway "{local_gateway}" rejected'
