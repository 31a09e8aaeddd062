"""The PostgreSQL + pgvector memory store (memory_search.store.backend: postgres)."""
