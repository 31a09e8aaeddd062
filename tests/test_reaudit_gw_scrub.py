"""A member's delete takes back only what their message brought into a session (sessions/scrub.py).

The scrub replaced every copy of a deleted message's text written after it. A group member who quoted the owner
(or guessed a code the owner later said) and deleted that message took the owner's words out of every later reply
in the group — and out of the flush's notes — though the owner's own message still held them. Text another
message of the session holds, or the session held before the deleted message, is not the deleted message's copy.
Real parts: the Bus, an AgentRuntime on a FunctionModel, real transcripts.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agenthelpers import fixed_clock, load_offline
from gatewayhelpers import RecordingChannel, make_bus
from hermit.agent.runtime import AgentRuntime
from hermit.channels.base import InboundMessage
from hermit.models.base import ModelRequest
from hermit.sessions.keys import group_session_key
from hermit.sessions.scrub import Verbatim
from hermit.testing import FunctionModel
from hermit.testing.scripted import Reply

GROUP = group_session_key("main", "telegram", "g1")
CODE = "A7Q9X2"
PHONE = "0176 5551 2398"
PLACE = "meet at the blue harbour cafe on friday evening"


def said(text: str, mid: str, sender: str, **kw: Any) -> InboundMessage:
    return InboundMessage(channel="telegram", account_id="default", peer_kind="group", peer_id="g1",
                          sender_id=sender, text=text, message_id=mid, mentioned=True, **kw)


def model(req: ModelRequest) -> Reply:
    last = req.messages[-1].to_dict()
    content = last.get("content")
    text = content if isinstance(content, str) else " ".join(
        str(p.get("text", "")) for p in content or [] if isinstance(p, dict))
    if "what was the plan" in text:
        return f"The owner said: door code {CODE}, call {PHONE}, and {PLACE}."
    return "ok"


def test_a_members_delete_leaves_the_owners_words_in_later_replies(tmp_path: Path) -> None:
    home = tmp_path / "home"
    rt = AgentRuntime(load_offline(home).agent(), FunctionModel(model), clock=fixed_clock, fsync=False, home=home)
    bus = make_bus(rt, RecordingChannel())

    async def main() -> None:
        await bus.publish(said(f"door code {CODE}, call {PHONE}; {PLACE}", "1", "u1"))  # the owner
        await bus.publish(said(f"so the door code is {CODE}? and {PLACE}? and {PHONE}", "2", "u8"))  # a member quotes
        await bus.publish(said("what was the plan again?", "3", "u1"))
        assert await bus.drain(20)
        await bus.publish(said("", "2", "u8", change="deleted"))
        assert await bus.drain(20)

    asyncio.run(main())
    record = rt.store.get(GROUP)
    assert record is not None
    raw = rt.store.transcript_path(record.session_id).read_text()
    assert '"customType":"retracted"' in raw and "so the door code is" not in raw  # the member's message is gone
    # The reply to the owner keeps the owner's words: the member's message was not where they came from.
    assert f"The owner said: door code {CODE}, call {PHONE}, and {PLACE}." in raw, raw


def test_words_the_session_holds_elsewhere_are_no_copy_but_the_deleted_messages_own_are() -> None:
    rule = Verbatim((f"my pin is 99887766 and {PLACE}, code {CODE}",), kept=(f"owner: {PLACE} / {CODE}",))
    text, n = rule.scrub(f"Noted 99887766; {PLACE}; {CODE}.")
    assert text == f"Noted [deleted]; {PLACE}; {CODE}.", text
    assert n == 1
    assert Verbatim((f"my pin is 99887766 and {PLACE}",)).scrub(PLACE)[0] == "[deleted]"  # nothing kept: a copy


def test_two_scrubs_of_one_transcript_at_once_lose_neither(tmp_path: Path) -> None:
    """Two deletes in one session scrubbed at once (a delete coming in while the retraction of another runs again
    after its turn: only the first is under the bus's one-at-a-time): the second opened the file, waited for the
    first's lock, then read the file the first had replaced and put it back with its own change — the first's
    scrub undone (the card number back in the reply), and whatever a turn appended to the new file meanwhile lost."""
    import threading

    import hermit.durable as durable
    import hermit.sessions.scrub as scrub
    from hermit.sessions.scrub import find_deleted, scrub_transcript
    from hermit.sessions.transcript import Transcript

    path = tmp_path / "sessions" / "s1.jsonl"
    t = Transcript.create(path, cwd=path.parent, session_key=GROUP, fsync=False)
    t.append_message({"role": "user", "content": [{"type": "text", "text": "card 4111 1111 1111 1111"}],
                      "ref": "telegram:default:1", "sender": {"id": "u8"}})
    t.append_message({"role": "user", "content": [{"type": "text", "text": f"code {CODE}"}],
                      "ref": "telegram:default:2", "sender": {"id": "u8"}})
    t.append_message({"role": "assistant", "content": [{"type": "text", "text": f"noted 4111 1111 1111 1111 and {CODE}"}]})
    first, second = find_deleted(path, "telegram:default:1"), find_deleted(path, "telegram:default:2")
    assert first is not None and second is not None
    real_lock, real_write = scrub.lock_fd, durable.write_all  # the scrub's one write: its new file's (write_atomic)
    waiting = threading.Event()
    done: list[BaseException | None] = []

    def lock_fd(fd: int, **kw: Any) -> Any:
        if threading.current_thread().name == "second":
            waiting.set()  # opened the file, about to wait for the first's lock
        return real_lock(fd, **kw)

    def run_second() -> None:
        try:
            scrub_transcript(path, second)
            done.append(None)
        except BaseException as e:  # noqa: BLE001 - reported below
            done.append(e)

    thread = threading.Thread(target=run_second, name="second")

    def write_all(fd: int, data: bytes, **kw: Any) -> None:
        if not thread.is_alive() and not done:
            thread.start()
            assert waiting.wait(10)
        real_write(fd, data, **kw)

    scrub.lock_fd, durable.write_all = lock_fd, write_all  # type: ignore[assignment]
    try:
        scrub_transcript(path, first)
        thread.join(10)
    finally:
        scrub.lock_fd, durable.write_all = real_lock, real_write  # type: ignore[assignment]
    assert done == [None]
    raw = path.read_text()
    assert "1111" not in raw and CODE not in raw, raw  # both scrubs, neither undone
    assert "noted [deleted] and [deleted]" in raw


def test_a_repeated_delete_of_one_message_writes_one_retracted_entry(tmp_path: Path) -> None:
    """A delete of the same message again (a webhook retried, a client sending its revoke over and over) appended
    another `retracted` entry each time: a contact grew the transcript without bound, 150 bytes a delete."""
    home = tmp_path / "home"
    rt = AgentRuntime(load_offline(home).agent(), FunctionModel(model), clock=fixed_clock, fsync=False, home=home)
    bus = make_bus(rt, RecordingChannel())

    async def main() -> None:
        await bus.publish(said(f"door code {CODE}", "1", "u8"))
        assert await bus.drain(20)
        for _ in range(20):
            await bus.publish(said("", "1", "u8", change="deleted"))
        assert await bus.drain(20)

    asyncio.run(main())
    record = rt.store.get(GROUP)
    assert record is not None
    raw = rt.store.transcript_path(record.session_id).read_text()
    assert CODE not in raw and raw.count('"customType":"retracted"') == 1, raw.count('"customType":"retracted"')


def test_a_members_delete_after_new_leaves_the_owners_words_in_the_saved_session(tmp_path: Path) -> None:
    """The same for what /new saved of the group's session: the assistant's messages there kept only what the
    member's deleted message alone brought."""
    home = tmp_path / "home"
    rt = AgentRuntime(load_offline(home).agent(), FunctionModel(model), clock=fixed_clock, fsync=False, home=home)
    bus = make_bus(rt, RecordingChannel())

    async def main() -> None:
        await bus.publish(said(f"door code {CODE}, call {PHONE}; {PLACE}", "1", "u1"))
        await bus.publish(said(f"so the door code is {CODE}? and {PLACE}? and {PHONE}, pin 99887766", "2", "u8"))
        await bus.publish(said("what was the plan again?", "3", "u1"))
        await bus.publish(said("/new", "4", "u1"))
        assert await bus.drain(20)
        await bus.publish(said("", "2", "u8", change="deleted"))
        assert await bus.drain(20)

    asyncio.run(main())
    saved = [p for p in (rt.agent.workspace / "memory").glob("*.md") if "Session id" in p.read_text()]
    assert saved, list((rt.agent.workspace / "memory").iterdir())
    text = saved[0].read_text()
    assert "99887766" not in text and "so the door code is" not in text, text
    assert f"The owner said: door code {CODE}, call {PHONE}, and {PLACE}." in text, text


def test_the_flushs_notes_keep_the_owners_words_a_deleted_message_quoted(tmp_path: Path) -> None:
    """The group's flush noted the owner's code and the member's pin; the member deletes their message quoting
    the code: the note loses the pin, not the owner's code."""
    from hermit.agent.flush import scrub_flush_notes
    from hermit.sessions.scrub import deleted_in

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    block = f'<!-- origin session="{GROUP}" -->'
    note = ws / "memory" / "2026-01-20.md"
    note.write_text(f"{block}\n- door code {CODE}\n- u8's pin 99887766\n<!-- /origin -->\n")
    write = {"role": "assistant", "content": [{"type": "toolCall", "id": "c", "name": "write", "arguments": {
        "path": "memory/2026-01-20.md", "content": f"- door code {CODE}\n- u8's pin 99887766\n"}}]}
    deleted = deleted_in([
        {"type": "message", "message": {"role": "user", "content": [{"type": "text", "text": f"door code {CODE}"}],
                                        "ref": "r1", "sender": {"id": "u1"}}},
        {"type": "message", "message": {"role": "user", "content": [
            {"type": "text", "text": f"door code {CODE}? my pin 99887766"}], "ref": "r2", "sender": {"id": "u8"}}},
        {"type": "custom", "customType": "memory_flush", "data": {"message": write}}], "r2")
    assert deleted is not None
    assert scrub_flush_notes(ws, GROUP, deleted) == {note.resolve(): 1}
    assert note.read_text() == f"{block}\n- door code {CODE}\n- u8's [deleted]\n<!-- /origin -->\n"


def test_the_rule_kept_after_a_scrub_still_leaves_what_the_owner_said_since() -> None:
    """Retracted again after a turn that was running at the delete (the rule found first is kept for an hour, the
    transcript no longer holding the text), the owner's words said since are not the deleted message's copies."""
    from hermit.sessions.entries import RETRACTED_TEXT
    from hermit.sessions.scrub import deleted_in

    def user(text: str, ref: str, who: str) -> dict[str, Any]:
        return {"type": "message", "message": {"role": "user", "content": [{"type": "text", "text": text}],
                                               "ref": ref, "sender": {"id": who}}}

    first = deleted_in([user(f"the code is {CODE}, pin 99887766", "m", "u8")], "m")
    assert first is not None
    again = deleted_in([user(RETRACTED_TEXT, "m", "u8"), user(f"yes, the code is {CODE}", "o", "u1")], "m", first)
    assert again is not None
    assert again.rule.scrub(f"Code {CODE} confirmed; pin 99887766")[0] == f"Code {CODE} confirmed; [deleted]"
