"""Clustering: routes (one cluster), gateways (super-clusters) and leaf nodes.

``protocol`` parses and encodes the server-to-server wire protocols (sans-IO, like rillet.protocol.parser),
``info`` holds the INFO/CONNECT JSON documents and naming rules, ``interest`` the reference-counted
interest bookkeeping of a route. See README.md in this directory for how the server wires them in.
"""

from rillet import lane as _lane


def _pure_server_parser():
    from rillet.cluster.protocol import ServerParser
    return ServerParser


def _compiled_server_parser():
    from rillet._speedups._cserver import ServerParser
    return ServerParser


def _pure_wire():
    from rillet.cluster import protocol
    return protocol


def _compiled_wire():
    from rillet._speedups import _cserver
    return _cserver


# this package's twins in the compiled lane (rillet.lane): the route/gateway/leaf parser and the frame builders
_lane.register("ServerParser", _pure_server_parser, _compiled_server_parser)
_lane.register("wire", _pure_wire, _compiled_wire)
