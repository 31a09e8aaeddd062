"""The HermitError tree: every error carries a message and an actionable hint."""

from __future__ import annotations


class HermitError(Exception):
    """Base of every error Hermit raises on purpose; `hint` says what the user can do about it."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message


class ConfigError(HermitError):
    """The config file is missing, malformed or invalid."""


class WorkspaceError(HermitError):
    """A workspace path is invalid, or a path escapes the workspace."""


class PathPolicyError(WorkspaceError):
    """A path was refused by a rule (outside the workspace, symlink, wrong extension...)."""


class IndexError_(HermitError):
    """The memory index could not be opened, read or written."""


class DiskFullError(HermitError):
    """A write failed because the filesystem is full (ENOSPC, SQLITE_FULL): what was already saved is intact."""


def disk_full(path: object, what: str) -> DiskFullError:
    """The one wording for a full disk, wherever Hermit was writing: never advice to delete anything."""
    return DiskFullError(f"the disk is full: could not write {what} ({path})",
                         "free some space on that disk (`df -h` shows which is full), then run the command "
                         "again; nothing was lost: your notes, sessions and the existing index are as they were")


class EmbeddingError(HermitError):
    """An embedding provider failed (missing key, HTTP error, bad response, model file)."""


class ProviderError(HermitError):
    """A model provider failed."""


class AuthError(ProviderError):
    """The provider rejected the credentials."""


class RateLimitError(ProviderError):
    """The provider said 429 and retries ran out."""

    def __init__(self, message: str, hint: str = "", retry_after: float | None = None) -> None:
        super().__init__(message, hint)
        self.retry_after = retry_after


class ContextOverflowError(ProviderError):
    """The request was larger than the model's context window; compaction can recover."""


class ToolError(HermitError):
    """A tool failed; the agent loop turns this into a tool result for the model."""


class SessionError(HermitError):
    """A session transcript or store could not be read or written."""


class ChannelError(HermitError):
    """A chat channel could not deliver or receive (platform error, bad credentials, retries exhausted)."""


class AccessDenied(HermitError):
    """A sender or client is not allowed in (access policy, bad token, forged signature)."""


class JobError(HermitError):
    """A scheduled job is invalid or unknown, or the job file could not be read or written."""


class Cancelled(HermitError):
    """A model call or turn was cancelled on purpose (the gateway shutting down, a client going away)."""


class SessionBusy(SessionError):
    """Another process is answering in the same session right now."""


class StoreError(IndexError_):
    """The configured memory store (a PostgreSQL server) cannot be reached or used."""
