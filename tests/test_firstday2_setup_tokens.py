"""`hermit setup` checked only Telegram tokens: a Slack bot token or a WhatsApp access token pasted wrong was saved
without a word, and the first sign was a gateway that never connected. Setup now asks Slack's auth.test and the
Graph API (the phone number the token is for) before saving, through the channel's own client, names the bot and
workspace or the number on success, and saves nothing on a refusal; an unreachable API gets the same clear error as
Telegram's. --no-check saves unchecked; --api-base sets the account's base_url (the check goes there).

Real `hermit` processes against the fake Slack and WhatsApp APIs on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

import test_setup as setup_cli  # its hermit (a module attribute: its tests are not collected here)
from fakes.fake_slack import BOT_USER, TEAM, FakeSlack
from fakes.fake_whatsapp import PHONE_NUMBER_ID, FakeWhatsApp
from gatewayhelpers import free_port
from hermit.config.envfile import read_env_file
from test_firstday2_channel_hints import served

SLACK = ["setup", "--channel", "slack", "--token-stdin", "--secret-stdin", "app_token"]
WHATSAPP = ["setup", "--channel", "whatsapp", "--phone-number-id", PHONE_NUMBER_ID, "--token-stdin",
            "--secret-stdin", "app_secret", "--secret-stdin", "verify_token"]


class GraphApi(FakeWhatsApp):
    """The fake WhatsApp Cloud API, answering GET /<phone_number_id> as the Graph API does."""

    async def _media_info(self, request: Any) -> Any:
        from aiohttp import web

        if request.match_info["media_id"] != self.phone_number_id:
            return await super()._media_info(request)
        if not self._authorised(request):
            self.record("number", {}, faulted="401")
            return web.json_response({"error": {"message": "Invalid OAuth access token - Cannot parse access token",
                                                "type": "OAuthException", "code": 190}}, status=401)
        self.record("number", {})
        return web.json_response({"id": self.phone_number_id, "display_phone_number": "+1 555-010-0100",
                                  "verified_name": "Hermit Test", "quality_rating": "GREEN"})


def test_a_slack_token_is_checked_with_auth_test_and_the_bot_and_workspace_named(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with served(FakeSlack()) as fake:
        base = fake.base_url + "/api"
        r = setup_cli.hermit(home, *SLACK, "--api-base", base, stdin="xoxb-test\nxapp-test\n")
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"ok: it is the token of the bot @hermit ({BOT_USER}) in the workspace {TEAM}" in r.stdout, r.stdout
        assert len(fake.done("auth.test")) == 1
    assert read_env_file(home / "hermit.env").values["SLACK_BOT_TOKEN"] == "xoxb-test"
    cfg = yaml.safe_load((home / "hermit.yaml").read_text())
    assert cfg["channels"]["slack"]["accounts"]["default"]["base_url"] == base


def test_a_slack_token_slack_refuses_saves_nothing_and_says_where_to_copy_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with served(FakeSlack()) as fake:
        r = setup_cli.hermit(home, *SLACK, "--api-base", fake.base_url + "/api", stdin="xoxb-tesT\nxapp-test\n")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "error: Slack does not know this bot token (invalid_auth)" in r.stderr, r.stderr
    assert "api.slack.com/apps" in r.stderr and "nothing was saved (use --no-check to save without asking Slack)" \
        in r.stderr
    assert "xoxb-tesT" not in r.stdout + r.stderr and not home.exists()


def test_a_whatsapp_token_is_checked_by_reading_its_number(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with served(GraphApi()) as fake:
        r = setup_cli.hermit(home, *WHATSAPP, "--api-base", fake.base_url, stdin="EAAG-test\nsecret\nverify\n")
        assert r.returncode == 0, r.stdout + r.stderr
        assert (f"ok: it is an access token for the number +1 555-010-0100 (Hermit Test), phone number id "
                f"{PHONE_NUMBER_ID}") in r.stdout, r.stdout
        assert len(fake.done("number")) == 1
    assert read_env_file(home / "hermit.env").values["WHATSAPP_ACCESS_TOKEN"] == "EAAG-test"

    again = tmp_path / "again"
    with served(GraphApi()) as fake:
        r = setup_cli.hermit(again, *WHATSAPP, "--api-base", fake.base_url, stdin="EAAG-expired\nsecret\nverify\n")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "error: the Graph API does not accept this access token (401 Invalid OAuth access token" in r.stderr
    assert "developers.facebook.com" in r.stderr and "EAAG-expired" not in r.stdout + r.stderr
    assert not again.exists()


def test_an_unreachable_api_is_said_clearly_and_no_check_saves_unchecked(tmp_path: Path) -> None:
    home = tmp_path / "home"
    base = f"http://127.0.0.1:{free_port()}/api"  # nothing listens
    r = setup_cli.hermit(home, *SLACK, "--api-base", base, stdin="xoxb-test\nxapp-test\n")
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"error: cannot reach Slack at {base} (ConnectError)" in r.stderr, r.stderr
    assert "check the network (or the proxy); pass --no-check to save the token unchecked" in r.stderr
    assert not home.exists()
    r = setup_cli.hermit(home, *SLACK, "--api-base", base, "--no-check", stdin="xoxb-test\nxapp-test\n")
    assert r.returncode == 0 and "checking" not in r.stdout, r.stdout + r.stderr
    assert read_env_file(home / "hermit.env").values["SLACK_BOT_TOKEN"] == "xoxb-test"


def test_api_base_for_discord_points_only_the_token_check(tmp_path: Path) -> None:
    # discord.py talks to discord.com only: the URL is where the check goes, never saved (test_channel_ids_discord_setup)
    r = setup_cli.hermit(tmp_path / "home", "setup", "--channel", "discord", "--token-stdin", "--api-base",
                         "http://127.0.0.1:1", stdin="x\n")
    assert r.returncode == 1 and "error: cannot reach Discord at http://127.0.0.1:1" in r.stderr, r.stderr


def test_the_slack_check_sends_the_token_to_no_other_users_server(tmp_path: Path) -> None:
    """auth.test goes through the Slack channel's own client: a port on this machine another login user holds
    gets nothing, and nothing is saved."""
    from test_channel_local_api import LISTENER, OTHER_USER, as_other

    home = tmp_path / "home"
    with as_other(OTHER_USER, LISTENER) as squatter:
        r = setup_cli.hermit(home, *SLACK, "--api-base", squatter.url, stdin="xoxb-test\nxapp-test\n")
        received = squatter.finish()["received"]
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"is run by another user (uid {OTHER_USER}" in r.stderr and "Hermit sent it nothing" in r.stderr, r.stderr
    assert received == "" and not home.exists()
