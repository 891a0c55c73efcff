# ``python -m rillet.server``: the command line runs a server built by the composition root (rillet.app), the
# one module of rillet.server that imports it (a script, never imported: tests/test_import_cycles.py)
import sys

from rillet.app.main import main

sys.exit(main())
