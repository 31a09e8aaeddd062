"""Lone surrogates from outside (batch query lines, CLI arguments, a model's text and tool-call arguments,
a user's message, a transcript written by someone else) are made valid at the boundary: nothing crashes,
one bad batch line gets an error line and the batch goes on, and the process always ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agenthelpers import load, make_runtime
from conftest import write
from hermit.memory.index.session_source import render_transcript
from hermit.messages import valid_json, valid_text
from hermit.sessions.transcript import Transcript, read_transcript
from hermit.testing import FakeProvider
from memhelpers import HashEmbedder, service
from prochelpers import PROC_TIMEOUT


def test_valid_text_replaces_lone_surrogates_only() -> None:
    assert valid_text("plain 数据") == "plain 数据"
    assert valid_text("a\ud800b") == "a\ufffdb"
    assert valid_text("\udcff") == "\ufffd"
    assert valid_text("\ud83d\ude00") == "😀"  # a pair is a character, not garbage
    assert valid_json({"q\udc80": ["x\ud800", 1, None, {"k": "ok"}]}) == {"q\ufffd": ["x\ufffd", 1, None, {"k": "ok"}]}
    "".join(valid_text(s) for s in ("\ud800", "\udfff", "x")).encode("utf-8")  # encodable: would raise


def _cli(home: Path, *args: str | bytes, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"}
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], env=env, input=stdin,
                          capture_output=True, timeout=PROC_TIMEOUT)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    write(home / "hermit.yaml", "agents:\n  defaults:\n    memory_search:\n      provider: local\n")
    write(home / "workspace" / "memory" / "2026-12-01.md", "# 2026-12-01\n- The billing database is Postgres.\n")
    return home


def test_batch_goes_on_past_surrogates_bad_json_and_bad_bytes(home: Path) -> None:
    lines = [
        b'{"id": "q1", "query": "billing database"}',
        b'{"id": "q2", "query": "\\ud800 billing"}',  # a lone surrogate as a JSON escape
        b'{"id": "q3\\udc80", "query": "\\udfff"}',
        b"not json at all",
        b'\xff\xfe{"id": "q5", "query": "bytes that are not UTF-8"}',
        b'{"id": "q6", "query": 42}',
        b'{"id": "q7", "query": "Postgres"}',
    ]
    r = _cli(home, "memory", "search", "--json", "--queries", "-", stdin=b"\n".join(lines) + b"\n")
    assert r.returncode == 1 and b"3 query line(s) failed" in r.stderr  # the exit status still tells
    out = [json.loads(x) for x in r.stdout.decode("utf-8").splitlines()]
    assert len(out) == 7  # one line per input line, in order
    assert [o["id"] for o in out] == ["q1", "q2", "q3\ufffd", None, None, "q6", "q7"]
    assert out[0]["results"][0]["path"] == "memory/2026-12-01.md"
    assert out[1]["results"][0]["path"] == "memory/2026-12-01.md" and "error" not in out[1]
    assert "error" not in out[2]
    for bad in (out[3], out[4], out[5]):
        assert bad["results"] == [] and "expected a JSON object" in bad["error"]
    assert out[3]["error"].startswith("line 4:")
    assert out[6]["results"][0]["path"] == "memory/2026-12-01.md"
    assert b"Traceback" not in r.stderr


def test_cli_arguments_that_are_not_utf8(home: Path) -> None:
    r = _cli(home, "memory", "search", "--json", b"\xff billing")
    assert r.returncode == 0, r.stderr.decode()
    assert json.loads(r.stdout)["results"][0]["path"] == "memory/2026-12-01.md"
    r = _cli(home, "memory", "get", b"memory/\xed\xa0\x80.md")
    assert r.returncode == 1 and b"Traceback" not in r.stderr


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_model_text_and_tool_arguments_with_surrogates_do_not_abort_the_turn(tmp_path: Path, api: str) -> None:
    script = [
        {"tool_calls": [{"name": "memory_search", "arguments": {"query": "\ud800 billing"}},
                        {"name": "write", "arguments": {"path": "memory/n\udc80.md", "content": "x\ud800y\n"}}]},
        {"text": "Found it \udfff there."},
    ]
    with FakeProvider(script) as fake:
        loaded = load(tmp_path / "home", api, fake)
        rt = make_runtime(loaded, HashEmbedder())
        write(rt.agent.workspace / "memory" / "2026-12-01.md", "- The billing database is Postgres.\n")
        result = rt.run_turn("agent:main:main", "look \ud800 it up")
        assert result.reply == "Found it \ufffd there."
        runs = {c.name: c for c in result.tool_calls}
        assert not runs["memory_search"].is_error
        assert (rt.agent.workspace / "memory" / "n\ufffd.md").read_text() == (  # owner-only: the main session's
            '<!-- origin session="agent:main:main" audience="owner" -->\nx\ufffdy\n<!-- /origin -->\n')
        read = read_transcript(rt.store.transcript_path(result.session_id))
        assert not read.problems
        texts = json.dumps([e.message for e in read.entries], ensure_ascii=False)  # type: ignore[union-attr]
        assert "look \ufffd it up" in texts and "\ufffd billing" in texts
        # what was sent back to the provider was valid too
        assert "look \ufffd it up" in json.dumps(fake.requests[-1].body, ensure_ascii=False)
        rt.memory.close()  # type: ignore[union-attr]


def test_transcripts_and_indexing_survive_escaped_surrogates(tmp_path: Path, workspace: Path) -> None:
    t = Transcript.create(tmp_path / "s.jsonl", cwd=tmp_path, session_key="agent:main:main", fsync=False)
    t.append_message({"role": "user", "content": [{"type": "text", "text": "raw \ud800 text"}]})
    assert read_transcript(t.path).entries[0].message["content"][0]["text"] == "raw \ufffd text"  # type: ignore[union-attr]
    # A transcript line written by someone else with a "\ud800" escape still renders and indexes.
    with (tmp_path / "s.jsonl").open("a") as f:
        f.write('{"type":"message","id":"zz","parentId":null,"timestamp":"","message":'
                '{"role":"assistant","content":[{"type":"text","text":"bad \\ud800 billing"}]}}\n')
    text, _ = render_transcript((tmp_path / "s.jsonl").read_text())
    assert "bad \ufffd billing" in text
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    (tmp_path / "s.jsonl").rename(sessions / "s.jsonl")
    from hermit.config.schema import MemorySearchConfig
    from hermit.memory.service import MemoryKey, MemoryService

    svc = MemoryService(MemoryKey("main", workspace), tmp_path / "i.sqlite",
                        MemorySearchConfig.model_validate({"sources": ["memory", "sessions"]}), HashEmbedder(),
                        sessions_dir=sessions)
    try:
        report = svc.sync()
        assert report.files_indexed == 1
        assert svc.search("billing")["results"][0]["path"] == "sessions/s.jsonl"
    finally:
        svc.close()


def test_search_service_never_raises_on_surrogates(workspace: Path, tmp_path: Path, e5: object) -> None:
    write(workspace / "memory" / "a.md", "- The billing database is Postgres.\n")
    svc = service(workspace, tmp_path / "i.sqlite", e5)  # type: ignore[arg-type]
    try:
        svc.sync()
        res = svc.search("\ud800 billing database")
        assert res["results"][0]["path"] == "memory/a.md"
    finally:
        svc.close()
