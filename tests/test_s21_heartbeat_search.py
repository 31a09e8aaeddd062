"""`sources: [sessions]`: a heartbeat's prompt and acknowledgements are not indexed (nobody's words, and a day of
quiet beats outranked the owner's own); its alerts are, as the owner read them; the owner's words around them are.
The same rule as the web chat's history and /new (sessions/background.py)."""

from __future__ import annotations

import time
from pathlib import Path

from hermit.config.schema import HeartbeatConfig, MemorySearchConfig
from hermit.memory.index.session_source import render_transcript
from hermit.memory.service import MemoryKey, MemoryService
from hermit.sessions.background import HEARTBEAT_MARK
from hermit.sessions.transcript import Transcript

PROMPT = HeartbeatConfig().prompt


def _msg(role: str, text: str) -> dict[str, object]:
    return {"role": role, "content": [{"type": "text", "text": text}]}


def _main_session(sessions: Path, ws: Path) -> Path:
    t = Transcript.create(sessions / "main1.jsonl", cwd=str(ws), session_id="main1", session_key="agent:main:main")
    t.append_message(_msg("user", "Remind me: the dentist appointment is on Thursday at 9, bring the insurance card."))
    t.append_message(_msg("assistant", "Noted: dentist on Thursday at 9 with the insurance card."))
    for i in range(12):  # an afternoon of quiet beats, one of them an alert
        t.append_custom(HEARTBEAT_MARK)
        t.append_message(_msg("user", PROMPT))
        t.append_message({"role": "assistant", "content": [{"type": "toolCall", "id": f"c{i}", "name": "read",
                                                            "arguments": {"path": "HEARTBEAT.md"}}]})
        t.append_message({"role": "toolResult", "toolCallId": f"c{i}", "toolName": "read",
                          "content": [{"type": "text", "text": "- check the dentist reminder"}]})
        reply = ("HEARTBEAT_OK" if i != 5 else
                 "Reminder: the dentist appointment is tomorrow, Thursday at 9 — the insurance card is on the desk.")
        t.append_message(_msg("assistant", reply))
    t.append_message(_msg("user", "What was the heartbeat checklist about again?"))
    t.append_message(_msg("assistant", "It checks the dentist reminder."))
    return sessions / "main1.jsonl"


def test_a_beats_prompt_and_acknowledgements_are_not_rendered_its_alert_is(tmp_path: Path) -> None:
    path = _main_session(tmp_path / "sessions", tmp_path / "ws")
    doc, messages = render_transcript(path.read_text(encoding="utf-8"))
    lines = [line for line in doc.split("\n") if line]
    assert messages == 2 + 12 * 4 + 2
    assert not [line for line in lines if "HEARTBEAT" in line or "HEARTBEAT.md" in line]
    assert lines == [
        "User: Remind me: the dentist appointment is on Thursday at 9, bring the insurance card.",
        "Assistant: Noted: dentist on Thursday at 9 with the insurance card.",
        "Assistant: Reminder: the dentist appointment is tomorrow, Thursday at 9 — the insurance card is on the desk.",
        "User: What was the heartbeat checklist about again?",
        "Assistant: It checks the dentist reminder.",
    ]
    # Line numbers still point into the JSONL: the owner's first words are on its line 2.
    assert doc.split("\n")[1].startswith("User: Remind me")


def test_search_over_sessions_finds_the_owners_words_not_the_beats(tmp_path: Path, e5: object) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    sessions = tmp_path / "sessions"
    _main_session(sessions, ws)
    cfg = MemorySearchConfig.model_validate({"sources": ["sessions"]})
    now = time.time() + 3600  # the transcript is quiet: indexed
    svc = MemoryService(MemoryKey("main", ws), tmp_path / "idx.sqlite", cfg, e5, sessions_dir=sessions,  # type: ignore[arg-type]
                        clock=lambda: now)
    try:
        svc.sync()
        for query in ("read HEARTBEAT.md and follow it strictly", "HEARTBEAT_OK nothing needs attention"):
            found = svc.search(query, max_results=20, min_score=0.0)["results"]
            assert found, query
            assert not [r for r in found if "HEARTBEAT_OK" in r["snippet"] or "follow it strictly" in r["snippet"]]
        found = svc.search("dentist appointment", max_results=5)["results"]
        assert found and "dentist" in found[0]["snippet"]
    finally:
        svc.close()
