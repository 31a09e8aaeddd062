"""Re-audit s22 (t11) of the owner moves let through as "widening nothing" (gateway/owner_moves.py, t4).

- A brand-new agent whose own entry lists the owner's vault under memory_search.extra_paths (its entry copied from
  main's) was "fresh" — only its workspace and sessions were looked at — and the relative's family bot moved there
  by a binding change started and reloaded: the relative's main session searched the owner's vault.
- Contacts (and groups) let into a session of their own at an agent with nothing in memory yet read that agent's
  shared notes from then on, written by its owners: an agent another owner reaches (a new bot of the owner's bound to
  it in the same edit), or the default agent while still empty, was "fresh", and the family bot's contacts then read
  the owner's daily logs there. Now such a move is harmless only when whoever reaches that agent's main session
  came from the old agent's with them (and it is not the default or web chat's agent, nor owned before).
Real configs on a real state dir, the real loader and router, and a real `hermit gateway run` for the start.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gatewayhelpers import free_port
from hermit.errors import ConfigError
from hermit.gateway import owner_routes
from hermit.workspace import TEMPLATE_FILES, template_text
from prochelpers import PROC_TIMEOUT
from test_audit21_reaudit_config_routes import config, home_fixture, save, started
from test_audit22_config_routes import NOTE, live_reload, with_kids

__all__ = ["home_fixture"]

DIARY = "the owner's private diary: the job offer from Acme, not told to the family yet\n"


def vaulted(home: Path, cfg: dict[str, Any], *agents: str) -> dict[str, Any]:
    """`cfg` with the owner's vault (a notes folder outside every workspace) in these agents' extra_paths."""
    vault = home.parent / "vault"
    for a in cfg["agents"]["list"]:
        if a["id"] in agents:
            a["memory_search"] = {"extra_paths": [str(vault)]}
    return cfg


def gateway_start(home: Path, port: int) -> subprocess.CompletedProcess[str] | None:
    """A real `hermit gateway run` on the saved config: its exit (a refusal), or None when it started (answered on
    its port; stopped then)."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(HERMIT_HOME=str(home), HOME=str(home.parent / "user"), OMP_WAIT_POLICY="PASSIVE")
    proc = subprocess.Popen([sys.executable, "-m", "hermit.cli.main", "gateway", "run"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + PROC_TIMEOUT
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return None  # it started
            time.sleep(0.05)
        out, err = proc.communicate(timeout=PROC_TIMEOUT)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.communicate(timeout=PROC_TIMEOUT)


def test_a_relative_is_not_moved_into_a_new_agent_that_indexes_the_owners_vault(home: Path) -> None:
    vault = home.parent / "vault"
    vault.mkdir()
    (vault / "diary.md").write_text(DIARY)
    first = vaulted(home, config(home), "main")
    started(home, first)
    moved = vaulted(home, with_kids(home), "main", "kids")  # kids' entry copied from main's
    port = free_port()
    moved["gateway"] = {"port": port}
    loaded = save(home, moved)
    assert str(vault) in loaded.agent("kids").settings.memory_search.extra_paths  # kids' memory: the vault
    with pytest.raises(ConfigError) as refused:
        owner_routes.check_start(home, loaded)
    assert "telegram/family/3003 (agent family -> agent kids)" in refused.value.message
    assert live_reload(home, first, moved) is not None
    ran = gateway_start(home, port)
    assert ran is not None, "the gateway started with the relative in the agent that searches the owner's vault"
    assert ran.returncode != 0 and "telegram/family/3003 (agent family -> agent kids)" in ran.stderr, ran.stderr
    # The guard: an extra_paths folder with nothing in it yet is nothing to read; still let through.
    (vault / "diary.md").unlink()
    owner_routes.check_start(home, save(home, moved))
    assert live_reload(home, first, moved) is None


def with_work(home: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    """A new agent `work` and the owner's new bot `work` bound to it; the family bot's binding aimed at `work`."""
    cfg["agents"]["list"].append({"id": "work", "workspace": str(home / "work-ws"), "sandbox": {"mode": "all"}})
    (home / "work-ws").mkdir(exist_ok=True)
    cfg["channels"]["telegram"]["accounts"]["work"] = {"owners": ["1001"], "dm_policy": "allowlist"}
    cfg["bindings"] = [{"match": {"channel": "telegram", "account_id": a}, "agent_id": "work"}
                       for a in ("family", "work")]
    return cfg


def test_contacts_are_not_let_into_a_new_agent_whose_notes_another_owner_writes(home: Path) -> None:
    """The family bot (no owner: its contacts only) re-aimed at the owner's new work agent in the edit that adds
    it: empty then, so "nothing to read" — and the owner's work daily logs from the next day on."""
    from hermit.agent.routing import RouteInput, Router
    from hermit.memory.policy.audience import reader_for_session, visible_text

    first = config(home, family_owners=())
    started(home, first)
    moved = save(home, with_work(home, config(home, family_owners=())))
    route = Router.from_config(moved).resolve(RouteInput("telegram", "family", "dm", "4004"))
    assert (route.agent_id, route.main) == ("work", False)
    # What they would read there once the owner writes: work's shared daily log.
    assert visible_text(NOTE, "memory/2026-12-07.md", reader_for_session(route.session_key)) == NOTE
    with pytest.raises(ConfigError) as refused:
        owner_routes.check_start(home, moved)
    assert "telegram/family/* (agent family -> agent work)" in refused.value.message
    assert live_reload(home, first, with_work(home, config(home, family_owners=()))) is not None


def test_contacts_are_not_let_into_the_default_agent_while_it_is_still_empty(home: Path) -> None:
    first = config(home, family_owners=())
    started(home, first)
    with pytest.raises(ConfigError) as refused:  # the family agent removed: its bot's contacts go to main
        owner_routes.check_start(home, save(home, config(home, family=False, family_owners=())))
    assert "telegram/family/* (agent family -> agent main)" in refused.value.message
    assert live_reload(home, first, config(home, family=False, family_owners=())) is not None


def test_contacts_moving_with_their_owner_to_a_brand_new_agent_still_start(home: Path) -> None:
    """The guard of the two above: the relative and their bot's contacts, together into a new confined agent."""
    started(home, config(home))
    moves = owner_routes.all_moves(home, save(home, with_kids(home)))
    assert {m.key: m.harmless is not None for m in moves} == {"telegram/family/*": True, "telegram/family/3003": True}


def test_a_template_edited_but_stamped_with_its_old_time_is_not_untouched(home: Path) -> None:
    """Held: the templates are compared by content, not by mtime."""
    started(home, config(home))
    name = sorted(TEMPLATE_FILES)[0]
    cfg = with_kids(home)
    path = home / "kids-ws" / name
    path.write_text(template_text(name))
    st = path.stat()
    path.write_text(template_text(name) + "\nThe owner's PIN is 4417.\n")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(ConfigError):
        owner_routes.check_start(home, save(home, cfg))
