"""The web app's memory methods: search, read, browse, edit MEMORY.md and append to today's log, as the owner.

Every answer comes from the same MemoryService the agent's tools use, with the owner reader (the
token holder is the owner, SPEC §18): the results, scores, audiences and origins are the ones
memory_search gives the main session. Writes go through the main session's own `write` tool, so the
memory rules are the agent's (MEMORY.md's previous version is copied to
`<state>/agents/<id>/memory-history/` first); an edit names the text it started from (its sha256), and
a MEMORY.md changed on disk since (by the agent, an editor) is refused rather than overwritten. An
append to today's log is the owner's own words: owner-only by default (wrapped in an owner origin block, as
the main session's writes are), shared with every chat only when the page asks for it (`private: false`, a
hand-written daily note as in the original design). Both mark the index dirty, so the next search sees the
change (the watcher re-indexes it too).
"""

from __future__ import annotations

import hashlib
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from hermit.agent.runtime import AgentRuntime
from hermit.errors import HermitError, PathPolicyError
from hermit.gateway.agents import AgentHost
from hermit.gateway.protocol import (
    AgentParams,
    MemoryAppendParams,
    MemoryGetParams,
    MemorySearchParams,
    MemoryWriteParams,
)
from hermit.memory.index.chunking import MARKER
from hermit.memory.index.sources import Skip, scan_memory_files
from hermit.memory.policy.audience import OWNER, SHARED, block_audience, owner_origin
from hermit.memory.policy.daily_log import append_daily_note, daily_log_path, memory_writes_locked
from hermit.memory.policy.provenance import CLOSE_LINE, by_owner, damaged_origin, marker_damage, origin_blocks
from hermit.memory.service import MemoryService
from hermit.sessions.keys import main_session_key
from hermit.tools.memory_files import DAILY_LOG_RE
from hermit.workspace import MEMORY_FILE

MAX_FILES = 2_000  # the browse list; a memory folder with more is listed newest first up to this


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def origin_spans(text: str) -> list[dict[str, Any]]:
    """The origin blocks the parser finds in a file (lines start..end, whether the close marker is there,
    who wrote it and who may read it), for the viewer to set apart: a line that merely looks like a marker
    is shown as the text it is, inside the block it belongs to."""
    if (damage := marker_damage(text)) is not None:  # no block can be trusted: one span, nobody's, owner-only
        origin = damaged_origin(damage)
        return [{"start": 1, "end": text.count("\n") + 1, "closed": False, "audience": block_audience(origin),
                 "owner": False, "from": origin.describe()}]
    if MARKER not in text:
        return []
    lines = text.split("\n")
    return [{"start": b.start, "end": b.end, "closed": lines[b.end - 1].strip() == CLOSE_LINE,
             "audience": block_audience(b.origin), "owner": by_owner(b.origin), "from": b.origin.describe()}
            for b in origin_blocks(text)]


class MemoryConsole:
    def __init__(self, host: AgentHost, default_agent: str) -> None:
        self.host = host
        self.default_agent = default_agent

    def _runtime(self, agent_id: str | None) -> AgentRuntime:
        return self.host.runtime(agent_id or self.default_agent)

    def _service(self, runtime: AgentRuntime) -> MemoryService:
        if runtime.memory is None:
            raise HermitError(f"memory is off for agent {runtime.agent.id}",
                              "turn memory_search on for this agent (agents.defaults.memory_search.enabled)")
        return runtime.memory

    def search(self, p: MemorySearchParams) -> dict[str, Any]:
        rt = self._runtime(p.agent_id)
        return {"agentId": rt.agent.id, **self._service(rt).search(p.query, p.max_results, p.min_score)}

    def get(self, p: MemoryGetParams) -> dict[str, Any]:
        """The file's text (all of it unless `from`/`lines` ask for a window) and, for the whole file, its
        sha256, which memory.write wants back, and its origin blocks (`origin_spans`)."""
        rt = self._runtime(p.agent_id)
        got = self._service(rt).get(p.path, p.from_line, p.lines)
        out: dict[str, Any] = {"agentId": rt.agent.id, **got, "editable": got["path"] == MEMORY_FILE,
                               "audience": OWNER if got["path"] == MEMORY_FILE else None}
        if p.from_line is None and p.lines is None:
            out["sha256"] = sha256(got["text"])
            out["blocks"] = origin_spans(got["text"])
        return out

    def files(self, p: AgentParams) -> dict[str, Any]:
        """MEMORY.md, the daily logs by date (newest first) and the other memory files, with sizes.

        A file the index leaves out (binary, too large, a symlink, a FIFO, unreadable) is listed too, so the
        owner sees it is there, with `skipped` ({reason, fix}) and `indexed: false`; its `modified` says "not
        indexed — <reason>" instead of a time (`modifiedAt` keeps the time), which the page shows where a
        note's age goes."""
        rt = self._runtime(p.agent_id)
        svc = self._service(rt)
        found = scan_memory_files(rt.agent.workspace, svc.cfg.extra_paths)
        skipped = {s.path: s for s in svc.skipped_files()} | {s.path: s for s in found.skips}
        entries: list[dict[str, Any]] = []
        for path, at in [*((f.rel, f.path) for f in found.files if f.source == "memory"),
                         *((s.path, str(rt.agent.workspace / s.path)) for s in found.skips)]:
            try:
                st = os.lstat(at)
            except OSError:
                continue
            entries.append(_entry(path, st, skipped.get(path)))
        order = {"long-term": 0, "daily": 1, "other": 2}
        entries.sort(key=lambda e: (order[e["kind"]], "" if e["date"] is None else _inverted(e["date"]), e["path"]))
        today = rt.today()
        warnings = [s.warning for _, s in sorted(skipped.items())] + found.warnings
        return {"agentId": rt.agent.id, "files": entries[:MAX_FILES], "today": today,
                "todayPath": f"memory/{today}.md", "warnings": warnings[:20]}

    def write(self, p: MemoryWriteParams) -> dict[str, Any]:
        """MEMORY.md rewritten through the main session's `write` tool (history kept, index marked dirty)."""
        rt = self._runtime(p.agent_id)
        svc = self._service(rt)
        if p.path != MEMORY_FILE:
            raise PathPolicyError(f"{p.path} cannot be rewritten from the web app",
                                  "MEMORY.md is edited here; daily logs are append-only: use \"Append to today's "
                                  "log\"; other files: edit them on disk")
        write = rt.tools_for(main_session_key(rt.agent.id)).get("write")
        assert write is not None  # every session's toolset has the file tools
        # The check and the write under one hold of the memory lock: a note the assistant adds in between
        # would otherwise be replaced by the text the owner opened before it.
        with memory_writes_locked(rt.agent.workspace, rt.agent.workspace / MEMORY_FILE):
            # Only a missing MEMORY.md makes this edit its first: one that cannot be read (a symlink, a
            # FIFO, binary) is refused with svc.get's reason, never replaced (through the link, outside the
            # workspace) without the base check and the history copy.
            current: str | None = None
            if os.path.lexists(rt.agent.workspace / MEMORY_FILE):
                current = svc.get(MEMORY_FILE)["text"]
            if current is not None and p.base_sha256 != sha256(current):
                raise HermitError("MEMORY.md changed on disk since you opened it (the assistant or an editor wrote "
                                  "it)", "copy your text, reload the file, and apply your change again")
            message = str(write.function(path=MEMORY_FILE, content=p.content))
        after = svc.get(MEMORY_FILE)["text"]
        return {"agentId": rt.agent.id, "path": MEMORY_FILE, "message": message, "sha256": sha256(after),
                "history": _newest(rt.confinement.agent_dir / "memory-history") if current is not None else None}

    def append(self, p: MemoryAppendParams) -> dict[str, Any]:
        """A note at the end of today's daily log (the agent's timezone), never a rewrite."""
        rt = self._runtime(p.agent_id)
        svc = self._service(rt)
        now = rt.clock().astimezone(rt.timezone)
        origin = owner_origin(main_session_key(rt.agent.id)) if p.private else None
        done = append_daily_note(rt.agent.workspace, p.text, now, svc.cfg.extra_paths, origin)
        svc.mark_dirty()
        return {"agentId": rt.agent.id, **done, "audience": OWNER if p.private else SHARED,
                "expected": daily_log_path(now)}

    def status(self, p: AgentParams) -> dict[str, Any]:
        rt = self._runtime(p.agent_id)
        st = self._service(rt).status()
        keep = ("agent", "provider", "model", "files", "chunks", "dirty", "skipped", "sessions_indexed", "vector")
        return {"agentId": rt.agent.id, **{k: st[k] for k in keep if k in st}}


def _entry(path: str, st: os.stat_result, skip: Skip | None) -> dict[str, Any]:
    daily = DAILY_LOG_RE.fullmatch(path) is not None
    modified = datetime.fromtimestamp(st.st_mtime).astimezone().isoformat(timespec="seconds")
    return {"path": path, "kind": "long-term" if path == MEMORY_FILE else "daily" if daily else "other",
            "date": path[7:17] if daily else None, "bytes": st.st_size,
            "modified": f"not indexed — {skip.reason}" if skip else modified, "modifiedAt": modified,
            "indexed": skip is None, "skipped": {"reason": skip.reason, "fix": skip.fix} if skip else None}


def _inverted(date: str) -> str:
    """A sort key that puts later dates first."""
    return "".join(chr(ord("9") - ord(c) + ord("0")) if c.isdigit() else c for c in date)


def _newest(folder: Path) -> str | None:
    try:
        kept = [(e.stat().st_mtime_ns, e.name) for e in os.scandir(folder) if e.name.startswith("MEMORY-")]
    except OSError:
        return None
    return str(folder / max(kept)[1]) if kept else None
