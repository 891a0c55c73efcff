"""Clustering: routes (one cluster), gateways (super-clusters) and leaf nodes.

``protocol`` parses and encodes the server-to-server wire protocols (sans-IO, like rillet.protocol.parser),
``info`` holds the INFO/CONNECT JSON documents and naming rules, ``interest`` the reference-counted
interest bookkeeping of a route. See README.md in this directory for how the server wires them in.
"""

from rillet import lane as _lane


# this package's twins in the compiled lane (rillet.lane): the route/gateway/leaf parser and the frame builders
_lane.register("ServerParser", "rillet.cluster.protocol:ServerParser", "rillet._speedups._cserver:ServerParser")
_lane.register("wire", "rillet.cluster.protocol", "rillet._speedups._cserver")
