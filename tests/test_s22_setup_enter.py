"""`hermit setup` on a terminal, answered with Enter where a new user has nothing to type (session 22, t7):

- Enter at a new bot's token prompt (no token at hand, none in the environment) wrote the account with no token;
  `hermit gateway run` then refused to start at all (`channels.telegram.accounts.default: no token`), the web app
  with it. Now the account is not added, setup says how to add it later, and the rest is saved.
- `hermit --agent family setup`: Enter at "Account id [default]" bound the default agent's own bot (telegram/default)
  to agent family — the owner's DMs answered by the family agent from then on, main cut off from its bot. Now Enter
  offers a bot named after the agent, and re-aiming an existing account that answers another agent asks first.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import test_setup as setup_cli  # its Terminal, env_for and hermit (a module attribute: its tests are not collected)
from hermit.channels.base import ChannelDeps
from hermit.config import StatePaths, load_config
from hermit.gateway.channels import build_channels
from hermit.testing import FakeProvider

TOKEN = "123456:main-bot-token"


@contextmanager
def terminal(argv: list[str], home: Path) -> Iterator[setup_cli.Terminal]:
    """setup_cli.Terminal, killed at once when a step fails (its close() would wait for a process that waits for
    an answer)."""
    term = setup_cli.Terminal(argv, setup_cli.env_for(home))
    try:
        yield term
    except BaseException:
        os.killpg(term.proc.pid, signal.SIGKILL)
        term.close()
        raise


def _bindings(home: Path) -> list[object]:
    return list(setup_cli.config(home).get("bindings") or [])  # type: ignore[call-overload]


def test_enter_at_a_new_bots_token_adds_no_account_and_the_gateway_can_start(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider([{"text": "OK", "repeat": True}]) as fake:
        with terminal(["setup", "--provider", "fake", "--base-url", fake.openai_base_url], home) as term:
            term.expect("Model [test-model]: ")
            term.send("")
            term.expect("Add a chat channel account")
            term.send("y")
            term.expect("choice [1]: ")
            term.send("")  # Telegram
            term.expect("Account id (a name for this bot) [default]: ")
            term.send("")
            term.expect("telegram token, stored as TELEGRAM_BOT_TOKEN")
            term.send("")  # no token yet
            term.expect("next: ")
        code = term.close()
    assert code == 0, term.seen
    assert "the telegram account default is not added" in term.seen
    assert "hermit setup --channel telegram --account default" in term.seen
    assert "Your own sender id" not in term.seen  # no more questions about an account not added
    cfg = setup_cli.config(home)
    assert cfg["agents"]["defaults"]["model"] == "fake/test-model"  # type: ignore[index]  # the rest is saved
    assert "telegram" not in (cfg.get("channels") or {})  # type: ignore[operator]
    # What `hermit gateway run` builds at its start: no account without a token to refuse the whole gateway.
    assert build_channels(load_config(StatePaths(home)), ChannelDeps(home, {}, time.time)) == []


def owners_bot_and_family(tmp_path: Path) -> Path:
    """A home set up with the owner's Telegram bot (account default, owner 4242) and a second agent, family."""
    home = tmp_path / "home"
    made = setup_cli.hermit(home, "setup", "--provider", "fake", "--no-check", "--channel", "telegram",
                            "--token-stdin", "--owner", "4242", stdin=TOKEN + "\n")
    assert made.returncode == 0, made.stderr
    assert setup_cli.hermit(home, "agents", "add", "family").returncode == 0
    return home


def test_enter_for_another_agents_bot_names_a_bot_of_its_own(tmp_path: Path) -> None:
    home = owners_bot_and_family(tmp_path)
    with terminal(["--agent", "family", "setup", "--no-check"], home) as term:
        term.expect("choice [5]: ")
        term.send("")  # keep the model
        term.expect("Add a chat channel account")
        term.send("y")
        term.expect("choice [1]: ")
        term.send("")
        term.expect("Account id (a name for this bot) [family]: ")
        term.send("")
        term.expect("telegram token, stored as TELEGRAM_BOT_TOKEN_FAMILY")
        term.send("654321:family-bot-token")
        term.expect("Enter to skip: ")
        term.send("77")
        term.expect("choice [1]: ")
        term.send("")
        term.expect("next: ")
    code = term.close()
    assert code == 0, term.seen
    accounts = setup_cli.config(home)["channels"]["telegram"]["accounts"]  # type: ignore[index]
    assert accounts["default"]["owners"] == ["4242"] and accounts["family"]["owners"] == ["77"]
    # The owner's own bot still answers as main: only the new bot is bound to family.
    assert _bindings(home) == [{"agent_id": "family", "match": {"channel": "telegram", "account_id": "family"}}]


def test_an_existing_bot_of_another_agent_is_moved_only_when_asked_for(tmp_path: Path) -> None:
    home = owners_bot_and_family(tmp_path)
    before = (home / "hermit.yaml").read_text()
    for answer in ("", "y"):
        with terminal(["--agent", "family", "setup", "--no-check"], home) as term:
            term.expect("choice [5]: ")
            term.send("")
            term.expect("Add a chat channel account")
            term.send("y")
            term.expect("choice [1]: ")
            term.send("")
            term.expect("[family]: ")
            term.send("default")  # the owner's own bot, typed
            term.expect("telegram/default answers as agent main now; answer as agent family instead")
            term.send(answer)
            if answer:
                term.expect("(Enter keeps it): ")
                term.send("")
                term.expect("Enter to skip [4242]: ")  # its owner kept
                term.send("")
                term.expect("choice [1]: ")
                term.send("")
            term.expect("next: " if answer else "nothing changed")
        code = term.close()
        assert code == 0, term.seen
        if not answer:  # Enter: No — nothing written
            assert "telegram/default left as it is" in term.seen
            assert (home / "hermit.yaml").read_text() == before
    assert _bindings(home) == [{"agent_id": "family", "match": {"channel": "telegram", "account_id": "default"}}]
