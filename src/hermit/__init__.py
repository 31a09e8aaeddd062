"""Hermit: a local-first personal AI assistant whose memory is plain Markdown files."""

__version__ = "0.1.0"
