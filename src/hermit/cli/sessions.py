"""`hermit sessions list|show KEY`: the agent's sessions.json and one session's transcript, readable."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from hermit.cli.context import CliContext
from hermit.errors import SessionError
from hermit.messages import stored_text
from hermit.sessions.store import SessionRecord, SessionStore
from hermit.sessions.transcript import (
    CompactionEntry,
    CustomEntry,
    Entry,
    MessageEntry,
    format_timestamp,
    read_transcript,
)


def register(sub: Any) -> None:
    s = sub.add_parser("sessions", help="list sessions and show transcripts")
    ss = s.add_subparsers(dest="sessions_command", metavar="SUBCOMMAND", required=True)
    p = ss.add_parser("list", help="sessions of the agent, most recent first")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)
    p = ss.add_parser("show", help="print a session's transcript")
    p.add_argument("key", help="session key (agent:main:main) or session id")
    p.add_argument("--json", action="store_true", help="print the transcript entries as JSON")
    p.add_argument("--full", action="store_true", help="do not shorten long tool results")
    p.set_defaults(func=cmd_show)


def _store(ctx: CliContext) -> SessionStore:
    agent = ctx.agent()
    return SessionStore(agent.sessions_dir, cwd=agent.workspace)


def cmd_list(ctx: CliContext, args: argparse.Namespace) -> int:
    store = _store(ctx)
    records = store.list()
    for w in store.warnings:
        print(f"warning: {w}", file=sys.stderr)
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


def _find(store: SessionStore, key: str) -> SessionRecord:
    records = store.list()
    for r in records:
        if r.key == key:
            return r
    by_id = [r for r in records if r.session_id.startswith(key)]
    if len(by_id) == 1:
        return by_id[0]
    raise SessionError(f"no session {key!r}", "see `hermit sessions list` for keys and ids")


def _short(text: str, full: bool, limit: int = 400) -> str:
    if full or len(text) <= limit:
        return text
    return text[:limit] + f"… [{len(text) - limit:,} more chars; --full shows all]"


def _render(entry: Entry, full: bool) -> list[str]:
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
            lines.append(f"[{stamp}] {role}: {_short(text, full, 2000)}")
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
        return [f"[{stamp}] — {entry.custom_type}"]
    return [f"[{stamp}] — {entry.type} entry"]


def cmd_show(ctx: CliContext, args: argparse.Namespace) -> int:
    store = _store(ctx)
    record = _find(store, args.key)
    read = read_transcript(store.transcript_path(record.session_id))
    for p in read.problems:
        print(f"warning: {p}", file=sys.stderr)
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
    print(f"session {record.key} · {record.session_id} · started {format_timestamp(record.created_at)}")
    print(f"transcript {store.transcript_path(record.session_id)}")
    for e in read.entries:
        for line in _render(e, args.full):
            print(line)
    return 0
