"""Hermit killed (SIGKILL) in the middle of merging what a contact's command left back into its room, through the
real sandbox (bubblewrap): no link in the room may lead out of it afterwards.

The command leaves `b -> .` and `esc -> b/..`: each stays inside by its own text, together `esc` is the rooms
folder, holding every other chat's room. The merge created both links and removed `esc` only as its last step,
so a Hermit killed in between left the room with a way into the others until that chat's next command. The
merge now never creates a link that would leave the room.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from prochelpers import PROC_TIMEOUT, pythonpath
from test_sandbox_attacks import need_sandbox

# The gateway's side, in a process of its own that SIGKILLs itself when the merge reaches its last step.
CHILD = """
import os, signal, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
import hermit.tools.rooms as rooms
rooms._drop_links_leaving = lambda fd: os.kill(os.getpid(), signal.SIGKILL)
from test_sandbox_attacks import room_tools, run
runner, view = room_tools(Path(sys.argv[1]))
run(runner, "exec", command="ln -s . b; ln -s b/.. esc; ln -s b/b/b/.. esc2; mkdir -p d/e; ln -s ../.. d/e/up; "
                            "ln -s d/e sub; echo hi > note.txt")
print("merge finished")
"""


def test_a_merge_killed_before_its_last_step_leaves_no_link_out_of_the_room(tmp_path: Path) -> None:
    need_sandbox()
    other = tmp_path / "rooms" / "telegram_dm_777-other"
    other.mkdir(parents=True)
    (other / "secret.txt").write_text("another chat's file")
    tests = str(Path(__file__).parent)
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), tests], text=True, capture_output=True,
                          timeout=PROC_TIMEOUT, env={**os.environ, "PYTHONPATH": pythonpath()})
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stdout, done.stderr)
    room = next(p for p in (tmp_path / "rooms").iterdir() if p.name.startswith("telegram_group_5-"))
    assert (room / "note.txt").read_text() == "hi\n"  # the merge ran up to its last step
    assert os.readlink(room / "b") == "." and os.readlink(room / "sub") == "d/e"
    for gone in ("esc", "esc2"):
        assert not os.path.lexists(room / gone), gone
    assert not (room / "esc" / "telegram_dm_777-other" / "secret.txt").exists()
    # `d/e/up` is `..` twice from d/e: the room itself, fine alone; through `sub` it is still the room's top.
    for path in room.rglob("*"):
        if path.is_symlink():
            real = os.path.realpath(path)
            assert real == str(room.resolve()) or real.startswith(str(room.resolve()) + os.sep), (path, real)


def teardown_module() -> None:
    """The killed process could not remove its command's cgroup; as the next Hermit process would, this
    removes such groups, so a test run leaves none on the machine."""
    from hermit.tools.exec_cgroup import remove_stale_groups

    remove_stale_groups()
