"""Audit s22 (t4): hermit.yaml saved the way real editors save, with pauses longer than read_settled's 50 ms.

Each editor's save is played by a separate process (the editor): in place (nano, vim with backupcopy=yes, VS Code's
plain write, emacs after its first save: truncate, write, fsync, close), the old file moved aside and a new one
written (vim's backupcopy=no, emacs's first save), or a temp file renamed over (VS Code's atomic save, gedit,
JetBrains' safe write). Each pauses mid-save (an fsync on a busy disk, a slow mount) after a first piece that is a
valid config letting the family group in and routing it to the default agent `main` (test_audit21_reaudit_config_
halfsave's FULL[:CUT]). Meanwhile the gateway's LiveConfig is asked as admissions ask it, and `hermit`'s loader too.

Before: a pause over 50 ms had the piece read as the config (the family group in, routed to main). Now a file some
process holds open for writing is not read as settled (config/load.writer_holds, a kernel read lease): the read waits
for the save's end, and a save held open for over a second fails the read (the gateway fails closed) instead of being
taken. What is read after the editor is done is the whole new config, every time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from hermit.agent.routing import Router
from hermit.config import StatePaths, load_config
from hermit.config.load import LoadedConfig, read_settled
from hermit.errors import ConfigError
from hermit.gateway.live_config import LiveConfig
from prochelpers import PROC_TIMEOUT
from test_audit21_reaudit_config_halfsave import CUT, FULL, GROUP, _home

OLD = FULL.replace("-100500", "-100999")  # the config in force before the save: the family group not let in

EDITOR = r"""
import os, sys, time
pattern, pause, path, cut = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
text = sys.stdin.buffer.read()

def pieces(fd):
    os.write(fd, text[:cut])
    print("piece", flush=True)
    time.sleep(pause)  # the editor's own pause mid-save
    os.write(fd, text[cut:])
    os.fsync(fd)

if pattern == "in-place":
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    pieces(fd)
    os.close(fd)
elif pattern == "backup-rename":
    os.rename(path, path + "~")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    pieces(fd)
    os.close(fd)
elif pattern == "atomic":
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    pieces(fd)
    os.close(fd)
    os.rename(path + ".tmp", path)
print("saved", flush=True)
"""


def seen(loaded: LoadedConfig) -> tuple[bool, str]:
    """(the family group let in, the agent it is routed to)."""
    return "-100500" in loaded.config.channels.accounts_of("telegram")["default"].groups, \
        Router.from_config(loaded).resolve(GROUP).agent_id


@pytest.mark.parametrize(("pattern", "pause", "cut"), [
    ("in-place", 0.3, CUT),
    ("in-place", 0.3, 0),  # truncated, then a pause before the first byte
    ("in-place", 1.5, CUT),  # held open longer than the reader waits
    ("in-place", 1.5, len(FULL)),  # written whole, then a slow fsync before the close: taken once closed
    ("backup-rename", 0.3, CUT),
    ("atomic", 0.3, CUT),
])
def test_a_save_paused_mid_way_is_never_taken_for_the_config(tmp_path: Path, pattern: str, pause: float,
                                                             cut: int) -> None:
    home = _home(tmp_path)
    path = home / "hermit.yaml"
    path.write_text(OLD)
    live = LiveConfig(load_config(StatePaths(home)))
    assert seen(live.current()) == (False, "main")
    editor = subprocess.Popen([sys.executable, "-c", EDITOR, pattern, str(pause), str(path), str(cut)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert editor.stdin is not None and editor.stdout is not None
    editor.stdin.write(FULL)
    editor.stdin.close()
    assert editor.stdout.readline() == "piece\n"  # the first piece is on disk, the editor pausing
    saved = threading.Event()
    threading.Thread(target=lambda: (editor.stdout.read() if editor.stdout else None, saved.set()), daemon=True).start()
    observed: list[tuple[bool, str] | str] = []
    while not saved.is_set():
        for read in (live.current, lambda: load_config(StatePaths(home))):
            try:
                observed.append(seen(read()))
            except ConfigError as e:
                observed.append(e.message)  # failed closed meanwhile: nobody let in
    assert editor.wait(timeout=PROC_TIMEOUT) == 0
    assert (True, "main") not in observed, f"the editor's first piece was taken for the config: {observed}"
    assert all(o in ((False, "main"), (True, "family")) or isinstance(o, str) for o in observed), observed
    assert seen(live.current()) == (True, "family")
    assert seen(load_config(StatePaths(home))) == (True, "family")


def test_a_writer_opening_the_file_during_the_check_never_ends_the_reader(tmp_path: Path) -> None:
    """The lease the check takes is broken by a writer opening the file meanwhile, and the kernel signals the
    reader: SIGURG (ignored), not SIGIO (the default, which ends a process). A reader process checks 3,000 times
    while another opens the file for writing over and over; it finishes, and its last read is the file."""
    path = tmp_path / "hermit.yaml"
    path.write_text(FULL)
    writer = subprocess.Popen([sys.executable, "-c", "import os, sys\nwhile True:\n    os.close(os.open(sys.argv[1], "
                               "os.O_WRONLY))\n", str(path)])
    try:
        reader = subprocess.run(
            [sys.executable, "-c", "import os, sys\nfrom pathlib import Path\nfrom hermit.config.load import "
             "writer_holds\np = Path(sys.argv[1]); st = os.stat(p)\nr = [writer_holds(p, st) for _ in range(3000)]\n"
             "print(r.count(True), r.count(False), r.count(None))", str(path)],
            capture_output=True, text=True, timeout=PROC_TIMEOUT, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                p for p in sys.path if p)})
    finally:
        writer.kill()
        writer.wait()
    assert reader.returncode == 0, (reader.returncode, reader.stderr)
    held, free, unknown = map(int, reader.stdout.split())
    assert held + free == 3000 and unknown == 0, reader.stdout
    assert read_settled(path)[0] == FULL.encode()
