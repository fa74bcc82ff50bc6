"""How an index folder and its daemon's socket are named, with nothing imported but the
digest: the ``rootgrep grep`` that a daemon runs whole (``remote_grep``) finds that daemon's
socket by these names before it imports anything else of rootgrep (``cache.py`` pins and
checks the folders themselves)."""

from __future__ import annotations

import os

from ..digest import sha256

# The layout of an index folder's contents (``fields.py``'s fields, ``state.py``'s files);
# bumped with any change to it. Here (as the names below): a CLI grep that asks a daemon names
# the folder without importing the cache, the store or tantivy. Its history:
# 2: trigrams keep their case; 3: binary state; 4: bound to a directory;
# 5: symbols (``sym``, ``defs``, ``symbols``) and the ``low`` (test/vendored/generated) flag;
# 6: no stored copy of the files (snippets and grep read the files themselves), and no
# positions (phrases are checked on the files); 7: one ``sym`` field for every symbol name
# (``defs`` and ``main`` folded into it), symbols stored compactly, without signatures;
# 8: ``content`` cut by the simple tokenizer over ``word_text`` (``_`` stored as ``WORD_JOIN``);
# 9: a large file's trigrams in pieces cut at line ends (``tri_pieces``: part documents);
# 10: every file's trigrams in part documents only (its main document holds none), so a
# build commits them first, ready for grep, and its words and symbols after (``_complete_locked``);
# 11: a file's key holds its ctime (``state.Entry``: an edit that keeps the size and sets the
# mtime back is seen); 12: ``parts``, the sub-words of the compound names a file defines
SCHEMA_VERSION = 12
SOCKET_NAME = "daemon.sock"  # a daemon's socket, in the index folder it keeps fresh


def default_cache_dir() -> str:
    """``$ROOTGREP_CACHE_DIR``, else ``$XDG_CACHE_HOME/rootgrep``, else ``~/.cache/rootgrep``."""
    env = os.environ.get("ROOTGREP_CACHE_DIR")
    if env:
        return env
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "rootgrep")


def folder_name(root_path: bytes, schema: int | None = None) -> str:
    """The index folder of a root for one schema (default ``SCHEMA_VERSION``): the hash of its
    canonical path, ``-v`` and the schema version."""
    return f"{root_key(root_path)}-v{SCHEMA_VERSION if schema is None else schema}"


def root_key(root_path: bytes) -> str:
    return sha256(root_path).hexdigest()[:20]


def self_and_ancestors(path: bytes) -> list[bytes]:
    """``path`` (absolute) and every directory above it, nearest first."""
    out = [path]
    while (parent := os.path.dirname(path)) != path:
        out.append(parent)
        path = parent
    return out


def no_index_why(cache_dir: str, path: bytes) -> str | None:
    """Why no index in ``cache_dir`` can answer for the directory ``path``, seen without
    loading the index (a CLI grep's start-up: 2 ms): there is no cache dir, or no folder of
    ``path`` or of a directory above it in it, for this schema. None when there may be one,
    or the cache dir is not one to look into (``index.cache`` then says why)."""
    from ..confine.sockets import entry_at, pin_lookup

    fd = pin_lookup(cache_dir)
    if fd is None:  # (``lexists`` only to say why: nothing is opened by it)
        return f"no index cache at {cache_dir}" if not os.path.lexists(cache_dir) else None
    try:
        if any(entry_at(fd, folder_name(above)) for above in self_and_ancestors(path)):
            return None
    finally:
        os.close(fd)
    return no_index_of(path, cache_dir)


def no_index_of(path: bytes, cache_dir: str) -> str:
    from ..confine.paths import display

    return f"no index of {display(path)} or of a directory above it in {cache_dir}"
