"""What the scrub-race tests share: an outside editor's save from a second process, and the main session's runtime
with a scripted model (tests/test_owner_notes_race.py, tests/test_t9_daily_note_editor_race.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from agenthelpers import fixed_clock, load_offline
from hermit.agent.runtime import AgentRuntime
from hermit.models.base import ModelProfile, ModelRequest
from hermit.testing import FunctionModel
from hermit.testing.scripted import Reply
from hermit.tools.os_sandbox import Backend


def save_as_an_editor(path: Path, how: str, line: str) -> None:
    """A second process saves `path` with `line` added, as an editor does (its own read of the file, then a rename
    of its temp over it, or a rewrite in place), and exits; returns once it has."""
    pid = os.fork()
    if pid == 0:
        try:
            text = path.read_text() + line + "\n"
            if how == "rename":
                tmp = path.with_name(f".{path.name}.editor~")
                tmp.write_text(text)
                os.replace(tmp, path)
            else:
                with open(path, "r+") as f:
                    f.truncate(0)
                    f.write(text)
            os._exit(0)
        except BaseException:  # noqa: BLE001 - the child reports by its exit status
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def scripted_runtime(home: Path, model: Callable[[ModelRequest], Reply]) -> AgentRuntime:
    """The default agent's runtime in `home`, answered by `model`, no memory search, sandbox backend off."""
    agent = load_offline(home).agent()
    return AgentRuntime(agent, FunctionModel(model, profile=ModelProfile("scripted", "x", context_window=200_000)),
                        memory=None, clock=fixed_clock, fsync=True, home=home,
                        sandbox_backend=Backend(None, None, "test"))


def set_up_then_delete(home: Path, uid: int | None, setup: Callable[[Path], None],
                       delete: Callable[[Path], str]) -> str:
    """`setup(home)` then `delete(home)`, each in a child as `uid` (crashharness.ok), after both ran once in a
    scratch home here (the lazy imports, before a child drops to another uid); what `delete` returned."""
    import crashharness as ch

    def warm(scratch: Path) -> None:
        scratch.mkdir(mode=0o700)
        setup(scratch)
        delete(scratch)

    ch.warm(warm)
    ch.ok(lambda: setup(home), uid=uid)
    text: str = ch.ok(lambda: delete(home), uid=uid).result
    return text
