"""The wire of a ``rootgrep grep`` that a daemon runs whole for a CLI (``remote_grep`` asks,
``freshness.FreshnessServer`` hands the request to the CLI's runner, ``cli.served_grep``).
Nothing but C modules is imported: the asking CLI has not loaded rootgrep yet.

The request is one line on the daemon's socket (``daemon.sock``, the one the freshness
protocol uses): ``run PROTOCOL CWD ARG...``, the CLI's working directory and each argument
after ``grep`` in base64 (``surrogateescape``: any bytes a shell can pass). The answer is a
stream of frames, a byte of kind and four of length (big-endian) before the payload:
``o`` bytes for stdout, ``e`` bytes for stderr, in the order the grep wrote them; then ``x``
and the exit status in ASCII. Or, before any output, ``l`` and why not: the CLI then runs the
grep itself (a flag the daemon does not run, a PATH its index does not answer for exactly, a
usage error, which the CLI says in its own words)."""

from __future__ import annotations

import binascii

PROTOCOL = 3  # (the freshness protocol's requests are ``2 ...``: another first word)
MAX_REQUEST = 1 << 20  # the request line (a pattern of up to 256 KiB and the paths, in base64;
# a longer one: the CLI runs the grep itself)
MAX_FRAME = 1 << 16  # a frame's payload: the daemon writes at most this much at once
OUT, ERR, EXIT, LOCAL = b"o", b"e", b"x", b"l"
KINDS = frozenset((OUT, ERR, EXIT, LOCAL))


def _b64(s: str) -> bytes:
    return binascii.b2a_base64(s.encode("utf-8", "surrogateescape"), newline=False)


def _unb64(b: bytes) -> str:
    return binascii.a2b_base64(b, strict_mode=True).decode("utf-8", "surrogateescape")


def run_request(cwd: str, argv: list[str]) -> bytes:
    """The request line for ``rootgrep grep ARGV`` run in ``cwd`` (absolute)."""
    return b" ".join([b"run", b"%d" % PROTOCOL, _b64(cwd), *map(_b64, argv)]) + b"\n"


def is_run_request(line: bytes) -> bool:
    return line.startswith(b"run ")


def parse_run_request(line: bytes) -> tuple[str, list[str]]:
    """(cwd, argv) of a request line; ValueError for one of another version, or garbage."""
    words = line.split(b" ")
    if len(words) < 3 or words[0] != b"run" or words[1] != b"%d" % PROTOCOL:
        raise ValueError("a run request of another version of rootgrep")
    try:
        cwd, *argv = map(_unb64, words[2:])
    except (binascii.Error, UnicodeDecodeError) as e:
        raise ValueError(f"a run request not in base64 ({e})") from None
    if not cwd.startswith("/"):
        raise ValueError("a run request's working directory is not absolute")
    return cwd, argv


def frame(kind: bytes, payload: bytes) -> bytes:
    """One frame (``payload`` of at most ``MAX_FRAME`` bytes)."""
    assert kind in KINDS and len(payload) <= MAX_FRAME
    return kind + len(payload).to_bytes(4, "big") + payload


def frames(buf: bytearray) -> list[tuple[bytes, bytes]]:
    """The whole frames at the front of ``buf``, taken off it; ValueError for a frame of an
    unknown kind or over ``MAX_FRAME`` (a daemon of another version, or garbage)."""
    out = []
    at = 0
    while len(buf) - at >= 5:
        kind = bytes(buf[at : at + 1])
        size = int.from_bytes(buf[at + 1 : at + 5], "big")
        if kind not in KINDS or size > MAX_FRAME:
            raise ValueError("not a frame of this version of rootgrep")
        if len(buf) - at - 5 < size:
            break
        out.append((kind, bytes(buf[at + 5 : at + 5 + size])))
        at += 5 + size
    del buf[:at]
    return out
