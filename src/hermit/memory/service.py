"""The memory service: the one place that answers memory_search / memory_get / status / sync.

The agent tool, the MCP tool and the CLI are thin faces over this class; the JSON it returns is the
memory_search / memory_get contract of SPEC §4 (camelCase keys as the original), each search result
labelled with its `audience`. Both take a reader (memory/policy/audience.py; default the owner): anyone else
gets only the chunks and lines it may see.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermit.config.schema import MemorySearchConfig
from hermit.errors import HermitError, PathPolicyError
from hermit.memory.embedders.base import Embedder, QueryRunner
from hermit.memory.index import skips
from hermit.memory.index.coverage import indexed_sources
from hermit.memory.index.session_source import (
    SESSIONS_PREFIX,
    read_transcript,
    resolve_session_path,
    transcript_origin,
    transcript_session_key,
)
from hermit.memory.index.sources import Skip
from hermit.memory.index.sync import ChunkProgress, Indexer, Progress, Ready, SyncReport
from hermit.memory.policy.audience import (
    AUDIENCE_RULE,
    NOT_FOUND_OR_NOT_SHARED,
    OWNER_READER,
    Reader,
    is_private_path,
    unnamed_result,
    visible_text,
)
from hermit.memory.policy.audience_map import AudienceMap
from hermit.memory.policy.paths import RULES as PATH_RULES
from hermit.memory.policy.paths import resolve_memory_path, safe_extra_roots
from hermit.memory.policy.privacy import is_hard_linked, is_long_term
from hermit.memory.policy.provenance import Origin, damaged_note, marker_damage
from hermit.memory.search.hybrid import HybridSearcher, SearchOutcome
from hermit.memory.search.lexicon import load_lexicon
from hermit.memory.search.tuning import DEFAULT_TUNING, SearchTuning
from hermit.memory.store.api import MemoryStore
from hermit.memory.store.factory import open_store
from hermit.messages import valid_text
from hermit.textfile import NotRegularFile, decode_text, read_regular
from hermit.workspace import MEMORY_FILE

log = logging.getLogger(__name__)
CHAT_SEARCH_FAILED = "memory search failed; the owner can see why in `hermit memory status` or the log"

# One cap for every face (agent tool, MCP, CLI): a question is a sentence or two, and a 200 KB query
# held the index for minutes (every word a keyword term, the whole text through the embedding model).
MAX_QUERY_CHARS = 2_000


@dataclass(frozen=True)
class MemoryKey:
    """Memory is keyed by agent id + workspace: no search ever crosses agents."""

    agent_id: str
    workspace: Path


WITHHELD_NOTICE = ("notes not shared with this chat are never searched or shown here (owner-only notes, MEMORY.md, "
                   "session transcripts, other chats' notes)")

NOT_FOUND_HINT = "check the path: use a path from memory_search results"
SYMLINK_REFUSAL = "symlinks are not followed"  # memory.policy.paths' refusal that depends on the disk


def not_found_or_not_shared(shown: str) -> PathPolicyError:
    return PathPolicyError(NOT_FOUND_OR_NOT_SHARED.format(path=shown), NOT_FOUND_HINT)


class MemoryService:
    def __init__(
        self,
        key: MemoryKey,
        index_path: Path,
        cfg: MemorySearchConfig,
        embedder: Embedder | None,
        *,
        long_lived: bool = False,
        clock: Callable[[], float] = time.time,
        sessions_dir: Path | None = None,
        cache_dir: Path | None = None,
        environ: Mapping[str, str] | None = None,
        store: MemoryStore | None = None,
        tuning: SearchTuning = DEFAULT_TUNING,
        state_dir: Path | None = None,
    ) -> None:
        self.key = key
        self.cfg = cfg
        self.embedder = embedder
        self.index_path = index_path
        # The configured backend (memory.store.factory); a postgres DSN is read from `environ` by name.
        env = os.environ if environ is None else environ
        # `state_dir`: whose PostgreSQL schema this may open (memory.store.postgres.claim).
        self.store = store or open_store(cfg, index_path, key.agent_id, env, state_dir)
        # The indexer writes through a connection of its own, so a search in this process (another
        # thread: an agent turn while the watcher indexes) reads what each file's transaction committed
        # and never waits for a sync, nor sees one half done. An injected store is shared (tests).
        self._writer = None if store is not None else open_store(cfg, index_path, key.agent_id, env, state_dir)
        self.sessions_dir = sessions_dir if "sessions" in cfg.sources else None
        self.indexer = Indexer(self._writer or self.store, key.workspace, cfg, embedder, clock=clock,
                               sessions_dir=self.sessions_dir)
        self.indexer.clean_stale_rebuilds()  # left by a killed `index --force`, possibly megabytes
        self.audiences = AudienceMap(key.workspace, cfg.max_file_bytes)
        # The translation lexicon is opened (built, in a new state dir: ~2 s of CPU) by the first search, not
        # here: status, get, index and a runtime that never searches do not need it (`searcher`).
        self._lexicon_dir = cache_dir if cfg.query.translation_weight > 0 else None
        self._lexicon_pending = True
        self._lexicon_lock = threading.Lock()
        self._searcher = HybridSearcher(self.store, embedder if cfg.store.vector_enabled else None, cfg.query,
                                        use_matrix=long_lived, clock=clock, lexicon=None,
                                        visible=self.audiences.visible_ids, tuning=tuning)
        if long_lived and cfg.store.vector_enabled and isinstance(embedder, QueryRunner):
            embedder.warm_queries()  # a long-lived process's queries move onto the faster runtime once loaded
        self._dirty = True  # unknown until checked once
        # Warnings of syncs a chat's search ran (not shown to it: they name the owner's files), for the owner's
        # next search; a skipped file is warned about once, when the sync first finds it.
        self._owner_notes: list[str] = []
        self._checked_at: float | None = None
        # The reading connection: agent turns, status and the watcher's callers take turns on it.
        self._lock = threading.RLock()
        # One sync at a time in this process (the store's writer lock orders processes).
        self._sync_lock = threading.Lock()

    @property
    def workspace(self) -> Path:
        return self.key.workspace

    @property
    def searcher(self) -> HybridSearcher:
        """The hybrid searcher, with the translation lexicon once anything searches (memory.search.lexicon)."""
        if self._lexicon_pending:
            with self._lexicon_lock:
                if self._lexicon_pending:
                    if self._lexicon_dir is not None:
                        self._searcher.lexicon = load_lexicon(self._lexicon_dir)
                    self._lexicon_pending = False
        return self._searcher

    def close(self) -> None:
        self.store.close()
        if self._writer is not None:
            self._writer.close()

    def mark_dirty(self) -> None:
        self._dirty = True

    # -- sync -------------------------------------------------------------------------------------
    def sync(self, *, force: bool = False, blocking: bool = True, progress: Progress | None = None,
             chunk_progress: ChunkProgress | None = None, ready: Ready | None = None,
             defer_vectors: bool = False) -> SyncReport:
        """Bring the index up to date; with `blocking=False`, skip when another sync (this process's
        or another's) is running. Searches do not wait for a sync: they read what it has committed.
        `defer_vectors`: leave the embedding backlog (Indexer.sync), for a search that must answer now."""
        if not self._sync_lock.acquire(blocking):
            return SyncReport(skipped=True)
        try:
            report = self.indexer.sync(force=force, blocking=blocking, progress=progress,
                                       chunk_progress=chunk_progress, ready=ready, defer_vectors=defer_vectors)
        finally:
            self._sync_lock.release()
        if not report.skipped:
            self._dirty = False
        return report

    @property
    def syncing(self) -> bool:
        """A sync is running in this process (the watcher's, or another thread's)."""
        return self._sync_lock.locked()

    def sync_if_dirty(self) -> SyncReport | None:
        """Before a search: index the files whose text changed, unless another process is writing the index.
        Vectors still to embed (a first index stopped midway: minutes of the model on CPU) are not this
        sync's: the search answers from what is stored, by keyword for those files, and says so
        (`_say_pending`); `hermit memory index`, or the gateway's watcher, embeds them."""
        if not self.cfg.sync.on_search:
            return None
        if self.syncing:  # that sync will pick up the change; the search reads what it has stored
            return SyncReport(skipped=True)
        if not self._dirty:
            now = time.monotonic()
            if self._checked_at is not None and (now - self._checked_at) * 1000 < self.cfg.sync.dirty_check_interval_ms:
                return None
            self._checked_at = now
            if not self.indexer.is_dirty(vectors=False):
                return None
        return self.sync(blocking=False, defer_vectors=True)

    # -- search -----------------------------------------------------------------------------------
    def search(self, query: str, max_results: int | None = None, min_score: float | None = None,
               reader: Reader = OWNER_READER) -> dict[str, Any]:
        """The memory_search result object (SPEC §4) of what `reader` may see; failures become
        {"disabled": true, "error"}."""
        if not self.cfg.enabled:
            return {"results": [], "disabled": True,
                    "error": "memory search is disabled (agents.defaults.memory_search.enabled: false)"}
        if not query or not query.strip():
            return {"results": [], "disabled": False, "error": "empty query: pass the words to search for"}
        if len(query) > MAX_QUERY_CHARS:
            return {"results": [], "disabled": False,
                    "error": f"the query is {len(query):,} characters; memory_search takes at most "
                             f"{MAX_QUERY_CHARS:,} characters: search for the few words that matter"}
        query = valid_text(query)  # a lone surrogate would fail in SQLite and the embedding model
        try:
            with self._lock:
                return self._search_locked(query, max_results, min_score, reader)
        except Exception as e:
            if not reader.owner:
                # The reason may name the store (a DSN, a path) or depend on what the owner's notes hold: the
                # owner's, in the log. Any error: a raw database error would carry the same.
                log.warning("a search for a chat failed: %s", e)
                return {"results": [], "disabled": True, "error": CHAT_SEARCH_FAILED}
            if isinstance(e, HermitError):
                return {"results": [], "disabled": True, "error": str(e)}
            raise

    def _search_locked(self, query: str, max_results: int | None, min_score: float | None,
                       reader: Reader) -> dict[str, Any]:
        notes: list[str] = []
        report = self.sync_if_dirty()
        if report is not None and report.skipped and reader.owner:
            # (not a chat's: polled, it would say when the owner writes)
            notes.append("the index is being updated; results may miss the newest edits")
        # The index's warnings name files ("memory/private/x.md: skipped, it is a FIFO"): the owner's to
        # read. A chat may trigger a sync (its own note marks the index dirty) and would otherwise learn the
        # names of files memory_get answers it as missing: kept for the owner's next search instead.
        found = report.warnings if report is not None else []
        if reader.owner:
            notes.extend([*self._owner_notes, *found][:5])
            self._owner_notes = []
        elif found:
            self._owner_notes = [*self._owner_notes, *(w for w in found if w not in self._owner_notes)][-20:]
        searcher = self.searcher  # (a first search may build the lexicon: not inside the read)
        with self.store.reading():
            outcome = searcher.search(query, max_results, min_score, reader=reader)
        out = self._result(outcome, notes, reader)
        self._say_pending(out, reader)
        return out

    def _say_pending(self, out: dict[str, Any], reader: Reader = OWNER_READER) -> None:
        """While a (first) index is still embedding, say how much: those notes are found by keyword
        only until their vectors are stored. Not a chat's: the backlog counts the owner's notes, so even
        "some are" would say, polled, when the owner writes."""
        if self.embedder is None or not self.cfg.store.vector_enabled or not reader.owner:
            return
        files, chunks = self.store.pending_vectors()
        if not chunks:
            return
        out["indexing"] = {"filesPending": files, "chunksPending": chunks}
        out.setdefault("warnings", []).append(
            f"still embedding {chunks:,} chunks of {files:,} files: until then they are found by keyword only")

    def search_outcome(self, query: str, max_results: int | None = None,
                       min_score: float | None = None) -> SearchOutcome:
        searcher = self.searcher
        with self._lock, self.store.reading():
            return searcher.search(query, max_results, min_score)

    def _result(self, outcome: SearchOutcome, notes: list[str], reader: Reader = OWNER_READER) -> dict[str, Any]:
        info = self.embedder.info if self.embedder else None
        out: dict[str, Any] = {
            "results": [
                {"path": h.path, "startLine": h.start_line, "endLine": h.end_line, "score": h.score,
                 "snippet": h.snippet, "source": h.source}
                for h in outcome.hits
            ],
            "provider": info.provider if info else "none",
            "model": info.model if info else "none",
        }
        # Who may see each result, and which came from others' notes (a snippet prefix says so).
        out["results"] = self.audiences.annotate(out["results"], self.searcher.tuning.max_window_chars,
                                                 transcripts=self._transcript_origin)
        if not reader.owner:  # a chat is not told the agent id (audience.unnamed)
            out["results"] = [unnamed_result(r) for r in out["results"]]
        if outcome.withheld or not reader.owner:
            # Said to every reader who is not the owner, whatever this search dropped: a notice only when
            # something was dropped would tell a chat which words the owner's notes hold, one query at a time.
            out["withheld"] = WITHHELD_NOTICE
        if outcome.unmatched:
            # Why nothing came back though some notes shared words with the question (an explicit
            # minScore is a hard threshold and shows them).
            out["unmatched"] = (f"{outcome.unmatched} passage(s) shared only the question's common words, nothing "
                                "in them near what it asks, and were left out")
        if outcome.mode != "hybrid":
            out["mode"] = outcome.mode
            if outcome.reason and reader.owner:
                out["reason"] = outcome.reason
            elif outcome.reason:  # the owner's endpoint, a provider's error text, a host path: not a chat's
                log.warning("vector search unavailable for a chat's search: %s", outcome.reason)
                out["reason"] = "vector search is unavailable right now; these results come from keyword search"
        if notes:
            out["warnings"] = notes
        return out

    # -- get --------------------------------------------------------------------------------------
    def get(self, path: str, from_line: int | None = None, lines: int | None = None,
            reader: Reader = OWNER_READER) -> dict[str, Any]:
        """The memory_get result {"path", "text"}; raises PathPolicyError with the rule broken.

        A reader other than the owner gets the lines it may not see replaced (memory.policy.audience.visible_text),
        so line numbers are the file's. Whatever it may see nothing of — a missing file, an owner-only one,
        something not a regular file, binary or unreadable — gets one answer (`not_found_or_not_shared`):
        a precise one would tell a chat which of the owner's files exist (their names hold topics)."""
        if path.startswith(SESSIONS_PREFIX):
            if not reader.owner:
                raise PathPolicyError("session transcripts are not shared with this chat", AUDIENCE_RULE)
            return self._get_session(path, from_line, lines)
        try:
            real, shown = resolve_memory_path(self.workspace, path, self.cfg.extra_paths)
        except PathPolicyError as e:
            # Of the path rules only the symlink one looks at the disk: for anyone but the owner it is
            # answered as a missing file, so it tells nothing of what the owner keeps there.
            if not reader.owner and e.message.startswith(SYMLINK_REFUSAL):
                raise self._as_without_symlinks(path) from None
            raise
        if from_line is not None and from_line < 1:
            raise PathPolicyError("'from' is 1-based", "pass from ≥ 1")
        if lines is not None and lines < 1:
            raise PathPolicyError("'lines' must be ≥ 1", "omit it to read to the end of the file")
        text = self._owner_text(real, shown) if reader.owner else self._reader_text(real, shown, reader)
        # The owner reads a file whose markers broke whole, told that no line of it is known to be theirs.
        damage = None if not reader.owner or is_private_path(shown) else marker_damage(text)
        extra = {"note": damaged_note(shown, damage)} if damage is not None else {}
        if from_line is None and lines is None:
            return {"path": shown, "text": text, **extra}
        all_lines = text.split("\n")
        start = (from_line or 1) - 1
        end = len(all_lines) if lines is None else start + lines
        return {"path": shown, "text": "\n".join(all_lines[start:end]), **extra}

    def _as_without_symlinks(self, raw: str) -> PathPolicyError:
        """For a reader other than the owner, the answer to a path refused for a symlink on its way: the one
        the same path without the symlink gets ("not a memory file", or as a missing file), worked out
        from the path alone so that neither its wording nor its display path says a symlink is there."""
        ws = self.workspace.resolve()
        given = Path(raw).expanduser()
        cand = Path(os.path.normpath(given if given.is_absolute() else ws / given))
        if not cand.is_relative_to(ws):
            return not_found_or_not_shared(cand.as_posix())  # under an extra path outside the workspace
        rel = cand.relative_to(ws).as_posix()
        extras = safe_extra_roots(self.workspace, self.cfg.extra_paths)
        if rel == MEMORY_FILE or rel.startswith("memory/") or any(cand.is_relative_to(r) for r in extras):
            return not_found_or_not_shared(rel)
        return PathPolicyError(f"not a memory file: {raw}", PATH_RULES)

    def _owner_text(self, real: Path, shown: str) -> str:
        """The file's text for the owner, or the precise reason it cannot be read."""
        try:
            data = read_regular(real)
        except FileNotFoundError:
            raise PathPolicyError(f"no such memory file: {shown}", "use a path from memory_search results") from None
        except NotRegularFile as e:
            raise PathPolicyError(f"{shown} is {e.kind}, not a memory file",
                                  "memory files are regular Markdown files; use a path from memory_search "
                                  "results") from None
        except OSError as e:
            raise PathPolicyError(f"cannot read {shown}: {e.strerror or e}", "check the file's permissions") from e
        if b"\x00" in data[:8192]:
            raise PathPolicyError(f"{shown} looks binary", "memory files must be text")
        return decode_text(data).text

    def _reader_text(self, real: Path, shown: str, reader: Reader) -> str:
        """What `reader` (not the owner) may see of the file; the one answer when that is nothing."""
        if is_private_path(shown):  # decided on the name, before the file is looked at
            raise not_found_or_not_shared(shown)
        try:
            data = read_regular(real)
        except OSError:  # missing, a FIFO, a directory, unreadable: as a file it may not see
            raise not_found_or_not_shared(shown) from None
        if b"\x00" in data[:8192] or self._owner_only(real, shown):
            raise not_found_or_not_shared(shown)
        text = visible_text(decode_text(data).text, shown, reader)
        if text is None:
            raise not_found_or_not_shared(shown)
        return text

    def _owner_only(self, real: Path, shown: str) -> bool:
        """MEMORY.md (by identity), memory/private/, or a hard-linked file (maybe MEMORY.md by another name)."""
        return is_private_path(shown) or is_long_term(real, self.workspace) or is_hard_linked(real)

    def _get_session(self, path: str, from_line: int | None, lines: int | None) -> dict[str, Any]:
        """A transcript rendered as in the index (user/assistant text, redacted), by JSONL line numbers."""
        all_lines = read_transcript(self.sessions_dir, path).split("\n")
        start = (from_line or 1) - 1
        end = len(all_lines) if lines is None else start + lines
        return {"path": path, "text": "\n".join(all_lines[start:end])}

    def _transcript_origin(self, path: str) -> Origin | None:
        """Whose chat a transcript hit came from (None: the main session's); an unreadable one fails closed."""
        try:
            raw = read_regular(resolve_session_path(self.sessions_dir, path)).decode("utf-8", errors="replace")
        except (OSError, PathPolicyError):
            raw = ""
        return transcript_origin(transcript_session_key(raw))

    # -- status -----------------------------------------------------------------------------------
    def skipped_files(self) -> list[Skip]:
        """The files the last sync left out (binary, too large, a symlink, unreadable…), with what to do."""
        with self._lock:
            return [s.skip for _, s in sorted(skips.load(self.store.meta()).items())]

    def status(self) -> dict[str, Any]:
        with self._lock:
            return self._status()

    def _status(self) -> dict[str, Any]:
        counts = self.store.counts()
        meta = self.store.meta()
        ident = self.store.identity()
        info = self.embedder.info if self.embedder else None
        backend = self.store.describe()
        out: dict[str, Any] = {
            "agent": self.key.agent_id,
            "workspace": str(self.workspace),
            "db": self.store.location,
            "provider": info.provider if info else "none",
            "model": info.model if info else "none",
            "dims": int(meta["dims"]) if "dims" in meta else (info.dims if info else 0),
            "indexed_with": f"{ident.get('provider')}/{ident.get('model')}" if ident else None,
            "files": counts["files"],
            "chunks": counts["chunks"],
            "line_vectors": counts["line_vectors"],
            "files_without_vectors": counts["files_without_vectors"],
            "chunks_without_vectors": self.store.pending_vectors()[1],
            "syncing": self.syncing,
            "cache_entries": counts["cache_entries"],
            "vector": backend["vector"],
            "fts": {"available": True},
            "dirty": True if self.syncing else self.indexer.is_dirty(),
            # Seen by the last sync but not indexed, each with why and what to do: not "dirty" (a sync
            # would leave them out again), looked at again when they change.
            "skipped": [{"path": s.skip.path, "reason": s.skip.reason, "fix": s.skip.fix}
                        for _, s in sorted(skips.load(meta).items())],
            "chunking": {"tokens": self.cfg.chunking.tokens, "overlap": self.cfg.chunking.overlap},
            # Where the indexed files come from (MEMORY.md, memory/**, each extra path, sessions).
            "sources": indexed_sources(((p, f.source) for p, f in self.store.files().items()), self.workspace,
                                       self.cfg.extra_paths),
            "sessions_indexed": "sessions" in self.cfg.sources,
        }
        if backend["backend"] != "sqlite":  # SQLite's status stays as it was
            out["store"] = {k: v for k, v in backend.items() if k != "vector"}
        return out
