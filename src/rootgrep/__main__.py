"""``python -m rootgrep`` and the ``rootgrep`` command (``run``, the console script's entry)."""

from __future__ import annotations

import gc
import os
import sys


def drop_working_directory() -> list[str]:
    """Take off ``sys.path`` what names the working directory, before anything else is
    imported (``re2``, ``tantivy`` and the tree-sitter grammars are imported later, some
    lazily): ``python -m rootgrep`` puts the working directory first, and a relative entry
    of ``PYTHONPATH`` (an empty one, as ``PYTHONPATH=:$X`` makes) names a folder of it. Run
    from inside a served repository, a ``re2.py`` or ``tree_sitter_python/`` there would
    otherwise run as the user. The folder this package came from stays (a checkout's
    ``src``). Returned: the ``PYTHONPATH`` entries dropped, for a warning (a setting to fix;
    ``-m``'s own entry is dropped without a word)."""
    try:
        cwd = os.getcwd()
    except OSError:  # (a working directory deleted: nothing on the path can name it)
        return [p for p in sys.path if p and not os.path.isabs(p)]
    relative = {
        os.path.normpath(os.path.join(cwd, p))
        for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
        if not os.path.isabs(p)
    } if "PYTHONPATH" in os.environ else set()  # fmt: skip
    own = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    named = {os.path.normpath(cwd), *relative} - {own}
    kept = [p for p in sys.path if p and os.path.isabs(p) and os.path.normpath(p) not in named]
    if len(kept) == len(sys.path):
        return []
    dropped = [p for p in sys.path if p not in kept]
    sys.path[:] = kept
    said = [p for p in dropped if os.path.normpath(os.path.join(cwd, p)) in relative]
    return list(dict.fromkeys(said))


def run() -> int:
    """``cli.main`` with the cyclic garbage collector paused while the modules load: start-up
    makes some 100k objects that live until exit, and the collections they set off walked
    them again and again (about a tenth of a short ``rootgrep grep``). They are then frozen
    (never walked again) and the collector runs as usual for the verb itself."""
    dropped = drop_working_directory()
    if dropped:
        import logging

        logging.getLogger("rootgrep").warning(
            "PYTHONPATH: ignored %s (a relative entry names the working directory, whose "
            "code rootgrep never loads; keep PYTHONPATH absolute)", ", ".join(dropped)
        )  # fmt: skip
    gc.disable()
    try:
        if sys.argv[1:2] == ["grep"]:
            # (first: the daemon of the working directory runs the whole grep, if there is
            # one; this process then imports no more of rootgrep than it takes to ask)
            from .remote_grep import run_by_daemon

            status = run_by_daemon(sys.argv[2:])
            if status is not None:
                return status
        from .cli import main
    finally:
        gc.freeze()
        gc.enable()
    return main()


if __name__ == "__main__":
    sys.exit(run())
