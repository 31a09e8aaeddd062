"""The OS sandbox exec runs in for non-main sessions: bubblewrap on Linux, sandbox-exec on macOS, else none.

A command line check cannot confine a shell (`bash -c '…'`, `python3 -c open(…)`, globs all compute
paths at run time), so a session that is not the owner's runs exec inside an operating-system jail:

- Linux, bubblewrap (`bwrap`): new user, pid, network, ipc and uts namespaces (`--unshare-all`: no
  network at all, not even the host's loopback); a read-only root with only the system program dirs
  (/usr and the /bin, /lib* links or dirs) and a handful of /etc files programs need (not
  /etc/passwd); a private /tmp, /proc and /dev; the workspace bound read-write at its own path,
  except `memory/` and the bootstrap files (AGENTS.md, SOUL.md …), which are read-only, and
  MEMORY.md (when hidden), over which an empty read-only file is bound. The state dir, $HOME and
  everything else do not exist inside. `--die-with-parent` and a new session; the environment is
  PATH, HOME (the workspace), LANG and TERM only.
- macOS, `sandbox-exec` with a generated profile to the same effect (deny by default, read the
  system, read/write the workspace except memory/ and the bootstrap files, MEMORY.md denied, network
  denied). This path cannot be tested on the Linux CI; the README says so.
- Limits for both, set in the child before it execs the jail (setrlimit): CPU seconds, address
  space, size of any file written. The caller (exec.py) also kills the process group on timeout and
  caps the output it keeps.

Where neither is usable, `detect()` says why and the runtime does not offer exec to non-main
sessions at all; `hermit doctor` reports it (cli/sandbox_check.py).
"""

from __future__ import annotations

import atexit
import functools
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hermit.errors import ToolError
from hermit.memory.privacy import is_hard_linked
from hermit.tools.sandbox import is_within
from hermit.workspace import BOOTSTRAP_ORDER, MEMORY_FILE

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
# Only what ordinary programs need from /etc: the dynamic linker's cache, the alternatives links
# (awk, editors), time zone and locale data. Not passwd/group/hosts/ssl: nothing to learn there.
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "timezone",
             "locale.alias", "mime.types")
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
PROBE_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class SandboxLimits:
    cpu_seconds: int = 120
    memory_mb: int = 1024
    max_file_mb: int = 64


@dataclass(frozen=True)
class Backend:
    """A usable sandbox program, or why there is none (`name` None)."""

    name: str | None  # "bwrap" | "sandbox-exec" | None
    program: str | None
    detail: str

    @property
    def available(self) -> bool:
        return self.name is not None


def _bwrap_system_args() -> list[str]:
    """Read-only system dirs; on merged-/usr systems /bin, /lib … are symlinks and stay symlinks."""
    args: list[str] = []
    for d in SYSTEM_DIRS:
        p = Path(d)
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), d]
        elif p.is_dir():
            args += ["--ro-bind", d, d]
    for name in ETC_FILES:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return args


def _probe(argv: Sequence[str]) -> str | None:
    """None when the program ran and exited 0, else what went wrong."""
    try:
        done = subprocess.run(list(argv), stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=PROBE_TIMEOUT_SECONDS, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return str(e)
    if done.returncode != 0:
        return (done.stderr.decode("utf-8", "replace").strip() or f"exit code {done.returncode}")[:300]
    return None


@functools.lru_cache(maxsize=4)
def detect(platform: str = sys.platform) -> Backend:
    """The sandbox this machine offers; probed once per process by running `true` inside it."""
    if platform.startswith("linux"):
        program = shutil.which("bwrap")
        if program is None:
            return Backend(None, None, "bubblewrap (bwrap) is not installed")
        problem = _probe([program, "--unshare-all", "--die-with-parent", *_bwrap_system_args(),
                          "--proc", "/proc", "--dev", "/dev", "--", "/usr/bin/env", "true"])
        if problem is not None:
            return Backend(None, program, f"bubblewrap cannot create a sandbox here: {problem} "
                                          "(unprivileged user namespaces may be disabled)")
        return Backend("bwrap", program, f"bubblewrap at {program}")
    if platform == "darwin":
        program = "/usr/bin/sandbox-exec"
        if not Path(program).exists():
            return Backend(None, None, "sandbox-exec is not available")
        problem = _probe([program, "-p", "(version 1)(allow default)", "/usr/bin/true"])
        if problem is not None:
            return Backend(None, program, f"sandbox-exec does not work here: {problem}")
        return Backend("sandbox-exec", program, f"sandbox-exec at {program}")
    return Backend(None, None, f"no OS sandbox is supported on {platform}")


@dataclass(frozen=True)
class OsSandbox:
    """How to run one command confined to `workspace`; `hide_memory` hides MEMORY.md inside."""

    backend: Backend
    workspace: Path
    hide_memory: bool = True
    limits: SandboxLimits = SandboxLimits()
    scratch: Path | None = None  # a private dir for the empty stand-in of MEMORY.md (default: a temp file)

    @property
    def root(self) -> Path:
        return self.workspace.resolve()

    def environment(self, source: Mapping[str, str]) -> dict[str, str]:
        return {"PATH": SANDBOX_PATH, "HOME": str(self.root), "LANG": source.get("LANG") or "C.UTF-8",
                "TERM": source.get("TERM") or "dumb"}

    def check_ready(self) -> None:
        """Refuse to run when a hard link could show MEMORY.md under another name inside the sandbox."""
        memory = self.root / MEMORY_FILE
        if self.hide_memory and is_hard_linked(memory):
            raise ToolError("exec is refused in this session: MEMORY.md has another name (a hard link) in the "
                            "workspace, which the sandbox could not hide",
                            "the owner should remove the extra link (find the workspace -samefile MEMORY.md)")

    def _protected(self) -> list[Path]:
        """Workspace entries the sandboxed command may read but not change."""
        root = self.root
        out = [root / "memory"] + [root / name for name in BOOTSTRAP_ORDER]
        if not self.hide_memory:
            out.append(root / MEMORY_FILE)
        # A symlinked memory/ (into the workspace) is protected where it really is; a link leading out of
        # the workspace points at nothing inside the sandbox.
        real = [p.resolve() if p.is_symlink() else p for p in out]
        return sorted({p for p in real if p.exists() and is_within(p, root)})

    def absent_protected(self) -> list[Path]:
        """Instruction files that do not exist yet: a bind needs an existing file, so these are checked after."""
        return [self.root / name for name in BOOTSTRAP_ORDER if not os.path.lexists(self.root / name)]

    def remove_created(self, absent: Sequence[Path]) -> list[str]:
        """Remove instruction files the sandboxed command created (it has exited, with everything it started:
        its pid namespace died with it), so a group cannot plant an AGENTS.md or BOOTSTRAP.md for the owner."""
        removed = []
        for p in absent:
            if not os.path.lexists(p):
                continue
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            removed.append(p.name)
        return removed

    def _ensure_mount_points(self) -> None:
        # The stand-in must cover the name even when MEMORY.md does not exist yet, or the command
        # could create the owner's long-term memory; an empty file is what `hermit init` would make.
        root = self.root
        (root / "memory").mkdir(exist_ok=True)
        memory = root / MEMORY_FILE
        if self.hide_memory and not os.path.lexists(memory):
            fd = os.open(memory, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.close(fd)

    def _blank(self) -> Path:
        if self.scratch is None:
            return _process_blank()
        blank = self.scratch / ".sandbox-blank"
        if not blank.is_file() or blank.stat().st_size != 0:
            self.scratch.mkdir(parents=True, exist_ok=True)
            tmp = self.scratch / f".sandbox-blank.{os.getpid()}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o400)
            os.close(fd)
            os.replace(tmp, blank)
        return blank

    def wrap(self, argv: Sequence[str], cwd: Path) -> list[str]:
        """The command line that runs `argv` in `cwd` (inside the workspace) inside the sandbox."""
        self.check_ready()
        self._ensure_mount_points()
        if self.backend.name == "bwrap":
            return self._bwrap(argv, cwd)
        if self.backend.name == "sandbox-exec":
            return [str(self.backend.program), "-p", self.macos_profile(), *argv]
        raise ToolError(f"no OS sandbox: {self.backend.detail}", "install bubblewrap")

    def _bwrap(self, argv: Sequence[str], cwd: Path) -> list[str]:
        root = str(self.root)
        args = [str(self.backend.program), "--unshare-all", "--die-with-parent", "--new-session",
                *_bwrap_system_args(), "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
                "--bind", root, root]
        for p in self._protected():
            args += ["--ro-bind", str(p), str(p)]
        if self.hide_memory:
            args += ["--ro-bind", str(self._blank()), str(self.root / MEMORY_FILE)]
        args += ["--remount-ro", "/", "--chdir", str(cwd), "--", *argv]
        return args

    def macos_profile(self) -> str:
        """A Seatbelt profile: deny by default; the last matching rule wins, so denials come last."""
        root = _sb_quote(str(self.root))
        read_only = " ".join(f'(subpath "{_sb_quote(str(p))}")' if p.is_dir() else f'(literal "{_sb_quote(str(p))}")'
                             for p in self._protected())
        rules = [
            "(version 1)",
            "(deny default)",
            "(allow process-exec process-fork signal sysctl-read mach-lookup ipc-posix-shm)",
            '(allow file-read* (literal "/") (subpath "/usr") (subpath "/bin") (subpath "/sbin") '
            '(subpath "/System") (subpath "/Library") (subpath "/private/var/db/dyld") '
            '(subpath "/opt/homebrew") (subpath "/dev") (literal "/private/etc/localtime"))',
            '(allow file-write* (literal "/dev/null") (literal "/dev/tty"))',
            f'(allow file-read* file-write* (subpath "{root}"))',
        ]
        if read_only:
            rules.append(f"(deny file-write* {read_only})")
        if self.hide_memory:
            rules.append(f'(deny file-read* file-write* (literal "{root}/{MEMORY_FILE}"))')
        rules.append("(deny network*)")
        return "\n".join(rules)

    def preexec(self) -> Callable[[], None]:
        """Limits applied in the child before it execs the sandbox (inherited by everything inside)."""
        cpu = max(1, int(self.limits.cpu_seconds))
        memory = self.limits.memory_mb * 1024 * 1024
        fsize = self.limits.max_file_mb * 1024 * 1024

        def apply() -> None:
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
            if sys.platform.startswith("linux"):  # macOS does not enforce RLIMIT_AS
                resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

        return apply


@functools.lru_cache(maxsize=1)
def _process_blank() -> Path:
    """An empty read-only file of this process (a private temp name), removed at exit."""
    fd, name = tempfile.mkstemp(prefix="hermit-blank-")
    os.close(fd)
    os.chmod(name, 0o400)
    atexit.register(lambda: Path(name).unlink(missing_ok=True))
    return Path(name)


def _sb_quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')
