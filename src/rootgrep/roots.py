"""Roots: client root URIs, root identity, effective roots, and mapping a request to a root.

A root is pinned as a directory fd (through ``confine.Beneath.pin``) the moment it is accepted;
from then on it is addressed only through that fd. Containment is always by path components.
"""

from __future__ import annotations

import os

from .confine import Beneath, SymlinkPolicy, fsencode_path, split_relpath, strip_prefix
from .digest import sha256
from .errors import (
    AmbiguousRoot,
    InvalidPath,
    InvalidUri,
    NoRoots,
    OutsideRoots,
    RootgrepError,
    UnknownRoot,
)

# a path shown as text survives being passed back only without a backslash, a control or
# line-separating character, or white space at either end (``faithful``); a name that reads
# as a URI scheme (``uri_like``) is shown as its URI too. (Compiled at first use: the CLI's
# start-up imports this module.)
_PATH_TEXT: list[re.Pattern[str]] = []


def _path_text() -> list[re.Pattern[str]]:
    if not _PATH_TEXT:
        import re

        _PATH_TEXT[:] = [
            re.compile(r"[\\\x00-\x1f\x7f\u2028\u2029\x85]|^\s|\s$"),
            re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:"),
        ]
    return _PATH_TEXT


def faithful(shown: str) -> bool:
    """Whether a path shown as this text, passed back as a tool's ``path``, names the same
    file (else show its ``file://`` URI)."""
    return _path_text()[0].search(shown) is None


def uri_like(shown: str) -> bool:
    """Whether a path's text would read as a URI (``a:b``): shown as its URI instead."""
    return _path_text()[1].match(shown) is not None


TYPE_CHECKING = False  # (``typing`` is not imported at run time: the CLI's start-up)
if TYPE_CHECKING:
    import re
    from collections.abc import Sequence
    from typing import Literal

    RootSource = Literal["client", "operator", "both"]
else:
    RootSource = str


def _scheme(text: str) -> re.Match[str] | None:
    """A URI's scheme and its ``:`` at the start of ``text`` (``re`` imported only here: a
    CLI grep of a path does without it)."""
    import re

    return re.match(r"([A-Za-z][A-Za-z0-9+.\-]*):", text)


def parse_file_uri(uri: str) -> bytes:
    """The absolute path a ``file:`` URI names, percent-decoded exactly once.

    Accepts ``file:///p``, ``file://localhost/p`` and ``file:/p`` (scheme case-insensitive);
    refuses other schemes, other hosts, relative forms, queries, fragments and NUL.
    """
    if "\0" in uri:
        raise InvalidUri("the URI contains a NUL character; remove it")
    m = _scheme(uri)
    if m is None:
        raise InvalidUri(f"'{uri[:200]}' is not a URI; use a file:///absolute/path URI")
    scheme = m.group(1)
    if scheme.lower() != "file":
        raise InvalidUri(f"only file: URIs are accepted, not '{scheme}:'")
    rest = uri[m.end() :]
    if "?" in rest or "#" in rest:
        raise InvalidUri("a file URI may not have a query or a fragment; percent-encode ? and #")
    if rest.startswith("//"):
        host, sep, tail = rest[2:].partition("/")
        if host.lower() not in ("", "localhost"):
            raise InvalidUri(f"the file URI names host '{host}'; only local files are served")
        if not sep:
            raise InvalidUri("the file URI has no path; use file:///absolute/path")
        path = "/" + tail
    elif rest.startswith("/"):
        path = rest
    else:
        raise InvalidUri("a file URI must hold an absolute path (file:///absolute/path)")
    import urllib.parse  # (only for client URIs: the CLI never parses one)

    try:
        raw = urllib.parse.unquote_to_bytes(path)
    except UnicodeEncodeError:
        raise InvalidUri("the URI is not valid text (a lone surrogate); fix it") from None
    if b"\0" in raw:
        raise InvalidUri("the URI decodes to a path with a NUL byte")
    return raw


# the bytes ``urllib.parse.quote_from_bytes(path, safe="/")`` leaves as they are
_URI_PLAIN_BYTES = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~/"
_URI_PLAIN = frozenset(_URI_PLAIN_BYTES)
_URI_ESCAPES = [f"%{b:02X}" for b in range(256)]


def path_to_uri(path: bytes) -> str:
    """The canonical ``file://`` URI of an absolute path (bytes are percent-encoded), as
    ``urllib.parse.quote_from_bytes(path, safe="/")`` writes it (without importing
    ``urllib.parse``, 1.5 ms of every root pinned by the CLI; a test keeps the two equal)."""
    if not path.translate(None, _URI_PLAIN_BYTES):  # (every byte plain: one pass in C)
        return "file://" + path.decode("ascii")
    return "file://" + "".join(chr(b) if b in _URI_PLAIN else _URI_ESCAPES[b] for b in path)


def root_id(canonical: bytes) -> str:
    """A short, stable id for a root's canonical path."""
    return sha256(canonical).hexdigest()[:12]


def is_within(inner: bytes, outer: bytes) -> bool:
    return strip_prefix(inner, outer) is not None


class Root:
    """An accepted root: identity plus its pinned fd. (A plain class, not a dataclass: the
    CLI's start-up does not import ``dataclasses``.)"""

    def __init__(
        self,
        id: str,
        name: str,
        uri: str,
        path: bytes,
        source: RootSource,
        fs: Beneath,
        extra_aliases: tuple[bytes, ...] = (),
        anchor: tuple[Root, list[bytes]] | None = None,
        lookup_only: bool = False,
        announced: str | None = None,
    ) -> None:
        self.id = id
        self.name = name
        self.uri = uri
        self.path = path  # canonical absolute path
        self.source: RootSource = source
        self.fs = fs
        self.extra_aliases = extra_aliases
        # a client root inside an operator root: that root and the components leading to it
        self.anchor = anchor
        # a client root its reader may not open (only look up, see pin_root): it can only
        # hold operator roots, and is never served itself
        self.lookup_only = lookup_only
        # a client root: the URI as the client sent it (an error naming the root shows this,
        # never ``uri``: the canonical path of a root announced through a link that leads
        # out of the operator's roots would reveal where the link leads)
        self.announced = announced

    def __repr__(self) -> str:
        return (
            f"Root(id={self.id!r}, name={self.name!r}, uri={self.uri!r}, path={self.path!r}, "
            f"source={self.source!r}, extra_aliases={self.extra_aliases!r})"
        )

    @property
    def aliases(self) -> tuple[bytes, ...]:
        """Absolute spellings a request may use for this root (canonical first)."""
        return tuple(dict.fromkeys(self.fs.aliases + self.extra_aliases))

    def identity(self) -> dict[str, str]:
        return {"id": self.id, "name": self.name, "uri": self.uri}

    def close(self) -> None:
        self.fs.close()

    def still_inside(self) -> bool:
        """For a client root nested in an operator root: whether the directory pinned at
        acceptance is still the one found beneath the operator root's fd at the same place
        (a directory moved out after it was accepted is not served any more)."""
        if self.anchor is None:
            return True
        outer, prefix = self.anchor
        try:
            fd = outer.fs.open_dir(prefix, no_symlinks=True)
        except RootgrepError:
            return False
        try:
            there = os.fstat(fd)
            pinned = os.fstat(self.fs.fd) if self.fs.fd >= 0 else None
        except OSError:
            return False
        finally:
            os.close(fd)
        return pinned is not None and (there.st_dev, there.st_ino) == (
            pinned.st_dev,
            pinned.st_ino,
        )

    def acquire(self) -> bool:
        return self.fs.acquire()

    def release(self) -> None:
        self.fs.release()

    def retire(self) -> None:
        self.fs.retire()


def pin_root(
    path: str | bytes,
    *,
    name: str | None = None,
    source: RootSource = "operator",
    symlinks: SymlinkPolicy = "within",
    use_openat2: bool | None = None,
) -> Root:
    """Accept a directory as a root: it must exist and be a directory; it is pinned as an fd."""
    raw = fsencode_path(path)
    if not raw.startswith(b"/"):
        raw = os.fsencode(os.path.abspath(raw))
    shown = raw.decode("utf-8", "backslashreplace")
    lookup_only = False
    try:
        try:
            fs = Beneath.pin(raw, symlinks=symlinks, use_openat2=use_openat2)
        except PermissionError:
            if source != "client":
                raise
            # (a client root above the operator roots, which ``serve --sandbox`` may not
            # read: pinned to be looked up only, to find the operator roots it holds)
            fs = Beneath.pin(raw, symlinks=symlinks, use_openat2=use_openat2, lookup_only=True)
            lookup_only = True
    except FileNotFoundError:
        raise InvalidPath(f"root '{shown}' does not exist; give an existing directory") from None
    except NotADirectoryError:
        raise InvalidPath(f"root '{shown}' is not a directory; give a directory") from None
    except PermissionError:
        raise InvalidPath(f"root '{shown}' cannot be opened (permission denied)") from None
    except OSError as e:
        raise InvalidPath(f"root '{shown}' cannot be opened ({e.strerror})") from None
    canonical = fs.path
    if name is None:
        name = os.fsdecode(os.path.basename(canonical) or b"/")
    root = Root(root_id(canonical), name, path_to_uri(canonical), canonical, source, fs)
    root.lookup_only = lookup_only
    return root


def accept_client_root(
    uri: str,
    name: str | None = None,
    *,
    symlinks: SymlinkPolicy = "within",
    use_openat2: bool | None = None,
) -> Root:
    """Validate one raw client root URI (SPEC §3) and pin it. Raises ``invalid_uri``."""
    raw = parse_file_uri(uri)
    if any(c in (b".", b"..") for c in raw.split(b"/")):
        raise InvalidUri("a root URI may not contain '.' or '..' segments")
    try:
        r = pin_root(raw, name=name, source="client", symlinks=symlinks, use_openat2=use_openat2)
    except RootgrepError as e:
        raise InvalidUri(f"root {uri[:200]!r} is not usable: {e.message}") from None
    r.announced = uri
    return r


def effective_roots(client: Sequence[Root] | None, operator: Sequence[Root]) -> list[Root]:
    """Client roots ∩ operator roots, component-wise (SPEC §3).

    ``client=None`` means the client has no roots capability: the operator roots are the scope.
    With no operator roots the client roots are the scope. The result reuses the given pins
    (each effective root is one of the inputs: the deeper of an overlapping pair).
    """
    if client is None:
        return list(operator)
    if not operator:
        return _dedupe([c for c in client if not c.lookup_only])
    out: list[Root] = []
    for c in client:
        for o in operator:
            if is_within(o.path, c.path):
                if o.path == c.path:
                    out.append(Root(o.id, c.name, o.uri, o.path, "both", o.fs, c.aliases))
                else:
                    out.append(o)
            elif is_within(c.path, o.path) and not c.lookup_only:
                prefix = strip_prefix(c.path, o.path) or []
                out.append(
                    Root(c.id, c.name, c.uri, c.path, c.source, c.fs, c.extra_aliases, (o, prefix),
                         announced=c.announced)  # (an error names it as the client did)
                )  # fmt: skip
    return _dedupe(out)


def _dedupe(roots: list[Root]) -> list[Root]:
    seen: set[bytes] = set()
    out: list[Root] = []
    for r in roots:
        if r.path not in seen:
            seen.add(r.path)
            out.append(r)
    return out


def find_root(roots: Sequence[Root], ref: str) -> Root:
    """The root a tool's ``root`` argument names: its id, URI, name or path (a name that two
    roots share is ambiguous: their ids tell them apart)."""
    for r in roots:
        if ref in (r.id, r.uri):
            return r
    named = [r for r in roots if r.name == ref]
    if len(named) > 1:
        raise AmbiguousRoot(
            f"{len(named)} roots are named {ref[:200]!r}; pass `root` as one of their ids: "
            + list_roots_text(named)
        )
    if named:
        return named[0]
    try:
        raw = parse_file_uri(ref) if _scheme(ref) else fsencode_path(ref)
    except RootgrepError:
        raw = b""
    if raw.startswith(b"/"):
        for r in roots:
            if any(strip_prefix(raw, a) == [] for a in r.aliases):
                return r
    raise UnknownRoot(
        f"no effective root matches '{ref[:200]}'; the roots are: {list_roots_text(roots)}"
    )


MAX_ROOTS_LISTED = 20  # an error message names at most this many roots
MAX_LISTED_CHARS = 4_000  # ... in at most this many characters (one root at least)


def listed(items: Sequence[str], more_hint: str = "list_roots shows all") -> str:
    """Items (roots, URIs) joined for an error message, at most MAX_ROOTS_LISTED of them in
    at most MAX_LISTED_CHARS characters (the first always): a message stays well under the
    answer budget however many roots there are and however long their paths."""
    if not items:
        return "none"
    shown: list[str] = []
    size = 0
    for item in items[:MAX_ROOTS_LISTED]:
        if shown and size + len(item) + 2 > MAX_LISTED_CHARS:
            break
        shown.append(item)
        size += len(item) + 2
    more = len(items) - len(shown)
    return "; ".join(shown) + (f"; and {more} more ({more_hint})" if more else "")


def list_roots_text(roots: Sequence[Root]) -> str:
    """The roots to choose from, for an error message: name, id and URI of each."""
    return listed([f"{r.name} (id {r.id}, {r.uri})" for r in roots])


_OTHER_SCHEMES = frozenset(
    [
        "http",
        "https",
        "ftp",
        "ftps",
        "sftp",
        "ssh",
        "smb",
        "cifs",
        "nfs",
        "afp",
        "data",
        "javascript",
        "mailto",
        "urn",
        "git",
        "svn",
        "s3",
        "gs",
        "ws",
        "wss",
        "vscode",
        "about",
        "blob",
    ]
)


def _looks_like_uri(path: str) -> bool:
    """``file:`` URIs, anything with ``scheme://``, and well-known schemes are URIs (and so
    refused unless ``file:``); ``C:\\x`` or ``a:b.txt`` stay literal relative names."""
    m = _scheme(path)
    if m is None:
        return False
    scheme = m.group(1).lower()
    return scheme == "file" or scheme in _OTHER_SCHEMES or path[m.end() :].startswith("//")


def resolve_target(
    roots: Sequence[Root], path: str | None, root: str | None = None
) -> tuple[Root, list[bytes]]:
    """Map a tool's (path, root) arguments to a root and root-relative components (SPEC §4).

    The components may still hold ``..``: they are resolved beneath the root's fd, where a
    ``..`` that leaves the root fails with ``outside_roots``.
    """
    if not roots:
        raise NoRoots("no effective roots: the client announced none inside the served roots")
    chosen = find_root(roots, root) if root is not None else None
    if path is None or path in ("", "."):
        if chosen is None:
            if len(roots) > 1:
                raise AmbiguousRoot(
                    "several roots are served; pass `root` (an id, name or URI) or an absolute "
                    "path. The roots: " + list_roots_text(roots)
                )
            chosen = roots[0]
        return chosen, []
    raw = parse_file_uri(path) if _looks_like_uri(path) else fsencode_path(path)
    if raw.startswith(b"/"):
        best: tuple[int, Root, list[bytes]] | None = None
        for r in [chosen] if chosen is not None else roots:
            for alias in r.aliases:
                inner = strip_prefix(raw, alias)
                if inner is not None and (best is None or len(alias) > best[0]):
                    best = (len(alias), r, inner)
        if best is None:
            raise OutsideRoots(
                "the path is outside every root; use a path inside one of: "
                + listed([r.uri for r in roots])
            )
        inner = b"/".join(best[2])
        # a trailing '/' means "must be a directory"; the root itself (``file:///x/root/``)
        # is one, and an empty relative path would otherwise read as absolute
        tail = b"/" if inner and raw.endswith((b"/", b"/.")) else b""
        comps = split_relpath(inner + tail)
        return best[1], comps
    if chosen is None:
        if len(roots) > 1:
            raise AmbiguousRoot(
                "a relative path with several roots is ambiguous; pass `root` (an id, name or "
                "URI) or the path as answers show it (absolute). The roots: "
                + list_roots_text(roots)
            )
        chosen = roots[0]
    return chosen, split_relpath(raw)
