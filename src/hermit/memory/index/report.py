"""What a sync did, for its callers (the CLI's summary line, the gateway's log, `memory.status`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hermit.memory.index import skips
from hermit.memory.index.sources import Skip


def plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else (words or word + 's')}"


@dataclass
class SyncReport:
    files_seen: int = 0
    files_indexed: int = 0
    files_unchanged: int = 0
    files_deleted: int = 0
    files_skipped: int = 0  # seen but left out (binary, too large, a symlink…): `skips` says which and why
    chunks_indexed: int = 0
    lines_indexed: int = 0  # lines given a vector of their own
    lines_reused: int = 0  # … of which the index already held the vector (unchanged lines of an edited file)
    embedded: int = 0  # texts (chunks and lines) the model embedded; the rest came from the cache
    cache_hits: int = 0
    embed_seconds: float = 0.0
    seconds: float = 0.0
    rebuilt: bool = False
    first: bool = False  # the index held no files before this sync (a new workspace or index)
    skipped: bool = False  # another process holds the writer lock
    keyword_first: int = 0  # files stored keyword-only before their vectors (a large sync; see Ready)
    # Warnings: what could not be listed, and each file skipped for a reason not recorded before (a file
    # already recorded as skipped, unchanged since, is in `skips` but not warned about again).
    warnings: list[str] = field(default_factory=list)
    skips: list[Skip] = field(default_factory=list)

    def summary(self) -> str:
        what = "indexed" if self.first else "rebuilt" if self.rebuilt else "synced"
        return (f"{what}: {plural(self.files_seen, 'file')} ({self.files_indexed:,} indexed, "
                f"{self.files_unchanged:,} unchanged, "
                + (f"{self.files_skipped:,} skipped, " if self.files_skipped else "")
                + f"{self.files_deleted:,} removed), "
                f"{plural(self.chunks_indexed, 'chunk')}, "
                + (f"{plural(self.lines_indexed, 'line vector')}, " if self.lines_indexed else "")
                + f"{self.embedded:,} embedded, "
                f"{plural(self.cache_hits, 'cache hit')}, {self.seconds:.2f}s"
                + (f"; skipped: {skips.describe(self.skips)}" if self.skips else ""))
