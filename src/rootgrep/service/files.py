"""Reading: list_roots, read_file, list_directory, directory_tree, file_info."""

from __future__ import annotations

import os
import stat as stat_mod
from collections.abc import Sequence

from .. import confine
from ..confine import display
from ..errors import (
    InvalidArgument,
    NotADirectory,
)
from ..models import (
    DirectoryTreeResult,
    DirEntry,
    FileInfoResult,
    ListDirectoryResult,
    ListRootsResult,
    ReadFileResult,
    RootInfo,
    TreeNode,
)
from ..roots import Root
from ..walker import Walker
from ..window import DEFAULT_MAX_LINES, read_window_at
from .base import (
    LIST_PAGE,
    ServiceBase,
    Token,
    _b64,
    _clamp,
    _fingerprint,
    _unb64,
    audited,
    decode_cursor,
    encode_cursor,
    file_uri,
    iso,
    ref,
)


class Files(ServiceBase):
    # -- list_roots ------------------------------------------------------------------------

    def list_roots(self, roots: Sequence[Root], cursor: str | None = None) -> ListRootsResult:
        """The roots, from the one after the cursor's (a cut answer continues by root id)."""
        fp = _fingerprint(tool="list_roots")
        start = 0
        if cursor:
            after = decode_cursor(cursor, "roots", fp).get("a")
            ids = [r.id for r in roots]
            if after not in ids:
                raise InvalidArgument(
                    "`cursor` continues after a root that is no longer served; call list_roots "
                    "again without a cursor"
                )
            start = ids.index(after) + 1
        result = ListRootsResult(
            roots=[
                RootInfo(id=r.id, name=r.name, uri=r.uri, source=r.source, index=self.index_info(r))
                for r in roots[start:]
            ],
            read_only=not self.settings.allow_write,
        )

        shown = list(result.roots)  # (as built: the answer may cut result.roots)

        def resume_at(k: int) -> str | None:
            return encode_cursor("roots", fp, a=shown[k - 1].id) if 0 < k < len(shown) else None

        result._resume = resume_at
        return result

    # -- read_file ---------------------------------------------------------------------------

    @audited("read_file", "read", "path")
    def read_file(
        self,
        roots: Sequence[Root],
        *,
        path: str,
        root: str | None = None,
        start_line: int | None = None,
        end_line: int | None = None,
        max_lines: int = DEFAULT_MAX_LINES,
        token: Token | None = None,
    ) -> ReadFileResult:
        r, comps = self._locate(roots, "read_file", "read", path, root)
        w = read_window_at(
            r.fs, comps, start_line=1 if start_line is None else start_line, end_line=end_line,
            max_lines=max_lines, max_bytes=self.settings.max_read_bytes,
            max_file_size=self.settings.max_file_size,
            cancelled=(lambda: token.cancelled) if token is not None else None,
        )  # fmt: skip
        stop = w.total_lines if end_line is None else min(w.total_lines, end_line)

        def resume_at(k: int) -> int | None:
            """The line after the first k lines of this window (None: past the range)."""
            nxt = w.start_line + k
            return nxt if nxt <= stop else None

        result = ReadFileResult(
            root=ref(r),
            path=display(comps),
            uri=file_uri(r, b"/".join(comps)),
            content="".join(w.lines),
            start_line=w.start_line,
            end_line=w.end_line,
            total_lines=w.total_lines,
            next_start_line=w.next_start_line,
            truncated=w.truncated,
            lines_cut=w.cut_lines,
        )
        result._resume = resume_at
        result._lines = w.lines
        return result

    # -- list_directory ----------------------------------------------------------------------

    @audited("list_directory", "list", "path")
    def list_directory(
        self,
        roots: Sequence[Root],
        *,
        path: str | None = None,
        root: str | None = None,
        cursor: str | None = None,
    ) -> ListDirectoryResult:
        r, comps = self._locate(roots, "list_directory", "list", path, root)
        fp = _fingerprint(t="ls", r=r.id, p=display(comps))
        after = _unb64(decode_cursor(cursor, "ls", fp)["n"]) if cursor else None
        fd = r.fs.open_dir(comps)
        entries: list[DirEntry] = []
        more = False
        names: list[bytes] = []  # (raw, for the cursors)
        try:
            listing = confine.scan_fd(fd)
            for e in listing:
                if after is not None and e.name <= after:
                    continue
                if len(entries) >= LIST_PAGE:
                    more = True
                    break
                try:
                    st: os.stat_result | None = confine.stat_at(fd, e.name)
                except OSError:
                    st = None
                entries.append(
                    DirEntry(
                        name=display(e.name),
                        type=e.kind,
                        size=st.st_size if st is not None else None,
                        mtime=iso(st.st_mtime) if st is not None else None,
                    )
                )
                names.append(e.name)
        finally:
            os.close(fd)

        def resume_at(k: int) -> str | None:
            return encode_cursor("ls", fp, n=_b64(names[k - 1])) if k < len(names) or more else None

        result = ListDirectoryResult(
            root=ref(r),
            path=display(comps),
            uri=file_uri(r, b"/".join(comps)),
            entries=entries,
            next_cursor=resume_at(len(entries)) if entries else None,
            truncated=listing.cut,
        )
        result._resume = resume_at
        return result

    # -- directory_tree ----------------------------------------------------------------------

    @audited("directory_tree", "list", "path")
    def directory_tree(
        self,
        roots: Sequence[Root],
        token: Token,
        *,
        path: str | None = None,
        root: str | None = None,
        max_depth: int = 3,
        max_entries: int = 500,
    ) -> DirectoryTreeResult:
        r, comps = self._locate(roots, "directory_tree", "list", path, root)
        depth = _clamp(max_depth, 1, 20)
        cap = _clamp(max_entries, 1, 10000)
        st = r.fs.stat(comps)
        if not stat_mod.S_ISDIR(st.st_mode):
            raise NotADirectory(f"'{display(comps)}' is not a directory")
        top = TreeNode(name=display(comps[-1]) if comps else r.name, type="dir", children=[])
        stack: list[TreeNode] = [top]
        truncated = False
        count = 0
        walker = Walker(r.fs, b"/".join(comps))
        entries = walker.tree_entries(depth)
        try:
            for level, _rel, e in entries:
                token.check()
                if count >= cap:
                    truncated = True
                    break
                del stack[level:]
                node = TreeNode(
                    name=display(e.name), type=e.kind, children=[] if e.kind == "dir" else None
                )
                parent = stack[-1]
                assert parent.children is not None
                parent.children.append(node)
                count += 1
                if e.kind == "dir":
                    stack.append(node)
        finally:
            entries.close()
        return DirectoryTreeResult(
            root=ref(r), path=display(comps), uri=file_uri(r, b"/".join(comps)), tree=top,
            truncated=truncated,
        )  # fmt: skip

    # -- file_info ---------------------------------------------------------------------------

    @audited("file_info", "stat", "path")
    def file_info(
        self, roots: Sequence[Root], *, path: str, root: str | None = None
    ) -> FileInfoResult:
        r, comps = self._locate(roots, "file_info", "stat", path, root)
        st = r.fs.stat(comps, follow=False)
        return FileInfoResult(
            root=ref(r),
            path=display(comps),
            uri=file_uri(r, b"/".join(comps)),
            type=confine.entry_kind(st.st_mode),
            size=st.st_size,
            mtime=iso(st.st_mtime),
            mode=f"{stat_mod.S_IMODE(st.st_mode):04o}",
            is_symlink=stat_mod.S_ISLNK(st.st_mode),
        )
