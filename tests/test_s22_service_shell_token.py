"""`hermit service install` with a bot token exported in the shell only (not in hermit.env): the installed
service's gateway reads hermit.env, never that shell, so it would run without that bot — and before the gateway
started without a missing account it did not start at all. Install said nothing. Now it warns, naming the
variable, the account and the command that stores it (as `hermit setup` does for a model key); a token stored in
hermit.env gets no warning. Real `hermit service install --no-start` into a temporary XDG config dir."""

from __future__ import annotations

from pathlib import Path

import test_setup as setup_cli  # its hermit and env_for (a module attribute: its tests are not collected here)
from gatewayhelpers import write_config

TOKEN = "123456789:AAHshellOnlyToken_x-1"


def test_service_install_names_a_bot_token_the_service_would_not_have(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_config(home, "http://127.0.0.1:9/v1", extra=(
        "channels:\n  telegram:\n    accounts:\n      default: {token_env: TELEGRAM_BOT_TOKEN}\n"
        "      family: {token_env: TELEGRAM_BOT_TOKEN_FAMILY}\n"))
    (home / "hermit.env").write_text("TELEGRAM_BOT_TOKEN_FAMILY=987654321:AAHstoredToken_y-2\n", encoding="utf-8")
    (home / "hermit.env").chmod(0o600)
    r = setup_cli.hermit(home, "service", "install", "--no-start", XDG_CONFIG_HOME=str(tmp_path / "xdg"),
                         TELEGRAM_BOT_TOKEN=TOKEN)
    assert r.returncode == 0, r.stdout + r.stderr
    [line] = [ln for ln in r.stderr.splitlines() if "TELEGRAM_BOT_TOKEN" in ln]
    assert line.startswith("warning: TELEGRAM_BOT_TOKEN (telegram/default) is set in this shell only"), r.stderr
    assert str(home / "hermit.env") in line, line
    assert "| hermit setup --channel telegram --account default --token-stdin" in line, line
    assert TOKEN not in r.stdout + r.stderr  # the variable's name, never its value
    assert "TELEGRAM_BOT_TOKEN_FAMILY" not in r.stderr  # stored in hermit.env: the service has it
