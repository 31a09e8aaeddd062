"""The quick start scripts and the README: the demo installs only the runtime; the README stands alone."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from prochelpers import PROC_TIMEOUT

ROOT = Path(__file__).resolve().parents[1]


def _fake_repo(tmp_path: Path) -> tuple[Path, Path]:
    """scripts/setup and pyproject.toml beside a .venv whose python only records how it was called."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "setup", repo / "scripts" / "setup")
    shutil.copy2(ROOT / "pyproject.toml", repo / "pyproject.toml")
    shutil.copy2(ROOT / "requirements.lock", repo / "requirements.lock")
    log = tmp_path / "calls.log"
    py = repo / ".venv" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    py.chmod(0o755)
    return repo, log


def _setup(repo: Path, log: Path, *args: str) -> list[str]:
    log.unlink(missing_ok=True)
    subprocess.run([str(repo / "scripts" / "setup"), *args], check=True, capture_output=True, timeout=PROC_TIMEOUT)
    return [ln for ln in log.read_text().splitlines() if "install" in ln] if log.exists() else []


def test_setup_runtime_mode_and_stamps(tmp_path: Path) -> None:
    repo, log = _fake_repo(tmp_path)
    assert _setup(repo, log, "--runtime")[-1] == "-m pip install --quiet -e . -c requirements.lock"
    assert _setup(repo, log, "--runtime") == []  # up to date
    full = re.search(r"^spec='([^']+)'", (ROOT / "scripts" / "setup").read_text(), re.M)
    assert full and full.group(1).startswith(".[minilm")
    # the full install adds the extras and the dev group, every version from the lock file
    assert _setup(repo, log)[-1] == f"-m pip install --quiet -e {full.group(1)} --group dev -c requirements.lock"
    assert _setup(repo, log, "--runtime") == [] and _setup(repo, log) == []  # full satisfies runtime
    stamp = repo / ".venv" / ".hermit-installed"
    stamp.write_text(stamp.read_text().split()[0] + "\n")  # a stamp from before modes = a full install
    assert _setup(repo, log) == [] and _setup(repo, log, "--runtime") == []
    with (repo / "requirements.lock").open("a") as f:
        f.write("# a new lock\n")
    assert _setup(repo, log)  # a changed lock file reinstalls
    r = subprocess.run([str(repo / "scripts" / "setup"), "--bogus"], capture_output=True, text=True, timeout=PROC_TIMEOUT)
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


def test_setup_link_puts_hermit_on_the_path_and_never_replaces_a_file(tmp_path: Path) -> None:
    repo, log = _fake_repo(tmp_path)
    bin_dir = tmp_path / "bin"
    env = {**os.environ, "XDG_BIN_HOME": str(bin_dir), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([str(repo / "scripts" / "setup"), "--runtime", "--link"], capture_output=True, text=True,
                       timeout=PROC_TIMEOUT, env=env)
    assert r.returncode == 0, r.stderr
    link = bin_dir / "hermit"
    assert link.is_symlink() and os.readlink(link) == str(repo / ".venv" / "bin" / "hermit")
    assert f"{bin_dir} is not on your PATH yet" in r.stderr
    # Again, with the directory on PATH: nothing to install, the link is kept, no PATH note.
    again = subprocess.run([str(repo / "scripts" / "setup"), "--runtime", "--link"], capture_output=True,
                           text=True, timeout=PROC_TIMEOUT, env={**env, "PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert again.returncode == 0 and "not on your PATH" not in again.stderr and link.is_symlink()
    link.unlink()
    link.write_text("someone else's hermit\n")
    refused = subprocess.run([str(repo / "scripts" / "setup"), "--runtime", "--link"], capture_output=True,
                             text=True, timeout=PROC_TIMEOUT, env=env)
    assert refused.returncode == 1 and "left alone" in refused.stderr
    assert link.read_text() == "someone else's hermit\n"
