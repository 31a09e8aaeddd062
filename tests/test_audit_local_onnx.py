"""onnxruntime (the local embedding model and the int8 vector pass) is loaded with its telemetry off.

onnxruntime 1.32's Linux wheel starts Microsoft's 1DS telemetry when it is imported: it writes a device id and
an event queue (the process's executable path, the OS, the CPU, the memory) under
`$HOME/.cache/Microsoft/DeveloperTools/.onnxruntime/`, following links, and looks up
mobile.events.data.microsoft.com to send them. A local-first assistant sends nothing anywhere unasked, and a
root-run Hermit must not create files in whatever folder HOME names. Each way Hermit loads onnxruntime runs
here in a process of its own, with HOME a fresh folder that must stay empty.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from prochelpers import PROC_TIMEOUT


def _run(home: Path, state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORT_")}
    env.update(HOME=str(home), HERMIT_HOME=str(state), OMP_WAIT_POLICY="PASSIVE")
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], env=env, text=True, capture_output=True,
                          timeout=PROC_TIMEOUT, stdin=subprocess.DEVNULL)


def _left_in(home: Path) -> list[str]:
    return sorted(str(p.relative_to(home)) for p in home.rglob("*"))


@pytest.mark.parametrize("model", ["multilingual-e5-small", "all-MiniLM-L6-v2"])
def test_the_local_model_and_the_vector_pass_leave_nothing_in_home_and_send_no_telemetry(tmp_path: Path,
                                                                                         model: str) -> None:
    home, state = tmp_path / "home", tmp_path / "state"
    home.mkdir(mode=0o700)
    assert _run(home, state, "init").returncode == 0
    cfg = state / "hermit.yaml"
    cfg.write_text(cfg.read_text().replace("provider: local ", f"provider: local\n      model: {model} ", 1))
    # Past the size at which the e5 embedder loads onnxruntime rather than embedding in numpy.
    lines = "".join(f"- note {i}: the boat trip to island {i} is on day {i % 28 + 1}\n" for i in range(600))
    (state / "workspace" / "memory" / "2026-11-20.md").write_text("# 2026-11-20\n\n" + lines)
    r = _run(home, state, "memory", "index")
    assert r.returncode == 0, r.stderr
    r = _run(home, state, "memory", "search", "boat trip to island 7")
    assert r.returncode == 0, r.stderr
    assert "island 7" in r.stdout
    assert _left_in(home) == []
