"""OCSP in a config file: the top-level ``ocsp`` (stapling) and ``ocsp_cache`` keys and the ``ocsp_peer``
entry of a tls {} block, with nats-server's keys, defaults and error texts.

What the server does with them is in rillet/server/ocsp.py (peer checks) and rillet/server/ocsp_staple.py
(stapling, with pyOpenSSL: Python's ssl module has no server-side OCSP status callback). A configuration
that would staple where this server cannot is refused once the certificates are known
(``check_stapling``, called when the whole file has been read)."""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field, fields
from typing import Any

from rillet.gocompat.goquote import go_type

from .errors import ConfigError
from .typed import Field

# nats-server's defaults (certidp and the response cache)
DEFAULT_CA_TIMEOUT = 2.0
DEFAULT_CLOCK_SKEW = 30.0
DEFAULT_TTL_UNSET_NEXT_UPDATE = 3600.0
DEFAULT_CACHE_DIR = "_rc_"
DEFAULT_SAVE_INTERVAL = 300.0
MIN_SAVE_INTERVAL = 1.0

OCSP_MODES = ("auto", "always", "must", "never")


def _peer_key(key: str, default: Any) -> Any:
    """A setting of the long form of ``ocsp_peer``: its default and the key it is written as (a bool is a
    flag, a float a number of seconds)."""
    return field(default=default, metadata={"key": key})


@dataclass
class OCSPPeerConfig:
    """``ocsp_peer`` of a tls {} block: check the peer's certificate chain with its CA's OCSP responder."""
    verify: bool = _peer_key("verify", False)
    ca_timeout: float = _peer_key("ca_timeout", DEFAULT_CA_TIMEOUT)
    clock_skew: float = _peer_key("allowed_clockskew", DEFAULT_CLOCK_SKEW)
    warn_only: bool = _peer_key("warn_only", False)
    unknown_is_good: bool = _peer_key("unknown_is_good", False)
    allow_when_ca_unreachable: bool = _peer_key("allow_when_ca_unreachable", False)
    ttl_unset_next_update: float = _peer_key("cache_ttl_when_next_update_unset", DEFAULT_TTL_UNSET_NEXT_UPDATE)
    source: Any = field(default=None, compare=False, repr=False)


_PEER_KEYS = {f.metadata["key"]: f for f in fields(OCSPPeerConfig) if f.metadata}


@dataclass
class OCSPCacheConfig:
    """``ocsp_cache``: where peer-check responses are kept ("none" or "local", a JSON file)."""
    type: str = "local"
    local_store: str = DEFAULT_CACHE_DIR
    preserve_revoked: bool = False
    save_interval: float = DEFAULT_SAVE_INTERVAL


@dataclass
class OCSPStapleConfig:
    """Top-level ``ocsp``: the stapling mode and responder URLs that override the certificate's."""
    mode: str = "auto"
    urls: list[str] = field(default_factory=list)
    source: Any = field(default=None, compare=False, repr=False)


PEER_PREFIX = "error parsing tls peer config"


def _seconds(sub: Field, err_prefix: str) -> float:
    """A number of seconds (integer, float or Go duration string); a negative one keeps the default."""
    v = sub.value
    if isinstance(v, bool):
        raise sub.error(f"{err_prefix}, conversion error: unexpected type")
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return sub.parse_duration_string(v)
        except ConfigError:
            raise sub.error(f"{err_prefix}, conversion error: {v!r} is not a duration") from None
    raise sub.error(f"{err_prefix}, conversion error: unexpected type")


def parse_ocsp_peer(sub: Field) -> OCSPPeerConfig:
    """``ocsp_peer: true|false`` or the long form ``ocsp_peer { verify, ca_timeout, ... }``."""
    if isinstance(sub.value, bool):
        return OCSPPeerConfig(verify=sub.value, source=sub.pos)
    if not isinstance(sub.value, dict):
        raise sub.error(f"error parsing ocsp peer config: unsupported type {go_type(sub.value)}")
    cfg = OCSPPeerConfig(source=sub.pos)
    for e in sub.entries():
        f = _PEER_KEYS.get(e.name)
        if f is None:
            raise e.error(f'{PEER_PREFIX}, unknown field ["{e.key}"]')
        if isinstance(f.default, bool):
            if not isinstance(e.value, bool):
                raise e.error(f'{PEER_PREFIX}, unknown field ["{e.key}"]')
            setattr(cfg, f.name, e.value)
        else:
            value = _seconds(e, PEER_PREFIX)
            if value >= 0:
                setattr(cfg, f.name, value)
    return cfg


def parse_ocsp_cache(f: Field) -> OCSPCacheConfig:
    """Top-level ``ocsp_cache: true|false`` or ``ocsp_cache { type, local_store, preserve_revoked,
    save_interval }``."""
    prefix = "error parsing OCSP peer cache config"
    if isinstance(f.value, bool):
        return OCSPCacheConfig(type="local" if f.value else "none")
    if not isinstance(f.value, dict):
        raise f.error(f"error parsing tags: unsupported type {go_type(f.value)}")
    cfg = OCSPCacheConfig()
    for e in f.entries():
        name = e.name
        if name == "type":
            if not isinstance(e.value, str):
                raise e.error(f'{prefix}, unknown field ["{e.key}"]')
            kind = e.value.lower()
            if kind not in ("none", "local"):
                raise e.error(f"{prefix}, unknown type [{e.value}]")
            cfg.type = kind
        elif name == "local_store":
            if not isinstance(e.value, str):
                raise e.error(f'{prefix}, unknown field ["{e.key}"]')
            cfg.local_store = e.value
        elif name == "preserve_revoked":
            if not isinstance(e.value, bool):
                raise e.error(f'{prefix}, unknown field ["{e.key}"]')
            cfg.preserve_revoked = e.value
        elif name == "save_interval":
            # whole seconds, at least one (as nats-server)
            cfg.save_interval = max(float(int(_seconds(e, prefix))), MIN_SAVE_INTERVAL)
        else:
            raise e.error(f'{prefix}, unknown field ["{e.key}"]')
    return cfg


def parse_ocsp(f: Field) -> OCSPStapleConfig:
    """Top-level ``ocsp: true|false`` or ``ocsp { mode, urls|url }``."""
    prefix = "error parsing ocsp config"
    if isinstance(f.value, bool):
        return OCSPStapleConfig(mode="auto" if f.value else "never", source=f.pos)
    if not isinstance(f.value, dict):
        raise f.error(f"{prefix}: unsupported type {go_type(f.value)}")
    cfg = OCSPStapleConfig(source=f.pos)
    for e in f.entries():
        if e.key == "mode":
            mode = e.as_str().lower()
            if mode not in OCSP_MODES:
                raise e.error(f"{prefix}: unsupported ocsp mode string")
            cfg.mode = mode
        elif e.key == "urls":
            cfg.urls = e.as_str_list()
        elif e.key == "url":
            cfg.urls = [e.as_str()]
        else:
            raise e.error(f"{prefix}: unsupported field string")
    return cfg


# ---- stapling: where it cannot happen -----------------------------------------------------------------

PYOPENSSL_MISSING = ("OCSP stapling needs the pyOpenSSL package (pip install 'rillet[ocsp]'): Python's ssl "
                     "module has no server-side OCSP status callback")
ROUTE_STAPLING = ("nats-server staples route and gateway connections in both directions and requires the "
                  "peer's staple, and OpenSSL can neither send a staple as the connecting side nor receive "
                  "one as the accepting side")


def has_must_staple(cert_file: str) -> bool:
    """Whether the first certificate of ``cert_file`` asks for a stapled status (TLS feature
    status_request, RFC 7633). False when the file cannot be read (the TLS setup reports that)."""
    try:
        from cryptography import x509
    except ImportError:
        return False  # (nothing can be known; with a must-staple certificate the TLS clients will complain)
    try:
        with open(cert_file, "rb") as fh:
            cert = x509.load_pem_x509_certificate(fh.read())
        ext = cert.extensions.get_extension_for_class(x509.TLSFeature)
    except (OSError, ValueError, x509.ExtensionNotFound):  # unreadable (reported by the TLS setup) or none
        return False
    return x509.TLSFeatureType.status_request in list(ext.value)


def stapling_blocks(o: Any) -> list[tuple[str, Any]]:
    """The tls blocks nats-server staples for: client port, websocket, mqtt, cluster, gateway (and its
    remote gateways); leafnode connections are never stapled."""
    out: list[tuple[str, Any]] = []
    if o.tls is not None:
        out.append(("client", o.tls))
    if o.websocket.tls is not None:
        out.append(("websocket", o.websocket.tls))
    mqtt_tls = o.mqtt.get("tls") if isinstance(o.mqtt, dict) else None
    if mqtt_tls is not None:
        out.append(("mqtt", mqtt_tls))
    if o.cluster.tls is not None:
        out.append(("cluster", o.cluster.tls))
    gw = o.gateway_opts
    if gw is not None:
        if gw.tls is not None:
            out.append(("gateway", gw.tls))
        for remote in gw.gateways:
            if remote.tls is not None:
                out.append(("gateway", remote.tls))
    return out


def check_stapling(o: Any) -> ConfigError | None:
    """The error for an ``ocsp`` setting this server cannot honour: stapling (mode always; must or auto
    with a must-staple certificate) on the route or gateway port, or on the client, websocket or MQTT
    port without pyOpenSSL (rillet.server.tls_openssl). None otherwise; rillet.server.ocsp_staple
    staples at start."""
    cfg: OCSPStapleConfig | None = getattr(o, "ocsp", None)
    if cfg is not None and cfg.mode == "never":
        return None
    mode = cfg.mode if cfg is not None else "auto"
    for kind, tls in stapling_blocks(o):
        if not tls.cert_file:
            continue
        if not (mode == "always" or has_must_staple(tls.cert_file)):
            continue
        why = ("mode 'always' staples every certificate" if mode == "always"
               else f"the certificate '{tls.cert_file}' requires a stapled status (must-staple)")
        if kind in ("cluster", "gateway"):
            return ConfigError.at(cfg.source if cfg is not None else None,
                                  f"'ocsp' is not supported for the {kind} certificate: {why}, and "
                                  f"{ROUTE_STAPLING}")
        if importlib.util.find_spec("OpenSSL") is None:
            return ConfigError.at(cfg.source if cfg is not None else None,
                                  f"'ocsp' cannot be honoured for the {kind} certificate: {why}, and "
                                  f"{PYOPENSSL_MISSING}")
    return None


def stapling_wanted(o: Any) -> bool:
    """Whether the client, websocket or MQTT listener staples under these options (mode always, or a
    must-staple certificate; under never such a certificate is only warned about, which is done there too):
    the server then loads rillet.server.ocsp_staple, and not otherwise."""
    cfg: OCSPStapleConfig | None = getattr(o, "ocsp", None)
    for kind, tls in stapling_blocks(o):
        if kind in ("cluster", "gateway") or not tls.cert_file:
            continue
        if (cfg is not None and cfg.mode == "always") or has_must_staple(tls.cert_file):
            return True
    return False


def peer_configs(o: Any) -> list[OCSPPeerConfig]:
    """The ocsp_peer settings in force (verify on) in these options."""
    out = []
    blocks = [o.tls, o.websocket.tls]
    leaf = o.leaf
    if leaf is not None:
        blocks.append(getattr(leaf, "tls", None))
        for r in getattr(leaf, "remotes", None) or []:
            blocks.append(getattr(r, "tls", None))
    for t in blocks:
        cfg = getattr(t, "ocsp_peer", None) if t is not None else None
        if cfg is not None and cfg.verify:
            out.append(cfg)
    return out
