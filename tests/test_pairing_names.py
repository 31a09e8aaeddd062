"""A stranger's display name cannot redraw the owner's terminal: `hermit pairing list|approve|revoke` (run as
the real CLI) print names, usernames and ids with every control, bidi and zero-width character escaped and
their length capped, both for requests stored now (the store cleans names as they come in) and for
records written before that."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

from hermit.channels.access import AccessControl, PairingStore
from hermit.config.schema import ChannelsConfig
from prochelpers import PROC_TIMEOUT

# Erase the line, return to column 0 and print a fake row; then a bidi override reversing what follows.
EVIL_NAME = "Mallory\x1b[2K\rtelegram  personal  2002 (Mom, @mom)\u202e\u2028\u200b" + "x" * 200
FAKE_ROW = "telegram  personal  2002 (Mom, @mom)"


def cli(home: Path, *args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "hermit.cli.main", "--home", str(home), "pairing", *args],
                       capture_output=True, timeout=PROC_TIMEOUT, env={**os.environ, "NO_COLOR": "1"})
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r.stdout.decode("utf-8")  # strict: the output is valid UTF-8


def hidden(out: str) -> list[str]:
    """Characters a terminal would act on or hide (other than the newlines between rows)."""
    return [repr(c) for c in out if c != "\n" and unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp", "Co", "Cn")]


def rows(out: str) -> list[str]:
    return [line for line in out.split("\n") if line.startswith("telegram")]


def test_a_name_from_the_platform_is_stored_plain_and_listed_on_one_row(tmp_path: Path) -> None:
    store = PairingStore(tmp_path)
    ac = AccessControl(ChannelsConfig.model_validate({"telegram": {"accounts": {"personal": {}}}}), store)
    assert ac.check("telegram", "personal", "dm", "2001", "2001", sender_name=EVIL_NAME,
                    sender_username="mallory_x\u202e").reply is not None
    [req] = store.pending()
    assert req.sender_name is not None and len(req.sender_name) <= 64 and not hidden(req.sender_name)
    assert req.sender_username == "mallory_x"
    out = cli(tmp_path, "list")
    print(out)
    assert hidden(out) == []
    assert [r.split()[2] for r in rows(out)] == ["2001"]  # one row, and it is the real sender's
    assert not any(line.startswith(FAKE_ROW) for line in out.split("\n"))


def test_records_written_before_names_were_cleaned_print_escaped(tmp_path: Path) -> None:
    creds = tmp_path / "credentials"
    creds.mkdir(mode=0o700)
    now = time.time()
    (creds / "pairing.json").write_text(json.dumps({"version": 1, "requests": [
        {"channel": "telegram", "account_id": "personal", "sender_id": "2001", "code": "ABCDEFGH",
         "created_at": now, "expires_at": now + 3600, "sender_name": EVIL_NAME, "sender_username": "m\u202e"},
        {"channel": "telegram", "account_id": "personal", "sender_id": "2003", "code": "JKLMNPQR",
         "created_at": now, "expires_at": now + 3600, "sender_name": "Eve\x1b]0;owned\x07", "sender_username": None}]}))
    (creds / "allow-telegram-personal.json").write_text(json.dumps({"version": 1, "allow_from": ["2005"], "senders": {
        "2005": {"sender_name": "Zed\r\x1b[1A" + FAKE_ROW, "sender_username": None, "approved_at": now}}}))
    for p in creds.iterdir():
        p.chmod(0o600)
    out = cli(tmp_path, "list")
    print(out)
    assert hidden(out) == []
    assert [r.split()[2] for r in rows(out)] == ["2001", "2003", "2005"]
    assert "Mallory\\x1b[2K\\x0dtelegram" in out and "\\u202e" in out  # shown, not acted on
    assert max(len(line) for line in out.split("\n")) < 300  # the 200 x's were cut
    approved = cli(tmp_path, "approve", "telegram", "ABCDEFGH")
    print(approved)
    assert hidden(approved) == [] and approved.startswith("approved 2001 (Mallory\\x1b[2K")
    revoked = cli(tmp_path, "revoke", "telegram", "2005")
    print(revoked)
    assert hidden(revoked) == [] and revoked.startswith("revoked 2005 (Zed\\x0d\\x1b[1A")
