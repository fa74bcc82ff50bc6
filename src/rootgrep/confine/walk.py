"""The component walk: resolution's way where ``openat2`` is missing or leaves the verdict
to it (``Beneath._resolve``). One name at a time with ``O_NOFOLLOW``; each symlink read with
``readlinkat`` and resolved again lexically beneath the root (an absolute target only
through one of the root's own spellings), ``..`` taken physically and refused above the
root, at most ``_WALK_HELD_FDS`` directory fds held at once. A mixin ``Beneath`` inherits
(``ComponentWalk``).
"""

from __future__ import annotations

import errno
import os
import stat as stat_mod

from ..errors import InvalidPath, NotFound, OutsideRoots
from .hiding import _gone, is_hidden
from .paths import _error, display, strip_prefix
from .syscalls import _O_PATH

TYPE_CHECKING = False  # (``typing`` is not imported at run time: the CLI's start-up)


MAX_SYMLINKS = 40
_WALK_HELD_FDS = 16  # directory fds the component walk keeps open at once


class ComponentWalk:
    """The component walk of ``Beneath`` (which inherits it), and what it needs of it."""

    if TYPE_CHECKING:  # (``Beneath``'s own)
        fd: int
        aliases: tuple[bytes, ...]

    def _walk(
        self, comps: list[bytes], flags: int, follow: bool, never: bool, each: bool = False
    ) -> int:
        """The component walk; ``each``: refuse a hidden directory on the way as missing."""
        pending = list(reversed(comps))  # a stack: pending[-1] is next
        # The directories we stand in, below the root: (name, fd or -1 once closed to keep
        # fds bounded; a closed one is reopened name by name from the root if '..' needs it).
        stack: list[tuple[bytes, int]] = []
        links = 0
        try:
            while pending:
                comp = pending.pop()
                if comp in (b"", b"."):
                    continue
                if comp == b"..":
                    if not stack:
                        raise OutsideRoots(
                            f"'{display(comps)}' leaves the root through '..'; "
                            "use a path inside the root"
                        )
                    _, fd = stack.pop()
                    if fd >= 0:
                        os.close(fd)
                    if stack and stack[-1][1] < 0:
                        stack[-1] = (stack[-1][0], self._reopen([n for n, _ in stack], comps))
                    continue
                cur = stack[-1][1] if stack else self.fd
                last = not pending
                fl = flags | os.O_NOFOLLOW if last else _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW
                try:
                    fd = os.open(comp, fl, dir_fd=cur)
                except OSError as e:
                    if e.errno not in (errno.ELOOP, errno.ENOTDIR) or (last and not follow):
                        raise _error(e, comps) from None
                    target = _readlink_at(cur, comp)
                    if target is None:
                        raise _error(e, comps) from None
                    links = self._push_link(target, pending, stack, links, never, comps)
                    continue
                opened_link = last and follow and flags & _O_PATH == _O_PATH
                if opened_link and stat_mod.S_ISLNK(os.fstat(fd).st_mode):
                    # O_PATH|O_NOFOLLOW opens a link itself: resolve it ourselves.
                    os.close(fd)
                    target = _readlink_at(cur, comp)
                    if target is None:
                        raise NotFound(f"'{display(comps)}' changed while being resolved")
                    links = self._push_link(target, pending, stack, links, never, comps)
                    continue
                if last:
                    return fd
                if each and is_hidden(os.fstat(fd)):
                    os.close(fd)
                    raise _error(_gone(comp), comps)
                stack.append((comp, fd))
                if len(stack) > _WALK_HELD_FDS:
                    name, old = stack[-_WALK_HELD_FDS - 1]
                    if old >= 0:
                        os.close(old)
                        stack[-_WALK_HELD_FDS - 1] = (name, -1)
            # Ended on '..', '.' or a link to a directory: open where we stand.
            cur = stack[-1][1] if stack else self.fd
            return os.open(b".", flags & ~os.O_NOFOLLOW, dir_fd=cur)
        finally:
            for _, fd in stack:
                if fd >= 0:
                    os.close(fd)

    def _reopen(self, names: list[bytes], comps: list[bytes]) -> int:
        """Open root/names[0]/…/names[-1] one name at a time, never through a link."""
        fd = self.fd
        try:
            for name in names:
                nfd = os.open(name, _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                if fd != self.fd:
                    os.close(fd)
                fd = nfd
        except OSError as e:
            if fd != self.fd:
                os.close(fd)
            raise _error(e, comps) from None
        return fd

    def _push_link(
        self,
        target: bytes,
        pending: list[bytes],
        stack: list[tuple[bytes, int]],
        links: int,
        never: bool,
        comps: list[bytes],
    ) -> int:
        where = display(comps)
        if never:
            raise OutsideRoots(f"'{where}' goes through a symbolic link, and links are refused")
        links += 1
        if links > MAX_SYMLINKS:
            raise InvalidPath(f"'{where}' has too many levels of symbolic links")
        if target.startswith(b"/"):
            inner = None
            for alias in self.aliases:
                inner = strip_prefix(target, alias)
                if inner is not None:
                    break
            if inner is None:
                raise OutsideRoots(
                    f"'{where}' is a symbolic link to a place outside the root; "
                    "only links that stay inside the root are followed"
                )
            for _, fd in stack:
                if fd >= 0:
                    os.close(fd)
            stack.clear()
            pending.extend(reversed(inner))
        else:
            pending.extend(reversed(target.split(b"/")))
        return links


def _readlink_at(dirfd: int, name: bytes) -> bytes | None:
    try:
        return os.readlink(name, dir_fd=dirfd)
    except OSError as e:
        if e.errno in (errno.EINVAL, errno.ENOENT):
            return None
        raise
