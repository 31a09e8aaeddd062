"""The record of messages handed on (channels/held_messages.py: Discord's and Slack's deletes missed while away) when it
is not what Hermit writes (s23 t13).

`<state>/channels/<platform>/<account>/held-messages.json` was read with `Path.read_text`: a FIFO put in its place
blocked the account's channel as it was built (and with it the gateway's start) for ever; a symlink was followed; a
file of another uid, or one of many megabytes, was read and trusted. Now it is read as the trust records are
(config/records.py: no link followed, a regular file of this uid, at most MAX_BYTES): any of these counts as nothing
held, with a warning, and the next message handed on writes a fresh 0600 record in its place (a link's target is not
written). Real processes, as this uid and (as root) as uid 65534.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from ciguard import need
from prochelpers import run_python_as, shared_dir

UIDS = [None, 65534] if os.geteuid() == 0 else [None]
VALID = {"version": 1, "channels": [{"id": "555", "guild": None, "messages": {"700": "42"}, "edits": {}}]}

CHILD = """
import json, logging, os, stat, sys
from pathlib import Path
logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(message)s")
from hermit.channels.discord_missed import Held
p = Path(sys.argv[1])
held = Held(p)
before = sum(len(c.messages) for c in held.channels())
held.add("555", None, "777", "42")
st = os.lstat(p)
print(json.dumps({"held": before, "regular": stat.S_ISREG(st.st_mode), "mode": st.st_mode & 0o777,
                  "uid": st.st_uid, "now": json.loads(p.read_text())["channels"][0]["messages"]}))
"""


def _plant(kind: str, path: Path, elsewhere: Path, uid: int) -> None:
    other = 65534 if uid == 0 else 0
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "symlink":
        elsewhere.write_text(json.dumps(VALID))
        path.symlink_to(elsewhere)
    elif kind == "other-uid":
        path.write_text(json.dumps(VALID))
        os.chown(path, other, other)
        path.chmod(0o644)
        return
    elif kind == "huge":
        path.write_text(json.dumps({**VALID, "pad": "x" * 5_000_000}))
    os.lchown(path, uid, uid)


@pytest.mark.parametrize("uid", UIDS)
@pytest.mark.parametrize("kind", ["fifo", "symlink", "other-uid", "huge"])
def test_an_untrusted_held_record_counts_as_nothing_held_and_the_account_goes_on(kind: str, uid: int | None) -> None:
    if kind == "other-uid":
        need(os.geteuid() == 0, "root, to give the record another uid")
    with shared_dir("t13-held-") as shared:
        run_uid = os.geteuid() if uid is None else uid
        folder = shared / "state" / "channels" / "discord" / "main"
        folder.mkdir(parents=True)
        for p in (folder, *folder.parents):
            if p == shared:
                break
            os.chown(p, run_uid, run_uid)
            p.chmod(0o700)
        path = folder / "held-messages.json"
        elsewhere = shared / "elsewhere.json"
        _plant(kind, path, elsewhere, run_uid)
        target = elsewhere.read_bytes() if kind == "symlink" else b""
        user: dict[str, Any] = {} if uid is None else {"user": uid, "group": uid}
        done = run_python_as(user, "-c", CHILD, str(path))
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        assert out["held"] == 0, f"the {kind} record was trusted: {out}"
        assert "not looked for" in done.stderr, done.stderr
        # The account goes on: the next message is held in a fresh record of its own, in place of what was there.
        assert out == {"held": 0, "regular": True, "mode": 0o600, "uid": run_uid, "now": {"777": "42"}}
        if kind == "symlink":
            assert elsewhere.read_bytes() == target  # the link's target is neither read as the record nor written
        assert stat.S_ISREG(os.lstat(path).st_mode)
