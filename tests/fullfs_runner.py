"""Run one command with a copy of a directory on a small full filesystem: `fullfs_runner.py SRC MOUNT SIZE -- CMD…`.

Run it under `unshare -m` (root) or `unshare -rm` (any user): it mounts a `SIZE` tmpfs on MOUNT in its own
mount namespace (gone when the process ends, so nothing is left mounted even if a test dies), copies SRC
into it, fills the rest with a file until the kernel says ENOSPC, runs CMD with the filesystem full, then
prints one JSON line: the command's return code, stdout, stderr, and every file left on the filesystem.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path


def fill(path: Path) -> None:
    """Write until ENOSPC, in big blocks then single bytes, so not one byte is left free."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for block in (b"\0" * 65536, b"\0" * 512, b"\0"):
            while True:
                try:
                    os.write(fd, block)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)


def main() -> None:
    src, mount, size = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    cmd = sys.argv[sys.argv.index("--") + 1:]
    mount.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], check=True)
    shutil.copytree(src, mount, dirs_exist_ok=True, symlinks=True)
    filler = mount / ".filler"
    fill(filler)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    files = sorted(str(p.relative_to(mount)) for p in mount.rglob("*") if p.is_file() and p != filler)
    print(json.dumps({"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr, "files": files}))


if __name__ == "__main__":
    main()
