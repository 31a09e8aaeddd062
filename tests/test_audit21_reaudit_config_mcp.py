"""Re-audit s21 (t12): `hermit mcp serve` reads its settings per call through the gateway's LiveConfig, whose
owner-move refusal (a channel routing check) made the owner's MCP client read as a non-owner while hermit.yaml held
a move the gateway refuses — nothing to do with MCP, which routes no channel. The per-call read still follows each
save: sharing turned off counts at the next call, and a file that does not load fails closed."""

from __future__ import annotations

from pathlib import Path

from hermit.cli.mcp import live_settings
from test_audit21_reaudit_config_routes import config, home_fixture, save  # noqa: F401 (home_fixture: `home`)


def with_mcp(cfg: dict[str, object], share: bool) -> dict[str, object]:
    return {**cfg, "mcp": {"share_private_memory": share, "allow_append": True}}


def test_an_owner_move_the_gateway_refuses_leaves_mcp_settings_as_written(home: Path) -> None:
    loaded = save(home, with_mcp(config(home), True))
    settings = live_settings(loaded, loaded.agent("main"))
    assert settings().share_private_memory
    save(home, with_mcp(config(home, family=False), True))  # family removed: the gateway refuses this reload
    assert settings().share_private_memory and settings().allow_append
    save(home, with_mcp(config(home, family=False), False))  # the owner turns sharing off: the next call
    assert not settings().share_private_memory
    (home / "hermit.yaml").write_text("mcp: {share_private_memory: [")  # does not load: a non-owner, no append
    assert not settings().share_private_memory and not settings().allow_append
