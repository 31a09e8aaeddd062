"""`hermit setup` and `hermit models list|test` as a new user runs them: by flags for each provider kind against
the fake provider server and then one chat turn, under a pseudo-terminal answering the prompts, and the
failures (a refused key, nothing listening) that must leave the config untouched. A command that only makes the
state dir a test starts from runs in this process (`here`); the commands asserted on are subprocesses."""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import stat
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
import yaml

from clihere import hermit_here
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT

KEY = "sk-test-0123456789abcdef"


def env_for(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BOT_TOKEN")) and k != "HERMIT_HOME"}
    env.update(HERMIT_HOME=str(home), OMP_WAIT_POLICY="PASSIVE", **extra)
    return env


def hermit(home: Path, *args: str, stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], input=stdin, capture_output=True,
                          text=True, env=env_for(home, **env), timeout=PROC_TIMEOUT)


def here(home: Path, *args: str, stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    """`hermit(home, ARGS)` in this process: for a command that only sets up what a test starts from."""
    return hermit_here(home, *args, env=env_for(home, **env), stdin=stdin)


def config(home: Path) -> dict[str, object]:
    return yaml.safe_load((home / "hermit.yaml").read_text())


def provider_flags(kind: str, fake: FakeProvider) -> list[str]:
    return {
        "openai-compatible": ["--base-url", fake.openai_base_url, "--model", "qwen3", "--name", "lab"],
        "anthropic": ["--base-url", fake.base_url, "--api-key-stdin"],
        "openai": ["--base-url", fake.openai_base_url, "--api-key-stdin", "--model", "gpt-4.1-mini"],
        # "Ollama" is an OpenAI-compatible server at the given URL; the fake stands in for it.
        "ollama": ["--ollama-url", fake.base_url, "--model", "llama3.1"],
        "fake": ["--base-url", fake.openai_base_url],
    }[kind]


@pytest.mark.parametrize("kind", ["openai-compatible", "anthropic", "openai", "ollama", "fake"])
def test_setup_by_flags_checks_the_model_stores_the_key_apart_and_then_chats(tmp_path: Path, kind: str) -> None:
    home = tmp_path / "home"
    needs_key = kind in ("anthropic", "openai")
    with FakeProvider(["OK", {"text": f"Hello from {kind}.", "repeat": True}],
                      api_key=KEY if needs_key else None) as fake:
        r = hermit(home, "setup", "--provider", kind, *provider_flags(kind, fake), stdin=KEY + "\n")
        assert r.returncode == 0, r.stderr
        assert "answers" in r.stdout and "updated" in r.stdout
        chat = hermit(home, "agent", "-m", "hello")
        assert chat.returncode == 0, chat.stderr
        assert chat.stdout.strip() == f"Hello from {kind}."
        check = fake.requests[0]
        assert "connection check" in json.dumps(check.body)
    cfg = config(home)
    ref = cfg["agents"]["defaults"]["model"]  # type: ignore[index]
    name = ref.split("/")[0]
    provider = cfg["models"]["providers"][name]  # type: ignore[index]
    assert provider["type"] == {"anthropic": "anthropic", "openai": "openai"}.get(kind, "openai-compatible")
    text = (home / "hermit.yaml").read_text()
    assert text.startswith("# Hermit configuration.")  # the template's comments are kept
    assert KEY not in text
    envfile = home / "hermit.env"
    if needs_key:
        assert provider["api_key_env"] in envfile.read_text() and KEY in envfile.read_text()
        assert stat.S_IMODE(envfile.stat().st_mode) == 0o600
    else:
        assert "api_key_env" not in provider and not envfile.exists()
    if kind == "fake":
        script = json.loads((home / "fake-provider.json").read_text())
        assert script[0]["repeat"] is True  # a starter script for `python -m hermit.testing.fake_provider`


def test_a_refused_key_or_a_silent_server_saves_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert here(home, "init").returncode == 0
    before = (home / "hermit.yaml").read_text()
    with FakeProvider([], api_key="the-right-key") as fake:
        r = hermit(home, "setup", "--provider", "anthropic", "--base-url", fake.base_url, "--api-key-stdin",
                   stdin="a-wrong-key\n")
    assert r.returncode == 1 and "rejected the credentials" in r.stderr and "hint:" in r.stderr
    assert "nothing was saved" in r.stderr
    dead = hermit(home, "setup", "--provider", "ollama", "--ollama-url", "http://127.0.0.1:9", "--model", "x")
    assert dead.returncode == 1 and "nothing listens on 127.0.0.1:9" in dead.stderr
    assert (home / "hermit.yaml").read_text() == before and not (home / "hermit.env").exists()
    missing = hermit(home, "setup", "--provider", "openai")
    assert missing.returncode == 1 and "--api-key-stdin" in missing.stderr
    nothing = hermit(home, "setup")
    assert nothing.returncode == 1 and "nothing to set up" in nothing.stderr


def test_rerunning_setup_changes_only_the_chosen_parts_and_the_environment_wins(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider([{"text": "OK", "repeat": True}], api_key=KEY) as fake:
        assert here(home, "setup", "--provider", "anthropic", "--base-url", fake.base_url, "--api-key", KEY
                    ).returncode == 0
        (home / "hermit.yaml").write_text((home / "hermit.yaml").read_text() + "# my own note at the end\n")
        ch = hermit(home, "setup", "--channel", "telegram", "--token-stdin", "--owner", "4242", "--no-check",
                    stdin="123:abc\n")
        assert ch.returncode == 0, ch.stderr
        cfg = config(home)
        assert cfg["agents"]["defaults"]["model"] == "anthropic/claude-sonnet-4-5"  # type: ignore[index]
        account = cfg["channels"]["telegram"]["accounts"]["default"]  # type: ignore[index]
        assert account == {"token_env": "TELEGRAM_BOT_TOKEN", "owners": ["4242"], "dm_policy": "pairing"}
        assert "TELEGRAM_BOT_TOKEN=123:abc" in (home / "hermit.env").read_text()
        # A bad owner id is refused before anything is written.
        bad = hermit(home, "setup", "--channel", "telegram", "--owner", "@")
        assert bad.returncode == 1 and config(home) == cfg
        # The variable in the environment wins over the stored key: a wrong one is what the server sees.
        wrong = hermit(home, "models", "test", ANTHROPIC_API_KEY="sk-wrong")
        assert wrong.returncode == 1 and "rejected the credentials" in wrong.stderr and "hermit.env" in wrong.stderr
        assert hermit(home, "models", "test").returncode == 0
        # Another model: the channel account and the user's note stay.
        lab = hermit(home, "setup", "--provider", "openai-compatible", "--base-url", fake.openai_base_url,
                     "--model", "m2", "--name", "lab", "--api-key-stdin", stdin=KEY + "\n")
        assert lab.returncode == 0, lab.stderr
        assert "stored LAB_API_KEY" in lab.stdout
    cfg = config(home)
    assert cfg["agents"]["defaults"]["model"] == "lab/m2"  # type: ignore[index]
    assert cfg["channels"]["telegram"]["accounts"]["default"]["owners"] == ["4242"]  # type: ignore[index]
    assert "# my own note at the end" in (home / "hermit.yaml").read_text()
    listing = hermit(home, "models", "list")
    assert "* lab/m2  used by: main" in listing.stdout
    assert "anthropic" in listing.stdout and "$ANTHROPIC_API_KEY (set in hermit.env)" in listing.stdout


def test_models_test_says_why_a_model_does_not_answer(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider([{"text": "OK", "repeat": True, "match": {"contains": "first"}}]) as fake:
        assert here(home, "setup", "--provider", "fake", "--base-url", fake.openai_base_url, "--no-check"
                    ).returncode == 0
        fake.add({"error": 429, "retry_after": 0}, {"error": 500}, "OK")
        limited = hermit(home, "models", "test")
        assert limited.returncode == 1 and "rate limited" in limited.stderr and "hint: wait" in limited.stderr
        broken = hermit(home, "models", "test", "--json")
        out = json.loads(broken.stdout)
        assert broken.returncode == 1 and out["ok"] is False and "HTTP 500" in out["error"]
        fine = hermit(home, "models", "test", "fake/test-model")
        assert fine.returncode == 0 and fine.stdout.startswith("fake/test-model answers (")
    unknown = hermit(home, "models", "test", "nope/x")
    assert unknown.returncode == 1 and "unknown model provider 'nope'" in unknown.stderr


class Terminal:
    """A command on a pseudo-terminal (its controlling terminal, so getpass works as for a person)."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.master, slave = os.openpty()
        attrs = termios.tcgetattr(slave)
        attrs[3] &= ~termios.ECHO  # the test reads what the program prints, not its own typing
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        take_tty = ("import fcntl, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
                    "from hermit.cli.main import main; sys.exit(main(sys.argv[1:]))")
        self.proc = subprocess.Popen([sys.executable, "-c", take_tty, *argv], stdin=slave, stdout=slave,
                                     stderr=slave, env=env, start_new_session=True)
        os.close(slave)
        fcntl.fcntl(self.master, fcntl.F_SETFL, os.O_NONBLOCK)
        self.seen = ""

    def expect(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"waited for {text!r}; the terminal shows:\n{self.seen}")
            ready, _, _ = select.select([self.master], [], [], min(left, 0.5))
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # EIO: the program exited and closed the terminal
                    chunk = b""
                if not chunk and self.proc.poll() is not None:
                    raise AssertionError(f"exited ({self.proc.returncode}) before {text!r}:\n{self.seen}")
                self.seen += chunk.decode("utf-8", "replace").replace("\r\n", "\n")
        return self.seen

    def send(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def close(self) -> int:
        try:
            return self.proc.wait(PROC_TIMEOUT)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
            os.close(self.master)


def test_interactive_setup_on_a_terminal_answering_its_prompts(tmp_path: Path) -> None:
    from test_firstday_telegram import telegram  # it imports this module

    home = tmp_path / "home"
    with FakeProvider(["OK", {"text": "Hello from the local model.", "repeat": True}]) as ollama, \
            telegram("123456:secret-token") as bot_api:  # setup asks getMe before saving the token
        term = Terminal(["setup", "--ollama-url", ollama.base_url, "--api-base", bot_api.base_url], env_for(home))
        try:
            term.expect("Which language model should Hermit talk to?")
            term.expect("choice [1]: ")
            assert f"1) Ollama on this machine (answering at {ollama.base_url})" in term.seen
            term.send("1")
            term.expect("Model [llama3.1]: ")
            term.send("")
            term.expect("Add a chat channel account")
            term.send("y")
            term.expect("Which chat platform?")
            term.expect("choice [1]: ")
            term.send("1")
            term.expect("Account id (a name for this bot) [default]: ")
            term.send("")
            term.expect("telegram token, stored as TELEGRAM_BOT_TOKEN: ")
            term.send("123456:secret-token")
            term.expect("Your own sender id on telegram")
            term.send("4242")
            term.expect("What do strangers who DM the bot get?")
            term.expect("choice [1]: ")
            term.send("")
            term.expect("next: ")
        finally:
            code = term.close()
        assert code == 0, term.seen
        assert "123456:secret-token" not in term.seen  # the token was not echoed
        assert "ok: ollama/llama3.1 answers" in term.seen and "ok: it is the token of the bot @hermit_bot" in term.seen
        chat = hermit(home, "agent", "-m", "hi")
        assert chat.returncode == 0 and chat.stdout.strip() == "Hello from the local model.", chat.stderr
    cfg = config(home)
    assert cfg["models"]["providers"]["ollama"] == {"type": "openai-compatible",  # type: ignore[index]
                                                    "base_url": f"{ollama.base_url}/v1"}
    account = cfg["channels"]["telegram"]["accounts"]["default"]  # type: ignore[index]
    assert account["owners"] == ["4242"] and account["dm_policy"] == "pairing"
    assert "TELEGRAM_BOT_TOKEN=123456:secret-token" in (home / "hermit.env").read_text()


def test_a_channels_secrets_come_from_stdin_and_command_line_ones_are_warned_of(tmp_path: Path) -> None:
    """Every secret of a Slack account can be piped in, one line each (the token's first); one given as an
    argument is in the command line other users read with `ps` while setup runs, and setup says so."""
    home = tmp_path / "home"
    piped = hermit(home, "setup", "--channel", "slack", "--no-check", "--token-stdin", "--secret-stdin", "app_token",
                   "--owner", "U0OWNER", stdin="xoxb-piped-bot\nxapp-piped-app\n")
    assert piped.returncode == 0, piped.stderr
    assert "warning" not in piped.stderr
    env_text = (home / "hermit.env").read_text()
    assert "SLACK_BOT_TOKEN=xoxb-piped-bot" in env_text and "SLACK_APP_TOKEN=xapp-piped-app" in env_text
    short = hermit(home, "setup", "--channel", "slack", "--no-check", "--account", "two", "--token-stdin", "--secret-stdin",
                   "app_token", stdin="xoxb-only-one-line\n")
    assert short.returncode == 1 and "no app_token on stdin" in short.stderr and "--secret-stdin app_token" in short.stderr
    argv = hermit(home, "setup", "--channel", "slack", "--no-check", "--account", "three", "--token", "xoxb-argv",
                  "--secret", "app_token=xapp-argv")
    assert argv.returncode == 0, argv.stderr
    assert "warning: --token, --secret put secrets in the command line" in argv.stderr
    assert "xapp-argv" not in argv.stderr and "--secret-stdin FIELD" in argv.stderr


def test_a_config_change_made_while_setup_checks_the_model_is_kept(tmp_path: Path) -> None:
    """`hermit setup` reads the config, checks the model (seconds), then saves: an agent added meanwhile was
    dropped by the text setup had read. Its updates now go into the file as it is when it saves."""
    home = tmp_path / "home"
    with FakeProvider([{"text": "OK", "repeat": True}], api_key=KEY) as fake:
        assert here(home, "init").returncode == 0  # a config to start from
        fake.hold()
        (tmp_path / "key").write_text(KEY + "\n")
        with (tmp_path / "key").open() as key:
            setup = subprocess.Popen([sys.executable, "-m", "hermit.cli.main", "setup", "--provider", "anthropic",
                                      "--base-url", fake.base_url, "--api-key-stdin"], stdin=key,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_for(home))
        try:
            assert fake.waiting.wait(PROC_TIMEOUT)  # setup's model check is in flight
            added = here(home, "agents", "add", "work")  # the change made meanwhile (setup is the subject)
            assert added.returncode == 0, added.stderr
        finally:
            fake.release()
        out, err = setup.communicate(timeout=PROC_TIMEOUT)
    assert setup.returncode == 0, err
    cfg = config(home)
    assert cfg["agents"]["defaults"]["model"] == "anthropic/claude-sonnet-4-5"  # type: ignore[index]
    assert [a["id"] for a in cfg["agents"]["list"]] == ["main", "work"]  # type: ignore[index]
