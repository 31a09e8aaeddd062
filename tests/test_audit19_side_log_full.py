"""Audit 19, side doors: a gateway whose log file cannot be written — a full disk, a quota, the file size limit —
had logging's default `handleError` print every record to stderr as "--- Logging error --- … Message: '…'
Arguments: (…)": the message and its arguments (peer ids, a sent file's name, words of a chat) in full. Under
systemd stderr is the journal, which the adm and systemd-journal groups read, and where the gateway otherwise
writes only start/stop and error kinds (gateway/logs.py). Now the file handler says once, in its own words and
without the record, that gateway.log cannot be written, and nothing more until it can again.

Played in a child process (the real `setup_logging`, handlers and file) whose stderr is a pipe JOURNAL_STREAM
names, with RLIMIT_FSIZE below the log's size: every write to gateway.log fails with EFBIG as on a full disk.
Runs as whatever user runs the tests (no mount, no root)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from prochelpers import PROC_TIMEOUT, pythonpath

PEER = "8800123987"
WORDS = "the locker code is 31-7-22"
CHILD = f"""
import logging, resource, signal, sys
from pathlib import Path
from hermit.gateway.logs import setup_logging
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing
setup_logging(Path(sys.argv[1]), "text", [])
log = logging.getLogger("hermit.gateway")
log.info("gateway listening on http://127.0.0.1:8765/ (agents: main)")
resource.setrlimit(resource.RLIMIT_FSIZE, (1, 1))  # nothing more fits in gateway.log: a full disk
for n in range(40):
    log.info("could not fetch %s sent by %s in dm:%s", "passport-scan.pdf", {PEER!r}, {PEER!r})
    log.warning("turn of dm:%s failed: %s", {PEER!r}, {WORDS!r})
try:
    raise ValueError({WORDS!r})
except ValueError:
    log.exception("job call-mum-%s failed", {PEER!r})
"""


def child_stderr(logs: Path, journal: bool, script: str = CHILD) -> str:
    """stderr of a child running `script` with `logs`, on a pipe the journal variable names when `journal`."""
    r, w = os.pipe()
    try:
        st = os.fstat(w)
        env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
        env["PYTHONPATH"] = pythonpath()
        if journal:
            env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
        done = subprocess.run([sys.executable, "-c", script, str(logs)], stderr=w, env=env, timeout=PROC_TIMEOUT)
    finally:
        os.close(w)
    with os.fdopen(r, "rb") as f:
        err = f.read().decode()
    assert done.returncode == 0, err
    return err


def test_a_log_that_cannot_be_written_sends_no_record_to_the_journal(tmp_path: Path) -> None:
    err = child_stderr(tmp_path / "logs", journal=True)
    assert PEER not in err and "passport" not in err and "locker" not in err, err
    assert "Logging error" not in err and "Arguments:" not in err, err
    said = [line for line in err.splitlines() if "gateway.log could not be written" in line]
    assert len(said) == 1, err  # once, not once per record
    assert "`hermit logs`" not in said[0] and "File too large" in said[0], said
    # the journal's own lines are still there (error kinds only)
    assert "WARNING hermit.gateway: warning logged: `hermit logs` shows the gateway's log" in err, err
    assert (tmp_path / "logs" / "gateway.log").read_text().count("gateway listening on") == 1


@pytest.mark.parametrize("journal", [False])
def test_a_terminal_gets_its_lines_and_one_word_of_the_lost_log(tmp_path: Path, journal: bool) -> None:
    err = child_stderr(tmp_path / "logs", journal)
    assert f"dm:{PEER}" in err  # a terminal (or a redirected stderr) gets every line, as before
    assert "Logging error" not in err and "Arguments:" not in err, err
    assert len([line for line in err.splitlines() if "gateway.log could not be written" in line]) == 1, err
