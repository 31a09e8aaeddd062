"""`hermit backup` of a workspace holding hard links (a `git clone` there makes them) restores: every name
of a file is stored as a plain file, never as a hard-link member that `hermit restore` refuses. Real CLI
subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

from prochelpers import PROC_TIMEOUT


def hermit(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(HERMIT_HOME=str(home), OMP_WAIT_POLICY="PASSIVE")
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=PROC_TIMEOUT, input=stdin)


def test_a_hard_linked_file_is_backed_up_as_files_and_restores(tmp_path: Path) -> None:
    home = tmp_path / "old"
    r = hermit(home, "setup", "--provider", "openai-compatible", "--base-url", "http://127.0.0.1:9/v1",
               "--model", "m", "--api-key-stdin", "--no-check", stdin="sk-hardlink-key\n")
    assert r.returncode == 0, r.stderr
    repo = home / "workspace" / "project" / ".git" / "objects" / "pack"
    repo.mkdir(parents=True)
    (repo / "pack-1.pack").write_bytes(b"PACK contents\n")
    os.link(repo / "pack-1.pack", home / "workspace" / "project" / "second-name.pack")
    os.link(repo / "pack-1.pack", home / "workspace" / "third-name.pack")

    archive = tmp_path / "out.tar.gz"
    r = hermit(home, "backup", str(archive))
    assert r.returncode == 0, r.stderr
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
    names = [n for n in members if n.endswith(".pack")]
    print("members:", sorted((n, members[n].type, members[n].size) for n in names))
    assert len(names) == 3 and all(members[n].isfile() and members[n].size == 14 for n in names)

    new = tmp_path / "new"
    r = hermit(new, "restore", str(archive))
    print("restore:", r.returncode, r.stderr.strip()[-300:])
    assert r.returncode == 0, r.stderr
    for p in ("project/.git/objects/pack/pack-1.pack", "project/second-name.pack", "third-name.pack"):
        assert (new / "workspace" / p).read_bytes() == b"PACK contents\n"
