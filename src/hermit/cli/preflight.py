"""Before a command touches state: is Hermit initialised, and is the state dir usable? One clear error each.

Commands that read or write memory and sessions call `require_initialized` first, so that before
`hermit setup` (or `hermit init`) they say "run `hermit setup` first (or `hermit init` for memory only)" — the
README's first step is setup, which also inits — and create nothing (no state dir, no index, no cache), and a
broken environment (HERMIT_HOME is a file, the config path is a directory, the state dir is read-only)
gets its own message instead of a traceback or advice that would destroy a good index.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from hermit.errors import ConfigError

if TYPE_CHECKING:
    from hermit.cli.context import CliContext

SETUP_HINT = "run `hermit setup` first (or `hermit init` for memory only)"  # before either: setup also inits
WORKSPACE_HINT = "run `hermit init`: it makes the missing workspace and keeps your config"


def init_hint(ctx: CliContext) -> str:
    """What to run when the agent's workspace is missing: setup on a fresh machine (no config yet), init when a
    config is there (setup would not make the workspace then)."""
    return SETUP_HINT if ctx.paths.config_file() is None else WORKSPACE_HINT


def state_dir_problem(home: Path) -> ConfigError | None:
    """Why `home` cannot be Hermit's state dir (a file there, or a file on its path; a folder another user
    owns or may write, or one inside such a folder), else None."""
    for p in (home, *home.parents):
        if p.is_dir():
            return ownership_problem(home)
        if p.exists() or p.is_symlink():
            what = "is a file" if p == home else f"is inside {p}, which is a file"
            return ConfigError(
                f"the state dir {home} {what}, not a directory",
                "set HERMIT_HOME (or --home) to a directory, e.g. ~/.hermit; Hermit never replaces a file",
            )
    return None


def ownership_problem(home: Path) -> ConfigError | None:
    """The state dir holds the keys (hermit.env), the config that names the model server and every note: one
    another local user owns or may write — `HERMIT_HOME=/tmp/x` made by them first — lets them read the keys
    written there, plant a hermit.env or hermit.yaml, or swap the workspace. So an existing state dir must be
    the user's and written by nobody else, and each folder above it the user's or root's and not writable by
    others unless sticky (/tmp), or they could rename it away and put their own in its place."""
    from hermit.config.paths import unsafe_folder

    found = unsafe_folder(home)  # a symlinked ~/.hermit is fine: the folder it names is judged
    if found is None:
        return None
    folder, why = found
    if folder == home.resolve():
        return ConfigError(f"the state dir {home} {why}",
                           "Hermit keeps your keys and notes there: use a folder of your own (unset HERMIT_HOME for "
                           "~/.hermit), or take it over after checking its files: "
                           f"chown -R $(id -u) {folder} && chmod 700 {folder}")
    return ConfigError(f"the state dir {home} is inside {folder}, which {why}",
                       "move the state dir (HERMIT_HOME) to a folder only you and root can write")


def config_path_problem(ctx: CliContext) -> ConfigError | None:
    for p in ctx.paths.config_candidates:
        if p.is_dir():
            return ConfigError(f"the config path {p} is a directory, not a file",
                               f"move that directory away; `hermit init` then writes a fresh {p.name}")
    return None


def writable_problem(path: Path) -> ConfigError | None:
    """A read-only state dir: say so, and say the index is fine (it must never be deleted for this)."""
    if path.is_dir() and not os.access(path, os.W_OK):
        return ConfigError(
            f"{path} is read-only: Hermit cannot update the memory index, caches or sessions there",
            f"make it writable (chmod u+w {path}) or set HERMIT_HOME to a writable copy; "
            "nothing is wrong with the index itself, so do not delete it",
        )
    return None


def creatable_problem(home: Path, *, fill: bool = True) -> ConfigError | None:
    """Why `hermit init`/`setup` cannot make the state dir `home` (the nearest folder above it that exists is
    not writable by this user: a `--home` under another user's folder) or, with `fill`, write into the
    existing one. None when it can."""
    existing = next((p for p in (home, *home.parents) if p.exists()), None)
    if existing is None or (existing == home and not fill) or os.access(existing, os.W_OK | os.X_OK):
        return None
    import getpass

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid {os.getuid()}"
    if existing == home:
        return ConfigError(f"the state dir {home} is not writable by you ({user})",
                           f"make it writable (chmod u+w {home}), or use a state dir of your own: --home "
                           "~/.hermit (or HERMIT_HOME)")
    return ConfigError(f"cannot create the state dir {home}: {existing} is not writable by you ({user})",
                       "use a folder you can write, e.g. --home ~/.hermit (or HERMIT_HOME=~/.hermit), or have "
                       f"the owner of {existing} create {home.relative_to(existing).parts[0]} there for you "
                       "(owned by you); nothing was created")


def check_environment(ctx: CliContext) -> None:
    """Raise the clear error for a state dir or config path that cannot work, before anything is created."""
    problem = state_dir_problem(ctx.home) or config_path_problem(ctx)
    if problem is not None:
        raise problem


def require_initialized(ctx: CliContext, *, writes: bool = True) -> None:
    """The agent's workspace must exist (what `hermit init` creates); with `writes`, its state dirs must
    be writable. Nothing is created here."""
    check_environment(ctx)
    agent = ctx.agent()
    if not agent.workspace.is_dir():
        if agent.workspace.exists():
            raise ConfigError(f"the workspace {agent.workspace} is not a directory",
                              "point the agent's workspace at a directory")
        raise ConfigError(f"workspace {agent.workspace} does not exist", init_hint(ctx))
    if writes:
        for d in (ctx.home, agent.index_path.parent):
            problem = writable_problem(d)
            if problem is not None:
                raise problem
