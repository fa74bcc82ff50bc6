"""An index folder's small files read whole: the manifest (``cache.py``), the state's
snapshot and journal (``state.py``). Beneath a pinned folder, never through a link, a
regular file only. (Below both: the cache lists the state's counts, and the state reads its
files through no cache.)"""

from __future__ import annotations

import os
import stat as stat_mod

from .. import confine
from ..confine import Beneath
from ..errors import RootgrepError


def read_whole(fs: Beneath, name: bytes) -> bytes | None:
    """A regular file beneath ``fs``, whole (never through a link); None if it is not one."""
    try:
        fd = fs.open([name], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except (OSError, RootgrepError):
        return None
    try:
        st = os.fstat(fd)
        if not stat_mod.S_ISREG(st.st_mode):
            return None
        data, _ = confine.read_fd(fd, st.st_size, 1 << 40)
        return data
    except OSError:
        return None
    finally:
        os.close(fd)
