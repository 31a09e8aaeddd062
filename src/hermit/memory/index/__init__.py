"""Indexing: which files are memory, how they are chunked and embedded, and keeping the index in step with them."""
