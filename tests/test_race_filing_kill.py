"""Hermit killed (SIGKILL) while it files a received file into the owner's inbox, then the message handed over
again (Telegram's journal does so after a restart): the owner's inbox must never hold a half-written file under
the name the assistant is told, and the replay must file the whole file.

The owner's inbox was written in place (a new file under the final name, then its bytes): a kill in the middle
of the bytes left a truncated `inbox/<name>` that looked like the document, and the replay, finding the name
taken, said the file "could not be kept" — the owner's session read half a document as the whole one.
And the inbox the filing made in the owner's workspace let another local user list what was received.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ciguard import need
from gatewayhelpers import runtime
from hermit.channels.base import InboundMessage
from hermit.channels.inbox import StagedFile
from hermit.gateway import attachments
from hermit.sessions.keys import main_session_key
from prochelpers import PROC_TIMEOUT, python_as, pythonpath

DATA = bytes(range(256)) * 8192  # 2 MiB: a phone's scan
OWNER = "42"
NOBODY: dict[str, Any] = {"user": 65534, "group": 65534, "extra_groups": []}

# The gateway's side, in a process of its own: any write of the file's size writes half and the process is
# killed, as a SIGKILL (an OOM kill, a `kill -9`) lands in the middle of a large write.
CHILD = """
import json, os, signal, sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
_write = os.write
def _killed_half_way(fd, data):
    if len(data) >= int(sys.argv[4]):
        _write(fd, bytes(data[: len(data) // 2]))
        os.kill(os.getpid(), signal.SIGKILL)
    return _write(fd, data)
os.write = _killed_half_way
from gatewayhelpers import runtime
from hermit.channels.base import Attachment, InboundMessage
from hermit.gateway import attachments
from hermit.sessions.keys import main_session_key
spec = json.loads(sys.argv[2])
a = Attachment("document", spec["path"], "scan.pdf", "application/pdf", spec["size"], staged=tuple(spec["staged"]))
msg = InboundMessage("telegram", "default", "dm", "42", "42", "keep this", message_id="101", attachments=(a,))
attachments.file_for_session(msg, runtime(Path(sys.argv[1]), lambda r: "ok"), main_session_key("main"))
print("filed")
"""


def test_a_filing_killed_half_way_leaves_no_half_file_and_the_replay_files_it_whole(tmp_path: Path) -> None:
    home = tmp_path / "home"
    rt = runtime(home, lambda r: "ok")
    with StagedFile(home / "inbox", ("telegram", "default", OWNER, "101"), "scan.pdf") as staged:
        staged.write(DATA)
    att = staged.attachment("document", "scan.pdf", "application/pdf")
    spec = {"path": att.path, "size": att.size, "staged": list(att.staged or ())}
    tests = str(Path(__file__).parent)
    done = subprocess.run([sys.executable, "-c", CHILD, str(home), json.dumps(spec), tests, str(len(DATA))],
                          text=True, capture_output=True, timeout=PROC_TIMEOUT, env={**os.environ,
                                                                                      "PYTHONPATH": pythonpath()})
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stdout, done.stderr)
    inbox = rt.agent.workspace / "inbox"
    final = inbox / Path(att.path).name
    # Killed half way: the name the assistant is told holds the whole file or nothing.
    assert not final.exists() or final.read_bytes() == DATA, final.stat().st_size
    assert Path(att.path).read_bytes() == DATA  # still staged, for the replay

    msg = InboundMessage("telegram", "default", "dm", OWNER, OWNER, "keep this", message_id="101", attachments=(att,))
    filed = attachments.file_for_session(msg, rt, main_session_key("main"))
    [a] = filed.attachments
    assert a.path == str(final) and final.read_bytes() == DATA
    assert "(file received with this message: inbox/" in attachments.described(msg.text, filed)
    assert not Path(att.path).exists()  # nothing left staged


def test_another_local_user_cannot_list_the_files_received_into_the_owners_inbox() -> None:
    """The owner's workspace may be a folder of theirs others can read (0755, as ~/notes often is); Hermit
    accepts it (only write by others is refused). The inbox it made there for received files was 0755 too, so
    another local user (uid 65534) listed every received file's name — the sender's chat and message id and the
    sender's own file name ("lab_results.pdf") — though not its bytes (0600). The inbox is now 0700, and one an
    older version made is tightened when a file is filed into it."""
    need(os.geteuid() == 0, "root, to look as uid 65534 (CI and containers run as root)")
    python = python_as(NOBODY)
    need(python is not None, "an interpreter that can import this checkout as uid 65534")
    assert python is not None
    base = Path(tempfile.mkdtemp(prefix="hermit-race-inbox-"))  # not under /root: the other uid reaches it
    try:
        os.chmod(base, 0o755)
        workspace = base / "notes"
        workspace.mkdir(mode=0o755)
        os.chmod(workspace, 0o755)
        home = base / "home"
        rt = runtime(home, lambda r: "ok", workspace=str(workspace))
        with StagedFile(home / "inbox", ("telegram", "default", OWNER, "102"), "lab_results.pdf") as staged:
            staged.write(b"%PDF results")
        msg = InboundMessage("telegram", "default", "dm", OWNER, OWNER, "keep this", message_id="102",
                             attachments=(staged.attachment("document", "lab_results.pdf", "application/pdf"),))
        (workspace / "inbox").mkdir(mode=0o755)
        os.chmod(workspace / "inbox", 0o755)  # as an older Hermit made it
        [filed] = attachments.file_for_session(msg, rt, main_session_key("main")).attachments
        assert Path(filed.path).parent == workspace / "inbox" and Path(filed.path).read_bytes() == b"%PDF results"
        look = subprocess.run([python, "-c", "import os, sys; print(os.listdir(sys.argv[1]))", str(workspace / "inbox")],
                              text=True, capture_output=True, timeout=PROC_TIMEOUT,
                              env={"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath()}, **NOBODY)
        assert "lab_results" not in look.stdout and "PermissionError" in look.stderr, (look.stdout, look.stderr)
        assert (workspace / "inbox").stat().st_mode & 0o777 == 0o700
    finally:
        shutil.rmtree(base, ignore_errors=True)
