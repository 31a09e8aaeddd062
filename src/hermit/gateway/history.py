"""What the web app shows of stored sessions: the session list (kind, last activity, whether the page may
continue it) and one session's conversation.

Read from sessions.json and the JSONL transcript (the truth), so a reloaded page, a reconnect or
another tab sees exactly what was recorded, including a turn the gateway marked interrupted and a turn
that failed (its error is kept in the transcript and shown).

Which sessions the owner may continue from the page: the main session, the owner's own DMs (a DM the
owner's messages are routed to: console.Console.owner_dm) and sessions started at the CLI under a name of one's own
(`hermit chat --session test2`: only the owner has the CLI). Everything else is read-only there:
writing into a group's, a contact's, a cron job's or a sub-agent's session would put the owner's words
into that chat's transcript, answered in its sandbox, and seen by nobody in that chat.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hermit.agent.context import is_silent
from hermit.agent.speakers import recorded_sender, speaker
from hermit.errors import SessionError
from hermit.messages import stored_text
from hermit.scheduler.heartbeat import DEFAULT_ACK_MAX_CHARS, strip_heartbeat_token
from hermit.sessions.keys import SessionKey, SessionKind, is_main_session_key, parse_session_key
from hermit.sessions.store import SessionStore
from hermit.sessions.transcript import CustomEntry, MessageEntry, format_timestamp, read_transcript

# A parsed DM key -> whether it is the owner's own DM session (what the owner's DMs are routed to).
OwnerCheck = Callable[[SessionKey], bool]

READ_ONLY = {
    "group": "a group chat: what you typed here would enter the group's conversation and be answered in its "
             "sandbox, yet nobody in the group would see it. Read it here; answer in the group.",
    "dm": "a contact's DM: your words would become part of their conversation with the assistant. Read it "
          "here; to make them an owner, list them under the channel account's owners.",
    "cron": "a scheduled job's session: its next run would take your words as part of the job. Run the job "
            "from Operations instead.",
    "subagent": "a sub-agent's run: it belongs to the task that started it.",
}


def describe_session(key: str, owner_dm: OwnerCheck) -> dict[str, Any]:
    """The kind of a session, a short label, and `mode`: "chat" (the page may continue it) or "read-only"
    (with `why`)."""
    try:
        k = parse_session_key(key)
    except SessionError:  # only the CLI names sessions freely, and only the owner has the CLI
        return {"kind": "cli", "label": key, "mode": "chat"}
    where = f" · thread {k.thread_id}" if k.thread_id else f" · topic {k.topic_id}" if k.topic_id else ""
    if k.kind is SessionKind.MAIN:
        return {"kind": "main", "label": "Main session" + (f" ({k.agent_id})" if k.agent_id != "main" else ""),
                "mode": "chat"}
    if k.kind is SessionKind.DM and k.peer_id is not None:
        label = f"DM {k.channel + ' ' if k.channel else ''}{k.peer_id}{where}"
        if owner_dm(k):
            return {"kind": "dm", "label": label, "mode": "chat", "owner": True}
        return {"kind": "dm", "label": label, "mode": "read-only", "why": READ_ONLY["dm"]}
    if k.kind in (SessionKind.GROUP, SessionKind.CHANNEL):
        noun = "group" if k.kind is SessionKind.GROUP else "channel"
        return {"kind": "group", "label": f"{k.channel} {noun} {k.peer_id}{where}", "mode": "read-only",
                "why": READ_ONLY["group"]}
    if k.kind is SessionKind.CRON:
        return {"kind": "cron", "label": f"cron job {k.job_id}", "mode": "read-only", "why": READ_ONLY["cron"]}
    return {"kind": "subagent", "label": f"sub-agent {k.run_id}", "mode": "read-only", "why": READ_ONLY["subagent"]}


def list_sessions(stores: Mapping[str, SessionStore], owner_dm: OwnerCheck) -> list[dict[str, Any]]:
    """Every agent's sessions, most recently updated first."""
    out: list[dict[str, Any]] = []
    for agent_id, store in stores.items():
        for r in store.list():
            out.append({"key": r.key, "agentId": agent_id, "sessionId": r.session_id,
                        "updatedAt": format_timestamp(r.updated_at), "main": is_main_session_key(r.key),
                        "channel": r.origin_channel, **describe_session(r.key, owner_dm)})
    out.sort(key=lambda s: str(s["updatedAt"]), reverse=True)
    return out


def _sender(raw: Any) -> dict[str, Any] | None:
    """Who wrote a group's message, as recorded with it (agent/speakers.py): id, name and whether it was the
    owner, with `label` ("Gus (3001)", "Ann (1001) — the owner") for the page to show. None for a message
    that recorded no sender (a DM, the main session, older transcripts)."""
    who = recorded_sender(raw)
    return None if who is None else {"id": who.id, "name": who.name, "owner": who.owner, "label": speaker(who)}


def chat_history(store: SessionStore, session_key: str, limit: int) -> dict[str, Any]:  # noqa: C901 - one pass over a transcript's entry kinds; split with the web app's history work
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
        if role == "user" and (who := _sender(m.get("sender"))) is not None:
            item["sender"] = who
        if background and role == "assistant":
            item["text"] = strip_heartbeat_token(item["text"], DEFAULT_ACK_MAX_CHARS) or ""
            if not item["text"]:
                continue  # an acknowledgement or a tool step of a heartbeat: no channel ever saw it
        if role == "assistant":
            failed = m.get("stopReason") == "error"
            why = str(m.get("errorMessage") or "the model call failed")
            calls = []
            for part in m.get("content") or []:
                if isinstance(part, dict) and part.get("type") == "toolCall":
                    tool = {"name": part.get("name"), "callId": part.get("id"), "status": "running"}
                    tools[str(part.get("id"))] = tool
                    calls.append(tool)
            if is_silent(item["text"]):
                item["text"] = ""  # a silent NO_REPLY was never delivered
            # A failed turn stays visible with its reason, after a reload too; one cut short by a stopping
            # gateway is said by the `interrupted` notice that follows it.
            if failed and (item["text"] or not why.startswith("interrupted")):
                item["error"] = why
            if not item["text"] and not item.get("error"):
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
