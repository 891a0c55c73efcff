"""The compiled lane: C extensions (built from the ``.pyx`` files here by setup.py when a C compiler is
present) that twin pure-Python modules. Nothing imports this package directly except ``rillet.lane``,
which decides which lane runs."""
