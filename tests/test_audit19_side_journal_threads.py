"""Audit 19, side doors: under systemd the gateway keeps its log's entries out of the journal (the adm and
systemd-journal groups read it): the journal gets start/stop and, for a warning or an error, its kind only, and a
crash of the main thread prints frames and the exception's type, not its message (cli/main.py). But an exception
no code caught in any other thread (the gateway's turns, watchers and sandbox pipes run in threads) went through
Python's default `threading.excepthook`, and a warning through `warnings.showwarning`, straight to stderr: the
exception's or warning's message whole — whatever text it quoted. Now, when stderr is the journal, both go through
the gateway's logging: gateway.log gets them whole, the journal their kind.

Played in a child process (the real `setup_logging`) whose stderr is a pipe JOURNAL_STREAM names; a terminal (no
JOURNAL_STREAM) still gets every word, as before."""

from __future__ import annotations

from pathlib import Path

from test_audit19_side_log_full import child_stderr

WORDS = "the locker code is 31-7-22"
CHILD = f"""
import logging, sys, threading, warnings
from pathlib import Path
from hermit.gateway.logs import setup_logging
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")  # as cli/main.py does
setup_logging(Path(sys.argv[1]), "text", [])

def turn():
    raise ValueError({WORDS!r})

t = threading.Thread(target=turn, name="turn-dm-8800123987")
t.start()
t.join()
warnings.warn({WORDS!r} + " (a library's warning)", UserWarning)
"""


def child(logs: Path, journal: bool) -> tuple[str, str]:
    err = child_stderr(logs, journal, CHILD)
    return err, (logs / "gateway.log").read_text(encoding="utf-8")


def test_a_threads_crash_and_a_warning_reach_the_journal_as_kinds_only(tmp_path: Path) -> None:
    err, log = child(tmp_path / "logs", journal=True)
    assert "locker" not in err and "8800123987" not in err, err
    assert "ERROR hermit.gateway: error logged (ValueError): `hermit logs` shows the gateway's log" in err, err
    assert "WARNING py.warnings: warning logged: `hermit logs` shows the gateway's log" in err, err
    # gateway.log has the thread's crash whole: its name, the exception's message and traceback
    assert "turn-dm-8800123987" in log and f"ValueError: {WORDS}" in log and "in turn" in log, log


def test_a_terminal_still_gets_them_whole(tmp_path: Path) -> None:
    err, _ = child(tmp_path / "logs", journal=False)
    assert f"ValueError: {WORDS}" in err and f"UserWarning: {WORDS}" in err, err
