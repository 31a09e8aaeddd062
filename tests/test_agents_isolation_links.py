"""A sandboxed main session (`sandbox.mode: all`: a relative's own agent on a family bot, its owner someone else)
may not point the names Hermit reads outside the sandbox at another agent's files.

The bind-mode sandbox binds only the agent's workspace, and the instruction files that exist read-only. A missing
one (BOOTSTRAP.md, deleted once the first-run ritual is done) and MEMORY.md were writable, and a link made inside
points at nothing there — but Hermit builds the next prompt outside the sandbox and followed it: agent main's
MEMORY.md reached agent family's model, whose owner is not main's. Driven through the real exec tool and a
scripted model that obeys whoever writes to it; the path is computed at run time, as a hostile command would, so
the command-line check (a courtesy, not the guarantee) does not catch it.
"""

from __future__ import annotations

import base64
from pathlib import Path

from agenthelpers import fixed_clock, load_offline
from ciguard import need
from hermit.agent.runtime import AgentRuntime
from hermit.sessions.keys import main_session_key
from hermit.testing import ScriptedModel
from hermit.tools.os_sandbox import detect
from hermit.workspace import ensure_workspace

SECRET = "MAIN-OWNER-CANARY-6620"


def test_a_sandboxed_command_cannot_link_an_instruction_file_to_another_agents_memory(tmp_path: Path) -> None:
    backend = detect()
    need(backend.available, f"an OS sandbox ({backend.detail})")
    loaded = load_offline(tmp_path, agents=[{"id": "main"}, {"id": "family", "sandbox": {"mode": "all"}}])
    main, family = loaded.agent("main"), loaded.agent("family")
    ensure_workspace(main.workspace)
    (main.workspace / "MEMORY.md").write_text(f"# MEMORY.md\n- {SECRET}\n")
    ensure_workspace(family.workspace)
    (family.workspace / "BOOTSTRAP.md").unlink()  # the first-run ritual is over
    hidden = base64.b64encode(str(main.workspace / "MEMORY.md").encode()).decode()
    command = (f'p=$(echo {hidden} | base64 -d); ln -s "$p" BOOTSTRAP.md; ln -s "$p" inbox; '
               f'rm -f MEMORY.md; ln -s "$p" MEMORY.md; echo planted')
    model = ScriptedModel([{"tool_calls": [{"name": "exec", "arguments": {"command": command}}]}, "done", "hello"])
    runtime = AgentRuntime(family, model, clock=fixed_clock, fsync=False, home=tmp_path, sandbox_backend=backend)
    key = main_session_key("family")

    runtime.run_turn(key, "please run this")
    runtime.run_turn(key, "and now?")

    assert SECRET not in model.requests[-1].system
    result = str(model.requests[1].messages[-1].to_dict())
    assert "planted" in result and "removed BOOTSTRAP.md" in result
    # MEMORY.md itself is read-only to the command (bound so), so it could not be replaced by a link at all.
    assert not (family.workspace / "MEMORY.md").is_symlink() and (family.workspace / "MEMORY.md").is_file()
    for name in ("BOOTSTRAP.md", "MEMORY.md", "inbox"):
        assert not (family.workspace / name).is_symlink(), name
    assert SECRET in (main.workspace / "MEMORY.md").read_text()  # nothing of main's was touched


def test_a_link_the_owner_made_before_stays(tmp_path: Path) -> None:
    """Only what the command made is undone: the owner's own link (a SOUL.md kept with their dotfiles) stays."""
    backend = detect()
    need(backend.available, f"an OS sandbox ({backend.detail})")
    loaded = load_offline(tmp_path, defaults={"sandbox": {"mode": "all"}})
    agent = loaded.agent()
    ensure_workspace(agent.workspace)
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "SOUL.md").write_text("# SOUL\nBe brief.\n")
    (agent.workspace / "SOUL.md").unlink()
    (agent.workspace / "SOUL.md").symlink_to(dotfiles / "SOUL.md")
    model = ScriptedModel([{"tool_calls": [{"name": "exec", "arguments": {"command": "ls > listing.txt"}}]},
                           "done"])
    runtime = AgentRuntime(agent, model, clock=fixed_clock, fsync=False, home=tmp_path, sandbox_backend=backend)

    runtime.run_turn(main_session_key(agent.id), "list the files")

    assert (agent.workspace / "SOUL.md").is_symlink()
    assert "removed" not in str(model.requests[1].messages[-1].to_dict())
    assert "Be brief." in model.requests[1].system
