"""Session transcripts as a memory source: redaction, JSONL line mapping, re-index thresholds, memory_get."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from hermit.config.schema import MemorySearchConfig
from hermit.memory.index.session_source import redact, render_transcript
from hermit.memory.service import MemoryKey, MemoryService
from hermit.sessions.transcript import Transcript
from memhelpers import HashEmbedder


def _msg(role: str, text: str) -> dict[str, object]:
    return {"role": role, "content": [{"type": "text", "text": text}]}


def test_redaction_patterns() -> None:
    s = redact("my key is sk-ant-abcdefghijklmnopqrstuvwx and password: hunter2 and Bearer abcdefghijklmnop1234")
    assert "sk-ant" not in s and "hunter2" not in s and "abcdefghijklmnop1234" not in s
    assert "password: [REDACTED]" in s
    assert redact("AKIAABCDEFGHIJKLMNOP ghp_" + "a" * 36).count("[REDACTED]") == 2
    assert redact("数据库密码：abc123xyz") == "数据库密码：[REDACTED]"
    assert redact("nothing secret here") == "nothing secret here"


def test_render_keeps_jsonl_line_numbers() -> None:
    lines = [
        json.dumps({"type": "session", "id": "s1", "sessionKey": "agent:main:main"}),
        json.dumps({"type": "message", "message": _msg("user", "hello\nthere")}),
        json.dumps({"type": "message", "message": {"role": "toolResult", "toolCallId": "c", "content": "big output"}}),
        "{corrupt",
        json.dumps({"type": "message", "message": _msg("assistant", "the answer is 42")}),
    ]
    doc, n = render_transcript("\n".join(lines) + "\n")
    assert n == 3
    assert doc.split("\n") == ["", "User: hello there", "", "", "Assistant: the answer is 42"]


def test_transcripts_are_searchable_and_readable(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    sessions = tmp_path / "sessions"
    t = Transcript.create(sessions / "abc123.jsonl", cwd=str(ws), session_id="abc123")
    t.append_message(_msg("user", "Remember that the garage door code is 5512, and my token: s3cr3t-value"))
    t.append_message(_msg("assistant", "Noted the garage door code."))
    t.append_message({"role": "toolResult", "toolCallId": "x", "toolName": "exec", "content": "garage log dump"})
    cfg = MemorySearchConfig.model_validate({"sources": ["memory", "sessions"]})
    now = time.time()
    svc = MemoryService(MemoryKey("main", ws), tmp_path / "idx.sqlite", cfg, HashEmbedder(), sessions_dir=sessions,
                        clock=lambda: now)
    svc.sync()
    res = svc.search("garage door code")
    hit = res["results"][0]
    assert hit["source"] == "sessions" and hit["path"] == "sessions/abc123.jsonl"
    jsonl_lines = (sessions / "abc123.jsonl").read_text().split("\n")
    assert "garage door code is 5512" in jsonl_lines[hit["startLine"] - 1]
    got = svc.get(hit["path"], hit["startLine"], hit["endLine"] - hit["startLine"] + 1)
    assert "5512" in got["text"] and "s3cr3t-value" not in got["text"] and "[REDACTED]" in got["text"]
    assert "garage log dump" not in got["text"]
    assert svc.search("s3cr3t-value")["results"] == [] or all(
        "s3cr3t" not in r["snippet"] for r in svc.search("s3cr3t-value")["results"])

    # A few more messages stay below the re-index threshold…
    t.append_message(_msg("user", "also the shed padlock is 8891"))
    assert not svc.indexer.is_dirty()
    svc.sync()
    assert svc.search("shed padlock")["results"] == [] or svc.search("shed padlock")["results"][0]["source"] != "sessions"
    # …until 50 messages arrive, or the conversation has been quiet for 5 minutes.
    later = now + 301
    os.utime(sessions / "abc123.jsonl", (now - 1, now - 1))
    svc.indexer.clock = lambda: later
    assert svc.indexer.is_dirty()
    svc.sync()
    assert svc.search("shed padlock")["results"][0]["path"] == "sessions/abc123.jsonl"
    svc.close()


def test_fifty_messages_trigger_reindex(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    sessions = tmp_path / "sessions"
    t = Transcript.create(sessions / "s.jsonl", cwd=str(ws), session_id="s")
    t.append_message(_msg("user", "first message"))
    cfg = MemorySearchConfig.model_validate({"sources": ["memory", "sessions"], "provider": "none"})
    now = time.time() + 10
    svc = MemoryService(MemoryKey("main", ws), tmp_path / "idx.sqlite", cfg, None, sessions_dir=sessions,
                        clock=lambda: now)
    svc.sync()
    for i in range(49):
        t.append_message(_msg("user", f"filler {i}"))
    assert not svc.indexer.is_dirty()
    t.append_message(_msg("user", "the fiftieth says quokka"))
    assert svc.indexer.is_dirty()
    svc.sync()
    assert svc.search("quokka")["results"][0]["source"] == "sessions"


def test_session_paths_are_confined(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    cfg = MemorySearchConfig.model_validate({"sources": ["memory", "sessions"], "provider": "none"})
    svc = MemoryService(MemoryKey("main", ws), tmp_path / "idx.sqlite", cfg, None, sessions_dir=tmp_path / "s")
    import pytest

    from hermit.errors import PathPolicyError

    for bad in ("sessions/../../etc/passwd", "sessions/x.md", "sessions/", "sessions/a/b.jsonl"):
        with pytest.raises(PathPolicyError):
            svc.get(bad)
    off = MemoryService(MemoryKey("main", ws), tmp_path / "idx2.sqlite",
                        MemorySearchConfig.model_validate({"provider": "none"}), None, sessions_dir=tmp_path / "s")
    with pytest.raises(PathPolicyError, match="not a memory source"):
        off.get("sessions/abc.jsonl")
