"""A real mount whose lookups never answer: a FUSE file system whose daemon (a thread of the
test process, speaking the kernel's /dev/fuse protocol directly) answers FUSE_INIT and then
reads every LOOKUP without ever replying. Opening any path beneath the mount point blocks in
the kernel, as on a hung NFS or FUSE mount, until the mount is torn down (closing the device
aborts the connection: the blocked opens fail with ENOTCONN).

The daemon records each LOOKUP (the name asked for), so a test can wait until a given number
of opens are really stuck in the kernel, without any sleep. ``answer(name)`` makes the mount
answer late for one name: the held lookup of it (and every later one) finds an empty
directory, which can be opened, stat'ed and closed; the daemon counts the directories opened
and released, so a test sees whether whoever opened one closed it.

``answer(name, valid=0)`` answers it with entry and attributes valid for no time: the kernel
then asks again (a LOOKUP) on every path walk through the name, as it would of a network file
system that revalidates, and ``hang(name)`` makes those later lookups of it held again (its
held lookup answered, with the same node, by the next ``answer(name)``): a mount that stops
answering after a root on it was accepted.
"""

from __future__ import annotations

import os
import select
import struct
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FUSE_LOOKUP = 1
FUSE_FORGET = 2
FUSE_GETATTR = 3
FUSE_OPENDIR = 27
FUSE_RELEASEDIR = 29
FUSE_INIT = 26
FUSE_INTERRUPT = 36
FUSE_BATCH_FORGET = 42
_IN_HEADER = struct.Struct("<IIQQIIIHH")  # fuse_in_header: 40 bytes
_OUT_HEADER = struct.Struct("<IiQ")  # fuse_out_header: 16 bytes
_INIT_OUT = struct.Struct("<IIIIHHIIHHII6I")  # fuse_init_out (7.31 layout): 64 bytes
_ATTR = struct.Struct("<QQQQQQIIIIIIIIII")  # fuse_attr: 88 bytes
_ENTRY_OUT = struct.Struct("<QQQQII")  # fuse_entry_out, before its fuse_attr
_ATTR_OUT = struct.Struct("<QII")  # fuse_attr_out, before its fuse_attr
_OPEN_OUT = struct.Struct("<QIi")  # fuse_open_out
ROOT_NODE = 1
VALID = 3600  # seconds the kernel may keep an answered entry or attribute
ENOENT = 2
FUSE_PARALLEL_DIROPS = 1 << 18  # (without it the kernel sends one lookup a directory at a time)
_NO_REPLY = {FUSE_FORGET, FUSE_INTERRUPT, FUSE_BATCH_FORGET}
ENOSYS = 38


def fuse_available() -> str | None:
    """Why a FUSE mount cannot be made here (None: it can)."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if os.geteuid() != 0:
        return "mounting FUSE without fusermount needs root"
    try:
        with open("/proc/filesystems") as f:
            if "fuse" not in f.read().split():
                return "the kernel has no fuse file system"
    except OSError:
        return "cannot read /proc/filesystems"
    return None


class HungMount:
    """The daemon side of the mount: see the module docstring."""

    def __init__(self, fd: int, deaf: bool = False) -> None:
        self.fd = fd
        self.deaf = deaf  # reads nothing after FUSE_INIT (see ``hung_mount``)
        self.lookups: list[bytes] = []  # names asked for, in order (never answered)
        self.opened = 0  # directories opened on the mount (of the names answered)
        self.released = 0  # ... and closed again
        self._held: dict[bytes, list[int]] = {}  # name -> unique ids of its held lookups
        self._nodes: dict[bytes, int] = {}  # names answered -> their node id
        self._valid: dict[int, int] = {}  # node id -> seconds its entry and attributes hold
        self._hanging: set[bytes] = set()  # names answered once whose lookups are held again
        self._changed = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._serve, name="hung-fuse", daemon=True)

    def _reply(self, unique: int, error: int, body: bytes = b"") -> None:
        os.write(self.fd, _OUT_HEADER.pack(_OUT_HEADER.size + len(body), error, unique) + body)

    def _attr(self, node: int) -> bytes:
        mode = 0o040755  # (an empty directory, owned by root)
        return _ATTR.pack(node, 0, 0, 0, 0, 0, 0, 0, 0, mode, 2, 0, 0, 0, 4096, 0)

    def _entry(self, node: int) -> bytes:
        valid = self._valid.get(node, VALID)
        return _ENTRY_OUT.pack(node, 0, valid, valid, 0, 0) + self._attr(node)

    def answer(self, name: bytes, valid: int = VALID) -> None:
        """From now on ``name`` (in the mount's top directory) is an empty directory, its
        entry and attributes valid for ``valid`` seconds (0: looked up again on every path
        walk through it); its held lookups are answered."""
        with self._changed:
            node = self._nodes.setdefault(name, len(self._nodes) + 2)
            self._valid[node] = valid
            self._hanging.discard(name)
            held = self._held.pop(name, [])
        for unique in held:
            self._reply(unique, 0, self._entry(node))

    def hang(self, name: bytes) -> None:
        """From now on lookups of ``name`` (answered before) are held again, until the next
        ``answer(name)`` (with ``valid=0`` the kernel asks on every path walk through it)."""
        with self._changed:
            self._hanging.add(name)

    def _serve(self) -> None:
        while not self._stop:
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if not ready:
                continue
            try:
                data = os.read(self.fd, 1 << 20)
            except OSError:  # aborted (the device was closed): the mount is gone
                return
            length, opcode, unique, nodeid, *_ = _IN_HEADER.unpack_from(data)
            if opcode == FUSE_INIT:
                self._reply(unique, 0, _INIT_OUT.pack(7, 31, 0, FUSE_PARALLEL_DIROPS, 0, 0, 4096, 1, 0, 0, 0, 0,
                                                      *([0] * 6)))  # fmt: skip
                if self.deaf:
                    return
            elif opcode == FUSE_LOOKUP:
                name = data[_IN_HEADER.size : length].rstrip(b"\0")
                with self._changed:
                    node = self._nodes.get(name) if nodeid == ROOT_NODE else None
                    if name in self._hanging and nodeid == ROOT_NODE:
                        node = None  # (held again: see ``hang``)
                    if node is None and nodeid == ROOT_NODE:
                        self.lookups.append(name)
                        self._held.setdefault(name, []).append(unique)
                    self._changed.notify_all()
                if node is not None:
                    self._reply(unique, 0, self._entry(node))
                elif nodeid != ROOT_NODE:  # (inside an answered directory: it is empty)
                    self._reply(unique, -ENOENT)
            elif opcode == FUSE_GETATTR:
                valid = self._valid.get(nodeid, VALID)
                self._reply(unique, 0, _ATTR_OUT.pack(valid, 0, 0) + self._attr(nodeid))
            elif opcode in (FUSE_OPENDIR, FUSE_RELEASEDIR):
                with self._changed:
                    if opcode == FUSE_OPENDIR:
                        self.opened += 1
                    else:
                        self.released += 1
                    self._changed.notify_all()
                self._reply(unique, 0, _OPEN_OUT.pack(0, 0, 0) if opcode == FUSE_OPENDIR else b"")
            elif opcode not in _NO_REPLY:
                self._reply(unique, -ENOSYS)

    def abort(self) -> None:
        """Tear the connection down: every open blocked on the mount fails (ENOTCONN). (A
        process with a thread blocked on a lookup the daemon has read cannot even be killed
        until then.)"""
        self._stop = True
        self._thread.join(5)
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def wait_closed(self, timeout: float) -> bool:
        """Block until a directory was opened on the mount and every one opened is closed."""
        with self._changed:
            return self._changed.wait_for(lambda: 0 < self.opened == self.released, timeout)

    def wait_lookups(self, n: int, timeout: float) -> bool:
        """Block until at least ``n`` lookups are stuck (a hang guard bounds it)."""
        with self._changed:
            return self._changed.wait_for(lambda: len(self.lookups) >= n, timeout)


STUCK_WCHANS = ("request_wait_answer", "d_alloc_parallel")  # (a lookup sent; one joining it)


def stuck_threads(pid: int) -> int:
    """How many threads of process ``pid`` wait in the kernel on a FUSE lookup (their own,
    or one of the same name under way: ``/proc/PID/task/TID/wchan``)."""
    n = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/wchan") as f:
                n += f.read().strip() in STUCK_WCHANS
        except OSError:  # (the thread ended)
            pass
    return n


@contextmanager
def hung_mount(where: Path, *, deaf: bool = False) -> Iterator[HungMount]:
    """Mount a hung FUSE file system at ``where`` (created); unmount it on exit. ``deaf``: the
    daemon reads no request after FUSE_INIT, so a lookup stays queued in the kernel, where a
    fatal signal still ends its wait (as on a hung NFS mount; a lookup the daemon has read is
    waited out even by SIGKILL); nothing is recorded in ``lookups`` then."""
    where.mkdir(parents=True, exist_ok=True)
    fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    try:
        opts = f"fd={fd},rootmode=40000,user_id=0,group_id=0"
        done = subprocess.run(["mount", "-t", "fuse", "-o", opts, "rootgrep-hung", str(where)],
                              pass_fds=[fd], capture_output=True, text=True)  # fmt: skip
        if done.returncode != 0:
            raise OSError(f"mounting FUSE at {where} failed: {done.stderr.strip()}")
    except BaseException:
        os.close(fd)
        raise
    mount = HungMount(fd, deaf)
    mount._thread.start()
    try:
        yield mount
    finally:
        mount.abort()
        subprocess.run(["umount", "-l", str(where)], capture_output=True)
