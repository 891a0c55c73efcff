import sys

from rillet.cli.main import main

sys.exit(main())
