"""The audit log: one JSON line per authorization decision, never contents or credentials.

While it is open, the log file is hidden from every tool of this process (by identity, see
``confine.hide``): a log inside a served root must not show one session the paths another
asked for, nor be overwritten, moved or deleted through the tools."""

from __future__ import annotations

import datetime as _dt
import json
import os
import threading
from typing import Literal

from . import confine


class Audit:
    """Appends decisions to ``path`` (opened once, by the operator's own name for it)."""

    def __init__(self, path: str | None) -> None:
        self._lock = threading.Lock()
        self._fd = -1
        self._hidden: tuple[int, int] | None = None
        if path:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._hidden = confine.hide(self._fd)

    @property
    def enabled(self) -> bool:
        return self._fd >= 0

    @property
    def fd(self) -> int:
        """The log's fd (-1 when off): written only through it (``serve --sandbox`` grants no
        open of the file by name)."""
        return self._fd

    def record(
        self,
        *,
        tool: str,
        op: str,
        requested: str | None,
        decision: Literal["allow", "deny"],
        reason: str,
        root_id: str | None = None,
        path: str | None = None,
    ) -> None:
        if self._fd < 0:
            return
        line = {
            "ts": _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds"),
            "tool": tool,
            "op": op,
            "requested": None if requested is None else requested[:4096],
            "root_id": root_id,
            "path": path,
            "decision": decision,
            "reason": reason,
        }
        data = (json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8", "backslashreplace")
        with self._lock:
            os.write(self._fd, data)  # O_APPEND: each decision is one whole line

    def close(self) -> None:
        if self._hidden is not None:
            confine.unhide(self._hidden)
            self._hidden = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
