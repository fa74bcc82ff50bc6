"""``python -m rootgrep`` and the ``rootgrep`` command (``run``, the console script's entry)."""

from __future__ import annotations

import gc
import sys


def run() -> int:
    """``cli.main`` with the cyclic garbage collector paused while the modules load: start-up
    makes some 100k objects that live until exit, and the collections they set off walked
    them again and again (about a tenth of a short ``rootgrep grep``). They are then frozen
    (never walked again) and the collector runs as usual for the verb itself."""
    gc.disable()
    try:
        from .cli import main
    finally:
        gc.freeze()
        gc.enable()
    return main()


if __name__ == "__main__":
    sys.exit(run())
