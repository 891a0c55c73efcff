"""The JetStream fault harness (issue 12): cluster in namespaces, nemesis, workloads, checkers.
Command line: scripts/js_faults.py; overview: tests/faults/README.md."""
