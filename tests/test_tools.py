"""Tools: schemas from signatures, the runner's error handling, files, exec, memory faces and the sandbox."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import Field

from conftest import write
from hermit.config.schema import MemorySearchConfig
from hermit.errors import ToolError
from hermit.memory.service import MemoryKey, MemoryService
from hermit.messages import INVALID_ARGUMENTS_KEY, ToolCallPart
from hermit.tools import (
    AppendOnlyPolicy,
    ExecTool,
    FileTools,
    MemoryTools,
    OsSandbox,
    PathResolver,
    ToolRunner,
    build_toolset,
    make_tool,
)
from hermit.tools.os_sandbox import Backend


def call(runner: ToolRunner, name: str, **arguments: Any) -> tuple[str, bool]:
    res = runner.run(ToolCallPart("c1", name, arguments)).result
    return res.content, res.is_error


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    w = tmp_path / "ws"
    (w / "memory").mkdir(parents=True)
    return w


def files(ws: Path, confined: bool = True, **kw: Any) -> ToolRunner:
    return ToolRunner(FileTools(PathResolver(ws, confined, ws.parent / "home"), **kw).tools())


# ---- base ---------------------------------------------------------------------------------------


def test_schema_comes_from_the_signature_with_wire_aliases() -> None:
    def lookup(
        query: Annotated[str, Field(description="What to find")],
        max_results: Annotated[int | None, Field(alias="maxResults", ge=1)] = None,
        from_line: Annotated[int | None, Field(alias="from")] = None,
        exact: bool = False,
    ) -> str:
        """Find things.

        Longer text that is not part of the description."""
        return f"{query}|{max_results}|{from_line}|{exact}"

    tool = make_tool(lookup)
    schema = tool.schema
    assert schema.name == "lookup" and schema.description == "Find things."
    params = dict(schema.parameters)
    assert params["required"] == ["query"] and params["additionalProperties"] is False
    assert params["properties"]["maxResults"] == {"type": "integer", "minimum": 1}
    assert params["properties"]["from"] == {"type": "integer"}
    assert params["properties"]["exact"] == {"type": "boolean", "default": False}
    assert "title" not in json.dumps(params) and "anyOf" not in json.dumps(params)
    runner = ToolRunner([tool])
    assert call(runner, "lookup", query="q", maxResults=3, **{"from": 7}) == ("q|3|7|False", False)
    text, err = call(runner, "lookup", query="q", max_results=3)
    assert err and "unexpected argument 'max_results'" in text and "query, maxResults, from, exact" in text


def test_runner_turns_every_failure_into_an_error_result() -> None:
    def fail(kind: str) -> str:
        if kind == "tool":
            raise ToolError("it broke", "try again")
        raise RuntimeError("bug inside")

    runner = ToolRunner([make_tool(fail)])
    assert call(runner, "fail", kind="tool") == ("error: it broke\nhint: try again", True)
    assert call(runner, "fail", kind="other") == ("error: RuntimeError: bug inside", True)
    text, err = call(runner, "fail")
    assert err and "missing required argument 'kind'" in text
    text, err = call(runner, "fail", kind=["a"])
    assert err and "kind: Input should be a valid string" in text
    text, err = call(runner, "nope")
    assert err and "unknown tool 'nope'" in text and "fail" in text
    text, err = call(runner, "fail", **{INVALID_ARGUMENTS_KEY: "{kind: tool"})
    assert err and "not a valid JSON object: {kind: tool" in text


def test_runner_lets_ctrl_c_through_and_caps_huge_results() -> None:
    def interrupt() -> str:
        raise KeyboardInterrupt

    def huge() -> str:
        return "a" * 50 + "b" * 200 + "c" * 50

    runner = ToolRunner([make_tool(interrupt), make_tool(huge)], max_result_chars=100)
    with pytest.raises(KeyboardInterrupt):
        runner.run(ToolCallPart("c", "interrupt", {}))
    text, err = call(runner, "huge")
    assert not err and text.startswith("a" * 50) and text.endswith("c" * 25) and "chars omitted" in text


def test_dict_results_are_json() -> None:
    def info() -> dict[str, Any]:
        return {"path": "memory/a.md", "text": "数据"}

    assert call(ToolRunner([make_tool(info)]), "info") == ('{"path": "memory/a.md", "text": "数据"}', False)


# ---- files --------------------------------------------------------------------------------------


def test_read_windows_and_paging(ws: Path) -> None:
    write(ws / "big.txt", "".join(f"line {i}\n" for i in range(1, 3001)))
    r = files(ws)
    text, err = call(r, "read", path="big.txt")
    assert not err and text.startswith("line 1\n") and "[showing lines 1-2000 of 3000; use offset=2001" in text
    text, _ = call(r, "read", path="big.txt", offset=2999, limit=5)
    assert text == "line 2999\nline 3000\n\n[showing lines 2999-3000 of 3000]"
    text, err = call(r, "read", path="big.txt", offset=4000)
    assert err and "past the end" in text and "3000 lines" in text
    write(ws / "small.md", "hello\n")
    assert call(r, "read", path="small.md") == ("hello", False)


def test_read_errors_are_clear(ws: Path) -> None:
    r = files(ws)
    (ws / "bin.dat").write_bytes(b"\x00\x01\x02")
    write(ws / "sub" / "a.md", "x")
    assert "file not found: nope.md" in call(r, "read", path="nope.md")[0]
    assert "binary" in call(r, "read", path="bin.dat")[0]
    text, err = call(r, "read", path="sub")
    assert err and "is a directory" in text and "a.md" in text
    assert "empty path" in call(r, "read", path=" ")[0]


def test_write_creates_overwrites_and_keeps_mode(ws: Path) -> None:
    changed: list[Path] = []
    r = files(ws, on_change=changed.append)
    assert call(r, "write", path="memory/2026-01-20.md", content="- a\n") == (
        "created memory/2026-01-20.md (4 bytes)", False)
    target = ws / "memory" / "2026-01-20.md"
    target.chmod(0o600)
    assert call(r, "write", path="memory/2026-01-20.md", content="- a\n- b\n")[0].startswith("overwrote")
    assert target.read_text() == "- a\n- b\n" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert changed == [target.resolve()] * 2
    assert not [p for p in (ws / "memory").iterdir() if p.name.startswith(".")]  # no temp files left


def test_edit_exact_once_or_a_clear_failure(ws: Path) -> None:
    write(ws / "notes.md", "alpha\nbeta\nalpha\ngamma\n")
    r = files(ws)
    text, err = call(r, "edit", path="notes.md", old="alpha", new="A")
    assert err and "matches 2 times" in text and "more surrounding text" in text
    text, err = call(r, "edit", path="notes.md", old="delta", new="D")
    assert err and "not found" in text and "0 matches" in text
    assert call(r, "edit", path="notes.md", old="", new="x")[1]
    assert call(r, "edit", path="notes.md", old="alpha\ngamma", new="omega") == (
        "edited notes.md: replaced 1 occurrence at line 3", False)
    assert (ws / "notes.md").read_text() == "alpha\nbeta\nomega\n"
    assert "file not found" in call(r, "edit", path="missing.md", old="a", new="b")[0]


def test_append_only_policy(ws: Path) -> None:
    daily = ws / "memory" / "2026-01-20.md"
    write(daily, "- first\n")
    write(ws / "MEMORY.md", "# long term\n")
    r = files(ws, policy=AppendOnlyPolicy(daily))
    assert not call(r, "write", path="memory/2026-01-20.md", content="- first\n- second\n")[1]
    assert not call(r, "edit", path="memory/2026-01-20.md", old="- second\n", new="- second\n- third\n")[1]
    text, err = call(r, "write", path="memory/2026-01-20.md", content="- replaced\n")
    assert err and "append" in text  # the daily-log rule or the flush policy
    text, err = call(r, "edit", path="memory/2026-01-20.md", old="first", new="1st")
    assert err and "append" in text  # the daily-log rule or the flush policy
    text, err = call(r, "write", path="MEMORY.md", content="# long term\nmore\n")
    assert err and "only appending to 2026-01-20.md" in text
    assert daily.read_text() == "- first\n- second\n- third\n" and (ws / "MEMORY.md").read_text() == "# long term\n"


# ---- sandbox ------------------------------------------------------------------------------------


@pytest.fixture
def neighbour(tmp_path: Path, ws: Path) -> Path:
    other = tmp_path / "other"
    write(other / "secret.md", "SECRET\n")
    os.symlink(other, ws / "portal")
    os.symlink(other / "secret.md", ws / "innocent.md")
    write(tmp_path / "home" / ".ssh" / "id", "KEY\n")
    return other


@pytest.mark.parametrize("path", ["{other}/secret.md", "../other/secret.md", "memory/../../other/secret.md",
                                  "portal/secret.md", "innocent.md", "~/.ssh/id", "/etc/hostname"])
def test_confined_paths_refused_after_dotdot_tilde_and_symlinks(ws: Path, neighbour: Path, path: str) -> None:
    text, err = call(files(ws), "read", path=path.format(other=neighbour))
    assert err and "outside the workspace" in text and "sandbox rule" in text and str(ws.resolve()) in text
    assert "SECRET" not in text and "KEY" not in text


def test_confined_writes_through_symlinks_refused(ws: Path, neighbour: Path) -> None:
    r = files(ws)
    assert call(r, "write", path="portal/new.md", content="x")[1]
    assert call(r, "write", path="innocent.md", content="x")[1]
    assert not (neighbour / "new.md").exists() and (neighbour / "secret.md").read_text() == "SECRET\n"


def test_unconfined_paths_may_leave_the_workspace(ws: Path, neighbour: Path) -> None:
    r = files(ws, confined=False)
    assert call(r, "read", path=str(neighbour / "secret.md")) == ("SECRET", False)
    assert call(r, "read", path="~/.ssh/id") == ("KEY", False)


def test_hidden_files_refused_by_every_file_tool(ws: Path) -> None:
    write(ws / "MEMORY.md", "private\n")
    resolver = PathResolver(ws, True, hidden=frozenset({(ws / "MEMORY.md").resolve()}))
    r = ToolRunner(FileTools(resolver).tools() + ExecTool(resolver).tools())
    for name, args in [("read", {"path": "MEMORY.md"}), ("read", {"path": "./memory/../MEMORY.md"}),
                       ("write", {"path": "MEMORY.md", "content": "x"}),
                       ("exec", {"command": "cat MEMORY.md"})]:
        text, err = call(r, name, **args)
        assert err and "privacy rule" in text, (name, args)


# ---- exec ---------------------------------------------------------------------------------------


def exec_runner(ws: Path, confined: bool = True, **kw: Any) -> ToolRunner:
    return ToolRunner(ExecTool(PathResolver(ws, confined, ws.parent / "home"), **kw).tools())


def test_exec_runs_in_the_workspace(ws: Path) -> None:
    write(ws / "memory" / "a.md", "x")
    r = exec_runner(ws)
    text, err = call(r, "exec", command="pwd; ls memory; echo oops >&2; exit 3")
    assert not err and text.startswith("exit code 3 (")
    assert f"\n{ws.resolve()}\na.md\noops" in text
    text, err = call(r, "exec", command="pwd", cwd="memory")
    assert not err and text.endswith(str((ws / "memory").resolve()))


def test_exec_timeout_kills_the_process_group(ws: Path) -> None:
    r = exec_runner(ws)
    start = time.monotonic()
    text, err = call(r, "exec", command="echo started; sleep 30; echo never", timeout=0.5)
    assert err and "timed out after 0.5s" in text and "started" in text and "never" not in text
    assert time.monotonic() - start < 5
    start = time.monotonic()
    text, err = call(r, "exec", command="sleep 30 & echo background")
    assert not err and "background" in text and time.monotonic() - start < 5


def test_exec_output_is_capped_head_and_tail(ws: Path) -> None:
    text, err = call(exec_runner(ws, max_output_chars=1000), "exec", command="seq 1 100000")
    assert not err and "\n1\n2\n3\n" in text and text.endswith("99999\n100000")
    assert "bytes of output omitted" in text and len(text) < 1300


@pytest.mark.parametrize("command", ["cat {other}/secret.md", "cat ../other/secret.md", "cat portal/secret.md",
                                     "cat innocent.md", "ls ~", "cat < {other}/secret.md",
                                     "grep -r x --include={other}/x .", "cd .. && ls", "FOO=../x ls"])
def test_exec_refuses_paths_outside_a_confined_workspace(ws: Path, neighbour: Path, command: str) -> None:
    text, err = call(exec_runner(ws), "exec", command=command.format(other=neighbour))
    assert err and "exec refused" in text and "sandbox rule" in text and "SECRET" not in text


def test_exec_allows_programs_and_dev_null(ws: Path, neighbour: Path) -> None:
    r = exec_runner(ws)
    env_path = next(p for p in ("/usr/bin/env", "/bin/env") if os.path.exists(p))
    text, err = call(r, "exec", command=f"{env_path} true > /dev/null && echo ok")
    assert (text.splitlines()[-1], err) == ("ok", False)
    assert call(r, "exec", command="cat ../x", cwd="../other")[1]
    assert call(r, "exec", command="cat 'unbalanced")[1]
    assert call(exec_runner(ws, confined=False), "exec", command=f"cat {neighbour}/secret.md")[0].endswith("SECRET")


# ---- memory -------------------------------------------------------------------------------------


@pytest.fixture
def memory(ws: Path, tmp_path: Path) -> Any:
    write(ws / "MEMORY.md", "# Memory\n- Alice Chen leads the data platform team.\n")
    write(ws / "memory" / "2026-01-19.md", "# 2026-01-19\n- Alice Chen approved TICKET-4821.\n")
    cfg = MemorySearchConfig.model_validate({"provider": "none"})
    svc = MemoryService(MemoryKey("main", ws), tmp_path / "idx.sqlite", cfg, None)
    yield svc
    svc.close()


def test_memory_tools_contract(memory: MemoryService) -> None:
    runner = ToolRunner(MemoryTools(memory).tools())
    schemas = {s.name: s for s in runner.schemas()}
    assert schemas["memory_search"].description.startswith("Mandatory recall step: search MEMORY.md + memory/*.md")
    assert set(schemas["memory_search"].parameters["properties"]) == {"query", "maxResults", "minScore"}
    # SPEC §4's from/lines, and the startLine/endLine a search result names (s19)
    assert set(schemas["memory_get"].parameters["properties"]) == {"path", "from", "lines", "startLine", "endLine"}
    text, err = call(runner, "memory_search", query="Alice Chen", maxResults=5, minScore=0.0)
    res = json.loads(text)
    assert not err and {r["path"] for r in res["results"]} == {"MEMORY.md", "memory/2026-01-19.md"}
    assert res["mode"] == "keyword-only" and res["reason"]
    text, err = call(runner, "memory_get", path="memory/2026-01-19.md", lines=1, **{"from": 2})
    assert json.loads(text) == {"path": "memory/2026-01-19.md", "text": "- Alice Chen approved TICKET-4821."}
    text, err = call(runner, "memory_get", path="../etc/passwd.md")
    assert err and "'..' is not allowed" in text
    text, err = call(runner, "memory_search", query="x", maxResults=0)
    assert err and "maxResults" in text


def test_memory_tools_withhold_memory_md_outside_the_main_session(memory: MemoryService) -> None:
    runner = ToolRunner(MemoryTools(memory, private=False).tools())
    res = json.loads(call(runner, "memory_search", query="Alice Chen", minScore=0.0)[0])
    assert [r["path"] for r in res["results"]] == ["memory/2026-01-19.md"] and "privacy rule" in res["withheld"]
    for path in ("MEMORY.md", "./MEMORY.md"):
        text, err = call(runner, "memory_get", path=path)
        assert err and "privacy rule" in text
    assert not call(runner, "memory_get", path="memory/2026-01-19.md")[1]


def test_build_toolset(ws: Path, memory: MemoryService) -> None:
    assert build_toolset(ws, confined=False, memory=memory).names == (
        "read", "write", "edit", "exec", "memory_search", "memory_get")
    jail = OsSandbox(Backend("bwrap", "/usr/bin/bwrap", "test"), ws)
    assert "exec" in build_toolset(ws, confined=True, os_sandbox=jail).names
    # A confined session without an OS sandbox is not offered exec at all.
    assert build_toolset(ws, confined=True, memory=memory).names == ("read", "write", "edit", "memory_search",
                                                                      "memory_get")
    assert build_toolset(ws, confined=True, exec_enabled=False, os_sandbox=jail).names == ("read", "write", "edit")


def test_layers_tools_and_agent_never_import_outer_layers() -> None:
    import ast

    src = Path(__file__).resolve().parents[1] / "src" / "hermit"
    forbidden = {"tools": ("hermit.cli", "hermit.agent", "hermit.channels", "hermit.gateway"),
                 "agent": ("hermit.cli", "hermit.channels", "hermit.gateway")}
    for package, banned in forbidden.items():
        for path in (src / package).glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                for name in names:
                    assert not name.startswith(banned), f"{path.name} imports {name}"


def test_memory_tools_withhold_session_transcripts_outside_the_main_session(tmp_path: Path) -> None:
    from hermit.config.schema import MemorySearchConfig
    from hermit.memory.service import MemoryKey
    from hermit.sessions.transcript import Transcript

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    sessions = tmp_path / "sessions"
    t = Transcript.create(sessions / "s1.jsonl", cwd=str(ws), session_id="s1")
    t.append_message({"role": "user", "content": [{"type": "text", "text": "my bank PIN hint is the dog's name"}]})
    cfg = MemorySearchConfig.model_validate({"provider": "none", "sources": ["memory", "sessions"]})
    svc = MemoryService(MemoryKey("main", ws), tmp_path / "idx.sqlite", cfg, None, sessions_dir=sessions)
    private = json.loads(call(ToolRunner(MemoryTools(svc, private=True).tools()), "memory_search",
                              query="bank PIN hint")[0])
    assert private["results"] and private["results"][0]["source"] == "sessions"
    group = ToolRunner(MemoryTools(svc, private=False).tools())
    res = json.loads(call(group, "memory_search", query="bank PIN hint")[0])
    assert res["results"] == [] and "session transcripts" in res["withheld"]
    text, err = call(group, "memory_get", path="sessions/s1.jsonl")
    assert err and "privacy rule" in text
    svc.close()


def test_a_chat_cannot_tell_from_the_withheld_notice_which_words_the_owners_notes_hold(tmp_path: Path) -> None:
    """Keyword-only search (no embedder): the notice that notes were left out used to appear only when
    a query matched an owner-only note, so "biopsy" against "xylophone" said what the private notes say."""
    from hermit.config.schema import MemorySearchConfig
    from hermit.memory.policy.audience import reader_for_session
    from hermit.memory.service import MemoryKey
    from hermit.sessions.keys import group_session_key

    ws = tmp_path / "ws"
    (ws / "memory" / "private").mkdir(parents=True)
    (ws / "memory" / "private" / "health.md").write_text("# Health\n- biopsy result due on Friday\n")
    (ws / "MEMORY.md").write_text("# Memory\n- prefers window seats\n")
    (ws / "memory" / "2026-01-19.md").write_text("# 2026-01-19\n- the team lunch is at noon\n")
    cfg = MemorySearchConfig.model_validate({"provider": "none"})
    svc = MemoryService(MemoryKey("main", ws), tmp_path / "idx.sqlite", cfg, None)
    reader = reader_for_session(group_session_key("main", "telegram", "-100"))
    group = ToolRunner(MemoryTools(svc, private=False, reader=reader).tools())
    answers = [json.loads(call(group, "memory_search", query=q)[0])
               for q in ("biopsy", "window seats", "xylophone", "zeppelin")]
    assert all(a["results"] == [] for a in answers)
    assert len({a["withheld"] for a in answers}) == 1  # one notice, whatever the query matched
    lunch = json.loads(call(group, "memory_search", query="team lunch")[0])
    assert lunch["results"] and lunch["withheld"] == answers[0]["withheld"]
    owner = json.loads(call(ToolRunner(MemoryTools(svc, private=True).tools()), "memory_search", query="biopsy")[0])
    assert owner["results"] and "withheld" not in owner
    svc.close()
