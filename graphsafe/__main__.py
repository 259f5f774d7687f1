"""``python -m graphsafe``: the command line."""

import sys

from .frontend.cli import main

sys.exit(main())
