"""The owner's inbox/ is filed into only as a real folder of the workspace, never through a link.

A bind-mode command (`sandbox.mode: all`: the agent's own chats sandboxed too) may make `inbox` a link; the
link is removed when the command ends, but not when Hermit is killed or restarted while the command runs
(`sleep 3600` and a gateway restart). The next file sent to the main session was then filed through the link,
by whatever uid runs Hermit: as root into /etc/cron.d (the folder made 0700 on the way, the sender's bytes a
root crontab, its name a valid one when the sender's file has no dot), as the user into ~/.config/autostart.
The removal of a deleted message's files already refused the link; filing now does too.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from agenthelpers import fixed_clock, load_offline
from hermit.agent.runtime import AgentRuntime
from hermit.channels.base import InboundMessage
from hermit.channels.inbox import StagedFile
from hermit.gateway import attachments
from hermit.sessions.keys import main_session_key
from hermit.testing import ScriptedModel
from hermit.workspace import ensure_workspace

CRONTAB = b"* * * * * root touch /tmp/pwned-by-a-dm\n"


def test_a_file_for_the_main_session_is_not_filed_through_an_inbox_link(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    loaded = load_offline(tmp_path, defaults={"sandbox": {"mode": "all"}})
    agent = loaded.agent()
    ensure_workspace(agent.workspace)
    system_dir = tmp_path / "etc-cron.d"  # stands for /etc/cron.d: Hermit's uid's, 0755
    system_dir.mkdir(mode=0o755)
    system_dir.chmod(0o755)
    (agent.workspace / "inbox").symlink_to(system_dir)  # left by a command whose Hermit was killed
    runtime = AgentRuntime(agent, ScriptedModel(["ok"]), clock=fixed_clock, fsync=False, home=tmp_path)
    with StagedFile(tmp_path / "staged", ("telegram", "default", "42", "7"), "backup") as f:
        f.write(CRONTAB)
    msg = InboundMessage(channel="telegram", account_id="default", peer_kind="dm", peer_id="42", sender_id="42",
                         text="here is the file", message_id="7",
                         attachments=(f.attachment("document", "backup", "application/octet-stream"),))

    with caplog.at_level(logging.WARNING, logger="hermit.gateway"):
        filed, _ = attachments.filed(msg, runtime, main_session_key(agent.id))

    assert list(system_dir.iterdir()) == []
    assert stat.S_IMODE(os.stat(system_dir).st_mode) == 0o755
    assert [a.path for a in filed.attachments] == [""]  # not kept, and the turn is told so
    assert "inbox" in caplog.text and "link" in caplog.text
    assert (agent.workspace / "inbox").is_symlink()  # the owner's to look at; Hermit removes nothing there


def test_a_real_inbox_is_filed_into_as_before(tmp_path: Path) -> None:
    loaded = load_offline(tmp_path, defaults={"sandbox": {"mode": "all"}})
    agent = loaded.agent()
    ensure_workspace(agent.workspace)
    runtime = AgentRuntime(agent, ScriptedModel(["ok"]), clock=fixed_clock, fsync=False, home=tmp_path)
    with StagedFile(tmp_path / "staged", ("telegram", "default", "42", "8"), "notes.txt") as f:
        f.write(b"the notes\n")
    msg = InboundMessage(channel="telegram", account_id="default", peer_kind="dm", peer_id="42", sender_id="42",
                         text="notes", message_id="8", attachments=(f.attachment("document", "notes.txt", "text/plain"),))

    filed, _ = attachments.filed(msg, runtime, main_session_key(agent.id))

    (path,) = [Path(a.path) for a in filed.attachments]
    assert path.parent == agent.workspace / "inbox" and path.read_bytes() == b"the notes\n"
    assert stat.S_IMODE(os.stat(agent.workspace / "inbox").st_mode) == 0o700
