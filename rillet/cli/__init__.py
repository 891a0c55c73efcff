"""``rillet``: a NATS command line tool (contexts, pub/sub, JetStream, KV, object store, benchmarks).

The command modules import nats-py, rich and the server lazily, inside the commands, so that starting
the tool (and ``rillet server``, which hands its arguments to the server's own command line) stays quick.
"""
