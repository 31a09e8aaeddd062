"""`hermit sessions list|show KEY`: the agent's sessions (current and, with --all, past) and transcripts.

sessions.json names only the current session of each key; after `/new` or a reset the old transcript
stays on disk as `<sessionId>.jsonl` with its key in the header, so past sessions are found there.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermit.cli.context import CliContext
from hermit.cli.terminal import warn
from hermit.errors import SessionError

if TYPE_CHECKING:  # loaded by the commands, so `hermit --help` stays quick
    from hermit.sessions.store import SessionStore
    from hermit.sessions.transcript import Entry


def configure(s: argparse.ArgumentParser) -> None:
    """The arguments and handler of `hermit sessions` (its name and help are in the table of cli/commands.py)."""
    ss = s.add_subparsers(dest="sessions_command", metavar="SUBCOMMAND", required=True)
    p = ss.add_parser("list", help="sessions of the agent, most recent first")
    p.add_argument("--all", action="store_true", help="include past sessions (before /new or a reset)")
    p.add_argument("--json", action="store_true", help="print the sessions as a JSON list")
    p.set_defaults(func=cmd_list)
    p = ss.add_parser("show", help="print a session's transcript")
    p.add_argument("key", help="session key (agent:main:main = its current session) or a session id "
                               "or id prefix, past sessions included")
    p.add_argument("--json", action="store_true", help="print the transcript entries as JSON")
    p.add_argument("--full", action="store_true", help="do not shorten long tool results")
    p.set_defaults(func=cmd_show)


def _store(ctx: CliContext) -> SessionStore:
    from hermit.sessions.store import SessionStore

    agent = ctx.agent()
    return SessionStore(agent.sessions_dir, cwd=agent.workspace)


@dataclass(frozen=True)
class SessionRow:
    """One session, current or past, as the CLI shows it."""

    key: str
    session_id: str
    current: bool
    started: datetime | None
    updated: datetime
    messages: int
    transcript: Path
    total_tokens: int | None = None
    context_tokens: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "sessionId": self.session_id, "current": self.current,
                "startedAt": self.started.isoformat() if self.started else None,
                "updatedAt": self.updated.isoformat(), "messages": self.messages,
                "transcript": str(self.transcript), "totalTokens": self.total_tokens,
                "contextTokens": self.context_tokens}


def _all_sessions(store: SessionStore) -> list[SessionRow]:
    """Every transcript in the sessions dir, the ones sessions.json points at marked current."""
    from hermit.sessions.transcript import MessageEntry, parse_timestamp, read_transcript

    current = {r.session_id: r for r in store.list()}
    rows: list[SessionRow] = []
    for path in sorted(store.directory.glob("*.jsonl")):
        read = read_transcript(path)
        rec = current.get(read.header.session_id)
        mtime = datetime.fromtimestamp(path.stat().st_mtime, UTC)
        rows.append(SessionRow(
            key=rec.key if rec else (read.header.session_key or "(unknown key)"),
            session_id=read.header.session_id,
            current=rec is not None,
            started=rec.created_at if rec else parse_timestamp(read.header.timestamp),
            updated=rec.updated_at if rec else mtime,
            messages=sum(1 for e in read.entries if isinstance(e, MessageEntry)),
            transcript=path,
            total_tokens=rec.total_tokens if rec else None,
            context_tokens=rec.context_tokens if rec else None,
        ))
    return sorted(rows, key=lambda r: r.updated, reverse=True)


def cmd_list(ctx: CliContext, args: argparse.Namespace) -> int:
    store = _store(ctx)
    if args.all:
        return _list_all(ctx, store, args)
    records = store.list()
    for w in store.warnings:
        warn(w)
    if args.json:
        print(json.dumps([{"key": r.key, **r.to_json()} for r in records], ensure_ascii=False, indent=2))
        return 0
    if not records:
        print(f"no sessions yet for agent {ctx.agent().id} (start one with `hermit chat`)")
        return 0
    width = max(len(r.key) for r in records)
    print(f"{'KEY':<{width}}  {'SESSION':<8}  {'UPDATED':<16}  {'TOKENS':>9}  {'CONTEXT':>8}")
    for r in records:
        updated = r.updated_at.astimezone().strftime("%Y-%m-%d %H:%M")
        print(f"{r.key:<{width}}  {r.session_id[:8]:<8}  {updated:<16}  {r.total_tokens:>9,}  {r.context_tokens:>8,}")
    return 0


def _list_all(ctx: CliContext, store: SessionStore, args: argparse.Namespace) -> int:
    rows = _all_sessions(store)
    for w in store.warnings:
        warn(w)
    if args.json:
        print(json.dumps([r.to_json() for r in rows], ensure_ascii=False, indent=2))
        return 0
    if not rows:
        print(f"no sessions yet for agent {ctx.agent().id} (start one with `hermit chat`)")
        return 0
    width = max(len(r.key) for r in rows)
    print(f"{'KEY':<{width}}  {'SESSION':<8}  {'STATUS':<7}  {'STARTED':<16}  {'UPDATED':<16}  MESSAGES")
    for r in rows:
        started = r.started.astimezone().strftime("%Y-%m-%d %H:%M") if r.started else "?"
        updated = r.updated.astimezone().strftime("%Y-%m-%d %H:%M")
        status = "current" if r.current else "past"
        print(f"{r.key:<{width}}  {r.session_id[:8]:<8}  {status:<7}  {started:<16}  {updated:<16}  {r.messages:>8}")
    print("(read one with `hermit sessions show <SESSION>`)")
    return 0


def _find(store: SessionStore, key: str) -> tuple[str, str, bool]:
    """(session key, session id, current?) for a key, or a unique id (prefix) of any session on disk."""
    for r in store.list():
        if r.key == key:
            return r.key, r.session_id, True
    matches = [r for r in _all_sessions(store) if r.session_id.startswith(key)] if key else []
    if len(matches) == 1:
        return matches[0].key, matches[0].session_id, matches[0].current
    if len(matches) > 1:
        ids = ", ".join(m.session_id[:12] for m in matches[:5])
        raise SessionError(f"session id prefix {key!r} is ambiguous ({ids})", "give more characters of the id")
    raise SessionError(f"no session {key!r}",
                       "see `hermit sessions list` for keys, `hermit sessions list --all` for past sessions too")


def _short(text: str, full: bool, limit: int = 400) -> str:
    if full or len(text) <= limit:
        return text
    return text[:limit] + f"… [{len(text) - limit:,} more chars; --full shows all]"


def _render(entry: Entry, full: bool) -> list[str]:
    from hermit.agent.speakers import recorded_sender, speaker
    from hermit.messages import stored_text
    from hermit.sessions.transcript import CompactionEntry, CustomEntry, MessageEntry

    stamp = entry.timestamp[11:19] if len(entry.timestamp) >= 19 else entry.timestamp
    if isinstance(entry, MessageEntry):
        m = entry.message
        role = m.get("role")
        if role == "toolResult":
            mark = "error" if m.get("isError") else "result"
            return [f"[{stamp}]   ← {m.get('toolName')} {mark}: {_short(stored_text(m), full)}"]
        lines = []
        text = stored_text(m)
        if text or role == "user":
            who = recorded_sender(m.get("sender")) if role == "user" else None  # a group's member
            lines.append(f"[{stamp}] {role}{f' ({speaker(who)})' if who else ''}: {_short(text, full, 2000)}")
        for part in m.get("content") or []:
            if isinstance(part, dict) and part.get("type") == "toolCall":
                args = json.dumps(part.get("arguments"), ensure_ascii=False)
                lines.append(f"[{stamp}]   → {part.get('name')} {_short(args, full, 300)}")
        if m.get("stopReason") == "error":
            lines.append(f"[{stamp}] assistant failed: {m.get('errorMessage')}")
        return lines
    if isinstance(entry, CompactionEntry):
        after = f" → {entry.tokens_after:,}" if entry.tokens_after is not None else ""
        return [f"[{stamp}] — compaction ({entry.tokens_before:,}{after} tokens): {_short(entry.summary, full)}"]
    if isinstance(entry, CustomEntry):
        inner = entry.data.get("message") if isinstance(entry.data, dict) else None
        if isinstance(inner, dict):  # e.g. the silent memory-flush turn, kept out of the conversation
            nested = MessageEntry(entry.id, entry.parent_id, entry.timestamp, entry.line, inner)
            return [line.replace("] ", f"] ({entry.custom_type}) ", 1) for line in _render(nested, full)]
        reason = entry.data.get("reason") if isinstance(entry.data, dict) else None
        return [f"[{stamp}] — {entry.custom_type}" + (f" ({reason})" if isinstance(reason, str) else "")]
    return [f"[{stamp}] — {entry.type} entry"]


def cmd_show(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.sessions.transcript import (
        CompactionEntry,
        CustomEntry,
        MessageEntry,
        format_timestamp,
        read_transcript,
    )

    store = _store(ctx)
    key, session_id, current = _find(store, args.key)
    path = store.transcript_path(session_id)
    read = read_transcript(path)
    for p in read.problems:
        warn(p)
    if args.json:
        out: list[dict[str, Any]] = [read.header.to_json()]
        for e in read.entries:
            item: dict[str, Any] = {"type": e.type, "id": e.id, "parentId": e.parent_id,
                                    "timestamp": e.timestamp, "line": e.line}
            if isinstance(e, MessageEntry):
                item["message"] = e.message
            elif isinstance(e, CompactionEntry):
                item.update(summary=e.summary, firstKeptEntryId=e.first_kept_entry_id,
                            tokensBefore=e.tokens_before, tokensAfter=e.tokens_after, details=e.details)
            elif isinstance(e, CustomEntry):
                item.update(customType=e.custom_type, data=e.data)
            out.append(item)
        print(json.dumps(out, ensure_ascii=False, indent=2))
        return 0
    record = store.get(key) if current else None
    started = format_timestamp(record.created_at) if record else (read.header.timestamp or "?")
    print(f"session {key} · {session_id} · started {started}" + ("" if current else " (past session)"))
    print(f"transcript {path}")
    for e in read.entries:
        for line in _render(e, args.full):
            print(line)
    return 0
