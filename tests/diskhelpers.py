"""Run the `hermit` CLI on a real, small, full filesystem (a tmpfs in a private mount namespace)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

RUNNER = Path(__file__).with_name("fullfs_runner.py")


@dataclass(frozen=True)
class FullDiskRun:
    rc: int
    stdout: str
    stderr: str
    files: list[str]  # what is left on the filesystem (the filler aside), relative to the home


def unshare_prefix() -> list[str]:
    """As root a mount namespace is enough; any other user maps itself to root in a user namespace first."""
    return ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-r", "-m"]


def hermit_on_full_disk(src_home: Path, mount: Path, *args: str, env: dict[str, str] | None = None,
                        timeout: float = 300) -> FullDiskRun:
    """`hermit ARGS` with HERMIT_HOME a copy of `src_home` on a tmpfs at `mount` (room for the copy and a
    few MiB more), filled to the last byte."""
    used = sum(p.stat().st_size for p in src_home.rglob("*") if p.is_file())
    size = f"{used // 1024 + 8192}k"
    full_env = {**os.environ, **(env or {}), "HERMIT_HOME": str(mount), "OMP_WAIT_POLICY": "PASSIVE"}
    cmd = [*unshare_prefix(), sys.executable, str(RUNNER), str(src_home), str(mount), size, "--",
           sys.executable, "-m", "hermit.cli.main", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0 and r.stdout.strip(), f"the full-disk runner failed: {r.stderr}"
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return FullDiskRun(out["rc"], out["stdout"], out["stderr"], out["files"])
