"""JetStream: streams, consumers, their stores and the ``$JS.API``; the replicated (clustered) layer in ``cluster``.

This package's twins in the compiled lane (rillet.lane) are registered here, before any of its modules reads them:
the file store, the ack subject codec and the replicated log's entry codec."""
from rillet import lane as _lane


_lane.register("FileStore", "rillet.jetstream.store.filestore:FileStore", "rillet._speedups._cstore:FileStore")
_lane.register("ack_numbers", "rillet.jetstream.acksubject:ack_numbers", "rillet._speedups._cjs:ack_numbers")
_lane.register("ack_reply", "rillet.jetstream.acksubject:ack_reply", "rillet._speedups._cjs:ack_reply")
_lane.register("entry_codec", "rillet.jetstream.cluster.log", "rillet._speedups._ccluster")
