"""What other processes on the machine can read of Hermit's secrets and of a command's text while it runs: the
environment of the processes Hermit starts (its keys), the moment the `hermit` process becomes non-dumpable,
and the command lines (`ps`, /proc/<pid>/cmdline, readable by every local user) of a command's processes.
Real bubblewrap, real processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ciguard import need
from hermit.tools import os_sandbox
from prochelpers import PROC_TIMEOUT
from test_sandbox_attacks import need_sandbox

SECRET = "sk-ant-EXPOSURE-5e1f0c9a7b3d"


def test_the_sandbox_probe_gets_none_of_hermits_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """detect() ran bubblewrap and the probe's shell with Hermit's whole environment: both are dumpable, so any
    process of the uid read the keys from their /proc/<pid>/environ (the gateway's first non-main turn, every
    `hermit doctor`). Now they get PATH alone; the probe shows what it was given."""
    need_sandbox()
    seen: list[str] = []
    real = os_sandbox._probe

    def spy(argv: list[str], uid: int | None, pass_fds: tuple[int, ...] = ()) -> tuple[str | None, str]:
        problem, out = real(argv, uid, pass_fds)
        seen.append(out)
        return problem, out

    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.setattr(os_sandbox, "_probe", spy)
    monkeypatch.setattr(os_sandbox, "PROBE_SCRIPT", os_sandbox.PROBE_SCRIPT + "; echo; tr '\\0' '\\n' </proc/self/environ")
    backend = os_sandbox.detect.__wrapped__("linux", 65534)  # type: ignore[attr-defined]
    assert backend.available, backend.detail
    environ = seen[-1].split("\n\n", 1)[-1]
    print("the probe's environment:", environ.split())
    assert SECRET not in seen[-1] and "ANTHROPIC_API_KEY" not in seen[-1]
    assert {line.split("=", 1)[0] for line in environ.split()} <= {"PATH", "PWD"}  # PWD: bubblewrap's


# Records, for each module, whether the process was still dumpable when it was first imported; then starts Hermit
# the way argv[1] says (the console script, `python -m hermit`, `python -m hermit.cli.main`, or a script that
# only imports the module).
IMPORT_SPY = r'''
import ctypes, json, runpy, sys
libc = ctypes.CDLL(None)
first = {}
class Spy:
    def find_spec(self, name, path=None, target=None):
        first.setdefault(name, libc.prctl(3, 0, 0, 0, 0))  # PR_GET_DUMPABLE
        return None
sys.meta_path.insert(0, Spy())
how = sys.argv[1]
sys.argv = ["/opt/venv/bin/hermit" if how == "console" else "script.py", "--version"]
try:
    if how == "console":  # what pip's `hermit` script does
        from hermit.cli.main import main
        main()
    elif how == "script":
        import hermit.cli.main
    else:
        runpy.run_module(how, run_name="__main__", alter_sys=True)
except SystemExit:
    pass
print(json.dumps({"first": first, "now": libc.prctl(3, 0, 0, 0, 0)}))
'''


@pytest.mark.parametrize("how", ["console", "hermit", "hermit.cli.main"])
def test_the_hermit_process_is_non_dumpable_before_its_imports(how: str) -> None:
    """keep_environment_private() ran only once the command had parsed its arguments and loaded its modules:
    /proc/<pid>/environ (the keys) stayed readable to the uid's other processes for 100-200 ms of every start.
    Now the entry module does it before its own imports: every Hermit module but the two package markers and
    the entry module itself, and argparse, json and logging, are imported after it."""
    need(sys.platform.startswith("linux"), "Linux (PR_SET_DUMPABLE)")
    done = subprocess.run([sys.executable, "-c", IMPORT_SPY, how], capture_output=True, text=True,
                          timeout=PROC_TIMEOUT, env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    first = out["first"]
    early = sorted(name for name, dumpable in first.items() if dumpable and name.startswith("hermit"))
    print(how, "imported while dumpable:", early)
    assert out["now"] == 0
    assert set(early) <= {"hermit", "hermit.cli", "hermit.cli.main", "hermit.__main__"}
    assert all(first[m] == 0 for m in ("argparse", "logging", "hermit.cli.commands", "hermit.errors") if m in first)
    assert "hermit.cli.commands" in first


def test_importing_the_cli_module_leaves_other_processes_dumpable() -> None:
    """Only the `hermit` process itself: a script or a test that imports hermit.cli.main keeps its own flag."""
    done = subprocess.run([sys.executable, "-c", IMPORT_SPY, "script"], capture_output=True, text=True,
                          timeout=PROC_TIMEOUT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["now"] == 1


def test_the_documented_entry_points_exist() -> None:
    """The entry points the spy above plays: pip's `hermit` script calls hermit.cli.main:main."""
    text = (Path(__file__).parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    assert 'hermit = "hermit.cli.main:main"' in text


NOTE = "note-text-7c2e91 divorce lawyer Tuesday"
RUNNING = "4.0417"  # sleep's argument, which `ps` shows as any program's: how the test knows the command runs
COMMAND = f": '{NOTE}'\nsleep {RUNNING}; env; printf 'quoted: %s|\\n' \"a  b\" 'c'"


def _exec_in(mode: str, tmp_path: Path) -> str:
    from hermit.tools import ExecTool, PathResolver
    from hermit.tools.os_sandbox import OsSandbox

    if mode.startswith("room"):
        from test_sandbox_quotas import as_owner

        return as_owner(tmp_path, 65534 if mode == "room as 65534" else None, COMMAND)
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    sandbox = OsSandbox(need_sandbox(), ws) if mode == "bind" else None
    return ExecTool(PathResolver(ws, sandbox is not None), env={"PATH": "/usr/bin:/bin"},
                    sandbox=sandbox).exec(COMMAND, timeout=60).text


def _command_lines() -> list[bytes]:
    lines = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                lines.append(Path(f"/proc/{pid}/cmdline").read_bytes())
            except OSError:
                continue
    return lines


@pytest.mark.parametrize("mode", ["main", "bind", "room", *(["room as 65534"] if os.geteuid() == 0 else [])])
def test_a_commands_text_is_in_no_command_line(tmp_path: Path, mode: str) -> None:
    """The command was an argument of bubblewrap, of the wrapper's `sh -c` and of the main session's shell, and
    every local user reads arguments (`ps`, /proc/<pid>/cmdline): a command holding a note's text showed it
    to all of them while it ran. Now the shell takes it from its environment (owner-only), and unsets it before
    the command runs: no process on the machine has it in its command line, and the command's own environment
    is what it was."""
    import threading
    import time

    done: dict[str, str] = {}
    worker = threading.Thread(target=lambda: done.update(text=_exec_in(mode, tmp_path)), daemon=True)
    worker.start()
    running, leaks = 0, []
    ends = time.monotonic() + PROC_TIMEOUT
    while worker.is_alive() and time.monotonic() < ends:
        lines = _command_lines()
        running += any(line == f"sleep\0{RUNNING}\0".encode() for line in lines)
        leaks += [line[:200] for line in lines if NOTE.encode() in line]
        time.sleep(0.02)
    worker.join(timeout=1)
    text = done.get("text", "")
    print(f"{mode}: {running} looks while the command ran; {text.splitlines()[:1]}")
    assert running and not leaks, leaks
    assert "quoted: a  b|\nquoted: c|" in text and "HERMIT_" not in text, text
