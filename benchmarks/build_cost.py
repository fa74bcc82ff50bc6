"""The index build of a folder (default F, the interpreter's library folder): time and index
size. ``python benchmarks/build_cost.py [DIR]``: prints one JSON line."""

from __future__ import annotations

import json
import os
import sys
import sysconfig
import tempfile
import time

from rootgrep.index.store import RootIndex, _dir_bytes
from rootgrep.roots import pin_root


def build(folder: str) -> dict[str, object]:
    root = pin_root(folder)
    with tempfile.TemporaryDirectory() as cache:
        ix = RootIndex(cache, root.path)
        try:
            t0 = time.perf_counter()
            stats = ix.sync(root.fs)
            seconds = time.perf_counter() - t0
            size = _dir_bytes(ix.dir)
        finally:
            ix.close()
            root.close()
    return {
        "folder": folder,
        "files": stats.files,
        "source_bytes": stats.bytes,
        "seconds": round(seconds, 2),
        "index_bytes": size,
        "index_per_source": round(size / max(stats.bytes, 1), 3),
    }


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else sysconfig.get_paths()["stdlib"]
    print(json.dumps(build(os.path.abspath(target))))
