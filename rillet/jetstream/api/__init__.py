"""The JetStream API: every ``$JS.API`` request, on a single server and in a cluster (``router``)."""
