"""Re-audit of held leftovers: a maker's lock never outlives it through a child process.

Liveness of a staging folder, a temp file, a lexicon build or a cgroup is its maker's flock (locks.hold_made),
and an flock belongs to the open file description: a descriptor inherited by a child (the commands Hermit runs,
sandboxed or not) would keep the lock, so a command that outlives its turn — or a hostile one that lingers on
purpose — would keep a dead Hermit's garbage forever. Every holding descriptor is opened O_CLOEXEC: here a child
is even started with close_fds=False (exec keeps only inheritable descriptors), and once the maker lets go the
leftover is swept while the child still runs. (Between fork and exec a child shares every descriptor: the lock
passes to it for that instant only, so the check waits until the child runs.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from hermit.durable import held_temp
from hermit.locks import left_unheld
from hermit.memory.search.lexicon import held_build
from hermit.tools.room_sandbox import STAGING_PREFIX, new_staging
from prochelpers import PROC_TIMEOUT


def _staging(where: Path) -> tuple[int, Path]:
    path, fd = new_staging(where)
    return fd, path


MAKERS: dict[str, tuple[Callable[[Path], tuple[int, Path]], str]] = {
    "staging": (_staging, STAGING_PREFIX),
    "temp": (lambda where: held_temp(where / "sessions.json"), ".sessions.json.tmp-"),
    "lexicon": (lambda where: held_build(where / "lexicon-cedict-v3.sqlite"), "lexicon-"),
}


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_a_child_started_while_a_leftover_is_held_does_not_hold_it(tmp_path: Path, kind: str) -> None:
    make, prefix = MAKERS[kind]
    fd, path = make(tmp_path)
    assert not os.get_inheritable(fd)
    child = subprocess.Popen([sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=False)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"up\n"  # exec'd: past fork's shared copy
        assert list(left_unheld(tmp_path, prefix)) == []  # held by its maker: never swept
        os.close(fd)  # the maker is done with it (as if it died) while the child lives on
        assert [Path(p) for p in left_unheld(tmp_path, prefix)] == [path]
    finally:
        assert child.stdin is not None
        child.stdin.close()
        assert child.wait(PROC_TIMEOUT) == 0
