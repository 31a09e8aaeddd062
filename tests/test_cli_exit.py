"""How a `hermit` process ends: what is garbage is collected (its finalizers flush and close), the rest is frozen
so that the interpreter's exit does not walk every object again (about 0.13 s of CPU per process, thousands of
processes in the suite); a test or script calling main(argv) keeps its collector as it was."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hermit.cli.main import main
from prochelpers import PROC_TIMEOUT, hermit_env

# Run last at exit (atexit is last in, first out; sitecustomize is imported before anything registers): how many
# objects the collector holds frozen.
AUDIT = '''
import atexit, gc, os
def _audit():
    with open(os.environ["EXIT_AUDIT"], "w") as f:
        f.write(str(gc.get_freeze_count()))
atexit.register(_audit)
'''


def test_a_hermit_process_exits_with_the_collector_frozen_and_its_writes_whole(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(AUDIT, encoding="utf-8")
    home, audit = tmp_path / "home", tmp_path / "audit"
    env = hermit_env(home, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
                     EXIT_AUDIT=str(audit))
    for argv in (["init"], ["memory", "status"]):
        r = subprocess.run([sys.executable, "-m", "hermit", *argv], env=env, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=PROC_TIMEOUT)
        assert r.returncode == 0, r.stderr
        assert int(audit.read_text(encoding="utf-8")) > 1000, argv  # the command's objects, frozen at its end
    assert "agents:" in (home / "hermit.yaml").read_text(encoding="utf-8")
    # --version leaves through argparse's SystemExit: frozen as well
    r = subprocess.run([sys.executable, "-m", "hermit", "--version"], env=env, capture_output=True, text=True,
                       timeout=PROC_TIMEOUT)
    assert r.returncode == 0 and r.stdout.startswith("hermit ")
    assert int(audit.read_text(encoding="utf-8")) > 0


def test_main_called_by_a_test_or_script_leaves_the_collector_alone() -> None:
    assert gc.get_freeze_count() == 0
    with pytest.raises(SystemExit):
        main(["--version"])
    assert gc.get_freeze_count() == 0
    assert gc.isenabled()
