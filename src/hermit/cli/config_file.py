"""The one way the CLI changes the config file: read, change and write it under the state dir's config lock.

`hermit setup` probes the model (seconds) between reading the config and saving it, and `hermit agents add`
may run meanwhile: each wrote the text it had read, so the later one dropped the other's change in silence.
Now every change is applied to the file as it is when the lock is held (a setup that read it earlier
re-applies its updates to the fresh text and validates again), and written atomically before the lock
is let go.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hermit.cli.context import CliContext


@dataclass(frozen=True)
class ConfigText:
    path: Path
    text: str  # "" when the file does not exist yet
    is_yaml: bool


def config_text(ctx: CliContext) -> ConfigText:
    """The config file's path and text now (hermit.yaml in the state dir when there is none yet)."""
    path = ctx.paths.config_file() or ctx.home / "hermit.yaml"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    return ConfigText(path, text, path.suffix.lower() != ".json")


def edit_config(ctx: CliContext, change: Callable[[ConfigText], str]) -> ConfigText:
    """Hold the config lock, read the file, write `change(current)` atomically; returns what was written.
    `change` raises (a HermitError) to write nothing."""
    from hermit.config.paths import ensure_private_dir
    from hermit.durable import write_atomic
    from hermit.locks import locked

    ensure_private_dir(ctx.home, own=True, what="the state dir")  # another user's, made since the check: refused
    with locked(ctx.home / ".config.lock"):
        current = config_text(ctx)
        written = ConfigText(current.path, change(current), current.is_yaml)
        write_atomic(written.path, written.text)
    return written
