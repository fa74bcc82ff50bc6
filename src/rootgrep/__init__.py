"""rootgrep: fast, root-confined code search and file access for AI agents (an MCP server)."""

__version__ = "0.1.0"
