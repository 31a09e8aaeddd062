"""The quick start scripts and the README: the demo installs only the runtime; the README stands alone."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _fake_repo(tmp_path: Path) -> tuple[Path, Path]:
    """scripts/setup and pyproject.toml beside a .venv whose python only records how it was called."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "setup", repo / "scripts" / "setup")
    shutil.copy2(ROOT / "pyproject.toml", repo / "pyproject.toml")
    log = tmp_path / "calls.log"
    py = repo / ".venv" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    py.chmod(0o755)
    return repo, log


def _setup(repo: Path, log: Path, *args: str) -> list[str]:
    log.unlink(missing_ok=True)
    subprocess.run([str(repo / "scripts" / "setup"), *args], check=True, capture_output=True, timeout=60)
    return [ln for ln in log.read_text().splitlines() if "install" in ln] if log.exists() else []


def test_setup_runtime_mode_and_stamps(tmp_path: Path) -> None:
    repo, log = _fake_repo(tmp_path)
    assert _setup(repo, log, "--runtime")[-1] == "-m pip install --quiet -e ."
    assert _setup(repo, log, "--runtime") == []  # up to date
    assert _setup(repo, log)[-1] == "-m pip install --quiet -e .[dev,minilm,mcp,channels]"  # the full install adds extras
    assert _setup(repo, log, "--runtime") == [] and _setup(repo, log) == []  # full satisfies runtime
    stamp = repo / ".venv" / ".hermit-installed"
    stamp.write_text(stamp.read_text().split()[0] + "\n")  # a stamp from before modes = a full install
    assert _setup(repo, log) == [] and _setup(repo, log, "--runtime") == []
    r = subprocess.run([str(repo / "scripts" / "setup"), "--bogus"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "usage" in r.stderr


def test_demo_installs_only_the_runtime_and_is_the_first_quick_start_command() -> None:
    demo = (ROOT / "scripts" / "demo").read_text()
    setup_calls = re.findall(r"^\./scripts/setup.*$", demo, re.M)
    assert setup_calls and all("--runtime" in c for c in setup_calls)
    readme = (ROOT / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    first_command = next(ln for ln in quick.splitlines() if ln.startswith("./") or ln.startswith("git "))
    assert first_command.startswith(("./scripts/demo", "git clone"))


def test_readme_stands_alone() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "../shared" not in readme and "shared/SPEC" not in readme and "shared/ARCHITECTURE" not in readme
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):  # every relative link resolves in the repo
        if not re.match(r"[a-z]+://", target):
            assert (ROOT / target).exists(), f"README links to {target}, which is not in the repository"
    assert os.path.exists(ROOT / "scripts" / "demo")
