"""Audit 19, side doors that held: guards. Private text (MEMORY.md, memory/private/, what contacts wrote and sent, the
commands run for them) and secrets (the bot token, API keys) reach nobody through the ways out that are not a chat
reply — with a permissive umask (000), a world-writable TMPDIR, `--debug`, and another local user (uid 65534) as
the reader:
- a real `hermit gateway run` (fake Telegram, fake model): the owner's turn writes a private note and runs a
  command, a contact sends text, a photo and a document and has a sandboxed command run, a stranger is refused.
  Nothing Hermit made has group/other bits; TMPDIR stays empty; gateway.log and the `--debug` stderr hold no
  message, note, command or document text and no token (httpx's `/bot<token>/` URLs are masked); the process
  table, sampled while the turns run, holds none of them either (commands go in the environment);
- the CLI under umask 000: a sandboxed (`mode: all`) turn, `memory index --force` (the rebuild's copies),
  `backup` into a world-writable folder, `restore`, `restore --force`; `doctor --json` and `channels list` with
  plaintext keys and tokens in the config name where they are, never their values;
- `hermit mcp serve --agent family` (stdio): memory_get of main's files and of the state dir's (hermit.env, the
  config, a transcript), by relative, absolute and `..` paths, answers none, shared or not.
Real processes, files and uids; as root the reader is uid 65534, otherwise other users are judged by the modes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from mcp import Client, StdioServerParameters

from channeldrivers import TelegramDriver
from channelhelpers import run
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_mcp_server import run_with_client

OTHER = 65534
RUNNER = Path(__file__).with_name("gateway_runner.py")
CANARY = re.compile(r"(OWNERMSG|CONTACTMSG|STRANGERMSG|PRIVNOTE|OWNERCMD|ROOMCMD|DOCBODY|MEMCANARY)-\d+")
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")


def private_home(home: Path, cfg: dict[str, Any]) -> None:
    (home / "workspace" / "memory").mkdir(parents=True, mode=0o700)
    os.chmod(home, 0o700)
    os.chmod(home / "workspace", 0o700)
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    (home / "workspace" / "MEMORY.md").write_text("# Memory\n\n- MEMCANARY-11\n", encoding="utf-8")
    for f in (home / "hermit.yaml", home / "workspace" / "MEMORY.md"):
        os.chmod(f, 0o600)


def loose(root: Path, *, skip: tuple[Path, ...] = ()) -> list[str]:
    """Everything under `root` a group or other user may read, write or enter."""
    return [f"{oct(stat.S_IMODE(p.lstat().st_mode))} {p}" for p in root.rglob("*")
            if p not in skip and not p.is_symlink() and p.lstat().st_mode & 0o077]


def readable_by_other(*roots: Path) -> list[str]:
    """As uid 65534 (a forked child; root only): every path under `roots` it can open or list."""
    if os.geteuid() != 0:
        return []
    paths = [str(p) for r in roots for p in [r, *r.rglob("*")] if not p.is_symlink()]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        opened = []
        try:
            os.setgroups([])
            os.setgid(OTHER)
            os.setuid(OTHER)
            for p in paths:
                try:
                    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
                except OSError:
                    continue
                os.close(fd)
                opened.append(p)
        finally:
            os.write(write, json.dumps(opened).encode())
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return [p for p in json.loads(data) if p not in {str(r) for r in roots}]


def tree_cmdlines(pid: int) -> set[str]:
    """The command lines of `pid` and its descendants, as any local user reads them (/proc/<pid>/cmdline)."""
    out: set[str] = set()
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            out.add(Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            tasks = list(Path(f"/proc/{p}/task").iterdir())
        except OSError:
            continue
        for task in tasks:  # a child started from a thread is that thread's child
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
    return out


def test_a_gateway_leaks_nothing_through_files_logs_tmp_or_the_process_table(tmp_path: Path) -> None:
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    tmp.mkdir()
    os.chmod(tmp, 0o1777)
    steps = [{"match": {"contains": "OWNERMSG-22"}, "tool_calls": [
                 {"name": "write", "arguments": {"path": "memory/private/x.md", "content": "- PRIVNOTE-77\n"}},
                 {"name": "exec", "arguments": {"command": "echo OWNERCMD-55 >/dev/null; sleep 1.5"}}]},
             {"match": {"contains": "OWNERMSG-22"}, "text": "done owner"},
             {"match": {"contains": "CONTACTMSG-33"}, "tool_calls": [
                 {"name": "exec", "arguments": {"command": "echo ROOMCMD-66 >/dev/null; sleep 1.5"}}]},
             {"match": {"contains": "CONTACTMSG"}, "text": "done contact", "repeat": True}]

    async def body() -> tuple[set[str], str, str]:
        with FakeProvider(steps) as fake:
            drv = TelegramDriver(["personal"])
            await drv.start()
            try:
                private_home(home, {
                    "agents": {"defaults": {"model": "fake/test-model", "memory_search": {"provider": "none"}}},
                    "models": {"providers": {"fake": {"type": "openai-compatible",
                                                      "base_url": fake.openai_base_url}}},
                    "gateway": {"shutdown_grace_seconds": 5},
                    "channels": {"telegram": {"accounts": {"personal": {
                        **drv.account_config("personal"), "owners": ["1001"], "dm_policy": "allowlist",
                        "allow_from": ["1002"]}}}}})
                token = drv.fakes["personal"].token
                env = {**os.environ, **drv.env, "OMP_WAIT_POLICY": "PASSIVE", "TMPDIR": str(tmp)}
                err = (tmp_path / "stderr").open("w")
                proc = await asyncio.create_subprocess_exec(
                    "sh", "-c", 'umask 000; exec "$@"', "sh", sys.executable, str(RUNNER), "--debug", "--home",
                    str(home), "gateway", "run", "--port", "0", stdout=asyncio.subprocess.PIPE, stderr=err, env=env)
                err.close()
                assert proc.stdout is not None
                while "Hermit gateway on" not in (line := (await asyncio.wait_for(proc.stdout.readline(),
                                                                                   PROC_TIMEOUT)).decode()):
                    assert line, (tmp_path / "stderr").read_text()[-3000:]
                fake_tg = drv.fakes["personal"]
                seen: set[str] = set()

                async def sample_until(peer: str, count: int) -> None:
                    end = time.monotonic() + PROC_TIMEOUT
                    while len(drv.texts("personal", peer)) < count:
                        assert time.monotonic() < end, drv.texts("personal", peer)
                        seen.update(tree_cmdlines(proc.pid))
                        await asyncio.sleep(0.02)

                fake_tg.push_message(chat_id=1001, text="hello OWNERMSG-22")
                await sample_until("1001", 1)
                fake_tg.push_message(chat_id=1002, text="hi CONTACTMSG-33", photo=PNG)
                fake_tg.push_message(chat_id=1002, text="doc CONTACTMSG-34",
                                     document=("letter.txt", b"DOCBODY-36"))
                fake_tg.push_message(chat_id=1003, text="stranger STRANGERMSG-44")
                await sample_until("1002", 2)
                proc.send_signal(15)
                assert await asyncio.wait_for(proc.wait(), PROC_TIMEOUT) == 0
            finally:
                await drv.stop()
        assert [r for r in fake.requests if "ROOMCMD-66" in json.dumps(r.body)]  # the commands did run
        return seen, token, (tmp_path / "stderr").read_text(errors="replace")

    seen, token, stderr = run(body, timeout=4 * PROC_TIMEOUT)
    assert any("sleep 1.5" in c for c in seen)  # the sampling saw the commands' processes
    assert any("bwrap" in c for c in seen)  # the contact's ran sandboxed
    shown = "\n".join(seen)
    assert not CANARY.search(shown) and token not in shown and token.split(":")[1] not in shown, shown
    log = (home / "logs" / "gateway.log").read_text(errors="replace")
    assert "refused telegram/personal sender 1003" in log and "/bot<token>/getUpdates" in stderr  # they are the logs
    for text in (log, stderr):
        assert not CANARY.search(text), CANARY.search(text)
        assert token.split(":")[1] not in text
    assert (home / "workspace" / "memory" / "private" / "x.md").is_file()
    assert list((home / "agents" / "main" / "rooms").rglob("*letter.txt"))  # the document was filed
    assert loose(home) == []
    assert list(tmp.iterdir()) == []
    assert readable_by_other(home) == []


def hermit(home: Path, env: dict[str, str], *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(["sh", "-c", 'umask 000; exec "$@"', "sh", sys.executable, "-m", "hermit.cli.main", *args],
                       env={**env, "HERMIT_HOME": str(home)}, capture_output=True, text=True, timeout=PROC_TIMEOUT,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0 or not ok, (args, r.stdout, r.stderr)
    return r


SECRETS = {"provider": "sk-ant-OKAPIPROV-0001", "telegram": "12345:OKAPITG-0002", "slack_bot": "xoxb-OKAPISB-0003",
           "slack_app": "xapp-OKAPISA-0004", "env": "sk-OKAPIENV-0005"}


def test_the_cli_under_umask_000_and_its_diagnostics(tmp_path: Path) -> None:
    home, tmp, out = tmp_path / "home", tmp_path / "tmp", tmp_path / "out"
    for d in (tmp, out):
        d.mkdir()
        os.chmod(d, 0o1777)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(TMPDIR=str(tmp), OMP_WAIT_POLICY="PASSIVE")
    steps = [{"match": {"contains": "ROOMCMD-1"}, "tool_calls": [
                 {"name": "write", "arguments": {"path": "memory/2026-01-01.md", "content": "- PRIVNOTE-2\n"}},
                 {"name": "exec", "arguments": {"command": "echo x > made.txt; mkdir -p d/e; echo y > d/e/f"}}]},
             {"text": "ok", "repeat": True}]
    with FakeProvider(steps) as fake:
        private_home(home, {
            "agents": {"defaults": {"model": "fake/m", "sandbox": {"mode": "all"},
                                    "memory_search": {"provider": "none"}}},
            "models": {"providers": {"fake": {"type": "openai-compatible", "base_url": fake.openai_base_url},
                                     "anthropic": {"type": "anthropic", "api_key": SECRETS["provider"]}}},
            "channels": {"telegram": {"accounts": {"default": {"token": SECRETS["telegram"], "owners": ["1"]}}},
                         "slack": {"accounts": {"default": {"mode": "socket", "bot_token": SECRETS["slack_bot"],
                                                            "app_token": SECRETS["slack_app"]}}}}})
        (home / "hermit.env").write_text(f"OPENAI_API_KEY={SECRETS['env']}\n", encoding="utf-8")
        os.chmod(home / "hermit.env", 0o600)
        hermit(home, env, "agent", "-m", "please ROOMCMD-1")
    hermit(home, env, "memory", "index")
    hermit(home, env, "memory", "index", "--force")
    said = [hermit(home, env, "doctor", "--json", ok=False).stdout,  # exit 1: a check fails (no real model)
            hermit(home, env, "channels", "list").stdout]
    for text in said:
        assert not [k for k, v in SECRETS.items() if v in text or v.split("-", 1)[1] in text], text
    assert "plaintext" in said[0] and "plaintext" in said[1]
    archive = out / "b.tar.gz"
    hermit(home, env, "backup", str(archive))
    hermit(tmp_path / "home2", env, "restore", str(archive))
    hermit(home, env, "restore", "--force", str(archive))
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    assert "PRIVNOTE-2" in (tmp_path / "home2" / "workspace" / "memory" / "2026-01-01.md").read_text()
    assert loose(tmp_path, skip=(tmp, out)) == []
    assert list(tmp.iterdir()) == [] and list(out.iterdir()) == [archive]
    assert readable_by_other(home, tmp_path / "home2", out) == []


def test_mcp_for_one_agent_reaches_no_other_agents_files_nor_the_state_dirs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    cfg = {"agents": {"defaults": {"timezone": "UTC", "memory_search": {"provider": "none",
                                                                        "sources": ["memory", "sessions"]}},
                      "list": [{"id": "main", "default": True}, {"id": "family"}]}}
    private_home(home, cfg)
    (home / "workspace" / "memory" / "n.md").write_text("- MEMCANARY-12 main's shared note\n", encoding="utf-8")
    (home / "workspace-family" / "memory").mkdir(parents=True)
    (home / "workspace-family" / "memory" / "f.md").write_text("- the family picnic\n", encoding="utf-8")
    (home / "hermit.env").write_text("OPENAI_API_KEY=sk-MEMCANARY-13\n", encoding="utf-8")
    sessions = home / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "s.jsonl").write_text(json.dumps({"type": "message", "message": {
        "role": "user", "content": "MEMCANARY-14"}}) + "\n", encoding="utf-8")
    ws = home / "workspace"
    paths = ["../workspace/MEMORY.md", "../workspace/memory/n.md", "../hermit.env", "../hermit.yaml",
             "memory/../../hermit.env", "../agents/main/sessions/s.jsonl", "sessions/s.jsonl",
             str(ws / "MEMORY.md"), str(ws / "memory" / "n.md"), str(home / "hermit.env"), "/proc/self/environ"]
    for share in (False, True):
        cfg["mcp"] = {"share_private_memory": share}
        (home / "hermit.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
        params = StdioServerParameters(command=sys.executable,
                                       args=["-m", "hermit.cli.main", "mcp", "serve", "--agent", "family"],
                                       env={**os.environ, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"})
        got: list[str] = []

        async def calls(client: Client, got: list[str] = got) -> None:
            for p in paths:
                r = await client.call_tool("memory_get", {"path": p})
                got.append(r.content[0].text + json.dumps(r.structured_content))
            for q in ("MEMCANARY", "memcanary 12", "picnic"):
                r = await client.call_tool("memory_search", {"query": q, "minScore": 0})
                got.append(json.dumps(r.structured_content))

        run_with_client(params, calls)
        assert "family picnic" in got[-1]  # its own agent's notes it reaches
        assert not [g for g in got if CANARY.search(g)], [g for g in got if CANARY.search(g)]
