"""Per-root search indexes: query planning, the Tantivy store, and keeping it in sync."""
