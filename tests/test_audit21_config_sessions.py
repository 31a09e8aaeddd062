"""A config's life, sessions side (audit s21 t3): settings changed in hermit.yaml while the gateway runs, with
sessions, notes and queued turns in place. Guards for what held:

- `session.dm_scope` cycled main → per-peer → per-channel-peer → per-account-channel-peer → main, live: a contact's
  DM never lands in a session holding the owner's words or MEMORY.md, and the owner's never in the contact's;
- `dangerously_share_main_session_with_contacts` turned off while a contact's message waits for the main session:
  it is not run there (routing is asked again when its turn starts), and the contact's next message goes to a
  session of their own;
- a contact promoted to owner and demoted again: MEMORY.md reaches them only while they are an owner.

And for the one that did not hold: an owner (or a contact) removed while the turn answering them runs gets no reply
(MEDIUM: the reply of a main-session turn, made from MEMORY.md, went to an id the owner had just removed); access is
asked again before the reply is sent, as it is for jobs.

The real in-process gateway of test_gateway_live_config (real config file, runtimes, Telegram adapter) against a
fake Telegram and the FakeProvider on 127.0.0.1; hermit.yaml replaced by rename, as editors save."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from test_gateway_live_config import (
    CONTACT,
    EX_OWNER,
    OWNER,
    REPLY,
    SECRET,
    Stack,
    gateway,
    replace_file,
    until,
)

OWNER_CANARY = "OWNER-DM-CANARY-5512"  # the owner's own words in their DMs
CONTACT_CANARY = "CONTACT-DM-CANARY-7788"  # the contact's


def set_session(s: Stack, line: str | None) -> None:
    """`agents.defaults.session` set to `line` (None: no such section), the file replaced by rename."""
    lines = [x for x in s.config.read_text().splitlines() if not x.startswith("    session:")]
    at = lines.index("    timezone: UTC") + 1
    if line is not None:
        lines.insert(at, f"    session: {line}")
    replace_file(s.config, "\n".join(lines) + "\n")


def request_with(s: Stack, text: str) -> str:
    """The first model request that carried `text`: the turn that answered it."""
    return next(json.dumps(r.body) for r in s.provider.requests if text in json.dumps(r.body))


def sessions(s: Stack) -> dict[str, str]:
    """Every transcript of agent main, by file name, as text."""
    root = s.gw.loaded.agent("main").sessions_dir
    return {p.name: p.read_text(encoding="utf-8", errors="replace") for p in root.rglob("*.jsonl")}


def test_dm_scope_changed_live_never_merges_a_contact_into_the_owners_session(tmp_path: Path) -> None:
    async def main() -> None:
        async with gateway(tmp_path, [REPLY], owners=[OWNER], allow=[CONTACT]) as s:
            assert await s.say(OWNER, f"my own note {OWNER_CANARY}") == ["noted"]
            assert await s.say(CONTACT, f"hello from the contact {CONTACT_CANARY}") == ["noted"]
            for scope in ("per-peer", "per-channel-peer", "per-account-channel-peer", "main"):
                set_session(s, f"{{dm_scope: {scope}}}")
                assert await s.say(CONTACT, f"contact under {scope}") == ["noted"]
                assert await s.say(OWNER, f"owner under {scope}") == ["noted"]
                asked = request_with(s, f"contact under {scope}")
                assert SECRET not in asked and OWNER_CANARY not in asked and "owner under" not in asked, scope
                owner_asked = request_with(s, f"owner under {scope}")
                assert CONTACT_CANARY not in owner_asked and "contact under" not in owner_asked, scope
            # No transcript holds both people's words: main, the owner's two DM keys, the contact's two.
            found = sessions(s)
            assert len(found) >= 5, sorted(found)
            for name, text in found.items():
                assert not (OWNER_CANARY in text and CONTACT_CANARY in text), name
                assert not ("owner under" in text and "contact under" in text), name
            assert not any(SECRET in t or OWNER_CANARY in t for t in s.texts(CONTACT))

    asyncio.run(main())


def test_sharing_main_turned_off_while_a_contacts_message_waits_for_it(tmp_path: Path) -> None:
    async def main() -> None:
        async with gateway(tmp_path, [REPLY], owners=[OWNER], allow=[CONTACT]) as s:
            set_session(s, "{dangerously_share_main_session_with_contacts: true}")
            assert await s.say(OWNER, f"my own note {OWNER_CANARY}") == ["noted"]
            s.provider.hold()
            s.telegram.push_message(chat_id=OWNER, text="owner holds the main session")
            await asyncio.to_thread(s.provider.waiting.wait, 30)  # the owner's turn is inside the model
            s.telegram.push_message(chat_id=CONTACT, text="contact-queued-for-main")
            await until(lambda: s.gw.bus.status()["waiting"] == 1, "the contact's message queued in main")
            set_session(s, None)  # sharing off again
            s.provider.release()
            await until(lambda: s.gw.bus.status()["sessions_active"] == 0, "the queue to empty")
            assert not s.asked("contact-queued-for-main")
            assert await s.say(CONTACT, "contact-after-sharing-off") == ["noted"]
            asked = request_with(s, "contact-after-sharing-off")
            assert SECRET not in asked and OWNER_CANARY not in asked

    asyncio.run(main())


def test_a_contact_promoted_then_demoted_reaches_memory_only_while_an_owner(tmp_path: Path) -> None:
    async def main() -> None:
        async with gateway(tmp_path, [REPLY], owners=[OWNER], allow=[CONTACT]) as s:
            assert await s.say(CONTACT, "as a contact") == ["noted"]
            assert SECRET not in request_with(s, "as a contact")
            owners = f'owners: ["{OWNER}"]'
            replace_file(s.config, s.config.read_text().replace(owners, f'owners: ["{OWNER}", "{CONTACT}"]'))
            assert await s.say(CONTACT, "as an owner") == ["noted"]
            assert SECRET in request_with(s, "as an owner")  # by design: an owner's DMs are the main session
            replace_file(s.config, s.config.read_text().replace(f'owners: ["{OWNER}", "{CONTACT}"]', owners))
            assert await s.say(CONTACT, "a contact again") == ["noted"]
            again = request_with(s, "a contact again")
            assert SECRET not in again and "as an owner" not in again

    asyncio.run(main())


def test_a_reply_is_not_sent_to_an_owner_removed_while_their_turn_ran(tmp_path: Path) -> None:
    """Revoking must count at once: an owner id removed (a stolen phone, an ex-partner) while the turn that
    answers it is inside the model gets no reply made from the main session; the reply is kept in the transcript.
    Jobs already worked so ("again before its reply is sent", docs/guide.md); messages were checked only at the
    start of their turn, so a slow model (or a long tool loop) handed MEMORY.md's text to the revoked id."""
    leak = f"The vault code is {SECRET}."

    async def main() -> None:
        async with gateway(tmp_path, [{"text": leak}, REPLY], owners=[OWNER, EX_OWNER], allow=[]) as s:
            s.provider.hold()
            s.telegram.push_message(chat_id=EX_OWNER, text="read me the vault code from MEMORY.md")
            await asyncio.to_thread(s.provider.waiting.wait, 30)  # the turn is inside the model
            replace_file(s.config, s.config.read_text().replace(f'"{OWNER}", "{EX_OWNER}"', f'"{OWNER}"'))
            s.provider.release()
            await until(lambda: s.gw.bus.status()["sessions_active"] == 0, "the turn to end")
            assert await s.say(OWNER, "ping") == ["noted"]  # the owner is still answered, after it
            assert not any(SECRET in t for t in s.texts(EX_OWNER)), s.texts(EX_OWNER)
            main_file = next(t for t in sessions(s).values() if leak in t)  # kept as the owner's record
            assert "read me the vault code" in main_file

    asyncio.run(main())


def test_a_reply_is_not_sent_to_a_contact_removed_while_their_turn_ran(tmp_path: Path) -> None:
    async def main() -> None:
        async with gateway(tmp_path, [{"text": "contact reply CR-1"}, REPLY], owners=[OWNER],
                           allow=[CONTACT]) as s:
            s.provider.hold()
            s.telegram.push_message(chat_id=CONTACT, text="contact asks")
            await asyncio.to_thread(s.provider.waiting.wait, 30)
            replace_file(s.config, s.config.read_text().replace(f'allow_from: ["{CONTACT}"]', "allow_from: []"))
            s.provider.release()
            await until(lambda: s.gw.bus.status()["sessions_active"] == 0, "the turn to end")
            assert await s.say(OWNER, "ping") == ["noted"]
            assert s.texts(CONTACT) == []

    asyncio.run(main())


def test_a_dm_scope_change_while_the_owners_turn_runs_still_answers_them(tmp_path: Path) -> None:
    """A change that takes nothing from them moves their chat to another session, not their reply: the owner (and a
    contact in a session of their own) still get the answer of a turn running while dm_scope changed."""
    async def main() -> None:
        async with gateway(tmp_path, [REPLY], owners=[OWNER], allow=[CONTACT]) as s:
            s.provider.hold()
            s.telegram.push_message(chat_id=OWNER, text="owner asks in main")
            s.telegram.push_message(chat_id=CONTACT, text="contact asks")
            await until(lambda: len(s.provider.requests) >= 2, "both turns inside the model")
            set_session(s, "{dm_scope: per-channel-peer}")
            s.provider.release()
            await until(lambda: s.texts(OWNER) == ["noted"] and s.texts(CONTACT) == ["noted"], "both answers")

    asyncio.run(main())
