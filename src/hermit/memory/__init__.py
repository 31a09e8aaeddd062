"""The memory engine: Markdown files chunked, embedded and indexed into SQLite for hybrid search."""
