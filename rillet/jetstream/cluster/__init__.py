"""Clustered JetStream: the parts that do not depend on the RAFT core (see README.md in this folder).

``peers`` (peer ids, the registry of JetStream servers), ``placement`` (choosing a group's peers),
``assignments`` (the meta group's state machine), ``transport`` (RAFT group messages over routes),
``monitor`` (the JSON of /jsz, stream info ``cluster``, /raftz, advisories, /healthz rules).
"""
