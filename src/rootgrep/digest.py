"""The one SHA-256 of the package (a root's id, an index folder's name), chosen for the CLI's
start-up: ``hashlib`` loads OpenSSL (2 ms), so the lean C module is taken, as ``random`` does:
``_sha2`` on Python 3.12 and later, ``_sha256`` before; ``hashlib`` only on a Python with
neither. Each gives the same digest."""

from __future__ import annotations

try:
    from _sha2 import sha256
except ImportError:  # (Python 3.11: the module's old name)
    try:
        from _sha256 import sha256
    except ImportError:  # pragma: no cover (a Python without either)
        from hashlib import sha256

__all__ = ["sha256"]
