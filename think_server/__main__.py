"""``python -m think_server serve ...``: the same command line as ``think-server``."""

import sys

from think_server.cli import main

sys.exit(main())
