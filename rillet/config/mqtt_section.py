"""The ``mqtt {}`` block, with nats-server's keys, aliases, defaults and errors.

The parsed block is ``Options.mqtt``: a dict with these keys (absent = not set, nats-server's default
applies): host, port, tls (TLSConfig), tls_timeout, username, password, token, auth_timeout, no_auth_user,
ack_wait (s), js_api_timeout (s), max_ack_pending, js_domain, stream_replicas, consumer_memory_storage,
consumer_inactive_threshold (s), reject_qos2_publish, downgrade_qos2_subscribe, and Rillet's
receive_maximum and max_keep_alive (MQTT 5).
``validate_mqtt(opts)`` is nats-server's check at start (ValueError).
"""
from __future__ import annotations

from typing import Any, Callable

from rillet.gocompat.goquote import go_type

from .typed import Field

__all__ = ["MqttSection", "validate_mqtt", "DEFAULT_ACK_WAIT", "DEFAULT_MAX_ACK_PENDING", "DEFAULT_JS_API_TIMEOUT"]

DEFAULT_ACK_WAIT = 30.0
DEFAULT_MAX_ACK_PENDING = 1024
DEFAULT_JS_API_TIMEOUT = 5.0
MAX_ACK_TOTAL = 0xFFFF


class MqttSection:
    """Mixed into the options builder (``rillet.config.options_builder``)."""

    o: Any
    warnings: list
    each: Callable[..., None]
    host_port: Callable[[Field], tuple[str, int]]
    parse_tls: Callable[..., Any]
    simple_auth: Callable[[Field], dict[str, Any]]

    def mqtt(self, f: Field) -> None:
        if not isinstance(f.value, dict):
            raise f.error(f"Expected mqtt to be a map, got {go_type(f.value)}")
        m: dict[str, Any] = {}
        self.o.mqtt = m

        def listen(sub: Field) -> None:
            m["host"], m["port"] = self.host_port(sub)

        def tls(sub: Field) -> None:
            cfg = self.parse_tls(sub, client_side=True, where="mqtt")
            for key, set_ in (("handshake_first", cfg.handshake_first), ("connection_rate_limit", cfg.rate_limit)):
                if set_:
                    raise sub.error(f'"{key}" is not supported in mqtt tls: Rillet applies it to the client '
                                    f"port only")
            m["tls"] = cfg
            m["tls_timeout"] = getattr(cfg, "timeout", 0) or 0

        def authorization(sub: Field) -> None:
            auth = self.simple_auth(sub)
            m["username"] = auth.get("user", "")
            m["password"] = auth.get("pass", "")
            m["token"] = auth.get("token", "")
            if "timeout" in auth:
                m["auth_timeout"] = auth["timeout"]

        def put(key: str, kind: str) -> Callable[[Field], None]:
            def handler(sub: Field) -> None:
                m[key] = getattr(sub, "as_" + kind)()
            return handler

        def duration(key: str) -> Callable[[Field], None]:
            def handler(sub: Field) -> None:
                m[key] = sub.as_duration(self.warnings)
            return handler

        def max_ack_pending(sub: Field) -> None:
            v = sub.as_int()
            if v < 0 or v > MAX_ACK_TOTAL:
                raise sub.error(f"invalid value {v}, should in [0..{MAX_ACK_TOTAL}] range")
            m["max_ack_pending"] = v

        def receive_maximum(sub: Field) -> None:
            # (Rillet only, MQTT 5: the Receive Maximum announced in CONNACK and enforced on QoS 1 and 2 PUBLISH)
            v = sub.as_int()
            if v < 1 or v > 65535:
                raise sub.error(f"invalid value {v}, should in [1..65535] range")
            m["receive_maximum"] = v

        def max_keep_alive(sub: Field) -> None:
            # (Rillet only, MQTT 5: an MQTT 5 client asking for no keep-alive or a longer one is given this one,
            # the CONNACK's Server Keep Alive)
            v = sub.as_int()
            if v < 1 or v > 65535:
                raise sub.error(f"invalid value {v}, should in [1..65535] range")
            m["max_keep_alive"] = v

        def consumer_replicas(sub: Field) -> None:
            self.warnings.append(sub.error(f'invalid use of field "{sub.key}": '
                                           "consumer replicas setting ignored in this server version"))

        table: dict[str, Callable[[Field], None]] = {
            "listen": listen,
            "port": put("port", "int"),
            "host": put("host", "str"),
            "net": put("host", "str"),
            "tls": tls,
            "authorization": authorization,
            "authentication": authorization,
            "no_auth_user": put("no_auth_user", "str"),
            "ack_wait": duration("ack_wait"),
            "ackwait": duration("ack_wait"),
            "js_api_timeout": duration("js_api_timeout"),
            "api_timeout": duration("js_api_timeout"),
            "max_ack_pending": max_ack_pending,
            "max_pending": max_ack_pending,
            "max_inflight": max_ack_pending,
            "js_domain": put("js_domain", "str"),
            "stream_replicas": put("stream_replicas", "int"),
            "consumer_replicas": consumer_replicas,
            "consumer_memory_storage": put("consumer_memory_storage", "bool"),
            "consumer_inactive_threshold": duration("consumer_inactive_threshold"),
            "consumer_auto_cleanup": duration("consumer_inactive_threshold"),
            "reject_qos2_publish": put("reject_qos2_publish", "bool"),
            "downgrade_qos2_subscribe": put("downgrade_qos2_subscribe", "bool"),
            "receive_maximum": receive_maximum,
            "max_keep_alive": max_keep_alive,
        }
        f.as_map()
        self.each(f, table, "mqtt")


def validate_mqtt(o: Any) -> None:
    """nats-server's checks of the mqtt block when the server starts (ValueError); nothing without a port."""
    m = o.mqtt or {}
    if not m.get("port"):
        return
    if not o.server_name and (o.cluster.port or (o.gateway_opts is not None and getattr(o.gateway_opts, "port", 0))):
        raise ValueError("mqtt requires server name to be explicitly set")
    nau = m.get("no_auth_user")
    if nau:
        names = {u.username for u in o.users}
        if not o.users and not o.nkeys:
            raise ValueError(f'no_auth_user: "{nau}" present, but users/nkeys are not defined')
        if nau not in names:
            raise ValueError(f'no_auth_user: "{nau}" not present as user or nkey in authorization block or '
                             f"account configuration")
    if o.users or o.nkeys:
        if m.get("username"):
            raise ValueError("mqtt authentication username not compatible with presence of users/nkeys")
        if m.get("token"):
            raise ValueError("mqtt authentication token not compatible with presence of users/nkeys")
    if m.get("ack_wait", 0) < 0:
        raise ValueError("ack wait must be a positive value")
    if m.get("js_api_timeout", 0) < 0:
        raise ValueError("JS API timeout must be a positive value")
    leaf = o.leaf
    if not o.jetstream.enabled and not o.cluster.port and o.gateway_opts is None and \
            not (leaf is not None and (leaf.port or leaf.remotes)):
        raise ValueError("mqtt requires JetStream to be enabled if running in standalone mode")
