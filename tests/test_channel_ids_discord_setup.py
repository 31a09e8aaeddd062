"""`hermit setup --channel discord` checks the bot token before saving it, as it does Telegram's, Slack's and
WhatsApp's: GET /users/@me with `Authorization: Bot <token>`, through the channel's guarded client. It names
the bot on success; a token Discord refuses (401) saves nothing and says where to copy it again and that
--no-check saves it unchecked; an unreachable API gets the offline error. discord.py talks to discord.com
only, so `--api-base` points the check (and nothing else: it is not saved) at another server.

Real `hermit` processes against the fake Discord's REST API on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import yaml

import test_setup as setup_cli  # its hermit (a module attribute: its tests are not collected here)
from fakes.fake_discord import BOT_ID, FakeDiscord
from gatewayhelpers import free_port
from hermit.config.envfile import read_env_file
from test_firstday_telegram import served

DISCORD = ["setup", "--channel", "discord", "--token-stdin", "--non-interactive"]
TOKEN = "discord-test-token"


def test_a_discord_token_is_checked_with_users_me_and_the_bot_named(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with served(FakeDiscord(TOKEN)) as fake:
        r = setup_cli.hermit(home, *DISCORD, "--api-base", fake.base_url + "/api/v10", stdin=f"{TOKEN}\n")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "checking the discord token with users/@me" in r.stdout, r.stdout
        assert f"ok: it is the token of the bot @hermit (id {BOT_ID})" in r.stdout, r.stdout
        assert len(fake.done("me")) == 1  # asked once, with `Bot <token>` (the fake takes nothing else)
    assert read_env_file(home / "hermit.env").values["DISCORD_BOT_TOKEN"] == TOKEN
    account = yaml.safe_load((home / "hermit.yaml").read_text())["channels"]["discord"]["accounts"]["default"]
    assert account["token_env"] == "DISCORD_BOT_TOKEN"
    assert "base_url" not in account and "api_base" not in account  # --api-base only pointed the check


def test_a_discord_token_discord_refuses_saves_nothing_and_names_no_check(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with served(FakeDiscord(TOKEN)) as fake:
        base = fake.base_url + "/api/v10"
        r = setup_cli.hermit(home, *DISCORD, "--api-base", base, stdin="discord-test-tokeN\n")
        assert r.returncode == 1, r.stdout + r.stderr
        assert "error: Discord does not know this bot token (401 401: Unauthorized)" in r.stderr, r.stderr
        assert "discord.com/developers/applications" in r.stderr and "--no-check" in r.stderr, r.stderr
        assert "nothing was saved (use --no-check to save without asking Discord)" in r.stderr, r.stderr
        assert "discord-test-tokeN" not in r.stdout + r.stderr and not home.exists()
        assert [c.faulted for c in fake.calls if c.route == "me"] == ["401"]  # asked once, refused

        # --no-check: saved unchecked, nothing asked.
        asked = len(fake.calls)
        r = setup_cli.hermit(home, *DISCORD, "--api-base", base, "--no-check", stdin="discord-test-tokeN\n")
        assert r.returncode == 0 and "checking" not in r.stdout, r.stdout + r.stderr
        assert len(fake.calls) == asked
    assert read_env_file(home / "hermit.env").values["DISCORD_BOT_TOKEN"] == "discord-test-tokeN"


def test_an_unreachable_discord_api_is_the_offline_error(tmp_path: Path) -> None:
    home = tmp_path / "home"
    base = f"http://127.0.0.1:{free_port()}/api/v10"  # nothing listens
    r = setup_cli.hermit(home, *DISCORD, "--api-base", base, stdin=f"{TOKEN}\n")
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"error: cannot reach Discord at {base} (ConnectError)" in r.stderr, r.stderr
    assert "check the network (or the proxy); pass --no-check to save the token unchecked" in r.stderr, r.stderr
    assert not home.exists()


def test_the_discord_check_sends_the_token_to_no_other_users_server(tmp_path: Path) -> None:
    """users/@me goes through the channel's guarded client: a port on this machine another login user holds gets
    nothing, and nothing is saved."""
    from test_channel_local_api import LISTENER, OTHER_USER, as_other

    home = tmp_path / "home"
    with as_other(OTHER_USER, LISTENER) as squatter:
        r = setup_cli.hermit(home, *DISCORD, "--api-base", squatter.url, stdin=f"{TOKEN}\n")
        received = squatter.finish()["received"]
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"is run by another user (uid {OTHER_USER}" in r.stderr and "Hermit sent it nothing" in r.stderr, r.stderr
    assert "--api-base" in r.stderr, r.stderr
    assert received == "" and not home.exists()
