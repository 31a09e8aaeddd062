"""An edit after the answer takes the removed words back (gateway/retractions.py, sessions/entries.py `edited`).

On Telegram, which never tells bots of deletes, editing is the only way a person takes words back: "my PIN is
4711-2290" edited to "my PIN is (removed)" after the bot answered stayed in the transcript, the reply's copy and the
note the turn wrote. Now the edit by the message's own sender is recorded (every reader sees the new text, marked
"(edited)"; no turn runs for it) and what the old text alone brought is scrubbed by a delete's batch; another
member's words stay; another sender's edit of that message id changes nothing; an edit that only adds words
changes the record only. Written before the update is acknowledged, the scrub is resumed after a restart.

Real parts: TelegramChannel over HTTP to the fake Bot API on 127.0.0.1, the gateway's Bus, an AgentRuntime on a
FunctionModel with the real file tools (the turn's note), real transcripts and the state dir's deletes.json.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agenthelpers import NOW
from channelhelpers import FAST, run, until
from fakes.fake_telegram import FakeTelegram
from gatewayhelpers import allow_all, last_user_text, route_dm_main_group_own, runtime
from hermit.agent.runtime import AgentRuntime
from hermit.channels.telegram import TelegramChannel
from hermit.config.schema import TelegramAccountConfig
from hermit.gateway.agents import AgentHost
from hermit.gateway.bus import Bus
from hermit.gateway.deletes_store import RememberedDeletes, deletes_path
from hermit.gateway.supervisor import split_chunks
from hermit.models.base import ModelRequest
from hermit.sessions.keys import group_session_key
from hermit.testing.scripted import Reply

TOKEN = "123:TEST"
GROUP, MEMBER, OTHER = -100, 5, 6
PIN = "4711-2290"
SAID = f"@hermit_bot my PIN is {PIN}, for the blue harbour gym locker"
EDITED = "@hermit_bot my PIN is (removed), for the blue harbour gym locker"
THEIRS = "@hermit_bot my own locker code is 5512-9034"
KEY = group_session_key("main", "telegram", str(GROUP))
DAY = f"memory/{NOW:%Y-%m-%d}.md"


def model(asked: list[str]) -> Callable[[ModelRequest], Reply]:
    """Notes the PIN in the turn that is told it (write, append), then answers quoting what it was told."""
    def fn(req: ModelRequest) -> Reply:
        last = req.messages[-1].to_dict()
        if last.get("role") == "toolResult":
            return f"Saved your PIN {PIN} for the blue harbour gym locker."
        text = last_user_text(req)
        asked.append(text)
        if PIN in text:
            return {"tool_calls": [{"name": "write", "arguments": {
                "path": DAY, "content": f"- Gym locker PIN {PIN} at the blue harbour gym\n", "append": True}}]}
        return "Noted 5512-9034, your own locker." if "5512-9034" in text else "ok"
    return fn


def edit(fake: FakeTelegram, mid: int, text: str, sender: int) -> None:
    """Queue Telegram's `edited_message` update for message `mid`."""
    fake.updates.append({"update_id": fake._next_update, "edited_message": {
        "message_id": mid, "date": int(time.time()), "edit_date": int(time.time()), "text": text,
        "from": {"id": sender, "is_bot": False, "first_name": "Gus"}, "chat": {"id": GROUP, "type": "supergroup"}}})
    fake._next_update += 1
    fake._new_update.set()


class Chat:
    """The group's two answered messages (the member's PIN, another member's code), then `edits` of the PIN's."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.asked = tmp, []
        self.rt: AgentRuntime = runtime(tmp / "home", model(self.asked))
        self.deletes = deletes_path(tmp / "state")

    def transcript(self) -> str:
        record = self.rt.store.get(KEY)
        assert record is not None
        return self.rt.store.transcript_path(record.session_id).read_text()

    def note(self) -> str:
        return (self.rt.agent.workspace / DAY).read_text()

    def shown(self) -> list[str]:
        """The user messages' texts as every reader gets them (the model's context, the web app's history)."""
        record = self.rt.store.get(KEY)
        assert record is not None
        return [json.dumps(e.message["content"]) for e in self.rt.store.open_transcript(record).messages()
                if e.message.get("role") == "user"]

    def run(self, *edits: tuple[str, int], stop: Callable[[Bus], None] | None = None,
            ended: bool = False) -> Bus:
        """`stop`: called once the edits are handled instead of draining (a gateway killed then); `ended`: the
        session ends (/new) before the edits come."""
        holder: list[Bus] = []

        async def main() -> None:
            fake = await FakeTelegram(TOKEN).start()
            cfg = TelegramAccountConfig(api_base=fake.base_url, poll_timeout_seconds=1)
            ch = TelegramChannel("default", cfg, TOKEN, state_dir=self.tmp / "state", inbox_dir=self.tmp / "inbox",
                                 policy=FAST, reconnect_max_delay=0.05)
            bus = Bus(AgentHost({"main": self.rt}), route=route_dm_main_group_own, admit=allow_all,
                      channels={(ch.name, ch.account_id): ch}, chunk=split_chunks,
                      deletes=RememberedDeletes(self.deletes))
            holder.append(bus)
            try:
                await ch.start(bus)
                mid = fake.push_message(chat_id=GROUP, from_id=MEMBER, chat_type="supergroup", text=SAID)
                fake.push_message(chat_id=GROUP, from_id=OTHER, chat_type="supergroup", text=THEIRS)
                await until(lambda: len(self.asked) == 2 and bus.running() == 0 and not bus.busy(KEY))
                assert PIN in self.transcript() and PIN in self.note()  # answered, noted
                if ended:
                    self.rt.new_session(KEY)
                for n, (text, sender) in enumerate(edits, 1):
                    edit(fake, mid, text, sender)
                    await until(lambda n=n: bus.counts["ignored"] == n)  # handled before publish returns
                if stop is not None:
                    stop(bus)
                else:
                    assert await bus.drain(20)
            finally:
                await ch.stop()
                await fake.stop()

        run(main)
        return holder[0]


def test_a_pin_edited_out_after_the_answer_is_gone_from_the_transcript_the_reply_and_the_note(tmp_path: Path) -> None:
    chat = Chat(tmp_path)
    try:
        bus = chat.run((EDITED, MEMBER))
        transcript, note = chat.transcript(), chat.note()
        assert PIN not in transcript and "47112290" not in transcript, transcript
        assert PIN not in note, note
        assert chat.asked == [SAID, THEIRS]  # no turn ran for the edit
        assert bus.scrubs.batches >= 1
        # The message reads as edited, to every reader and in the file.
        assert json.dumps(EDITED + " (edited)") in "".join(chat.shown())
        assert json.dumps(EDITED + " (edited)")[1:-1] in transcript
        assert "blue harbour gym" in transcript  # words the edited text still holds are not copies
        # The other member's message and the reply quoting it keep their words.
        assert transcript.count("5512-9034") >= 2 and THEIRS in transcript
        assert json.loads(chat.deletes.read_text()).get("scrubs", []) == []  # done: nothing left to resume
    finally:
        chat.rt.close()


def test_an_edit_after_the_session_ended_is_made_in_the_ended_transcript(tmp_path: Path) -> None:
    """Edited the day after, past the daily reset (here /new): the answered message is in the key's ended transcript."""
    chat = Chat(tmp_path)
    try:
        chat.run((EDITED, MEMBER), ended=True)
        record = chat.rt.store.get(KEY)
        assert record is not None
        old = [p for p in chat.rt.agent.sessions_dir.glob("*.jsonl") if p.stem != record.session_id]
        assert len(old) == 1
        text = old[0].read_text()
        assert PIN not in text and json.dumps(EDITED + " (edited)")[1:-1] in text and "5512-9034" in text, text
        assert PIN not in chat.note() and "Saved your PIN [deleted]" in text
    finally:
        chat.rt.close()


def test_another_senders_edit_of_that_message_id_changes_nothing(tmp_path: Path) -> None:
    chat = Chat(tmp_path)
    try:
        bus = chat.run((EDITED, OTHER))
        transcript = chat.transcript()
        assert transcript.count(PIN) >= 2 and PIN in chat.note()
        assert "(edited)" not in transcript and '"edited"' not in transcript
        assert bus.scrubs.batches == 0 and chat.asked == [SAID, THEIRS]
    finally:
        chat.rt.close()


def test_an_edit_to_the_same_text_changes_nothing(tmp_path: Path) -> None:
    """A platform's change event that keeps the text (Slack's for a thread's new reply) writes nothing."""
    chat = Chat(tmp_path)
    try:
        bus = chat.run((SAID, MEMBER))
        assert '"edited"' not in chat.transcript() and bus.scrubs.batches == 0 and PIN in chat.note()
    finally:
        chat.rt.close()


def test_an_edit_that_only_adds_words_changes_the_record_only(tmp_path: Path) -> None:
    chat = Chat(tmp_path)
    added = SAID + ", thanks!"
    try:
        bus = chat.run((added, MEMBER))
        assert bus.scrubs.batches == 0 and chat.asked == [SAID, THEIRS]
        assert json.dumps(added + " (edited)") in "".join(chat.shown())  # what every reader gets now
        assert PIN in chat.note()  # nothing taken back
    finally:
        chat.rt.close()


def test_an_edit_handled_before_a_kill_is_scrubbed_when_the_gateway_starts_again(tmp_path: Path) -> None:
    chat = Chat(tmp_path)

    def killed(bus: Bus) -> None:  # the update was acknowledged; the batch (still gathering) never ran
        assert bus.scrubs.batches == 0
        for task in bus.scrubs.tasks():
            task.cancel()

    try:
        chat.run((EDITED, MEMBER), stop=killed)
        assert PIN in chat.transcript()  # not scrubbed yet...
        assert json.dumps(EDITED + " (edited)") in "".join(chat.shown())  # ...but shown edited already
        assert len(json.loads(chat.deletes.read_text())["scrubs"]) == 1  # on disk before the acknowledgement

        async def restart() -> None:
            bus = Bus(AgentHost({"main": chat.rt}), route=route_dm_main_group_own, admit=allow_all, channels={},
                      chunk=split_chunks, deletes=RememberedDeletes(chat.deletes))
            bus.scrubs.resume()
            assert await bus.drain(20)

        asyncio.run(restart())
        assert PIN not in chat.transcript() and PIN not in chat.note()
        assert json.loads(chat.deletes.read_text()).get("scrubs", []) == []
    finally:
        chat.rt.close()


def test_an_edited_messages_photo_stays_and_a_transcript_without_edits_reads_as_before() -> None:
    from hermit.sessions.entries import edit, edited_texts

    ref = "telegram:default:1"
    photo = {"type": "image", "data": "AAAA", "mimeType": "image/jpeg"}
    message = {"role": "user", "content": [{"type": "text", "text": f"my PIN is {PIN}"}, photo], "ref": ref}
    assert edited_texts([{"type": "custom", "customType": "retracted", "data": {"ref": ref}}]) == {}
    assert edit(message, {}) is message
    texts = edited_texts([{"type": "custom", "customType": "edited", "data": {"ref": ref, "text": "one"}},
                          {"type": "custom", "customType": "edited", "data": {"ref": ref, "text": "my PIN is x"}}])
    assert edit(message, texts)["content"] == [{"type": "text", "text": "my PIN is x (edited)"}, photo]


def test_an_edit_while_its_turn_runs_is_scrubbed_from_what_that_turn_writes_after_it(tmp_path: Path) -> None:
    """The edit comes as the PIN's own turn is running (the model holds it): its entry is written ahead of the line
    the turn still records, and the batch waits for the turn to end, so the reply it writes after is scrubbed too."""
    started, release = threading.Event(), threading.Event()
    asked: list[str] = []
    inner = model(asked)

    def held(req: ModelRequest) -> Reply:
        if req.messages[-1].to_dict().get("role") == "toolResult":
            started.set()
            release.wait(20)
        return inner(req)

    rt = runtime(tmp_path / "home", held)

    async def main() -> None:
        fake = await FakeTelegram(TOKEN).start()
        cfg = TelegramAccountConfig(api_base=fake.base_url, poll_timeout_seconds=1)
        ch = TelegramChannel("default", cfg, TOKEN, state_dir=tmp_path / "state", inbox_dir=tmp_path / "inbox",
                             policy=FAST, reconnect_max_delay=0.05)
        bus = Bus(AgentHost({"main": rt}), route=route_dm_main_group_own, admit=allow_all,
                  channels={(ch.name, ch.account_id): ch}, chunk=split_chunks,
                  deletes=RememberedDeletes(deletes_path(tmp_path / "state")))
        try:
            await ch.start(bus)
            mid = fake.push_message(chat_id=GROUP, from_id=MEMBER, chat_type="supergroup", text=SAID)
            await until(started.is_set)  # the note is written; the reply is not yet
            edit(fake, mid, EDITED, OTHER)  # not theirs: changes nothing
            await until(lambda: bus.counts["ignored"] == 1)
            edit(fake, mid, EDITED, MEMBER)
            await until(lambda: bus.counts["ignored"] == 2)
            bus.scrubs.hurry()  # no gathering: the batch would run now, before the turn writes its reply...
            await until(lambda: bool(bus.scrubs.parked) or bus.scrubs.batches > 0)
            assert bus.scrubs.batches == 0  # ...but waits for the turn to end
            release.set()
            assert await bus.drain(20)
        finally:
            release.set()
            await ch.stop()
            await fake.stop()

    try:
        run(main)
        record = rt.store.get(KEY)
        assert record is not None
        transcript = rt.store.transcript_path(record.session_id).read_text()
        assert PIN not in transcript, transcript
        assert "Saved your PIN [deleted]" in transcript  # the reply written after the edit: scrubbed
        assert PIN not in (rt.agent.workspace / DAY).read_text()
        assert json.dumps(EDITED + " (edited)")[1:-1] in transcript and asked == [SAID]
    finally:
        rt.close()


def test_a_file_messages_edit_keeps_the_line_its_file_was_told_by_and_scrubs_what_the_caption_dropped(
        tmp_path: Path) -> None:
    """The recorded text of a message that brought a file ends with the gateway's line for it (attachments.described):
    the edit replaces the sender's caption only, and a change event with the caption as it was writes nothing."""
    from hermit.sessions.retraction import edit_in, scrub_retracted
    from hermit.sessions.transcript import Transcript

    path = tmp_path / "s.jsonl"
    t = Transcript.create(path, cwd=tmp_path, session_key=KEY, fsync=False)
    ref = "telegram:default:9"
    told = "(file received with this message: inbox/card.jpg — image, 2,048 bytes)"
    t.append_message({"role": "user", "content": f"my PIN is {PIN}\n{told}", "ref": ref,
                      "sender": {"id": str(MEMBER), "name": "Gus"}})
    t.append_message({"role": "assistant", "content": [{"type": "text", "text": f"Got the card, PIN {PIN}."}]})
    assert edit_in(Transcript.open(path, fsync=False), ref, str(MEMBER), f"my PIN is {PIN}") is None  # as it was
    assert edit_in(Transcript.open(path, fsync=False), ref, str(OTHER), "my PIN is gone") is None  # not theirs
    assert edit_in(Transcript.open(path, fsync=False), ref, str(MEMBER), "my PIN is gone") is True
    assert scrub_retracted(path, KEY) == 1
    data = path.read_text()
    assert PIN not in data and "Got the card, PIN [deleted]." in data
    shown = [e.message for e in Transcript.open(path, fsync=False).messages() if e.message["role"] == "user"]
    assert shown[0]["content"] == [{"type": "text", "text": f"my PIN is gone\n{told} (edited)"}]
    assert scrub_retracted(path, KEY) == 0  # done: the line holds its edited text


def test_words_an_earlier_edit_added_go_when_a_later_edit_or_a_delete_takes_them_back(tmp_path: Path) -> None:
    """Each `edited` entry holds its text: one that only added the PIN keeps it until a later edit drops it (then it
    reads as the last edit) or the message is deleted (then it reads as a delete's placeholder)."""
    from hermit.sessions.entries import RETRACTED_TEXT
    from hermit.sessions.retraction import edit_in, scrub_retracted
    from hermit.sessions.transcript import Transcript

    def opened(path: Path) -> Transcript:
        return Transcript.open(path, fsync=False)

    for end in ("edit", "delete"):
        path = tmp_path / f"{end}.jsonl"
        t = Transcript.create(path, cwd=tmp_path, session_key=KEY, fsync=False)
        ref = "slack:default:1.0001"
        t.append_message({"role": "user", "content": "my PIN is", "ref": ref, "sender": {"id": "u5"}})
        t.append_message({"role": "assistant", "content": [{"type": "text", "text": "Which PIN?"}]})
        assert edit_in(opened(path), ref, "u5", f"my PIN is {PIN}") is False  # only added: the record only
        opened(path).append_message({"role": "assistant", "content": [{"type": "text", "text": f"Noted {PIN}."}]})
        if end == "edit":
            assert edit_in(opened(path), ref, "u5", "my PIN is secret") is True
        else:
            opened(path).append_custom("retracted", {"ref": ref})
        assert scrub_retracted(path, KEY) == 1
        data = path.read_text()
        assert PIN not in data and "Noted [deleted]." in data, data
        shown = [e.message["content"] for e in opened(path).messages() if e.message["role"] == "user"]
        assert shown == [[{"type": "text", "text": "my PIN is secret (edited)" if end == "edit" else RETRACTED_TEXT}]]


def test_a_transcript_already_read_shows_the_edit_and_the_session_index_reads_it_edited(tmp_path: Path) -> None:
    """The runtime keeps a transcript it read: an `edited` entry appended through it is read back with the
    message changed (as a `retracted` one is); the sessions source of memory search renders the edited text."""
    from hermit.memory.index.session_source import render_transcript
    from hermit.sessions.retraction import edit_in
    from hermit.sessions.transcript import Transcript

    path = tmp_path / "s.jsonl"
    t = Transcript.create(path, cwd=tmp_path, session_key=KEY, fsync=False)
    ref = "telegram:default:3"
    t.append_message({"role": "user", "content": "meet at the blue harbour gym", "ref": ref})
    assert [e.message["content"] for e in t.messages()] == ["meet at the blue harbour gym"]  # read: kept
    assert edit_in(t, ref, "", "meet at the blue harbour gym, room 4 please") is False
    assert [e.message["content"] for e in t.messages()] == [
        [{"type": "text", "text": "meet at the blue harbour gym, room 4 please (edited)"}]]
    assert "room 4 please (edited)" in render_transcript(path.read_text())[0]


def test_a_gateway_killed_once_telegram_has_the_edits_acknowledgement_scrubs_it_after_the_restart(
        tmp_path: Path) -> None:
    """`hermit gateway run` killed (SIGKILL) as soon as the edit's update is acknowledged (the next getUpdates'
    offset): the edit is on disk by then — shown edited, its scrub in deletes.json — and the restarted gateway
    scrubs it without a turn (the model was asked once)."""
    import signal

    from channeldrivers import TelegramDriver
    from hermit.testing.fake_provider import FakeProvider
    from prochelpers import PROC_TIMEOUT
    from test_channel_gateway import Gateway, env_for, write_config
    from test_channel_gateway import until as until_for

    home = tmp_path

    def transcripts() -> str:
        return "".join(p.read_text() for p in home.rglob("*.jsonl") if p.parent.name == "sessions")

    def scrubs() -> list[Any]:
        found = list(home.rglob("deletes.json"))
        return json.loads(found[0].read_text()).get("scrubs", []) if found else []

    async def main() -> None:
        with FakeProvider([{"text": f"Saved your PIN {PIN}.", "repeat": True}]) as provider:
            policies = {"pair": {"dm_policy": "allowlist", "allow_from": ["1001"]}}
            driver = TelegramDriver(list(policies))
            await driver.start()
            fake = driver.fakes["pair"]
            try:
                write_config(home, provider, driver, policies)
                gw = await Gateway(home, env_for(driver)).start()
                mid = fake.push_message(chat_id=1001, text=f"my PIN is {PIN}")
                await until_for(lambda: driver.texts("pair", "1001"), "the answer")
                uid = fake._next_update
                fake.updates.append({"update_id": uid, "edited_message": {
                    "message_id": mid, "date": int(time.time()), "edit_date": int(time.time()),
                    "text": "my PIN is (removed)", "from": {"id": 1001, "is_bot": False, "first_name": "Gus"},
                    "chat": {"id": 1001, "type": "private"}}})
                fake._next_update += 1
                fake._new_update.set()
                await until_for(lambda: fake.confirmed > uid, "the edit's acknowledgement")
                assert await gw.stop(signal.SIGKILL) == -signal.SIGKILL
                assert "my PIN is (removed)" in transcripts()  # its entry, written before the acknowledgement
                assert scrubs() or PIN not in transcripts()  # its scrub to resume (unless its batch was done)
                gw = await Gateway(home, env_for(driver)).start()
                await until_for(lambda: PIN not in transcripts() and not scrubs(), "the scrub after the restart")
                assert await gw.stop() == 0
            finally:
                await driver.stop()
            assert len(provider.requests) == 1  # no turn for the edit
            assert driver.texts("pair", "1001") == [f"Saved your PIN {PIN}."]

    run(main, timeout=PROC_TIMEOUT)
