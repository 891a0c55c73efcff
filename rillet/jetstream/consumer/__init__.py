"""A JetStream consumer, by concern: ``engine`` (the Consumer, assembled from the mixins below, created and
recovered), ``state`` (its replicated state), ``delivery`` (the delivery pass), ``push`` (interest, flow
control, heartbeats), ``pull`` (pull requests), ``acks`` (acks and redelivery), ``priority`` (priority groups,
pinning), ``control`` (pause, inactivity, updates, info), ``persist`` (state and config on disk), ``reset``."""

from rillet import lane as _lane


def _pure_run_frames():
    import importlib  # (also while delivery itself is being imported: it asks for its twin)
    return importlib.import_module("rillet.jetstream.consumer.delivery").reference_run_frames


def _compiled_run_frames():
    from rillet._speedups._cjs import run_frames
    return run_frames


# a run of deliveries to one receiver (rillet.jetstream.consumer.delivery.reference_run_frames, or its compiled twin)
_lane.register("run_frames", _pure_run_frames, _compiled_run_frames)
