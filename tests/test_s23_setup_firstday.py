"""`hermit setup` on a terminal as a new user answers it, wrong answers included (t9's walk, session 23):

- Ctrl-D at any question ended in a Python traceback (`EOFError`, exit 1); it now stops setup as Ctrl-C does
  (`interrupted`, exit 130, nothing written).
- An owner id that can never match a sender (`my name`) was taken at its question, and setup then ended after
  the last one with `invalid config: …/hermit.yaml:15: …` — a line of a file it had not written — every answer
  lost. It is now asked again at once with the reason; `--owner 'my name'` is refused naming the flag.
- A bot token the platform refused dropped every answer, a model that had just answered too, and its hint
  offered `--no-check` (saving the wrong token). On a terminal the token may now be pasted again; Enter leaves
  the account out and the rest is saved (exit 1, with the command that adds the account).

Real `hermit setup` on a pseudo-terminal (test_setup.Terminal) against the fake Ollama and the fake Telegram."""

from __future__ import annotations

import os
from pathlib import Path

import test_setup as setup_cli  # its Terminal, hermit, env_for and config (its tests are not collected here)
from gatewayhelpers import free_port
from hermit.config.envfile import read_env_file
from hermit.testing import FakeProvider
from test_firstday_telegram import TOKEN, telegram


def _no_ollama() -> list[str]:
    return ["--ollama-url", f"http://127.0.0.1:{free_port()}"]  # nothing answers there: Enter picks the fake


def test_ctrl_d_at_a_question_stops_setup_like_ctrl_c_without_a_traceback(tmp_path: Path) -> None:
    for i, (question, answers) in enumerate([("choice [4]: ", []), ("channel account", ["5"])]):
        home = tmp_path / f"home{i}"
        term = setup_cli.Terminal(["setup", *_no_ollama()], setup_cli.env_for(home))
        try:
            for answer in answers:
                term.expect("choice [4]: ")
                term.send(answer)
            term.expect(question)
            os.write(term.master, b"\x04")  # Ctrl-D: end of input at the prompt
            term.expect("interrupted")  # before: a traceback ending in EOFError, exit 1
        except AssertionError:
            term.send("\x03")  # Ctrl-C at whatever it asks: close() returns at once
            raise
        finally:
            code = term.close()
        assert "Traceback" not in term.seen and "EOFError" not in term.seen, term.seen  # before: both, exit 1
        assert code == 130, (code, term.seen)
        assert not home.exists()


def _to_the_owner_question(term: setup_cli.Terminal, token: str) -> None:
    term.expect("choice [1]: ")
    term.send("1")  # the fake Ollama
    term.expect("Model [llama3.1]: ")
    term.send("")
    term.expect("Add a chat channel account")
    term.send("y")
    term.expect("Which chat platform?")
    term.send("")
    term.expect("Account id (a name for this bot) [default]: ")
    term.send("")
    term.expect("stored as TELEGRAM_BOT_TOKEN: ")
    term.send(token)
    term.expect("Your own sender id on telegram")


def test_an_owner_that_can_never_match_is_asked_again_at_its_question(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider([{"text": "OK", "repeat": True}]) as ollama, telegram() as tg:
        term = setup_cli.Terminal(["setup", "--ollama-url", ollama.base_url, "--api-base", tg.base_url],
                                  setup_cli.env_for(home))
        try:
            _to_the_owner_question(term, TOKEN)
            term.send("my name")
            # before: the next question, then `invalid config: …hermit.yaml:15` after the last one, nothing saved
            term.expect("type it again, or Enter to skip)")
            assert "'my name' is neither a numeric Telegram user id nor an @username" in term.seen, term.seen
            term.send("4242")
            term.expect("What do strangers who DM the bot get?")
            term.send("")
            term.expect("next: ")
        except AssertionError:
            term.send("\x03")  # Ctrl-C at whatever it asks: close() returns at once
            raise
        finally:
            code = term.close()
    assert code == 0, term.seen
    account = setup_cli.config(home)["channels"]["telegram"]["accounts"]["default"]  # type: ignore[index]
    assert account["owners"] == ["4242"]


def test_an_owner_flag_that_can_never_match_is_refused_naming_the_flag(tmp_path: Path) -> None:
    home = tmp_path / "home"
    r = setup_cli.hermit(home, "setup", "--channel", "telegram", "--no-check", "--token-stdin", "--owner", "my name",
                         stdin=TOKEN + "\n")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "error: --owner 'my name': 'my name' is neither a numeric Telegram user id" in r.stderr, r.stderr
    assert "hermit.yaml:" not in r.stderr  # before: a line of a file that was never written
    assert not home.exists()


def _refused_once(tmp_path: Path, again: str, last: str) -> tuple[Path, int, str]:
    home = tmp_path / "home"
    with FakeProvider([{"text": "OK", "repeat": True}]) as ollama, telegram() as tg:
        term = setup_cli.Terminal(["setup", "--ollama-url", ollama.base_url, "--api-base", tg.base_url],
                                  setup_cli.env_for(home))
        try:
            _to_the_owner_question(term, TOKEN[:-1])  # a character short
            term.send("4242")
            term.expect("What do strangers who DM the bot get?")
            term.send("")
            term.expect("Save this token anyway? [y/N]: ")
            term.send("")  # before: `nothing was saved (use --no-check …)`, exit 1, the model that answered too
            term.expect("Paste the telegram token again (Enter leaves the account out): ")
            term.send(again)
            term.expect(last)  # the last line it prints
        except AssertionError:
            term.send("\x03")  # Ctrl-C at whatever it asks: close() returns at once
            raise
        finally:
            code = term.close()
    return home, code, term.seen


def test_a_refused_token_pasted_again_right_saves_everything(tmp_path: Path) -> None:
    home, code, seen = _refused_once(tmp_path, TOKEN, "hermit doctor")
    assert code == 0, seen
    assert "ok: it is the token of the bot @hermit_bot" in seen and TOKEN not in seen
    cfg = setup_cli.config(home)
    assert cfg["agents"]["defaults"]["model"] == "ollama/llama3.1"  # type: ignore[index]
    assert cfg["channels"]["telegram"]["accounts"]["default"]["owners"] == ["4242"]  # type: ignore[index]
    assert read_env_file(home / "hermit.env").values["TELEGRAM_BOT_TOKEN"] == TOKEN


def test_enter_after_a_refused_token_keeps_the_model_and_leaves_the_account_out(tmp_path: Path) -> None:
    home, code, seen = _refused_once(tmp_path, "", "adds it with the right token")
    assert code == 1, seen
    assert "the telegram account default was not added (its token was refused): `hermit setup --channel telegram " \
           "--account default` adds it with the right token" in seen, seen
    cfg = setup_cli.config(home)
    assert cfg["agents"]["defaults"]["model"] == "ollama/llama3.1"  # type: ignore[index]
    assert "default" not in ((cfg.get("channels") or {}).get("telegram") or {}).get("accounts", {})  # type: ignore[attr-defined]
    env = home / "hermit.env"
    assert not env.exists() or "TELEGRAM_BOT_TOKEN" not in read_env_file(env).values


def test_enter_at_every_question_saves_the_fake_provider_that_is_not_started_yet(tmp_path: Path) -> None:
    """The fake provider is Enter's choice with no model anywhere; nothing listens until its start command runs,
    so its check fails: Enter at `Save this choice anyway?` saved nothing (exit 1), so a new user pressing Enter at
    every question ended with no model. It now saves it, with the command that starts it."""
    home = tmp_path / "home"
    fake_url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens: the fake provider is not started yet
    term = setup_cli.Terminal(["setup", *_no_ollama(), "--base-url", fake_url], setup_cli.env_for(home))
    try:
        term.expect("choice [4]: ")
        term.send("")
        term.expect("Model [test-model]: ")
        term.send("")
        term.expect("Save this choice anyway? [Y/n]: ")  # before: [y/N], and Enter saved no model
        term.send("")
        term.expect("Add a chat channel account")
        term.send("")
        term.expect("next: ")
    except AssertionError:
        term.send("\x03")  # Ctrl-C at whatever it asks: close() returns at once
        raise
    finally:
        code = term.close()
    assert code == 0, term.seen
    assert "the model was not saved" not in term.seen and "python -m hermit.testing.fake_provider" in term.seen
    assert setup_cli.config(home)["agents"]["defaults"]["model"] == "fake/test-model"  # type: ignore[index]
    assert (home / "fake-provider.json").exists()  # the start command's script
