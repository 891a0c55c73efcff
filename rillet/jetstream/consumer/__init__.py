"""A JetStream consumer, by concern: ``engine`` (the Consumer, assembled from the mixins below, created and
recovered), ``state`` (its replicated state), ``delivery`` (the delivery pass), ``push`` (interest, flow
control, heartbeats), ``pull`` (pull requests), ``acks`` (acks and redelivery), ``priority`` (priority groups,
pinning), ``control`` (pause, inactivity, updates, info), ``persist`` (state and config on disk), ``reset``."""

from rillet import lane as _lane


# a run of deliveries to one receiver (rillet.jetstream.consumer.delivery.reference_run_frames, or its compiled twin)
_lane.register("run_frames", "rillet.jetstream.consumer.delivery:reference_run_frames",
               "rillet._speedups._cjs:run_frames")
