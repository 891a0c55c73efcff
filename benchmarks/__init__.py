"""Benchmarks: a raw-socket NATS load generator and a side-by-side comparison with the Go nats-server."""
