"""Rillet: a NATS-compatible messaging server written in Python."""

__version__ = "0.1.0"
# The nats-server version we report in INFO and /varz: clients gate features on it.
SERVER_VERSION = "2.15.1"
PROTO_VERSION = 1
# The JetStream API level of that version (INFO api_lvl, $JS.API.INFO api.level, _nats.level metadata).
JS_API_LEVEL = 5
