"""JetStream: streams, consumers, their stores and the ``$JS.API``; the replicated (clustered) layer in ``cluster``.

This package's twins in the compiled lane (rillet.lane) are registered here, before any of its modules reads them:
the file store, the ack subject codec and the replicated log's entry codec."""
from rillet import lane as _lane


def _pure_file_store():
    from rillet.jetstream.store.filestore import FileStore
    return FileStore


def _compiled_file_store():
    from rillet._speedups._cstore import FileStore
    return FileStore


def _pure_ack(name: str):
    def load():
        from rillet.jetstream import acksubject
        return getattr(acksubject, name)
    return load


def _compiled_ack(name: str):
    def load():
        from rillet._speedups import _cjs
        return getattr(_cjs, name)
    return load


def _pure_entry_codec():
    from rillet.jetstream.cluster import log
    return log


def _compiled_entry_codec():
    from rillet._speedups import _ccluster
    return _ccluster


_lane.register("FileStore", _pure_file_store, _compiled_file_store)
_lane.register("ack_numbers", _pure_ack("ack_numbers"), _compiled_ack("ack_numbers"))
_lane.register("ack_reply", _pure_ack("ack_reply"), _compiled_ack("ack_reply"))
_lane.register("entry_codec", _pure_entry_codec, _compiled_entry_codec)
