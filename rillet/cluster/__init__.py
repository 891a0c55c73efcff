"""Clustering: routes (one cluster), gateways (super-clusters) and leaf nodes.

``protocol`` parses and encodes the server-to-server wire protocols (sans-IO, like rillet.protocol.parser),
``info`` holds the INFO/CONNECT JSON documents and naming rules, ``interest`` the reference-counted
interest bookkeeping of a route. See README.md in this directory for how the server wires them in.
"""
