"""What nats-server writes and reads the Go way, in one package.

nats-server is a Go program and its clients parse its Go-formatted output, so Rillet reproduces Go's
conventions exactly, once each:

* ``gotime``: ``time.Duration`` text (format and ``parse_go_duration``), RFC 3339 times, HTTP dates.
* ``gojson``: ``encoding/json``'s escaping: the one JSON writer behind monitoring, ``$SYS`` and the JetStream API.
* ``jsoncodec``: ``encoding/json``'s struct rules for the JetStream API (strict decoding with Go's error
  texts, ``omitempty``, sorted map keys, base64 byte slices).
* ``goquote``: ``%q`` (``strconv.Quote``) and ``%T`` as nats-server's errors print them.
* ``monitorfmt``: what only the monitoring endpoints format (``rtt``, ``uptime``, query parameters).

The package imports nothing else of Rillet: every layer may use it.
"""
