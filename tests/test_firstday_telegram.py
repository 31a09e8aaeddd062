"""`hermit setup --channel telegram` with a token pasted wrong (the first-day walk): a token with a typo, or with a
space inside, was stored without a word; `hermit doctor` called the channel fine, and the gateway's log said only
"telegram default stopped: Telegram getMe failed: 401 Unauthorized". Setup now asks Telegram's getMe before saving,
as it sends the model one tiny request, says which bot the token is, or what Telegram answered and how to fix it
(nothing saved); a token with a space or a line break inside is refused before any request, never echoed. Spaces
and a CR/LF around a pasted token are dropped.

Real `hermit` processes against the fake Telegram Bot API on 127.0.0.1 (`--api-base`, a Bot API server of one's own)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import test_setup as setup_cli  # its hermit and env_for (a module attribute: its tests are not collected here)
from fakes.fake_platform import FakePlatform
from fakes.fake_telegram import BOT_ID, FakeTelegram
from hermit.config.envfile import read_env_file

TOKEN = "123456789:AAHfirstDayToken_x-1"


FP = TypeVar("FP", bound=FakePlatform)


@contextmanager
def served(fake: FP) -> Iterator[FP]:
    """A fake platform served from an event loop of its own thread, for tests that run `hermit` as a process.
    Its loop closes as `asyncio.run`'s does: what still runs on it (a long poll the process left) is cancelled and
    waited for first, never destroyed pending with the loop."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(fake.start(), loop).result(30)
    try:
        yield fake
    finally:
        try:
            asyncio.run_coroutine_threadsafe(fake.stop(), loop).result(30)
        finally:
            asyncio.run_coroutine_threadsafe(_cancel_left(), loop).result(30)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(30)
            loop.close()


async def _cancel_left() -> None:
    """Cancel the loop's other tasks and wait until they are done (`asyncio.run` does so before it closes a loop)."""
    left = asyncio.all_tasks() - {asyncio.current_task()}
    for task in left:
        task.cancel()
    await asyncio.gather(*left, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()


@contextmanager
def telegram(token: str = TOKEN) -> Iterator[FakeTelegram]:
    """A FakeTelegram served from an event loop of its own thread."""
    with served(FakeTelegram(token)) as fake:
        yield fake


def test_a_pasted_token_is_checked_with_getme_and_stored_without_the_spaces_around_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with telegram() as fake:
        r = setup_cli.hermit(home, "setup", "--channel", "telegram", "--api-base", fake.base_url, "--token-stdin",
                             "--owner", "42", stdin=f"  {TOKEN} \r\n")
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"ok: it is the token of the bot @hermit_bot (id {BOT_ID})" in r.stdout
        assert len(fake.done("getMe")) == 1
    assert read_env_file(home / "hermit.env").values["TELEGRAM_BOT_TOKEN"] == TOKEN
    assert f"api_base: {fake.base_url}" in (home / "hermit.yaml").read_text()


def test_a_token_telegram_does_not_know_saves_nothing_and_says_where_to_get_the_right_one(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with telegram() as fake:
        r = setup_cli.hermit(home, "setup", "--channel", "telegram", "--api-base", fake.base_url, "--token-stdin",
                             stdin=TOKEN[:-1] + "\n")  # a character short
    assert r.returncode == 1, r.stdout + r.stderr
    assert "error: Telegram does not know this bot token (401 Unauthorized)" in r.stderr, r.stderr
    assert "copy it again from @BotFather in Telegram (/mybots → your bot → API Token)" in r.stderr
    assert "nothing was saved" in r.stderr and TOKEN[:-1] not in r.stdout + r.stderr
    assert not home.exists()  # no config, no env file, no workspace


def test_a_token_with_a_space_inside_is_refused_before_any_request_and_never_shown(tmp_path: Path) -> None:
    home = tmp_path / "home"
    pasted = "123456789:AAHfirst DayToken"
    with telegram() as fake:
        r = setup_cli.hermit(home, "setup", "--channel", "telegram", "--api-base", fake.base_url, "--token-stdin",
                             stdin=pasted + "\n")
        assert fake.calls == []
    assert r.returncode == 1, r.stdout + r.stderr
    assert "the telegram token has a space or a line break inside it (27 characters)" in r.stderr, r.stderr
    assert "paste it again as one piece" in r.stderr and "--token-stdin" in r.stderr
    assert "DayToken" not in r.stdout + r.stderr
    assert not home.exists()


def test_the_check_sends_the_token_to_no_other_users_server(tmp_path: Path) -> None:
    """The getMe of setup goes through the channel's own client: a Bot API port another login user holds (the
    user's own server is down) gets nothing, and nothing is saved."""
    from test_channel_local_api import LISTENER, OTHER_USER, as_other

    home = tmp_path / "home"
    with as_other(OTHER_USER, LISTENER) as squatter:
        r = setup_cli.hermit(home, "setup", "--channel", "telegram", "--api-base", squatter.url, "--token-stdin",
                             stdin=TOKEN + "\n")
        received = squatter.finish()["received"]
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"is run by another user (uid {OTHER_USER}" in r.stderr and "Hermit sent it nothing" in r.stderr
    assert received == "" and not home.exists()
