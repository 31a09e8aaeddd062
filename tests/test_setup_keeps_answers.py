"""`hermit setup` keeps what the user gave when the model check fails (the H9 walk, finding 8).

On a terminal setup asked the channel's questions (bot token, owner id, DM policy) before it checked the model;
when the check failed every answer was dropped, the bot token included, and the user typed it all again. The model
is now checked before the channel's questions: a failed check (and "no" to saving it anyway) leaves the model out
and setup goes on; the channel account, its token checked on its own, is saved, and setup says plainly that the
model was not saved and the command that finishes it. The flags path does the same: one command with --provider
and --channel saves the checked channel account and exits 1 naming what was not saved.

Real `hermit` processes (on a pseudo-terminal, as a person types) against the fake provider answering 500 and the
fake Telegram Bot API on 127.0.0.1.
"""

from __future__ import annotations

from pathlib import Path

import yaml

import test_setup as setup_cli  # its Terminal, hermit and env_for (a module attribute: its tests are not collected)
from hermit.config.envfile import read_env_file
from hermit.testing import FakeProvider
from test_firstday_telegram import TOKEN, telegram

FAILING = [{"error": 500, "repeat": True}]


def _saved(home: Path) -> tuple[dict[str, object], dict[str, str]]:
    cfg = yaml.safe_load((home / "hermit.yaml").read_text()) or {}
    return cfg, dict(read_env_file(home / "hermit.env").values)


def test_a_failed_model_check_on_a_terminal_keeps_the_bot_token_typed_after_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider(FAILING) as fake, telegram() as tg:
        term = setup_cli.Terminal(["setup", "--provider", "openai-compatible", "--base-url", fake.openai_base_url,
                                   "--name", "two", "--api-base", tg.base_url], setup_cli.env_for(home))
        try:
            term.expect("Model: ", timeout=20)
            term.send("small")
            term.expect("API key for two (Enter if the server needs none): ")
            term.send("sk-typed-key")
            # The model is checked before any channel question: its failure is said while nothing else is typed.
            term.expect("Save this choice anyway? [y/N]: ")
            assert "Add a chat channel account" not in term.seen and "error:" in term.seen, term.seen
            term.send("")
            term.expect("(the model is not saved; setup goes on with the rest)")
            term.expect("Add a chat channel account")
            term.send("y")
            term.expect("Which chat platform?")
            term.expect("choice [1]: ")
            term.send("1")
            term.expect("Account id (a name for this bot) [default]: ")
            term.send("")
            term.expect("telegram token, stored as TELEGRAM_BOT_TOKEN: ")
            term.send(TOKEN)
            term.expect("Your own sender id on telegram")
            term.send("4242")
            term.expect("What do strangers who DM the bot get?")
            term.expect("choice [1]: ")
            term.send("")
            term.expect("the model was not saved")
        except AssertionError:
            term.send("\x03")  # Ctrl-C at whatever it asks: close() returns at once, the failure is the expect's
            raise
        finally:
            code = term.close()
        assert len(tg.done("getMe")) == 1  # the token passed its own check
    assert code == 1, term.seen
    assert "channel account telegram/default" in term.seen and "ok: it is the token of the bot" in term.seen
    finish = (f"to finish: `hermit setup --provider openai-compatible --name two --base-url {fake.openai_base_url} "
              "--model small --api-key-stdin` once the check can pass, or with --no-check")
    assert finish in term.seen, term.seen
    cfg, env = _saved(home)
    account = cfg["channels"]["telegram"]["accounts"]["default"]  # type: ignore[index]
    assert account["owners"] == ["4242"] and account["token_env"] == "TELEGRAM_BOT_TOKEN"
    assert account["api_base"] == tg.base_url
    assert env == {"TELEGRAM_BOT_TOKEN": TOKEN}  # the refused model's key is not stored on its own
    assert "two" not in ((cfg.get("models") or {}).get("providers") or {})  # type: ignore[attr-defined]
    assert "sk-typed-key" not in (home / "hermit.yaml").read_text() + term.seen


def test_a_failed_model_check_with_flags_saves_the_checked_channel_account_and_exits_1(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider(FAILING) as fake, telegram() as tg:
        r = setup_cli.hermit(home, "setup", "--provider", "openai-compatible", "--base-url", fake.openai_base_url,
                             "--model", "m", "--channel", "telegram", "--api-base", tg.base_url, "--token-stdin",
                             "--owner", "42", stdin=TOKEN + "\n")
        assert len(tg.done("getMe")) == 1
    assert r.returncode == 1, r.stdout + r.stderr
    assert "updated" in r.stdout and "channel account telegram/default" in r.stdout and ": model " not in r.stdout
    assert "the model was not saved (to finish: `hermit setup --provider openai-compatible --base-url " \
           f"{fake.openai_base_url} --model m` once the check can pass, or with --no-check" in r.stderr, r.stderr
    # Without a model the gateway cannot start: the next step says to choose one first.
    assert "hermit setup   (choose a language model first" in r.stdout
    cfg, env = _saved(home)
    assert cfg["channels"]["telegram"]["accounts"]["default"]["owners"] == ["42"]  # type: ignore[index]
    assert env == {"TELEGRAM_BOT_TOKEN": TOKEN}
    assert "model" not in (cfg.get("agents") or {}).get("defaults", {})  # type: ignore[attr-defined]
    # Finishing as it says saves the model and leaves the channel account as it was.
    with FakeProvider([{"text": "ok", "repeat": True}]) as good:
        done = setup_cli.hermit(home, "setup", "--provider", "openai-compatible", "--base-url", good.openai_base_url,
                                "--model", "m")
    assert done.returncode == 0, done.stdout + done.stderr
    after, env_after = _saved(home)
    assert after["agents"]["defaults"]["model"] == "custom/m"  # type: ignore[index]
    assert after["channels"] == cfg["channels"] and env_after == env


def test_a_failed_model_check_and_a_refused_token_save_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider(FAILING) as fake, telegram() as tg:
        r = setup_cli.hermit(home, "setup", "--provider", "openai-compatible", "--base-url", fake.openai_base_url,
                             "--model", "m", "--channel", "telegram", "--api-base", tg.base_url, "--token-stdin",
                             stdin=TOKEN[:-1] + "\n")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "nothing was saved (the model neither)" in r.stderr, r.stderr
    assert not home.exists()


def test_a_failed_model_check_alone_still_saves_nothing_and_says_how_to_finish(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider(FAILING) as fake:
        r = setup_cli.hermit(home, "setup", "--provider", "openai-compatible", "--base-url", fake.openai_base_url,
                             "--model", "m")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "nothing was saved (to finish: `hermit setup --provider openai-compatible" in r.stderr, r.stderr
    assert not home.exists()
