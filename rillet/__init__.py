"""Rillet: a NATS-compatible messaging server written in Python."""

__version__ = "0.1.0"
# The nats-server version we report in INFO and /varz: clients gate features on it.
SERVER_VERSION = "2.12.0"
PROTO_VERSION = 1
