"""Where Hermit keeps things: the state dir ($HERMIT_HOME), config, workspaces, indexes, sessions."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_AGENT_ID = "main"


def default_home(environ: dict[str, str] | None = None) -> Path:
    """$HERMIT_HOME, else ~/.hermit. Only composition roots should call this."""
    env = os.environ if environ is None else environ
    raw = env.get("HERMIT_HOME")
    return Path(raw).expanduser() if raw else Path.home() / ".hermit"


@dataclass(frozen=True)
class StatePaths:
    home: Path

    @property
    def config_candidates(self) -> tuple[Path, Path, Path]:
        return (self.home / "hermit.yaml", self.home / "hermit.yml", self.home / "hermit.json")

    def config_file(self) -> Path | None:
        for p in self.config_candidates:
            if p.exists():
                return p
        return None

    def default_workspace(self, agent_id: str) -> Path:
        name = "workspace" if agent_id == DEFAULT_AGENT_ID else f"workspace-{agent_id}"
        return self.home / name

    def index_path(self, agent_id: str) -> Path:
        return self.home / "memory" / f"{agent_id}.sqlite"

    def sessions_dir(self, agent_id: str) -> Path:
        return self.home / "agents" / agent_id / "sessions"

    def agent_dir(self, agent_id: str) -> Path:
        return self.home / "agents" / agent_id
