"""A short PIN its deleted message names as a secret is a copy wherever a later reply repeats it (sessions/verbatim.py).

"my PIN is 4711", reply "Saved 4711 for you": only numbers of 6+ digits were copies on their own, so the reply kept
the PIN after the delete. Now a 4-5 digit number is one too when the deleted message names it a secret — PIN, code,
password … (SECRET_WORDS) within a few words of it, no other number between — and nothing else in the session holds
it. Years, times, prices and counts keep their place: a deleted message that only mentions them takes none of them
from the replies, and one the session holds elsewhere (the owner said it, a reply before) is never the message's.
Real parts: the Bus, an AgentRuntime on a FunctionModel, real transcripts.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from agenthelpers import fixed_clock, load_offline
from gatewayhelpers import RecordingChannel, last_user_text, make_bus
from hermit.agent.runtime import AgentRuntime
from hermit.channels.base import InboundMessage
from hermit.models.base import ModelRequest
from hermit.sessions.keys import group_session_key
from hermit.sessions.scrub import deleted_in
from hermit.sessions.verbatim import Verbatim
from hermit.testing import FunctionModel
from hermit.testing.scripted import Reply

GROUP = group_session_key("main", "telegram", "g1")


@pytest.mark.parametrize(("said", "reply", "after"), [
    ("my PIN is 4711", "Saved 4711 for you, see you in 2026", "Saved [deleted] for you, see you in 2026"),
    ("4711 is my pin", "ok, 4711 it is", "ok, [deleted] it is"),
    ("the door code for the garage is 0815", "Garage: 0815.", "Garage: [deleted]."),
    ("Passwort: 27182", "27182 noted", "[deleted] noted"),
    ("we were 4711 people in 2019", "There were 4711 of you in 2019!", None),  # a count, a year: not named secrets
    ("meet at 1930, the code word is banana", "1930 it is", None),  # "code" is in another clause
    ("my PIN changed, call me at 1930", "1930 it is", None),
    ("my pin is 12 and the flat is 4711", "flat 4711", None),  # another number stands between
    ("my PIN is 123", "123 saved", None),  # three digits: too short to tell from any other number
])
def test_a_short_number_is_a_copy_only_when_the_deleted_message_names_it_a_secret(
        said: str, reply: str, after: str | None) -> None:
    out, n = Verbatim((said,)).scrub(reply)
    assert (out, n) == ((reply, 0) if after is None else (after, 1))


def test_a_pin_the_session_holds_elsewhere_is_not_the_deleted_messages() -> None:
    rule = Verbatim(("my PIN is 2026",), kept=("the owner: we go to Lisbon in 2026",))
    assert rule.scrub("Lisbon in 2026, and your PIN is noted") == ("Lisbon in 2026, and your PIN is noted", 0)


OWNER, MEMBER = "u1", "u8"
# A group's afternoon: the owner's plans, a member's secrets and ordinary numbers, the assistant's replies quoting
# them and numbers of its own (times, a forecast). The member then deletes every message of theirs.
CONVO = [
    (OWNER, "Planning the Lisbon trip for 2026, we fly on the 14th at 0730"),
    ("A", "Noted: Lisbon in 2026, flight on the 14th at 0730."),
    (MEMBER, "I can book the hotel, it's 1290 euros for 4 nights"),
    ("A", "1290 euros for 4 nights, got it. That's about 322 a night."),
    (MEMBER, "my card PIN is 4711 if you need it for the deposit"),
    ("A", "Saved 4711 for you. The deposit is due by 1800 today."),
    (OWNER, "we were 1350 people at the conference in 2019, it was huge"),
    ("A", "1350 people in 2019 — impressive."),
    (MEMBER, "the door code for the flat is 0815, the wifi password is lisboa2026"),
    ("A", "Door code 0815 and the wifi password lisboa2026 noted. Check-in from 1500."),
    (MEMBER, "my postcode is 10115 by the way, for the invoice"),
    ("A", "Invoice to 10115, noted. The total is 1290 plus 58 tax, 1348."),
    (MEMBER, "I ran 5200 steps today and my phone PIN is 2580"),
    ("A", "5200 steps, nice! And 2580 is saved. Tomorrow: 24 degrees, sunrise 0712."),
    (OWNER, "remind me at 1930 to pack"),
    ("A", "I'll remind you at 1930. 2026 is going to be a good year."),
    (MEMBER, "the locker combination is 3141 and it's locker 1207"),
    ("A", "Locker 1207, combination 3141. The gym opens at 0600 and closes at 2200."),
    (MEMBER, "see you in 2026 then, the flight is at 0730 right?"),
    ("A", "Yes, 0730 on the 14th, 2026. Boarding at 0700."),
    (MEMBER, "my old code was 9876 but I changed it"),
    ("A", "Understood, 9876 is no longer valid. The hotel has 1290 euros on hold."),
]
SECRETS = {"4711", "0815", "2580", "3141", "9876"}
SHORT = re.compile(r"(?<![\w.])\d{4,5}(?![\w])")


def test_on_a_realistic_group_transcript_only_the_named_secrets_go() -> None:
    """Each of the member's messages deleted alone: every PIN and code it named leaves the replies after it, and no
    other short number does (years, times, prices, counts, the assistant's own numbers)."""
    objs: list[dict[str, Any] | None] = [{"type": "session"}]
    for n, (who, text) in enumerate(CONVO):
        message: dict[str, Any] = {"role": "assistant", "content": [{"type": "text", "text": text}]}
        if who != "A":
            message = {"role": "user", "content": [{"type": "text", "text": text}], "ref": f"r{n}",
                       "sender": {"id": who}}
        objs.append({"type": "message", "message": message})
    scrubbed: list[str] = []
    looked = 0
    for n, (who, said) in enumerate(CONVO):
        if who != MEMBER:
            continue
        deleted = deleted_in(objs, f"r{n}")
        assert deleted is not None
        for later in CONVO[n + 1:]:
            if later[0] != "A":
                continue
            out, _ = deleted.rule.scrub(later[1])
            numbers, left = SHORT.findall(later[1]), SHORT.findall(out)
            looked += len(numbers)
            scrubbed += [x for x in set(numbers) if numbers.count(x) > left.count(x)]
            for x in set(numbers) & SECRETS:
                if re.search(rf"\b{x}\b", said):
                    assert x not in left, (said, later[1], out)
    assert looked == 113
    # The five secrets (each in its reply), and the price that the deleted message's own 12+ character run
    # ("1290 euros for 4 nights") carried into the reply quoting it: nothing else.
    assert sorted(scrubbed) == ["0815", "1290", "2580", "3141", "4711", "9876"], scrubbed


def test_through_the_bus_a_members_pin_leaves_the_reply_and_the_owners_time_stays(tmp_path: Path) -> None:
    def model(req: ModelRequest) -> Reply:
        text = last_user_text(req)
        if "PIN" in text:
            return "Saved 4711 for you. I'll remind you at 1930, as the owner asked."
        return "ok"

    home = tmp_path / "home"
    rt = AgentRuntime(load_offline(home).agent(), FunctionModel(model), clock=fixed_clock, fsync=False, home=home)
    bus = make_bus(rt, RecordingChannel())

    def said(text: str, mid: str, sender: str, **kw: Any) -> InboundMessage:
        return InboundMessage(channel="telegram", account_id="default", peer_kind="group", peer_id="g1",
                              sender_id=sender, text=text, message_id=mid, mentioned=True, **kw)

    async def main() -> None:
        await bus.publish(said("remind me at 1930 to pack", "1", OWNER))
        await bus.publish(said("my card PIN is 4711, and 1930 works for me", "2", MEMBER))
        assert await bus.drain(20)
        await bus.publish(said("", "2", MEMBER, change="deleted"))
        assert await bus.drain(20)

    asyncio.run(main())
    record = rt.store.get(GROUP)
    assert record is not None
    raw = rt.store.transcript_path(record.session_id).read_text()
    assert "4711" not in raw, raw
    assert "Saved [deleted] for you. I'll remind you at 1930, as the owner asked." in raw, raw
