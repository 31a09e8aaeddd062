"""Storage backends of the memory index behind one interface: SQLite (the default) and PostgreSQL."""
