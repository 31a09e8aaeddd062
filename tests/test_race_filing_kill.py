"""Hermit killed (SIGKILL) while it files a received file into the owner's inbox, then the message handed over
again (Telegram's journal does so after a restart): the owner's inbox must never hold a half-written file under
the name the assistant is told, and the replay must file the whole file.

The owner's inbox was written in place (a new file under the final name, then its bytes): a kill in the middle
of the bytes left a truncated `inbox/<name>` that looked like the document, and the replay, finding the name
taken, said the file "could not be kept" — the owner's session read half a document as the whole one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from gatewayhelpers import runtime
from hermit.channels.base import InboundMessage
from hermit.channels.inbox import StagedFile
from hermit.gateway import attachments
from hermit.sessions.keys import main_session_key
from prochelpers import PROC_TIMEOUT, pythonpath

DATA = bytes(range(256)) * 8192  # 2 MiB: a phone's scan
OWNER = "42"

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
