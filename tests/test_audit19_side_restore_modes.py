"""Audit 19, side doors (a guard: this held): an archive of one's own whose members carry setuid, setgid and sticky
bits and group/other write bits (0o7777 folders, 0o6777 files, the owner uid/gid of another user) restores nothing
with any of them — under the state dir files are 0600 (0700 when executable) and folders 0700, in an external
workspace (`--external`) modes are capped at 0755/0644 under its top folder, made 0700 — and every file belongs to the user restoring it. uid 65534
reads none of the state dir's files. The real CLI, as a process."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

from prochelpers import PROC_TIMEOUT
from test_audit19_side_doors import readable_by_other

TOP = "hermit-backup"


def member(tar: tarfile.TarFile, name: str, mode: int, data: bytes | None = None) -> None:
    info = tarfile.TarInfo(f"{TOP}/{name}")
    info.mode, info.uid, info.gid = mode, 65534, 65534
    if data is None:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def test_restored_modes_carry_no_special_or_group_bits(tmp_path: Path) -> None:
    ext = tmp_path / "ext" / "notes"
    config = json.dumps({"agents": {"list": [{"id": "main", "default": True, "workspace": str(ext)}]}}).encode()
    archive = tmp_path / "modes.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        manifest = json.dumps({"format": 1, "external": {"main": {"workspace": "/old/notes"}},
                               "workspaces": ["external/main/workspace"]}).encode()
        member(tar, "manifest.json", 0o600, manifest)
        member(tar, "home", 0o7777)
        member(tar, "home/hermit.yaml", 0o6777, config)
        member(tar, "home/hermit.env", 0o6666, b"OPENAI_API_KEY=sk-x\n")
        member(tar, "home/agents", 0o7777)
        member(tar, "home/agents/tool.sh", 0o6777, b"#!/bin/sh\n")
        member(tar, "external/main/workspace", 0o7777)
        member(tar, "external/main/workspace/MEMORY.md", 0o6777, b"# Memory\n")
        member(tar, "external/main/workspace/memory", 0o7777)
        member(tar, "external/main/workspace/memory/run.sh", 0o6775, b"#!/bin/sh\n")
    os.chmod(archive, 0o600)
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(HERMIT_HOME=str(home), OMP_WAIT_POLICY="PASSIVE")
    r = subprocess.run([sys.executable, "-m", "hermit.cli.main", "restore", "--external", str(archive)],
                       capture_output=True, text=True, env=env, timeout=PROC_TIMEOUT, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout + r.stderr
    got = {str(p.relative_to(tmp_path)): stat.S_IMODE(p.lstat().st_mode) for p in [*home.rglob("*"), ext,
                                                                                   *ext.rglob("*")]}
    assert got == {"home/hermit.yaml": 0o700, "home/hermit.env": 0o600, "home/agents": 0o700,
                   "home/agents/tool.sh": 0o700, "ext/notes": 0o700, "ext/notes/MEMORY.md": 0o755,
                   "ext/notes/memory": 0o755, "ext/notes/memory/run.sh": 0o755}, got
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert {p.lstat().st_uid for p in [home, *home.rglob("*"), ext, *ext.rglob("*")]} == {os.geteuid()}
    assert readable_by_other(home) == []
