"""A JetStream consumer, by concern: ``engine`` (the Consumer, assembled from the mixins below, created and
recovered), ``state`` (its replicated state), ``delivery`` (the delivery pass), ``push`` (interest, flow
control, heartbeats), ``pull`` (pull requests), ``acks`` (acks and redelivery), ``priority`` (priority groups,
pinning), ``control`` (pause, inactivity, updates, info), ``persist`` (state and config on disk), ``reset``."""
