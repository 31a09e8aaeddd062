"""A second `hermit setup` run, as a user's first day has it (the first-day walk): it must keep what the first run
chose. A second Telegram bot (a relative's, docs/security.md) was stored as TELEGRAM_BOT_TOKEN too, replacing the
first bot's token in hermit.env, so both accounts polled one bot and the first token was gone; a second Anthropic
provider replaced the first one's key the same way; a provider set up with --key-var lost it on the next run
(setup asked for ANTHROPIC_API_KEY); and on a terminal, Enter at "Which language model" — under "Enter keeps what
[brackets] show" — picked the first option, switching a working model to Anthropic and asking for its key.

Real `hermit` processes (and a pseudo-terminal) on real files, against the fake provider server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import yaml

import test_setup as setup_cli  # its Terminal, env_for and hermit (a module attribute: its tests are not collected here)
from hermit.config.envfile import read_env_file
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT


def accounts(home: Path) -> dict[str, dict[str, object]]:
    found: dict[str, dict[str, object]] = yaml.safe_load((home / "hermit.yaml").read_text())["channels"]["telegram"][
        "accounts"]
    return found


def test_a_second_telegram_bot_gets_a_variable_of_its_own_and_the_first_token_is_kept(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = setup_cli.hermit(home, "setup", "--channel", "telegram", "--token-stdin", "--owner", "42",
                             "--no-check", stdin="111:FIRST-bot-token\n")
    assert first.returncode == 0, first.stderr
    second = setup_cli.hermit(home, "setup", "--channel", "telegram", "--account", "mum's bot", "--token-stdin",
                              "--no-check", stdin="222:SECOND-bot-token\n")
    assert second.returncode == 0, second.stderr
    assert "stored TELEGRAM_BOT_TOKEN_MUM_S_BOT in" in second.stdout, second.stdout
    env = read_env_file(home / "hermit.env").values
    assert env["TELEGRAM_BOT_TOKEN"] == "111:FIRST-bot-token"  # was replaced by the second bot's
    assert env["TELEGRAM_BOT_TOKEN_MUM_S_BOT"] == "222:SECOND-bot-token"
    accs = accounts(home)
    assert accs["default"]["token_env"] == "TELEGRAM_BOT_TOKEN"
    assert accs["mum's bot"]["token_env"] == "TELEGRAM_BOT_TOKEN_MUM_S_BOT"
    # Each account's own token changes its own variable only; an account keeps the variable it has.
    again = setup_cli.hermit(home, "setup", "--channel", "telegram", "--token-stdin", "--no-check",
                             stdin="111:NEW-first\n")
    assert again.returncode == 0 and "stored TELEGRAM_BOT_TOKEN in" in again.stdout, again.stdout + again.stderr
    env = read_env_file(home / "hermit.env").values
    assert env["TELEGRAM_BOT_TOKEN"] == "111:NEW-first" and env["TELEGRAM_BOT_TOKEN_MUM_S_BOT"] == "222:SECOND-bot-token"
    listed = setup_cli.hermit(home, "channels", "list")
    assert listed.returncode == 0 and "TELEGRAM_BOT_TOKEN_MUM_S_BOT" in listed.stdout, listed.stdout + listed.stderr


def test_a_second_anthropic_provider_keeps_the_first_key_and_a_chosen_key_variable_is_kept(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider([{"text": "OK", "repeat": True}]) as fake:
        r = setup_cli.hermit(home, "setup", "--provider", "anthropic", "--base-url", fake.base_url, "--api-key-stdin",
                             stdin="sk-ant-personal\n")
        assert r.returncode == 0, r.stderr
        r = setup_cli.hermit(home, "setup", "--provider", "anthropic", "--name", "work", "--base-url", fake.base_url,
                             "--api-key-stdin", stdin="sk-ant-work\n")
        assert r.returncode == 0, r.stderr
        env = read_env_file(home / "hermit.env").values
        assert env["ANTHROPIC_API_KEY"] == "sk-ant-personal" and env["WORK_API_KEY"] == "sk-ant-work", env
        providers = yaml.safe_load((home / "hermit.yaml").read_text())["models"]["providers"]
        assert providers["anthropic"]["api_key_env"] == "ANTHROPIC_API_KEY"
        assert providers["work"]["api_key_env"] == "WORK_API_KEY"

        other = tmp_path / "other"
        r = setup_cli.hermit(other, "setup", "--provider", "anthropic", "--base-url", fake.base_url, "--key-var",
                             "CLAUDE_KEY", "--api-key-stdin", stdin="sk-ant-mine\n")
        assert r.returncode == 0, r.stderr
        # The next run changes the model only: the key is where the first run put it.
        r = setup_cli.hermit(other, "setup", "--provider", "anthropic", "--base-url", fake.base_url, "--model",
                             "claude-opus-4-1")
        assert r.returncode == 0, r.stderr  # was: "hermit setup needs an API key for anthropic"
        assert "ok: anthropic/claude-opus-4-1 answers" in r.stdout
        providers = yaml.safe_load((other / "hermit.yaml").read_text())["models"]["providers"]
        assert providers["anthropic"]["api_key_env"] == "CLAUDE_KEY"


def test_enter_at_the_model_question_of_a_second_run_keeps_the_current_model(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider([{"text": "OK", "repeat": True}]) as fake:
        r = setup_cli.hermit(home, "setup", "--provider", "fake", "--base-url", fake.base_url)
        assert r.returncode == 0, r.stderr
        before = (home / "hermit.yaml").read_text()
        term = setup_cli.Terminal(["setup", "--ollama-url", "http://127.0.0.1:9"], setup_cli.env_for(home))
        try:
            term.expect("Which language model should Hermit talk to?")
            term.expect("choice [5]: ")
            assert "5) keep the current model (fake/test-model)" in term.seen
            term.send("")  # Enter keeps what [brackets] show
            term.expect("Add a chat channel account", timeout=30)  # not "Model [claude-sonnet-4-5]: "
            term.send("")
            term.expect("nothing changed")
        except AssertionError:
            os.killpg(term.proc.pid, signal.SIGKILL)  # it waits for an answer the test does not give
            raise
        finally:
            code = term.close()
    assert code == 0, term.seen
    assert "API key for" not in term.seen and "Model [" not in term.seen
    assert (home / "hermit.yaml").read_text() == before


def test_a_channel_set_up_before_any_model_is_told_to_choose_a_model_not_to_run_the_gateway(tmp_path: Path) -> None:
    """`next: hermit gateway run` was printed, and the gateway then refused to start: "no language model"."""
    home = tmp_path / "home"
    r = setup_cli.hermit(home, "setup", "--channel", "telegram", "--token-stdin", "--no-check", stdin="1:abc\n")
    assert r.returncode == 0, r.stderr
    assert "next: hermit setup   (choose a language model first: the gateway needs one) · hermit doctor" in r.stdout
    assert "hermit gateway run" not in r.stdout
    gateway = setup_cli.hermit(home, "gateway", "run", "--port", "0")
    assert gateway.returncode == 1 and "no language model is configured" in gateway.stderr  # as said
    with FakeProvider([{"text": "OK", "repeat": True}]) as fake:
        assert setup_cli.hermit(home, "setup", "--provider", "fake", "--base-url", fake.base_url).returncode == 0
    r = setup_cli.hermit(home, "setup", "--channel", "telegram", "--owner", "42")
    assert "next: hermit gateway run   (or `hermit service install` to keep it running)" in r.stdout, r.stdout


def test_a_key_from_the_shell_only_is_said_with_how_to_store_it_and_a_servers_url_is_kept(tmp_path: Path) -> None:
    """A key exported in the shell was taken without a word and not stored: the gateway service (it reads hermit.env)
    and the next shell had no key. And a second run without --base-url dropped the first run's server URL."""
    home = tmp_path / "home"
    with FakeProvider([{"text": "OK", "repeat": True}]) as fake:
        r = setup_cli.hermit(home, "setup", "--provider", "anthropic", "--base-url", fake.base_url,
                             ANTHROPIC_API_KEY="sk-ant-shell")
        assert r.returncode == 0, r.stderr
        note = (f"note: ANTHROPIC_API_KEY comes from this shell's environment only, not {home / 'hermit.env'}: the "
                "gateway service and a new shell will not have it; store it with printf '%s\\n' "
                "\"$ANTHROPIC_API_KEY\" | hermit setup --provider anthropic --api-key-stdin")
        assert note in r.stdout, r.stdout
        assert not (home / "hermit.env").exists()
        # The command it gives, as given: the key is stored, the server the first run chose is kept.
        r = subprocess.run(["sh", "-c", "printf '%s\\n' \"$ANTHROPIC_API_KEY\" | \"$0\" -m hermit.cli.main setup "
                            "--provider anthropic --api-key-stdin", sys.executable], capture_output=True, text=True,
                           env=setup_cli.env_for(home, ANTHROPIC_API_KEY="sk-ant-shell"), timeout=PROC_TIMEOUT)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "ok: anthropic/claude-sonnet-4-5 answers" in r.stdout and "comes from this shell" not in r.stdout
        assert read_env_file(home / "hermit.env").values["ANTHROPIC_API_KEY"] == "sk-ant-shell"
        providers = yaml.safe_load((home / "hermit.yaml").read_text())["models"]["providers"]
        assert providers["anthropic"]["base_url"] == fake.base_url  # was dropped: the check went to the real API
