"""``serve --sandbox``: the process restricts itself with Landlock (Linux), through ctypes.

Defence in depth beneath ``confine``: once restricted, the kernel itself refuses every open
outside what the rules grant, whatever a bug above it would ask for. The rules are made
beneath fds the process already holds (the pinned operator roots, the cache dir, /dev/null),
never by name: read beneath the roots (write too with ``--allow-write``), read-write beneath
the cache dir, read-write /dev/null, and nothing else (the audit log is written through the
fd it holds, which needs no rule): no other file, no directory listing, no ``execve``
anywhere (the Python prefix included: every module the server may import must be imported
before, see ``load_lazy_modules``).

Landlock restricts the calling thread only (this kernel's ABI 7 has no flag to restrict the
other threads of the process; later ones add ``TSYNC``), and threads made later inherit the
restriction: so ``restrict`` refuses unless the process has exactly one thread, checked
both by ``threading`` and by the kernel's own count (``/proc/self/task``). The network is not
restricted (the HTTP transport listens and accepts; its socket is bound before anyway).

Measured on this machine (kernel 6.18): ``landlock_create_ruleset(NULL, 0, VERSION)`` gives
ABI 7; ``landlock_restrict_self`` rejects flag ``1 << 3`` (TSYNC in ABI 8) with EINVAL.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import stat
import sys
import threading
from dataclasses import dataclass

# syscall numbers: the same in the unified table of these machines (Linux 5.13)
_MACHINES = {"x86_64", "aarch64", "arm64", "riscv64", "ppc64le", "ppc64", "s390x", "i686",
             "armv7l", "loongarch64"}  # fmt: skip
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# filesystem access rights (uapi/linux/landlock.h)
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2: link or rename across directories (ABI 1 always refuses it)
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
# scopes (ABI 6): no connection to an abstract unix socket, no signal, outside the domain
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

_FS_BY_ABI = ((1, (1 << 13) - 1), (2, REFER), (3, TRUNCATE), (5, IOCTL_DEV))
_FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # rights a file rule takes

READ = READ_FILE | READ_DIR
WRITE_TREE = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | REFER | TRUNCATE
# (no MAKE_SOCK: only a `rootgrep index --watch` daemon binds a freshness socket in the
# cache, never `serve`; a sandboxed server cannot pose as one to the CLI's greps)
CACHE = READ | WRITE_TREE
NULL_DEVICE = READ_FILE | WRITE_FILE  # /dev/null (no IOCTL_DEV)

# The strict mode needs every right that can change a file handled: truncate(2) is only
# governed from ABI 3, cross-directory renames only allowed (under REFER) from ABI 2.
STRICT_MIN_ABI = 3


class SandboxError(Exception):
    """The sandbox cannot be applied (the kernel lacks Landlock, or the process is not in a
    state where restricting it would hold). The message is one line for the operator."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),  # ABI 4
        ("scoped", ctypes.c_uint64),  # ABI 6
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # (__attribute__((packed)) in the kernel's header)
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _syscall(*args: object) -> int:
    return int(_libc.syscall(*args))


def abi_version() -> tuple[int, str]:
    """The kernel's Landlock ABI (0 when it has none) and, when 0, why."""
    if not sys.platform.startswith("linux"):
        return 0, f"Landlock is Linux-only (this is {sys.platform})"
    if platform.machine() not in _MACHINES:
        return 0, f"Landlock's syscall numbers are not known here ({platform.machine()})"
    v = _syscall(
        ctypes.c_long(_SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
        ctypes.c_uint32(_CREATE_RULESET_VERSION),
    )  # fmt: skip
    if v >= 1:
        return v, ""
    err = ctypes.get_errno()
    if err == errno.ENOSYS:
        return 0, "the kernel has no Landlock (ENOSYS: built without it, or too old)"
    if err == errno.EOPNOTSUPP:
        return 0, "Landlock is disabled on this kernel (EOPNOTSUPP: not in the lsm= list)"
    return 0, f"Landlock cannot be used ({os.strerror(err)})"


def handled_fs(abi: int) -> int:
    """Every filesystem right the ABI knows (what the ruleset governs: all of them)."""
    mask = 0
    for since, rights in _FS_BY_ABI:
        if abi >= since:
            mask |= rights
    return mask


def scopes(abi: int) -> int:
    return SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0


@dataclass(frozen=True)
class Rule:
    """Grant ``access`` beneath what ``fd`` holds (a directory: the tree below it, the
    directory included; a file: that file). ``what`` names it in messages."""

    fd: int
    access: int
    what: str


def thread_count() -> int:
    """The kernel's count of this process's threads (Python's count misses threads made by
    native code, such as a Rust library's)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError as e:
        raise SandboxError(
            f"cannot count this process's threads (/proc/self/task: {e.strerror}); "
            "the sandbox needs /proc mounted"
        ) from None


def restrict(rules: list[Rule], *, min_abi: int = 1) -> int:
    """Restrict this process (which must have exactly one thread) to ``rules``; returns the
    ABI used. Raises ``SandboxError`` when the kernel's ABI is below ``min_abi`` or when a
    step fails (then the process is as it was, except ``no_new_privs``)."""
    abi, why = abi_version()
    if abi == 0:
        raise SandboxError(why)
    if abi < min_abi:
        raise SandboxError(
            f"the kernel's Landlock ABI is {abi}; --sandbox needs {min_abi} or later "
            "(to govern every right that changes a file)"
        )
    python_threads, kernel_threads = threading.active_count(), thread_count()
    if python_threads != 1 or kernel_threads != 1:
        raise SandboxError(
            f"refusing to restrict a process with {max(python_threads, kernel_threads)} "
            "threads: Landlock restricts the calling thread only, the others would stay free"
        )
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise SandboxError(f"prctl(PR_SET_NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}")
    handled = handled_fs(abi)
    attr = _RulesetAttr(handled, 0, scopes(abi))  # handled_access_net 0: network untouched
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else (16 if abi >= 4 else 8)
    ruleset = _syscall(
        ctypes.c_long(_SYS_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size),
        ctypes.c_uint32(0),
    )  # fmt: skip
    if ruleset < 0:
        raise SandboxError(f"landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}")
    try:
        for rule in rules:
            access = rule.access & handled
            if not _is_dir(rule.fd):
                access &= _FILE_ONLY
            beneath = _PathBeneathAttr(access, rule.fd)
            r = _syscall(
                ctypes.c_long(_SYS_ADD_RULE), ctypes.c_int(ruleset),
                ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(beneath), ctypes.c_uint32(0),
            )  # fmt: skip
            if r != 0:
                err = os.strerror(ctypes.get_errno())
                raise SandboxError(f"landlock_add_rule for {rule.what} failed: {err}")
        if _syscall(ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)):
            err = os.strerror(ctypes.get_errno())
            raise SandboxError(f"landlock_restrict_self failed: {err}")
    finally:
        os.close(ruleset)
    return abi


def _is_dir(fd: int) -> bool:
    return stat.S_ISDIR(os.fstat(fd).st_mode)


# Imported by ``load_lazy_modules``: what the server would otherwise import on first use.
LAZY_MODULES = (
    "anyio._backends._asyncio",  # anyio picks its backend when the loop starts
    "anyio._core._signals",  # open_signal_receiver: the stdio loop's Ctrl-C (server.py)
    "concurrent.futures.thread",  # concurrent.futures loads its executors lazily (grep.py)
    "encodings.idna",  # socket.getaddrinfo encodes names with it
    "encodings.latin_1",
    "mcp.server.stdio",
    "rootgrep.globs",  # (imported inside functions)
    "rootgrep.index.plan",
    "rootgrep.index.state",
)
OPTIONAL_MODULES = ("watchfiles",)  # the watcher's fallback where inotify cannot be used


def load_lazy_modules() -> None:
    """Import (and load) now what the server would otherwise load on first use, from files
    the sandbox no longer lets it read: native grammars, backends chosen at run time, modules
    imported inside functions. Found by tracing every tool over both transports (strace: the
    failed opens after the restriction) and pinned by tests/e2e/test_sandbox_tools.py."""
    import importlib
    import time

    for name in LAZY_MODULES:
        importlib.import_module(name)
    for name in OPTIONAL_MODULES:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    from . import symbols

    # every tree-sitter grammar (a native library each, loaded on its language's first file)
    seen: set[str] = set()
    for ext, language in symbols._EXTENSIONS.items():
        if language not in seen:
            seen.add(language)
            symbols.extract(b"x" + ext, b"x\n")
    time.localtime()  # (glibc reads /etc/localtime once, for the log's timestamps)
    from . import confine

    confine.open_mount_table()  # (watchers poll it: mounts made inside a root)
