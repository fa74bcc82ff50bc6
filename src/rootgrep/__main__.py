"""``python -m rootgrep``."""

import sys

from .cli import main

sys.exit(main())
