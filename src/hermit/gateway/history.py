"""What the web chat shows of stored sessions: the session list and one session's conversation.

Read from sessions.json and the JSONL transcript (the truth), so a reloaded page, a reconnect or
another tab sees exactly what was recorded, including a turn the gateway marked interrupted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hermit.agent.context import is_silent
from hermit.messages import stored_text
from hermit.scheduler.heartbeat import DEFAULT_ACK_MAX_CHARS, strip_heartbeat_token
from hermit.sessions.keys import is_main_session_key
from hermit.sessions.store import SessionStore
from hermit.sessions.transcript import CustomEntry, MessageEntry, format_timestamp, read_transcript


def list_sessions(stores: Mapping[str, SessionStore]) -> list[dict[str, Any]]:
    """Every agent's sessions, most recently updated first."""
    out: list[dict[str, Any]] = []
    for agent_id, store in stores.items():
        for r in store.list():
            out.append({"key": r.key, "agentId": agent_id, "sessionId": r.session_id,
                        "updatedAt": format_timestamp(r.updated_at), "main": is_main_session_key(r.key),
                        "channel": r.origin_channel})
    out.sort(key=lambda s: str(s["updatedAt"]), reverse=True)
    return out


def chat_history(store: SessionStore, session_key: str, limit: int) -> dict[str, Any]:
    """The session's user/assistant messages, newest `limit` items. Tool calls (with done/failed from
    their results) are shown on the assistant reply that followed them, as the live page shows them."""
    record = store.get(session_key)
    if record is None:
        return {"sessionKey": session_key, "sessionId": None, "messages": []}
    read = read_transcript(store.transcript_path(record.session_id))
    items: list[dict[str, Any]] = []
    tools: dict[str, dict[str, Any]] = {}
    carried: list[dict[str, Any]] = []  # calls of tool-only assistant messages, shown on the next reply
    background = 0  # after a `heartbeat` marker: 1 hides its prompt, 2 hides acknowledgements (HEARTBEAT_OK)
    for entry in read.entries:
        if isinstance(entry, CustomEntry):
            if entry.custom_type == "heartbeat":
                background = 1
            elif entry.custom_type == "interrupted":
                items.append({"role": "notice", "text": "(this reply was interrupted when the gateway stopped)",
                              "timestamp": entry.timestamp})
            continue
        if not isinstance(entry, MessageEntry):
            continue
        m = entry.message
        role = m.get("role")
        if role == "toolResult":
            tool = tools.get(str(m.get("toolCallId")))
            if tool is not None:
                tool["status"] = "failed" if m.get("isError") else "done"
            continue
        if role not in ("user", "assistant"):
            continue
        if role == "user":
            background = 2 if background == 1 else 0
            if background:
                continue
        item: dict[str, Any] = {"role": role, "text": stored_text(m), "timestamp": entry.timestamp}
        if background and role == "assistant":
            item["text"] = strip_heartbeat_token(item["text"], DEFAULT_ACK_MAX_CHARS) or ""
            if not item["text"]:
                continue  # an acknowledgement or a tool step of a heartbeat: no channel ever saw it
        if role == "assistant":
            calls = []
            for part in m.get("content") or []:
                if isinstance(part, dict) and part.get("type") == "toolCall":
                    tool = {"name": part.get("name"), "callId": part.get("id"), "status": "running"}
                    tools[str(part.get("id"))] = tool
                    calls.append(tool)
            if m.get("stopReason") == "error":
                item["error"] = True
            if is_silent(item["text"]):
                item["text"] = ""  # a silent NO_REPLY was never delivered
            if not item["text"]:
                carried += calls
                continue
            item["tools"], carried = carried + calls, []
        elif carried:  # the tools ran but no reply followed (interrupted or failed)
            items.append({"role": "assistant", "text": "", "tools": carried, "timestamp": entry.timestamp})
            carried = []
        items.append(item)
    if carried:
        items.append({"role": "assistant", "text": "", "tools": carried, "timestamp": read.entries[-1].timestamp})
    return {"sessionKey": session_key, "sessionId": record.session_id, "messages": items[-limit:]}
