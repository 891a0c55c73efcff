"""The one Options object: flags and the config file both produce it, every component reads it.

Field names follow nats-server's configuration keys where one exists. Durations are float seconds,
sizes are int bytes. Reload builds a fresh Options and the server swaps what may change at runtime.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DEFAULT_PORT = 4222
DEFAULT_HOST = "0.0.0.0"
DEFAULT_MAX_PAYLOAD = 1024 * 1024
DEFAULT_MAX_CONTROL_LINE = 4096
DEFAULT_MAX_CONNECTIONS = 64 * 1024
DEFAULT_MAX_PENDING = 64 * 1024 * 1024
DEFAULT_PING_INTERVAL = 120.0
DEFAULT_PING_MAX = 2
DEFAULT_WRITE_DEADLINE = 10.0
DEFAULT_AUTH_TIMEOUT = 2.0
DEFAULT_TLS_TIMEOUT = 2.0
DEFAULT_LAME_DUCK_DURATION = 120.0
DEFAULT_LAME_DUCK_GRACE_PERIOD = 10.0
RANDOM_PORT = -1


@dataclass
class Permission:
    """Allow/deny subject lists for one direction (publish or subscribe)."""
    allow: list[str] | None = None
    deny: list[str] | None = None


@dataclass
class ResponsePermission:
    max_msgs: int = 1
    expires: float = 0.0  # seconds; 0 = no expiry


@dataclass
class Permissions:
    publish: Permission | None = None
    subscribe: Permission | None = None
    response: ResponsePermission | None = None


@dataclass
class User:
    username: str = ""
    password: str = ""  # plain text, or a bcrypt hash starting with "$2"
    nkey: str = ""
    permissions: Permissions | None = None
    account: str = ""  # account name; "" = the global account
    allowed_connection_types: list[str] | None = None
    proxy_required: bool = False  # admitted only through a trusted proxy (proxies { trusted }, nats-server 2.12)


@dataclass
class TLSConfig:
    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""
    verify: bool = False
    verify_and_map: bool = False
    insecure: bool = False
    timeout: float = DEFAULT_TLS_TIMEOUT
    handshake_first: bool = False
    handshake_first_fallback: float = 0.0  # seconds; >0 = fall back to INFO-first after this delay
    ciphers: list[str] = field(default_factory=list)
    curve_preferences: list[str] = field(default_factory=list)
    pinned_certs: list[str] = field(default_factory=list)  # hex sha256 of the peer's SubjectPublicKeyInfo
    # certs [{cert_file, key_file}]: several certificates, chosen by the client's SNI (rillet.server.tls)
    certs: list[tuple[str, str]] = field(default_factory=list)
    min_version: str = ""  # "1.2" or "1.3"; "" = TLS 1.2
    allow_insecure_ciphers: bool = False
    rate_limit: int = 0  # connection_rate_limit: TLS connections per second, 0 = no limit
    extra: dict[str, Any] = field(default_factory=dict)  # other nats-server tls keys, stored as parsed
    source: Any = field(default=None, compare=False, repr=False)  # the tls key's Position in a config file
    ocsp_peer: Any = None  # rillet.config.ocsp_section.OCSPPeerConfig when ocsp_peer is written


@dataclass
class WebsocketOptions:
    host: str = ""
    port: int = 0  # 0 = disabled
    advertise: str = ""
    no_tls: bool = False
    tls: TLSConfig | None = None
    compression: bool = False
    same_origin: bool = False
    allowed_origins: list[str] = field(default_factory=list)
    handshake_timeout: float = 2.0
    no_auth_user: str = ""
    jwt_cookie: str = ""
    username: str = ""
    password: str = ""
    token: str = ""
    auth_timeout: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # other nats-server websocket keys (cookies, ping_interval)


@dataclass
class JetStreamOptions:
    enabled: bool = False
    store_dir: str = ""
    max_memory_store: int = -1
    max_file_store: int = -1
    domain: str = ""
    sync_interval: float | str = 120.0  # seconds, or "always"
    unique_tag: str = ""
    # encryption at rest (rillet.cipher): key (key | ek | encryption_key), prev_key, cipher
    key: str = ""
    prev_key: str = ""
    cipher: str = "chachapoly"  # or "aes"
    # the tpm {} block (keys_file, encryption_password, srk_password, pcr, cipher): parsed; with a keys_file
    # JetStream does not start (no TPM support on this platform, as nats-server outside Windows)
    tpm: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ClusterOptions:
    name: str = ""
    host: str = ""
    port: int = 0  # 0 = disabled
    listen: str = ""  # the raw --cluster/--cluster_listen URL
    routes: list[str] = field(default_factory=list)
    no_advertise: bool = False
    advertise: str = ""
    connect_retries: int = 0
    username: str = ""
    password: str = ""
    auth_timeout: float = 0.0
    tls: TLSConfig | None = None
    pool_size: int = 0  # routes per server: >= 1 pooled; 0 (unset): 3, as nats-server; -1: one, no pooling
    accounts: list[str] = field(default_factory=list)  # pinned accounts (a dedicated route each)
    connect_backoff: bool = False  # exponential back-off between attempts to solicit a route (up to 30s)
    compression: str = ""  # "" (unset: accept), or a mode of rillet.compression (normalized)
    compression_rtts: tuple = ()  # s2_auto's rtt_thresholds (seconds; () = the default ones)
    ping_interval: float = 0.0  # 0 = the server's ping_interval (capped at 30s for routes)
    ping_max: int = 0  # 0 = the server's ping_max
    write_deadline: float = 0.0  # 0 = the server's write_deadline
    write_timeout: str = ""  # "" (default: retry for routes), "close" or "retry"
    # route permissions: publish = import (our interest sent to routes), subscribe = export (routes'
    # interest accepted), as nats-server's RoutePermissions
    permissions: Permissions | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Options:
    # identity and listeners
    server_name: str = ""
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    client_advertise: str = ""
    no_advertise: bool = False  # the client-facing no_advertise (connect_urls)
    http_host: str = ""  # "" = same as host
    http_port: int = 0  # 0 = monitoring off
    https_port: int = 0
    http_base_path: str = ""
    http_metrics: bool = False  # /metrics (Prometheus text, prometheus-nats-exporter names) on the monitor
    ports_file_dir: str = ""
    pid_file: str = ""
    config_file: str = ""

    # limits
    max_payload: int = DEFAULT_MAX_PAYLOAD
    max_control_line: int = DEFAULT_MAX_CONTROL_LINE
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_subscriptions: int = 0  # 0 = unlimited (per connection)
    max_sub_tokens: int = 0  # most tokens in a client's subscription subject (1-255; 0 = no limit)
    proxy_protocol: bool = False  # client connections may start with a PROXY header (v1 or v2)
    write_timeout: str = ""  # clients past the write deadline: "" (default: close), "close" or "retry"
    max_pending: int = DEFAULT_MAX_PENDING
    max_pending_total: int = 0  # clients' pending output summed (0: 16 x max_pending; -1: none): rillet.server.pendingtotal
    ping_interval: float = DEFAULT_PING_INTERVAL
    ping_max: int = DEFAULT_PING_MAX
    write_deadline: float = DEFAULT_WRITE_DEADLINE
    lame_duck_duration: float = DEFAULT_LAME_DUCK_DURATION
    lame_duck_grace_period: float = DEFAULT_LAME_DUCK_GRACE_PERIOD
    max_closed_clients: int = 10000
    disable_sublist_cache: bool = False
    no_header_support: bool = False
    no_fast_producer_stall: bool = False  # drop messages for a receiver past 3/4 of max_pending, never stall

    # authentication (single / global account)
    username: str = ""
    password: str = ""
    authorization: str = ""  # token
    auth_timeout: float = 0.0  # 0 = default (DEFAULT_AUTH_TIMEOUT, or the TLS timeout when larger)
    users: list[User] = field(default_factory=list)
    nkeys: list[User] = field(default_factory=list)
    no_auth_user: str = ""
    auth_block: bool = False  # an authorization {} block was written (even an empty one)
    proxy_required: bool = False  # authorization { proxy_required }: the single user or token through a proxy
    proxies_trusted: list[str] = field(default_factory=list)  # proxies { trusted [{key}] }: the proxies' nkeys
    accounts: dict[str, Any] = field(default_factory=dict)  # raw account definitions, for later work
    system_account: str = ""
    no_system_account: bool = False

    # decentralized auth ("operator mode"; see rillet.server.operator)
    trusted_operators: list[dict] = field(default_factory=list)  # decoded operator JWT claims
    default_sentinel: str = ""  # operator mode: the (bearer) user JWT of a client that presents none
    default_js_domain: dict[str, str] = field(default_factory=dict)  # account -> the JetStream domain its API goes to
    operator_jwts: list[str] = field(default_factory=list)
    trusted_keys: list[str] | None = None
    resolver: dict[str, Any] | None = None  # {"type": "MEMORY"} or {"type": "FULL", "dir": ..., ...}
    resolver_preload: dict[str, str] = field(default_factory=dict)  # account public key -> account JWT

    # TLS on the client port
    tls: TLSConfig | None = None
    tls_required: bool = False  # derived when tls is configured (unless allow_non_tls)
    allow_non_tls: bool = False
    ocsp: Any = None  # rillet.config.ocsp_section.OCSPStapleConfig (top-level ocsp)
    resolver_tls: Any = None  # TLSConfig of the URL account resolver (resolver_tls)
    ocsp_cache: Any = None  # rillet.config.ocsp_section.OCSPCacheConfig (top-level ocsp_cache)

    # other listeners and subsystems
    websocket: WebsocketOptions = field(default_factory=WebsocketOptions)
    jetstream: JetStreamOptions = field(default_factory=JetStreamOptions)
    cluster: ClusterOptions = field(default_factory=ClusterOptions)
    gateway: dict[str, Any] = field(default_factory=dict)  # the gateway block as written (monitoring)
    gateway_opts: Any = None  # rillet.config.gateway_section.GatewayOptions, when a gateway block is set
    leafnodes: dict[str, Any] = field(default_factory=dict)  # the leafnodes block as parsed (raw map)
    leaf: Any = None  # rillet.config.leaf_section.LeafNodeOptions: leaf nodes (hub listener, remotes)
    mqtt: dict[str, Any] = field(default_factory=dict)
    mappings: dict[str, Any] = field(default_factory=dict)  # subject -> dest (str, or list of {destination, weight, cluster})
    tags: list[str] = field(default_factory=list)

    # logging
    debug: bool = False
    trace: bool = False
    trace_verbose: bool = False
    max_traced_msg_len: int = 0  # bytes of a payload a trace line shows (0: all)
    logtime: bool = True
    logtime_utc: bool = False
    log_file: str = ""
    log_size_limit: int = 0
    log_max_files: int = 0  # logfile_max_num: rotated files kept, the live one included (0 = all)
    syslog: bool = False
    remote_syslog: str = ""
    no_log: bool = False
    max_traced_msg_len: int = 0  # 0 = unlimited

    # settings nats-server knows that rillet stores without acting on them (key -> parsed value)
    extra: dict[str, Any] = field(default_factory=dict)
    # non-fatal config file remarks ("file:line:col: reason"); nats-server's -t treats them as errors
    config_warnings: list[str] = field(default_factory=list)

    # which fields were set by command-line flags (flags override file values, also on reload)
    flags_set: set[str] = field(default_factory=set)

    def effective_auth_timeout(self) -> float:
        if self.auth_timeout > 0:
            return self.auth_timeout
        if self.tls is not None and self.tls.timeout > DEFAULT_AUTH_TIMEOUT:
            return self.tls.timeout
        return DEFAULT_AUTH_TIMEOUT

    def any_tls(self) -> bool:
        """Is a tls block configured anywhere: client port, websocket, MQTT, cluster, gateway (or a remote
        gateway), leaf nodes (or a remote)? Without one no OCSP setting can act, and a server does not load
        rillet.config.ocsp_section or rillet.server.tls (issue 20: idle memory)."""
        if self.tls is not None or self.websocket.tls is not None or self.cluster.tls is not None:
            return True
        if isinstance(self.mqtt, dict) and self.mqtt.get("tls") is not None:
            return True
        for block in (self.gateway_opts, self.leaf):
            if block is not None and (getattr(block, "tls", None) is not None or any(
                    getattr(r, "tls", None) is not None
                    for r in (getattr(block, "gateways", None) or getattr(block, "remotes", None) or ()))):
                return True
        return False

    def auth_required(self) -> bool:
        return bool(self.username or self.authorization or self.users or self.nkeys)
