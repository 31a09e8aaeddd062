"""What a chat still learned of the machine after its sandbox moved to /workspace (chat-paths-2).

1. memory_get gave a chat precise answers inside a configured `memory_search.extra_paths` folder outside the
   workspace ("file not found: /home/<login>/vault/x.md", "not a Markdown file: …") and "absolute path refused"
   anywhere else: a right guess at where the owner keeps notes was told from a wrong one, and `~/vault/x.md`
   came back spelled out with the owner's home (their login name, the state dir's parent). Those files are the
   owner's whole (never shown to a chat), so a chat's every absolute path, `~` included, now gets one answer;
   `/workspace/memory/x.md` (how its room shows the workspace) reads `memory/x.md`. The owner keeps real paths.
2. A chat's prompt named its session key with the channel account the owner configured (`telegram:work:dm:…`
   under dm_scope per-account-channel-peer): now without it; the owner's main session keeps its key whole.
3. Under systemd the gateway's stderr is the journal (read by the adm and systemd-journal groups) while
   gateway.log is 0600: every log line went there too, peer ids, session keys, file names people sent, job
   labels. When JOURNAL_STREAM names stderr the journal gets start/stop and, for a warning or an error, its
   level, logger and exception type only; gateway.log keeps every entry. Played in a child process whose stderr
   is a pipe JOURNAL_STREAM names, and by a real `hermit gateway run` whose stderr is the file it names.

Played through the real runtime (`run_turn`, a scripted model making the tool calls, the real SQLite index).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agenthelpers import fixed_clock, load_offline
from gatewayhelpers import GatewayProcess, write_config
from hermit.agent.runtime import AgentRuntime
from hermit.memory.service import MemoryKey, MemoryService
from hermit.messages import ToolResultMessage
from hermit.sessions.keys import dm_session_key, main_session_key
from hermit.testing import FakeProvider, ScriptedModel
from memhelpers import HashEmbedder
from prochelpers import PROC_TIMEOUT, pythonpath

MARK = "alice-q7z"  # a part of the owner's home, as their login name would be
CONTACT = dm_session_key("main", "telegram", "777", account_id="work-acct")
MAIN = main_session_key("main")
DIARY = "- biopsy appointment went fine (D1ARY-CANARY)\n"
SHARED = "- the team lunch is at the ramen place (R4MEN-SHARED)\n"
# A chat's guesses that do not spell the home out: none may come back with it.
GUESSES = ["~/vault/diary.md", "~/vault/nope.md", "~/elsewhere/diary.md", "~/vault/x.txt", "~"]


def runtime(home: Path, model: ScriptedModel) -> AgentRuntime:
    state = home / ".hermit"
    agent = load_offline(state, defaults={"memory_search": {"extra_paths": ["~/vault"]}}).agent()
    (agent.workspace / "memory").mkdir(parents=True)
    (agent.workspace / "memory" / "shared.md").write_text(SHARED)
    svc = MemoryService(MemoryKey(agent.id, agent.workspace), agent.index_path, agent.settings.memory_search,
                        HashEmbedder(), clock=lambda: time.time() + 3600)
    return AgentRuntime(agent, model, memory=svc, fsync=False, home=state, clock=fixed_clock,
                        exec_env={"PATH": "/usr/bin:/bin"})


def calls(paths: list[str]) -> dict[str, Any]:
    return {"tool_calls": [{"id": "s", "name": "memory_search", "arguments": {"query": "biopsy appointment ramen",
                                                                              "minScore": 0}}]
            + [{"id": f"g{i}", "name": "memory_get", "arguments": {"path": p}} for i, p in enumerate(paths)]}


def results(model: ScriptedModel, n: int) -> list[tuple[str, bool]]:
    return [(str(m.content), m.is_error) for m in model.requests[n].messages if isinstance(m, ToolResultMessage)]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / MARK
    (home / "vault").mkdir(parents=True)
    (home / "vault" / "diary.md").write_text(DIARY)
    (home / "vault" / "x.txt").write_text("not a note\n")
    monkeypatch.setenv("HOME", str(home))  # `~` is the owner's home, as for a Hermit the user runs
    return home


def test_a_chat_learns_nothing_of_where_the_owners_extra_notes_are(home: Path) -> None:
    vault = home / "vault"
    inside = [str(vault / "diary.md"), str(vault / "nope.md"), str(vault / "x.txt"), f"{vault}/../vault/diary.md"]
    outside = [str(home / "elsewhere" / "diary.md"), "/etc/x.md", "/srv/notes/x.txt"]
    readable = ["/workspace/memory/shared.md", "memory/shared.md"]
    script = [calls(GUESSES + inside + outside + readable), "done",
              calls(["~/vault/diary.md", str(vault / "diary.md")]), "done"]
    model = ScriptedModel(script)
    rt = runtime(home, model)
    rt.run_turn(CONTACT, "what do you know about me?")
    rt.run_turn(MAIN, "and for me?")
    got = results(model, 1)
    assert len(got) == 1 + len(GUESSES) + len(inside) + len(outside) + len(readable)
    search, guessed = got[0], got[1:1 + len(GUESSES)]
    assert not search[1] and "R4MEN-SHARED" in search[0] and "D1ARY-CANARY" not in search[0]
    for (text, is_error), raw in zip(guessed, GUESSES, strict=True):
        assert is_error and text.startswith(f"error: absolute path refused: {raw}\n"), (raw, text)
    # The home's and the state dir's path are in no prompt and no tool result the chat got but the echo of
    # its own guesses: every absolute path, inside the vault or not, gets the same words.
    for request in model.requests[:2]:
        assert MARK not in request.system and str(home) not in request.system
    answers = {text.replace(raw, "<path>") for (text, _), raw in
               zip(got[1 + len(GUESSES):-len(readable)], inside + outside, strict=True)}
    assert len(answers) == 1, answers
    assert all(text.count(MARK) <= 1 for text, _ in got)
    assert MARK not in search[0] and not any(MARK in text for text, _ in guessed)
    assert got[-2:] == [(f'{{"path": "memory/shared.md", "text": "{SHARED[:-1]}\\n"}}', False)] * 2
    # The owner's main session still searches and reads the vault by its real path.
    owner = results(model, 3)
    assert str(vault / "diary.md") in owner[0][0] and "D1ARY-CANARY" in owner[0][0]
    assert [(text.count("D1ARY-CANARY"), is_error) for text, is_error in owner[1:]] == [(1, False)] * 2
    assert str(vault / "diary.md") in owner[1][0]
    rt.close()


def test_a_chats_prompt_names_its_session_without_the_channel_account(home: Path) -> None:
    model = ScriptedModel(["hi", "hello owner"])
    rt = runtime(home, model)
    rt.run_turn(CONTACT, "hi")
    rt.run_turn(MAIN, "hi")
    contact, main = (r.system for r in model.requests)
    assert "work-acct" in CONTACT and "work-acct" not in contact, contact
    assert "Session: telegram:dm:777 (" in contact  # whose chat it is: still said (not the agent's id)
    assert f"· session: {MAIN} (the main private session)" in main
    rt.close()


PEER = "424242"
# The gateway's CLI as `hermit gateway run` sets it up (main.py's root handler, then setup_logging), then lines
# such as the gateway logs: its start and stop, a turn, a file a contact sent, a job that failed, a library's.
CHILD = f"""
import logging, sys
from pathlib import Path
from hermit.gateway.logs import setup_logging
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
setup_logging(Path(sys.argv[1]), "text", [])
sup = logging.getLogger("hermit.gateway")
sup.info("gateway listening on %s (agents: %s; channels: %s)", "http://127.0.0.1:8765", "main", "telegram/work-acct")
logging.getLogger("hermit.gateway.bus").info("turn done in agent:main:telegram:dm:%s", "{PEER}")
logging.getLogger("hermit.channels.telegram").warning("could not fetch %s sent by %s", "passport-scan.pdf", "{PEER}")
try:
    raise ValueError("job call-mum-{PEER} failed")
except ValueError:
    logging.getLogger("hermit.scheduler").exception("job %s failed", "call-mum-{PEER}")
logging.getLogger("httpx").warning("HTTP Request: POST https://slack.com/api/chat.postMessage?channel=C{PEER}")
sup.info("gateway stopped")
"""
JOURNAL = [
    "INFO hermit.gateway: gateway started; its log is kept out of the journal: `hermit logs` shows the "
    "gateway's log",
    "WARNING hermit.channels.telegram: warning logged: `hermit logs` shows the gateway's log",
    "ERROR hermit.scheduler: error logged (ValueError): `hermit logs` shows the gateway's log",
    "WARNING httpx: warning logged: `hermit logs` shows the gateway's log",
    "INFO hermit.gateway: gateway stopped",
]


def child_stderr(logs: Path, journal: str | None) -> tuple[str, str]:
    """(what the child wrote to its stderr, a pipe; gateway.log) with JOURNAL_STREAM naming that pipe ("pipe"),
    another file (inherited by a process whose stderr went elsewhere) or unset (None)."""
    r, w = os.pipe()
    try:
        st = os.fstat(w)
        env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
        env["PYTHONPATH"] = pythonpath()
        if journal == "pipe":
            env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
        elif journal == "other":
            other = os.stat(logs.parent)
            env["JOURNAL_STREAM"] = f"{other.st_dev}:{other.st_ino}"
        subprocess.run([sys.executable, "-c", CHILD, str(logs)], stderr=w, env=env, check=True,
                       timeout=PROC_TIMEOUT)
    finally:
        os.close(w)
    with os.fdopen(r, "rb") as f:
        err = f.read().decode()
    return err, (logs / "gateway.log").read_text()


def test_the_journal_gets_start_stop_and_error_kinds_never_the_logs_ids(tmp_path: Path) -> None:
    err, log = child_stderr(tmp_path / "journal" / "logs", "pipe")
    assert err.splitlines() == JOURNAL, err
    assert PEER not in err and "passport" not in err and "work-acct" not in err and "8765" not in err
    # gateway.log keeps every entry whole (0600: the owner's)
    for said in (f"dm:{PEER}", f"passport-scan.pdf sent by {PEER}", f"job call-mum-{PEER} failed",
                 "ValueError: job call-mum-", "gateway listening on http://127.0.0.1:8765", "gateway stopped"):
        assert said in log, (said, log)
    assert os.stat(tmp_path / "journal" / "logs" / "gateway.log").st_mode & 0o777 == 0o600


@pytest.mark.parametrize("journal", [None, "other"])
def test_a_terminal_or_a_redirected_stderr_still_gets_every_line(tmp_path: Path, journal: str | None) -> None:
    err, _ = child_stderr(tmp_path / "logs", journal)
    assert f"could not fetch passport-scan.pdf sent by {PEER}" in err and f"dm:{PEER}" in err, err
    assert "HTTP Request: POST https://slack.com" in err and "`hermit logs`" not in err


def test_a_real_gateway_under_a_journal_says_it_started_and_stopped(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    stderr = home / "gateway.stderr"  # GatewayProcess opens it for writing: the same file, so the same inode
    stderr.touch()
    st = os.stat(stderr)
    with FakeProvider([]) as fake, pytest.MonkeyPatch.context() as env:
        write_config(home, fake.openai_base_url)
        env.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
        gw = GatewayProcess(home)
        try:
            gw.wait_ready()
        finally:
            gw.stop()
    assert gw.proc.returncode == 0, gw.stderr()
    err = gw.stderr()
    assert JOURNAL[0] in err and JOURNAL[-1] in err, err
    assert str(home) not in err and "127.0.0.1" not in err, err
    log = (home / "logs" / "gateway.log").read_text()
    assert "gateway listening on http://127.0.0.1:" in log and "gateway stopped" in log


CRASH = r"""
import sys
from hermit.cli import main as cli
def boom(argv):
    raise ValueError("the door code is 4711-2290, sent by telegram 424242")
cli._main = boom
sys.argv = ["hermit", "gateway", "run"]
sys.exit(cli.main())
"""


@pytest.mark.parametrize("journal", [True, False], ids=["journal", "terminal"])
def test_a_crash_tells_the_journal_where_it_broke_never_its_message(tmp_path: Path, journal: bool) -> None:
    """A bug that ends `hermit gateway run` under systemd printed its traceback to stderr, the journal: the
    exception's message (a chat's text, a peer id) with it. There only the frames and the exception's type go;
    a terminal still gets the whole traceback."""
    stderr = tmp_path / "stderr"
    with stderr.open("wb") as f:
        st = os.fstat(f.fileno())
        env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
        env["PYTHONPATH"] = pythonpath()
        if journal:
            env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
        r = subprocess.run([sys.executable, "-c", CRASH], stderr=f, env=env, timeout=PROC_TIMEOUT)
    err = stderr.read_text()
    assert r.returncode == 1, err
    assert "Traceback (most recent call last)" in err and "in boom" in err, err
    if journal:
        assert "4711" not in err and "424242" not in err, err
        assert "builtins.ValueError (its message is kept out of the journal; `hermit logs`" in err, err
    else:
        assert "ValueError: the door code is 4711-2290, sent by telegram 424242" in err, err
