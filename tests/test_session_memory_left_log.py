"""`session-memory: … names session …, but not the deleted message as saved: left` is said only when the saved file
(what /new saved of the ended session) still holds the deleted message or a copy of it — not when it was taken out
already. A delete after /new scrubs the saved file when the ended transcript is retracted (runtime.retract_ended),
and the scrub batch then asks again (gateway/scrub_batch.saved_scrub): that second look found nothing to change and
logged the warning for every such delete — noise that hid the real one (the owner edited the saved message, so it is
not recognised, and it is left).

Through the real bus, the real runtime and its /new hook, with a scripted model.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from test_reaudit17b_owner_notes import Owner, dm

CODE = "QX81TR44"
SECRET = f"the locker code is {CODE}, at the blue harbour gym"
LEFT = "but not the deleted message as saved: left"


def saved(owner: Owner) -> Path:
    [dump] = [p for p in (owner.ws / "memory").glob("*.md") if CODE in p.read_text()]
    return dump


def test_a_saved_file_scrubbed_already_is_no_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    owner = Owner(tmp_path, "# Memory\n", {})
    try:
        owner.send(dm(SECRET, "1"), dm("/new", "2"))
        dump = saved(owner)
        with caplog.at_level(logging.INFO):
            owner.send(dm("", "1", change="deleted"))
            owner.send(dm("", "1", change="deleted"))  # again: a webhook retried, a revoke sent twice
        assert CODE not in dump.read_text(), dump.read_text()
        said = [r.getMessage() for r in caplog.records if LEFT in r.getMessage()]
        assert said == [], said
    finally:
        owner.rt.close()


def test_a_saved_message_the_owner_edited_is_left_and_said(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    owner = Owner(tmp_path, "# Memory\n", {})
    try:
        owner.send(dm(SECRET, "1"), dm("/new", "2"))
        dump = saved(owner)
        dump.write_text(dump.read_text().replace(SECRET, f"{SECRET} (my note: the gym moved)"))
        with caplog.at_level(logging.INFO):
            owner.send(dm("", "1", change="deleted"))
        assert CODE in dump.read_text()  # not recognised: left
        said = [r.getMessage() for r in caplog.records if LEFT in r.getMessage()]
        assert said and dump.name in said[0], said
    finally:
        owner.rt.close()
