"""An owner of a channel account bound to another agent (a relative's own agent on a family bot) reaches that
agent's main session, whose exec and file tools run unsandboxed as Hermit's uid under the default
`sandbox.mode: non-main`: `cat ~/.hermit/workspace/MEMORY.md` reads agent main's memory, and the keys. The cron
tool already treats such an owner as someone else's; `hermit doctor` said nothing of their shell. It warns now,
and is quiet once that agent's main session is sandboxed (`sandbox.mode: all`) or its owner is also the default
agent's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from prochelpers import PROC_TIMEOUT

CONFIG = (
    "agents:\n  defaults:\n    memory_search: {{provider: none}}\n"
    "  list:\n    - {{id: main, default: true}}\n    - {{id: family{family}}}\n"
    "channels:\n  telegram:\n    accounts:\n      personal: {{owners: ['42']}}\n"
    "      familybot: {{owners: [{family_owners}]}}\n"
    "bindings:\n  - {{match: {{channel: telegram, account_id: personal}}, agent_id: main}}\n"
    "  - {{match: {{channel: telegram, account_id: familybot}}, agent_id: family}}\n")


def access(home: Path, family: str = "", family_owners: str = "'77'") -> dict[str, object]:
    (home / "hermit.yaml").write_text(CONFIG.format(family=family, family_owners=family_owners))
    env = {**os.environ, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"}
    r = subprocess.run([sys.executable, "-m", "hermit.cli.main", "doctor", "--json"], env=env, text=True,
                       capture_output=True, timeout=PROC_TIMEOUT)
    checks: dict[str, dict[str, object]] = {c["name"]: c for c in json.loads(r.stdout)}
    return checks["access"]


def test_doctor_warns_that_another_agents_owner_has_an_unsandboxed_shell(tmp_path: Path) -> None:
    check = access(tmp_path)
    assert check["status"] == "warn"
    assert ("telegram/familybot: owner 77 reaches agent family's main session, whose exec and file tools are not "
            "sandboxed (sandbox.mode non-main), and is not an owner of the default agent main") in str(check["detail"])
    assert "sandbox.mode: all for agent family" in str(check["detail"])


@pytest.mark.parametrize(("family", "owners"), [(", sandbox: {mode: all}", "'77'"), ("", "'42'")],
                         ids=["sandboxed", "same-owner"])
def test_doctor_is_quiet_when_that_shell_is_sandboxed_or_the_owner_is_the_same(tmp_path: Path, family: str,
                                                                               owners: str) -> None:
    check = access(tmp_path, family, owners)
    assert "main session, whose exec" not in str(check["detail"])


def test_doctor_warns_when_an_accounts_owner_is_left_to_the_default_agent(tmp_path: Path) -> None:
    """Only the family group is bound to agent family: the family bot's owner (a relative) DMing it reaches the
    default agent's main session — agent main's MEMORY.md and shell. Doctor says so; binding the whole account
    to family silences it."""
    (tmp_path / "hermit.yaml").write_text(
        "agents:\n  defaults:\n    memory_search: {provider: none}\n"
        "  list:\n    - {id: main, default: true}\n    - {id: family, sandbox: {mode: all}}\n"
        "channels:\n  telegram:\n    accounts:\n      personal: {owners: ['42']}\n      familybot: {owners: ['77']}\n"
        "bindings:\n  - {match: {channel: telegram, account_id: familybot, peer: {kind: group, id: '-100777'}}, "
        "agent_id: family}\n")
    env = {**os.environ, "HERMIT_HOME": str(tmp_path), "OMP_WAIT_POLICY": "PASSIVE"}
    r = subprocess.run([sys.executable, "-m", "hermit.cli.main", "doctor", "--json"], env=env, text=True,
                       capture_output=True, timeout=PROC_TIMEOUT)
    check = {c["name"]: c for c in json.loads(r.stdout)}["access"]
    assert check["status"] == "warn"
    assert ("telegram/familybot: bindings give it to agent family, but the DMs of its owner 77 go to the default "
            "agent main's main session") in str(check["detail"])
    assert "telegram/personal:" not in str(check["detail"]).split(" — ", 1)[-1]
