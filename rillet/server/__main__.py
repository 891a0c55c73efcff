import sys

from rillet.server.main import main

sys.exit(main())
