"""A real mount whose lookups never answer: a FUSE file system whose daemon (a thread of the
test process, speaking the kernel's /dev/fuse protocol directly) answers FUSE_INIT and then
reads every LOOKUP without ever replying. Opening any path beneath the mount point blocks in
the kernel, as on a hung NFS or FUSE mount, until the mount is torn down (closing the device
aborts the connection: the blocked opens fail with ENOTCONN).

The daemon records each LOOKUP (the name asked for), so a test can wait until a given number
of opens are really stuck in the kernel, without any sleep.
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
FUSE_INIT = 26
FUSE_INTERRUPT = 36
FUSE_BATCH_FORGET = 42
_IN_HEADER = struct.Struct("<IIQQIIIHH")  # fuse_in_header: 40 bytes
_OUT_HEADER = struct.Struct("<IiQ")  # fuse_out_header: 16 bytes
_INIT_OUT = struct.Struct("<IIIIHHIIHHII6I")  # fuse_init_out (7.31 layout): 64 bytes
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

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lookups: list[bytes] = []  # names asked for, in order (never answered)
        self._changed = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._serve, name="hung-fuse", daemon=True)

    def _reply(self, unique: int, error: int, body: bytes = b"") -> None:
        os.write(self.fd, _OUT_HEADER.pack(_OUT_HEADER.size + len(body), error, unique) + body)

    def _serve(self) -> None:
        while not self._stop:
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if not ready:
                continue
            try:
                data = os.read(self.fd, 1 << 20)
            except OSError:  # aborted (the device was closed): the mount is gone
                return
            length, opcode, unique, _node, *_ = _IN_HEADER.unpack_from(data)
            if opcode == FUSE_INIT:
                self._reply(unique, 0, _INIT_OUT.pack(7, 31, 0, FUSE_PARALLEL_DIROPS, 0, 0, 4096, 1, 0, 0, 0, 0,
                                                      *([0] * 6)))  # fmt: skip
            elif opcode == FUSE_LOOKUP:
                name = data[_IN_HEADER.size : length].rstrip(b"\0")
                with self._changed:
                    self.lookups.append(name)
                    self._changed.notify_all()
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
def hung_mount(where: Path) -> Iterator[HungMount]:
    """Mount a hung FUSE file system at ``where`` (created); unmount it on exit."""
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
    mount = HungMount(fd)
    mount._thread.start()
    try:
        yield mount
    finally:
        mount.abort()
        subprocess.run(["umount", "-l", str(where)], capture_output=True)
