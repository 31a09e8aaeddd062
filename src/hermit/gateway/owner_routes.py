"""Which agent's main session each channel account's owners reached, remembered across restarts.

An account's `owners` are the owners of the agent its DMs are routed to. Taking an agent and its binding out of
hermit.yaml while its channel account stays (a relative's family bot) sends that account's DMs to the default agent:
its owner — the relative — becomes the owner of the default agent's main session (MEMORY.md, unsandboxed tools).
A running gateway refuses such an edit (live_config.owners_moved); this module does the same when the gateway
starts, against what the last gateway applied: `<state>/channels/owner-routes.json` (0600), written at each start
and each applied reload. An owner id that already reached one agent's main session and would now reach another
agent's is refused, naming the account, the id and both agents; an id not recorded (new to `owners`, a new
account, the first start) is a promotion the config states. To move someone on purpose: remove the file.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path

from hermit.agent.routing import RouteInput, Router
from hermit.config.load import LoadedConfig
from hermit.errors import ConfigError
from hermit.gateway.live_config import dm_scopes

log = logging.getLogger("hermit.gateway")

FILE = "owner-routes.json"


def path_of(home: Path) -> Path:
    return home / "channels" / FILE


def routes(loaded: LoadedConfig) -> dict[str, str]:
    """`channel/account/owner[/team]` → the agent whose main session that owner's DMs reach (running accounts)."""
    from hermit.config.channels import platforms

    router = Router.from_config(loaded)
    out: dict[str, str] = {}
    for channel in platforms():
        for account_id, acc in loaded.config.channels.accounts_of(channel).items():
            if not acc.enabled:
                continue
            for owner in acc.owners:
                for team in {t for _, t in dm_scopes(router, channel)}:  # a DM carries no guild
                    route = router.resolve(RouteInput(channel, account_id, "dm", owner, team_id=team,
                                                      sender_is_owner=True))
                    if route.main:
                        out["/".join([channel, account_id, owner, *([team] if team else [])])] = route.agent_id
    return out


def _recorded(path: Path) -> dict[str, str]:
    """What the last gateway applied; nothing (no check) when there is no such file of ours."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return {}
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > 4_000_000:
            return {}
        with os.fdopen(os.dup(fd), "rb") as f:
            data = json.loads(f.read())
    except (OSError, ValueError):
        return {}
    finally:
        os.close(fd)
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def check_start(home: Path, loaded: LoadedConfig) -> None:
    """Refuse to start when an owner id would reach another agent's main session than the last gateway gave it."""
    before, now = _recorded(path_of(home)), routes(loaded)
    moved = sorted(f"{k} (agent {before[k]} -> agent {agent})" for k, agent in now.items()
                   if k in before and before[k] != agent)
    if moved:
        raise ConfigError(f"hermit.yaml would give {', '.join(moved)} the main session of another agent than the last "
                          "gateway did (its MEMORY.md and owner tools), because routing changed, not their owners entry",
                          "bind the account to its agent again (bindings), turn it off (enabled: false) or take those "
                          f"ids out of its owners; to move them on purpose, remove {path_of(home)} and start again")


def record(home: Path, loaded: LoadedConfig) -> None:
    """Remember the routes of the config in force (at start and after each applied reload); logged, never fatal."""
    from hermit.config.paths import ensure_private_dir
    from hermit.durable import write_atomic

    try:
        ensure_private_dir(path_of(home).parent, own=True, what="the channels state folder")
        write_atomic(path_of(home), json.dumps(routes(loaded), sort_keys=True, indent=1), mode=0o600)
    except Exception:  # noqa: BLE001 - the check at the next start is weaker, the gateway goes on
        log.exception("could not record which agent each owner reaches in %s", path_of(home))
