"""Whose owner a group member is: the mark "— the owner" on a group message is the answering agent's owner only.

Audit (exfil Y1): the runtimes' owner check was the channel account's `owners` alone. On a gateway with two
agents, an owner of an account whose DMs the bindings give to agent main, writing in a group the bindings give
to agent family (or the family bot's owner writing in one of main's groups), had their group messages shown
to the other agent's model as its user's ("[Ann (42) — the owner]": obeyed as the user's instruction) and
labelled the owner's in that agent's transcript search — words of someone else's owner taken for one's own.
The owner of an agent is whoever reaches its main session (scheduler/targets.not_the_owner says the same for
deliveries): the mark now asks the bindings too. Built like `hermit gateway run` (supervisor.Gateway wiring
the live owner check into each runtime), without serving.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agenthelpers import fixed_clock
from hermit.agent.runtime import AgentRuntime
from hermit.config.load import load_config
from hermit.config.paths import StatePaths
from hermit.gateway.supervisor import Gateway
from hermit.testing import ScriptedModel

CONFIG = """agents:
  defaults:
    memory_search: {provider: none}
  list:
    - {id: main, default: true}
    - {id: family}
channels:
  telegram:
    accounts:
      personal: {token: "1:A", owners: ["42", "@annie"], group_policy: open}
      familybot: {token: "2:B", owners: ["77"], group_policy: open}
bindings:
  - {match: {channel: telegram, account_id: personal}, agent_id: main}
  - {match: {channel: telegram, account_id: familybot}, agent_id: family}
  - {match: {channel: telegram, account_id: personal, peer: {kind: group, id: "-100555"}}, agent_id: family}
  - {match: {channel: telegram, account_id: personal, peer: {kind: dm, id: "99"}}, agent_id: family}
"""


def gateway(tmp_path: Path, config: str = CONFIG) -> tuple[Gateway, dict[str, AgentRuntime]]:
    home = tmp_path / "home"
    (home / "workspace").mkdir(parents=True)
    (home / "hermit.yaml").write_text(config, encoding="utf-8")
    os.chmod(home / "hermit.yaml", 0o600)
    loaded = load_config(StatePaths(home))
    runtimes = {a.id: AgentRuntime(a, ScriptedModel([]), fsync=False, home=home, clock=fixed_clock)
                for a in loaded.agents}
    gw = Gateway(loaded, home, {"PATH": "/usr/bin:/bin"}, runtimes, "t" * 40, host="127.0.0.1", port=0,
                 channels=[])
    return gw, runtimes


def marked(rt: AgentRuntime, account: str, sender: str, username: str | None = None) -> Any:
    return rt.channel_sender("telegram", account, sender, "Ann", username).owner


def test_another_agents_owner_is_not_marked_the_owner_in_a_group(tmp_path: Path) -> None:
    gw, rts = gateway(tmp_path)
    main, family = rts["main"], rts["family"]
    # 42 owns main (their DMs on `personal` reach main's main session): marked in main's groups only.
    assert marked(main, "personal", "42")
    assert not marked(family, "personal", "42")  # in -100555, the group of `personal` bound to family
    # The same owner listed by username: the same answer.
    assert marked(main, "personal", "5", "annie") and not marked(family, "personal", "5", "annie")
    # 99 is no owner of `personal` at all, whatever agent their DMs are routed to.
    assert not marked(family, "personal", "99") and not marked(main, "personal", "99")
    # 77 owns family (the family bot): never main's owner.
    assert marked(family, "familybot", "77") and not marked(main, "familybot", "77")


def test_one_account_two_owners_each_agents_own(tmp_path: Path) -> None:
    """The family bot of one account with two owners, one of them sent to her own agent by a peer binding."""
    config = CONFIG.replace('owners: ["42", "@annie"]', 'owners: ["42", "99"]')
    gw, rts = gateway(tmp_path, config)
    assert marked(rts["main"], "personal", "42") and not marked(rts["main"], "personal", "99")
    assert marked(rts["family"], "personal", "99") and not marked(rts["family"], "personal", "42")
