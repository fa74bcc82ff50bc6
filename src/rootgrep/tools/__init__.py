"""The MCP tools' contracts: one ``ToolSpec`` each (arguments with their descriptions, result
model, text answer), grouped by family: ``searching`` (grep, search, find_files, reindex),
``symbols`` (find_symbol, outline), ``files`` (list_roots, read_file, list_directory,
directory_tree, file_info), ``writes``. The server registers ``TOOLS`` as they are; adding a
tool means adding a spec here."""

from __future__ import annotations

from typing import Any

from .files import DIRECTORY_TREE, FILE_INFO, LIST_DIRECTORY, LIST_ROOTS, READ_FILE
from .searching import FIND_FILES, GREP, REINDEX, SEARCH
from .spec import DEFAULT_MAX_ANSWER_CHARS, Call, Out, ToolSpec, invalid_argument_message
from .symbols import FIND_SYMBOL, OUTLINE
from .writes import (
    COPY_PATH,
    CREATE_DIRECTORY,
    DELETE_PATH,
    EDIT_FILE,
    MOVE_PATH,
    WRITE_FILE,
)

TOOLS: tuple[ToolSpec[Any, Any], ...] = (
    LIST_ROOTS,
    GREP,
    SEARCH,
    FIND_SYMBOL,
    FIND_FILES,
    READ_FILE,
    OUTLINE,
    LIST_DIRECTORY,
    DIRECTORY_TREE,
    FILE_INFO,
    REINDEX,
    WRITE_FILE,
    EDIT_FILE,
    CREATE_DIRECTORY,
    MOVE_PATH,
    COPY_PATH,
    DELETE_PATH,
)

INSTRUCTIONS = """rootgrep searches and reads files inside the client's roots (within the \
operator's). Which tool: grep for every exact occurrence of a string or regex (exhaustive, \
like ripgrep); find_symbol for where a name is defined; search for files ranked by words \
when you do not know the exact text; find_files for files by name or glob; outline for a \
file's definitions; read_file to read lines (as many as fit about 20k characters; its \
answer says which lines it gave and the start_line that reads on); list_directory / \
directory_tree to look around; list_roots for what is served. \
Paths shown in answers can be passed back as `path` as they are. Answers are cut to fit \
(about 20k characters): continue with the cursor or next_start_line they give. Errors start \
with a [code] and say what to do next."""

__all__ = [
    "DEFAULT_MAX_ANSWER_CHARS",
    "INSTRUCTIONS",
    "TOOLS",
    "Call",
    "Out",
    "ToolSpec",
    "invalid_argument_message",
]
