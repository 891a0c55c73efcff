import sys

from rillet.app.main import main

sys.exit(main())
