"""The `hermit` command line: one module per command group over the services."""
