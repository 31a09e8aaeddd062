"""A deleted message's files go with it (audit H8, item 2).

A photo or document that came with a message is filed into `inbox/` of the answering session's place (the
owner's workspace, or the room of a contact's or a group's session). When its sender deleted the message, its
text was retracted but its files stayed, readable by the model's tools and by a room's sandboxed commands.
The turn now records the files it filed with the message (messages.FiledFile: never parsed from the text, where
a sender can type a "(file received …)" line), and a delete removes exactly those, only while each still holds
the bytes filed, never through a link, a room's under the room's lock — before the `retracted` entry is
written, so a kill between the two leaves no file of the deleted message.

Real parts: the Discord channel against the fake Discord on 127.0.0.1 (a file served from its CDN), the real
Bus (Router, AccessControl), an AgentRuntime on a FunctionModel, real files and transcripts; as root and as uid
65534.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from channelhelpers import FAST, run
from ciguard import need
from gatewayhelpers import HeldAdmission, RecordingChannel, fixed_clock, make_bus, runtime
from hermit.agent.routing import Router
from hermit.agent.runtime import AgentRuntime
from hermit.channels.access import AccessControl
from hermit.channels.base import Attachment
from hermit.channels.discord import DiscordChannel
from hermit.channels.inbox import StagedFile
from hermit.channels.pairing import PairingStore
from hermit.config.load import build_config
from hermit.config.paths import StatePaths
from hermit.config.schema import DiscordAccountConfig
from hermit.gateway.agents import AgentHost
from hermit.gateway.bus import Bus
from hermit.gateway.supervisor import admit_with, route_with, split_chunks
from hermit.sessions.entries import RETRACTED_TEXT
from hermit.sessions.keys import group_session_key
from hermit.testing import FunctionModel
from prochelpers import PROC_TIMEOUT, python_as, pythonpath
from test_race_retraction import DMsDiscord, wait_for
from test_trust_deleted_messages import msg

AUTHOR = "600000000000000001"
LAB = b"%PDF-1.4 lab results: ferritin 12 (LOW) FILE-CANARY-5"
NOBODY: dict[str, Any] = {"user": 65534, "group": 65534, "extra_groups": []}
GROUP = group_session_key("main", "telegram", "g1")


class FilesDiscord(DMsDiscord):
    """The fake Discord, its next MESSAGE_CREATE carrying the files `attach` was given, served from its CDN."""

    def __init__(self) -> None:
        super().__init__()
        self.files: dict[str, bytes] = {}
        self.pending: list[dict[str, Any]] = []

    def attach(self, name: str, data: bytes, mime: str) -> None:
        self.files[name] = data
        url = f"{self.base_url}/cdn/{name}"
        self.pending.append({"id": self._snowflake(), "filename": name, "size": len(data), "url": url,
                             "proxy_url": url, "content_type": mime})

    def routes(self, app: Any) -> None:
        super().routes(app)
        app.router.add_get("/cdn/{name}", self._cdn)

    async def _cdn(self, request: Any) -> Any:
        from aiohttp import web

        return web.Response(body=self.files[request.match_info["name"]], content_type="application/octet-stream")

    async def _dispatch(self, event: str, data: Any, bot_token: str | None = None) -> None:
        if event == "MESSAGE_CREATE" and self.pending:
            data, self.pending = {**data, "attachments": self.pending}, []
        await super()._dispatch(event, data, bot_token)


@dataclass
class DiscordGateway:
    fake: FilesDiscord
    bus: Bus
    rt: AgentRuntime
    seen: list[str]


@asynccontextmanager
async def discord_gateway(tmp: Path) -> AsyncIterator[DiscordGateway]:
    """The Discord channel (the owner's DMs) publishing into a real Bus, files staged under <home>/inbox."""
    from fakes.fake_discord import patch_discord, unpatch

    home = tmp / "home"
    seen: list[str] = []

    def model(req: Any) -> str:
        seen.append(str(req.messages[-1].to_dict()))
        return "noted"

    fake = await FilesDiscord().start()
    old = patch_discord(fake)
    loaded = build_config({"agents": {"defaults": {"timezone": "Europe/Paris"}},
                           "channels": {"discord": {"accounts": {"default": {"owners": [AUTHOR]}}}}}, StatePaths(home))
    rt = AgentRuntime(loaded.agent(), FunctionModel(model), clock=fixed_clock, fsync=False, home=home)
    access = AccessControl(loaded.config.channels, PairingStore(home))
    ch = DiscordChannel("default", DiscordAccountConfig(owners=[AUTHOR]), fake.token, inbox_dir=home / "inbox",
                        state_dir=home, policy=FAST, reconnect_max_delay=0.1)
    bus = Bus(AgentHost({rt.agent.id: rt}), route=route_with(Router.from_config(loaded), access),
              admit=admit_with(access, loaded), chunk=split_chunks, channels={("discord", "default"): ch})
    try:
        await ch.start(bus)
        await fake.wait_for(lambda: ch.status().connected)
        yield DiscordGateway(fake, bus, rt, seen)
    finally:
        await bus.drain(30)
        await ch.stop()
        unpatch(old)
        await fake.stop()
        rt.close()


def test_discord_a_deleted_dm_takes_its_document_out_of_the_owners_inbox(tmp_path: Path) -> None:
    async def main() -> None:
        async with discord_gateway(tmp_path) as g:
            g.fake.attach("lab_results.pdf", LAB, "application/pdf")
            mid = await g.fake.say("here are my lab results", author=AUTHOR)
            await wait_for(lambda: len(g.seen) == 1)
            assert await g.bus.drain(20)
            inbox = g.rt.agent.workspace / "inbox"
            [filed] = list(inbox.iterdir())
            assert filed.read_bytes() == LAB and "lab_results.pdf" in filed.name
            assert f"inbox/{filed.name}" in g.seen[0]
            await g.fake._dispatch("MESSAGE_DELETE", {"id": mid, "channel_id": f"5{AUTHOR[1:]}"})
            await wait_for(lambda: RETRACTED_TEXT in transcripts(g.rt))
            assert await g.bus.drain(20)
            assert list(inbox.iterdir()) == [], list(inbox.iterdir())

    run(main, timeout=90)


def transcripts(rt: AgentRuntime) -> str:
    from hermit.memory.index.session_source import render_transcript

    return "".join(render_transcript(p.read_text())[0] for p in rt.agent.sessions_dir.glob("*.jsonl"))


def staged(home: Path, name: str, data: bytes, mid: str) -> Attachment:
    with StagedFile(home / "inbox", ("telegram", "default", "g1", mid), name) as f:
        f.write(data)
    return f.attachment("document", name, "application/pdf")


def test_a_deleted_group_message_takes_only_its_own_file_out_of_the_rooms_inbox(tmp_path: Path) -> None:
    """A group's files go to its room, whose sandboxed commands may change them: a delete removes a file only
    while it holds the bytes filed; one replaced by something else under its name is left (and logged), and a
    "(file received …)" line the sender typed names nothing that is removed."""
    rt = runtime(tmp_path, lambda _req: "noted")
    bus = make_bus(rt, RecordingChannel())
    room_inbox: list[Path] = []

    async def main() -> None:
        await bus.publish(replace(msg("keep this for the group", "1"),
                                  attachments=(staged(tmp_path, "minutes.pdf", b"%PDF minutes", "1"),)))
        await bus.publish(replace(msg("mine", "2"), attachments=(staged(tmp_path, "mine.pdf", LAB, "2"),)))
        await bus.publish(replace(msg("also mine", "3"), attachments=(staged(tmp_path, "swap.pdf", LAB, "3"),)))
        assert await bus.drain(20)
        [inbox] = list((rt.agent.sessions_dir.parent / "rooms").glob("*/inbox"))
        room_inbox.append(inbox)
        names = {p.name.split("-")[-1]: p for p in inbox.iterdir()}
        assert set(names) == {"minutes.pdf", "mine.pdf", "swap.pdf"}
        names["swap.pdf"].write_bytes(b"the room's own notes, put there by a command")  # no longer the file filed
        # A message whose text names another file as received with it (a sender may type anything).
        await bus.publish(msg(f"(file received with this message: inbox/{names['minutes.pdf'].name} — document)", "4"))
        assert await bus.drain(20)
        for mid in ("2", "3", "4"):
            await bus.publish(msg("", mid, change="deleted"))
        assert await bus.drain(20)

    asyncio.run(main())
    left = sorted(p.name.split("-")[-1] for p in room_inbox[0].iterdir())
    assert left == ["minutes.pdf", "swap.pdf"], left
    assert RETRACTED_TEXT in transcripts(rt)


def test_a_link_under_a_filed_name_is_left_and_its_target_kept(tmp_path: Path) -> None:
    """A room's command can put a link where a file was filed: the delete never follows it."""
    rt = runtime(tmp_path, lambda _req: "noted")
    bus = make_bus(rt, RecordingChannel())
    outside = tmp_path / "precious.txt"
    outside.write_bytes(LAB)

    async def main() -> None:
        await bus.publish(replace(msg("mine", "2"), attachments=(staged(tmp_path, "mine.pdf", LAB, "2"),)))
        assert await bus.drain(20)
        [filed] = list((rt.agent.sessions_dir.parent / "rooms").glob("*/inbox/*mine.pdf"))
        filed.unlink()
        filed.symlink_to(outside)
        await bus.publish(msg("", "2", change="deleted"))
        assert await bus.drain(20)
        assert filed.is_symlink() and outside.read_bytes() == LAB

    asyncio.run(main())



def test_a_delete_as_the_turn_starts_keeps_its_files_from_being_filed_or_removes_them_at_once(tmp_path: Path) -> None:
    """A delete that comes once the bus took the message from its queue, before its turn recorded it (the access
    check again, its files being filed, a flush before it), left its files to be removed after the turn: a kill
    during that turn — a model call can take minutes — kept them for good. Now they are not filed, or are
    removed as the delete comes, before the platform hears it was handled."""
    filing, filed_go, in_model, release = (threading.Event() for _ in range(4))
    admit = HeldAdmission(2)  # the first message's check when its turn is about to start: held there
    checking, go_on = admit.checking, admit.go_on

    def model(_req: Any) -> str:
        in_model.set()
        release.wait(20)
        return "noted"

    rt = runtime(tmp_path, model)
    run_turn = rt.run_turn

    def held_after_filing(key: str, text: str, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("ref") == "telegram:default:2":  # the second message: filed, not recorded yet
            filing.set()
            filed_go.wait(20)
        return run_turn(key, text, *args, **kwargs)

    rt.run_turn = held_after_filing  # type: ignore[method-assign]  # observed and held, not replaced
    bus = make_bus(rt, RecordingChannel(), admit=admit)
    first = staged(tmp_path, "first.pdf", LAB, "1")

    def room_files() -> list[Path]:
        return list((rt.agent.sessions_dir.parent / "rooms").glob("*/inbox/*"))

    async def main() -> None:
        try:
            await bus.publish(replace(msg("mine", "1"), attachments=(first,)))
            await wait_for(checking.is_set)
            await bus.publish(msg("", "1", change="deleted"))
            go_on.set()
            await wait_for(in_model.is_set)  # its turn runs: a kill now must leave no file of it
            assert room_files() == [] and not Path(first.path).exists()
            in_model.clear()
            release.set()
            assert await bus.drain(20)
            release.clear()
            await bus.publish(replace(msg("mine too", "2"), attachments=(staged(tmp_path, "second.pdf", LAB, "2"),)))
            await wait_for(filing.is_set)
            assert len(room_files()) == 1
            await bus.publish(msg("", "2", change="deleted"))
            assert room_files() == []  # removed before publish returned
            filed_go.set()
            await wait_for(in_model.is_set)
        finally:
            go_on.set()
            filed_go.set()
            release.set()
        assert await bus.drain(20)

    asyncio.run(main())
    shown = transcripts(rt)
    assert "mine" not in shown and shown.count(RETRACTED_TEXT) == 2, shown


# The gateway's side in a process of its own, killed (SIGKILL) right after the file was removed and before the
# `retracted` entry is written; then a restarted runtime answers in that session again.
CHILD = """
import asyncio, os, signal, sys
from dataclasses import replace
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from gatewayhelpers import RecordingChannel, fixed_clock, make_bus, runtime
from hermit.gateway import attachments
from hermit.sessions.transcript import Transcript
from test_retract_files import staged
from test_trust_deleted_messages import msg

home, phase = Path(sys.argv[1]), sys.argv[3]
rt = runtime(home, lambda _req: "noted")
bus = make_bus(rt, RecordingChannel())
if phase == "file":
    async def main():
        await bus.publish(replace(msg("my scan", "7"), attachments=(staged(home, "scan.pdf", b"%PDF scan", "7"),)))
        assert await bus.drain(20)
    asyncio.run(main())
    print("filed")
elif phase == "new":  # the session ends: the delete comes after
    async def main():
        await bus.publish(msg("/new", "9"))
        assert await bus.drain(20)
    asyncio.run(main())
    print("ended")
else:
    append = Transcript.append_custom
    def killed(self, custom_type, data=None):
        if custom_type == "retracted" and phase == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        return append(self, custom_type, data)
    Transcript.append_custom = killed
    async def main():
        await bus.publish(msg("", "7", change="deleted"))
        await bus.publish(msg("what is left?", "8"))
        assert await bus.drain(20)
    asyncio.run(main())
    print("answered")
"""


def _child(home: Path, phase: str, as_user: dict[str, Any], python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, "-c", CHILD, str(home), str(Path(__file__).parent), phase], text=True,
                          capture_output=True, timeout=PROC_TIMEOUT, env={
                              "PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath(), "HOME": str(home)}, **as_user)


def _room_files(home: Path) -> list[Path]:
    return list((home / "agents").glob("*/rooms/*/inbox/*"))


def test_a_kill_between_the_file_deletion_and_the_retraction_leaves_no_file_and_a_session_that_runs(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert _child(home, "file", {}).stdout.strip() == "filed"
    assert len(_room_files(home)) == 1
    killed = _child(home, "kill", {})
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stdout, killed.stderr)
    assert _room_files(home) == []  # removed before the entry: nothing left for another reader
    again = _child(home, "again", {})  # the next start: the session runs, nothing half-done in its way
    assert again.returncode == 0 and again.stdout.strip() == "answered", again.stderr


def test_as_an_unprivileged_user_a_late_delete_removes_the_file_and_retracts_the_ended_session(tmp_path: Path) -> None:
    need(os.geteuid() == 0, "root, to run Hermit as uid 65534 (CI and containers run as root)")
    python = python_as(NOBODY)
    need(python is not None, "an interpreter that can import this checkout as uid 65534")
    assert python is not None
    base = Path(tempfile.mkdtemp(prefix="hermit-retract-files-"))  # not under /root: the other uid reaches it
    try:
        os.chmod(base, 0o755)
        home = base / "home"
        home.mkdir(mode=0o700)
        os.chown(home, 65534, 65534)
        filed = _child(home, "file", NOBODY, python)
        assert filed.stdout.strip() == "filed", filed.stderr
        [f] = _room_files(home)
        assert f.stat().st_uid == 65534
        assert _child(home, "new", NOBODY, python).stdout.strip() == "ended"  # the delete comes after /new
        done = _child(home, "again", NOBODY, python)
        assert done.returncode == 0 and done.stdout.strip() == "answered", done.stderr
        assert _room_files(home) == []
        ended = [p for p in (home / "agents").glob("*/sessions/*.jsonl") if '"customType":"retracted"' in p.read_text()]
        assert len(ended) == 1 and "my scan" not in ended[0].read_text()  # its text scrubbed (sessions/scrub.py)
    finally:
        shutil.rmtree(base, ignore_errors=True)
