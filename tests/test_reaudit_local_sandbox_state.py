"""`sandbox.mode: all` with a workspace that holds Hermit's state dir (`workspace: ~` with the state in ~/.hermit).

The bind-mode sandbox binds the workspace read-write and the main session's file tools are confined to it, so
everything under it was the command's: the gateway token and the config's keys to read, every chat's transcripts
and rooms, and the bind guard's own journals to forge (the next turn's recovery then moved or removed whatever
names a forged journal listed). The config is now refused, saying what to change. Checked through the config as
loaded, and through a real bubblewrap command under the configuration the check refuses.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hermit.config.load import build_config
from hermit.config.paths import StatePaths
from hermit.errors import ConfigError


def _raw(workspace: Path, mode: str, **agent: object) -> dict[str, object]:
    return {"agents": {"defaults": {"timezone": "UTC", "sandbox": {"mode": mode}},
                       "list": [{"id": "main", "workspace": str(workspace), **agent}]}}


def test_a_sandboxed_workspace_that_holds_the_state_dir_is_refused(tmp_path: Path) -> None:
    home = tmp_path / ".hermit"
    home.mkdir(mode=0o700)
    for workspace in (tmp_path, home):
        with pytest.raises(ConfigError) as e:
            build_config(_raw(workspace, "all"), StatePaths(home))
        assert "state dir" in e.value.message and "sandbox.mode" in e.value.message
        assert "agents.list[].workspace" in (e.value.hint or "")
    # Sessions and rooms moved (session.store_dir) into the workspace: every chat's transcripts and files.
    with pytest.raises(ConfigError) as e:
        build_config(_raw(tmp_path / "ws", "all", session={"store_dir": str(tmp_path / "ws" / "chats")}),
                     StatePaths(home))
    assert "sessions and rooms" in e.value.message
    # Outside a sandboxed main session the owner's own session reads the state dir anyway: nothing changes.
    assert build_config(_raw(tmp_path, "non-main"), StatePaths(home)).agent().workspace == tmp_path.resolve()
    assert build_config(_raw(tmp_path / "ws", "all"), StatePaths(home)).agent().workspace == (tmp_path / "ws")



def test_a_workspace_given_on_the_command_line_is_judged_by_the_same_rule(tmp_path: Path) -> None:
    from hermit.cli.context import CliContext

    home = tmp_path / ".hermit"
    home.mkdir(mode=0o700)
    (home / "hermit.yaml").write_text("agents:\n  defaults:\n    timezone: UTC\n    sandbox: {mode: all}\n")
    with pytest.raises(ConfigError) as e:
        CliContext(home=home, workspace=tmp_path).agent()
    assert e.value.message.startswith("--workspace:") and "state dir" in e.value.message
    assert "--workspace" in (e.value.hint or "")
    assert CliContext(home=home, workspace=tmp_path / "notes").agent().workspace == tmp_path / "notes"
