"""The OS sandbox: which one this machine offers (probed, with proof of what it holds), and the bind-mode jail.

A command line check cannot confine a shell (`bash -c '…'`, `python3 -c open(…)`, globs all compute
paths at run time), so sessions that are sandboxed run exec inside an operating-system jail:

- Linux, bubblewrap (`bwrap`). A non-owner session (group, contact, cron) runs in room mode
  (room_sandbox.py): an unprivileged uid (as root: one no account uses, `unused_uid`), no capabilities,
  a size-limited copy of its room. The owner's
  own main session, when `sandbox.mode: all` confines it too, runs in bind mode (`OsSandbox` here): the
  workspace bound read-write at its path except memory/ and the instruction files (read-only), with
  every capability dropped (`--cap-drop ALL`, needed when Hermit runs as root: bubblewrap keeps root's
  capabilities inside its user namespace otherwise).
- macOS, `sandbox-exec` with a generated profile (deny by default, read the system, read/write only the
  confined folder except its protected entries, network denied). A non-owner session's folder is its
  room. This path cannot be tested on the Linux CI; docs/security.md says so.
- Limits, set in the child before it execs the jail (setrlimit): CPU seconds, address space, size of any
  file written, and (room mode) the number of tasks. The caller (exec.py) kills the process group on
  timeout and caps the output it keeps.

`detect()` probes the machine by running the room-mode sandbox once and reading, inside it, the uid,
the effective capabilities and whether `umount`/`mount -o remount` are refused; `hermit doctor` shows
that proof (cli/sandbox_check.py). Where no sandbox is usable, non-owner sessions get no exec at all.
"""

from __future__ import annotations

import functools
import grp
import os
import pwd
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hermit.errors import ToolError
from hermit.tools.bind_guard import LinkGuard
from hermit.tools.sandbox import is_within
from hermit.tools.seccomp import filter_fd, filter_program

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
# How exec hands a command to the shell: in an environment variable the shell takes it out of before running it,
# never as an argument. Every local user reads any process's arguments (`ps`, /proc/<pid>/cmdline), and a
# command often holds the text of a note; /proc/<pid>/environ is its owner's alone (and root's).
COMMAND_VARIABLE = "HERMIT_COMMAND"
RUN_COMMAND = f'eval "unset {COMMAND_VARIABLE}; ${COMMAND_VARIABLE}"'  # sh -c RUN_COMMAND
# Only what ordinary programs need from /etc: the dynamic linker's cache, the alternatives links
# (awk, editors), time zone and locale data. Not passwd/group/hosts/ssl: nothing to learn there.
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "timezone",
             "locale.alias", "mime.types")
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
PROBE_TIMEOUT_SECONDS = 10.0
# bubblewrap is there but may not make the user namespace every sandbox starts with. Hermit as root runs it as
# an unprivileged uid too, so that does not help.
USERNS_FIX = ("bubblewrap is installed, but this user may not create user namespaces: allow them — "
              "`sysctl -w user.max_user_namespaces=15000` where it is 0; `sysctl -w kernel.unprivileged_userns_clone=1` "
              "(Debian and older Ubuntu kernels); on Ubuntu 23.10 and later `sysctl -w "
              "kernel.apparmor_restrict_unprivileged_userns=0` or an AppArmor profile that allows `userns` for bwrap; "
              "in a container, a seccomp profile that allows unshare (Docker's default refuses it); "
              "put the setting in /etc/sysctl.d/ to keep it")
USERNS_WORDS = ("namespace", "uid map", "uid_map", "unshare")  # in bubblewrap's message when that is the cause
PROBE_ENVIRONMENT = {"PATH": SANDBOX_PATH}  # all a probe gets of Hermit's environment (_probe)
# When Hermit runs as root, sandboxed commands run as a uid (and gid) no account or group uses: a host
# process of that uid could otherwise read or change a room through /proc/<pid>/root (65534, `nobody`, is
# what many daemons run as). Above the ranges systemd gives users, dynamic users and containers
# (systemd's UIDS-GIDS.md: up to 1879048191), below 2^31 (some tools read uids as signed).
DEFAULT_SANDBOX_UID = 2_000_000_000
UID_SEARCH = 256  # how many uids from DEFAULT_SANDBOX_UID up are tried for one no account uses
# What the probe runs inside the sandbox: who it is, what it may do, and whether mounts can be undone.
PROBE_SCRIPT = ("id -u; grep '^CapEff' /proc/self/status; "
                "umount /usr >/dev/null 2>&1 && echo umount-allowed; "
                "mount -o remount,rw /usr >/dev/null 2>&1 && echo remount-allowed; "
                "command -v tar >/dev/null && command -v timeout >/dev/null && echo tools-ok; "
                "grep '^Seccomp:' /proc/self/status; if cat /proc/keys >/dev/null 2>&1; then echo keys-visible; fi; "
                "(: > /hermit-probe) 2>/dev/null && echo root-writable; (: > /dev/hermit-probe) 2>/dev/null && echo dev-writable; true")


@dataclass(frozen=True)
class SandboxLimits:
    cpu_seconds: int = 120
    memory_mb: int = 1024
    max_file_mb: int = 64
    max_processes: int = 128  # tasks a sandboxed command may add (room mode)
    tmp_mb: int = 64  # its /tmp (a tmpfs)


@dataclass(frozen=True)
class Backend:
    """A usable sandbox program, or why there is none (`name` None), and what the probe saw inside."""

    name: str | None  # "bwrap" | "sandbox-exec" | None
    program: str | None
    detail: str
    uid_inside: int | None = None
    cap_eff: str | None = None  # /proc/self/status CapEff inside ("0000000000000000" = none)
    run_as: int | None = None  # the uid commands run as on the host (None: Hermit's own)
    proof: tuple[str, ...] = field(default=())
    fix: str = ""  # what to do about it, when not available ("": install bubblewrap, cli/sandbox_check.FIX)

    @property
    def available(self) -> bool:
        return self.name is not None


def bwrap_system_args() -> list[str]:
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


def account_uses(uid: int) -> bool:
    """Whether a user or group account has the id `uid` (passwd/group through NSS)."""
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        pass
    try:
        grp.getgrgid(uid)
        return True
    except KeyError:
        return False


@functools.lru_cache(maxsize=8)
def unused_uid(configured: int) -> int:
    """The uid commands run as when Hermit is root: `configured` (`sandbox.uid`) unless an account uses it
    (65534 is `nobody` everywhere), else the first of DEFAULT_SANDBOX_UID and up that none uses."""
    if configured != 0 and not account_uses(configured):
        return configured
    for uid in range(DEFAULT_SANDBOX_UID, DEFAULT_SANDBOX_UID + UID_SEARCH):
        if not account_uses(uid):
            return uid
    raise ToolError(f"no free uid for the sandbox: accounts use {DEFAULT_SANDBOX_UID}..."
                    f"{DEFAULT_SANDBOX_UID + UID_SEARCH - 1}", "set sandbox.uid to a uid no account uses")


def host_uid(configured: int) -> int | None:
    """The uid a sandboxed command runs as on the host: one no account uses when Hermit is root
    (`unused_uid`), else Hermit's own (None: in a user namespace the host sees Hermit's uid anyway)."""
    return unused_uid(configured) if os.geteuid() == 0 else None


def run_as_kwargs(uid: int | None) -> dict[str, object]:
    """subprocess arguments that start the child as `uid` (its own group, no supplementary groups)."""
    if uid is None:
        return {}
    return {"user": uid, "group": uid, "extra_groups": []}


def _probe(argv: Sequence[str], uid: int | None, pass_fds: tuple[int, ...] = ()) -> tuple[str | None, str]:
    """(None, stdout) when the program ran and exited 0, else (what went wrong, stdout). With PATH alone for an
    environment: Hermit's holds the keys, and bubblewrap and the probe's shell are dumpable, so any process of
    the uid could read them from their /proc/<pid>/environ while they run."""
    try:
        done = subprocess.run(list(argv), stdin=subprocess.DEVNULL, capture_output=True, cwd="/", pass_fds=pass_fds,
                              env=PROBE_ENVIRONMENT, timeout=PROBE_TIMEOUT_SECONDS, check=False,
                              **run_as_kwargs(uid))  # type: ignore[call-overload]
    except (OSError, subprocess.SubprocessError) as e:
        return str(e), ""
    out = done.stdout.decode("utf-8", "replace")
    if done.returncode != 0:
        return (done.stderr.decode("utf-8", "replace").strip() or f"exit code {done.returncode}")[:300], out
    return None, out


def room_mode_args(program: str, tmp_bytes: int, seccomp_fd: int) -> list[str]:
    """The namespace and mount flags every room-mode sandbox starts with: every namespace (no network at
    all), no nested user namespaces, the system read-only, size-limited /tmp and /dev/shm, the keyring
    syscalls refused (`seccomp_fd`: a pipe holding seccomp.filter_program(), passed to the child) and
    /proc/keys, /proc/key-users hidden (the kernel keyring is not namespaced)."""
    return [program, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
            "--seccomp", str(seccomp_fd), *bwrap_system_args(), "--proc", "/proc",
            "--ro-bind", "/dev/null", "/proc/keys", "--ro-bind", "/dev/null", "/proc/key-users",
            "--dev", "/dev", "--size", str(1 << 20), "--tmpfs",
            "/dev/shm", "--size", str(tmp_bytes), "--tmpfs", "/tmp"]


# Made read-only once every mount is in place (the last mount arguments): bubblewrap's own root tmpfs and
# its /dev are sized by nothing, and without a cgroup a command filled host RAM through them (7 GB, with
# RLIMIT_AS at 256 MB). Writing to a device node (/dev/null) still works on a read-only /dev.
READ_ONLY_BASE = ["--remount-ro", "/", "--remount-ro", "/dev"]


@functools.lru_cache(maxsize=8)
def detect(platform: str = sys.platform, sandbox_uid: int = DEFAULT_SANDBOX_UID) -> Backend:
    """The sandbox this machine offers, probed once per process by running the room-mode jail (as
    `sandbox_uid` when Hermit is root) and reading what it may do inside."""
    if platform.startswith("linux"):
        program = shutil.which("bwrap")
        if program is None:
            return Backend(None, None, "bubblewrap (bwrap) is not installed")
        try:
            uid = host_uid(sandbox_uid)
        except ToolError as e:
            return Backend(None, program, f"{e.message} ({e.hint})", fix=e.hint)
        bpf = filter_program()
        if bpf is None:
            return Backend(None, program, f"no seccomp filter for this machine ({os.uname().machine}) to keep "
                                          "commands off the kernel keyring: refusing to sandbox without it", run_as=uid,
                           fix="none: the sandbox has a seccomp filter for x86_64 and aarch64 only")
        fd = filter_fd(bpf)
        try:
            problem, out = _probe([*room_mode_args(program, 1 << 20, fd), *READ_ONLY_BASE, "--", "/bin/sh", "-c",
                                   PROBE_SCRIPT],
                                  uid, (fd,))
        finally:
            os.close(fd)
        if problem is not None:
            userns = any(w in problem.lower() for w in USERNS_WORDS)
            return Backend(None, program, f"bubblewrap cannot create a sandbox here: {problem}"
                                          f"{' (user namespaces are not available)' if userns else ''}", run_as=uid,
                           fix=USERNS_FIX if userns else "see bubblewrap's message; until it starts, there is no exec")
        lines = out.split()
        inside = int(lines[0]) if lines and lines[0].isdigit() else None
        cap = next((lines[i + 1] for i, w in enumerate(lines[:-1]) if w == "CapEff:"), None)
        seccomp = next((lines[i + 1] for i, w in enumerate(lines[:-1]) if w == "Seccomp:"), None)
        broken: list[str] = [w for w in ("umount-allowed", "remount-allowed", "keys-visible", "root-writable",
                                         "dev-writable") if w in lines]
        if seccomp != "2":
            broken.append(f"seccomp mode {seccomp}, not a filter")
        if cap is None or int(cap, 16) != 0 or broken or inside == 0:
            return Backend(None, program, f"bubblewrap does not confine here (uid {inside}, CapEff {cap}"
                                          f"{', ' + ', '.join(broken) if broken else ''}): refusing to use it",
                           inside, cap, uid, fix="update bubblewrap (your distribution's package): a sandbox that "
                                                 "keeps a capability, a mount or the keyring is never used")
        if "tools-ok" not in lines:
            return Backend(None, program, "tar or timeout is missing from /usr/bin (coreutils, tar)", inside, cap, uid,
                           fix="install coreutils and tar")
        who = f"uid {uid}, which no account uses" if uid is not None else f"Hermit's uid {os.getuid()}"
        proof = (f"runs as {who} (uid {inside} inside)", f"CapEff {cap}: no capabilities",
                 "umount and remount refused", "keyring syscalls refused (seccomp), /proc/keys hidden")
        return Backend("bwrap", program, f"bubblewrap at {program}", inside, cap, uid, proof)
    if platform == "darwin":
        program = "/usr/bin/sandbox-exec"
        if not Path(program).exists():
            return Backend(None, None, "sandbox-exec is not available")
        problem, _ = _probe([program, "-p", "(version 1)(allow default)", "/usr/bin/true"], None)
        if problem is not None:
            return Backend(None, program, f"sandbox-exec does not work here: {problem}")
        return Backend("sandbox-exec", program, f"sandbox-exec at {program}")
    return Backend(None, None, f"no OS sandbox is supported on {platform}")


@dataclass(frozen=True)
class OsSandbox:
    """Bind mode: run one command confined to `root` (the workspace, or on macOS a room); `protected`
    entries inside it are read-only."""

    backend: Backend
    root_dir: Path
    protected: tuple[Path, ...] = ()
    limits: SandboxLimits = SandboxLimits()
    # Names Hermit itself opens by path outside the sandbox, following links: the instruction files and
    # MEMORY.md (read into the main session's prompt), inbox/ (where a DM's files are written). A missing one
    # cannot be bound read-only, and a link made inside points at nothing there but is followed outside it: a
    # command that made BOOTSTRAP.md a link to another agent's MEMORY.md had it in the next prompt. So a link
    # the command made (or re-pointed) at one of them is removed when it ends (`LinkGuard`).
    guarded: tuple[Path, ...] = ()
    # Names that must not appear while a command runs (the instruction files): one missing when it starts cannot
    # be bound read-only, and a file the command wrote there would be read into every later prompt. What it
    # made at such a name is moved aside when it ends (`LinkGuard`), its text kept.
    kept_out: tuple[Path, ...] = ()
    # Where the guard's journal is kept while a command runs (bind_guard.py): what a Hermit killed meanwhile left
    # undone is undone before the next prompt is read (`recover`).
    journal_dir: Path | None = None

    @property
    def root(self) -> Path:
        return self.root_dir.resolve()

    def environment(self, source: Mapping[str, str]) -> dict[str, str]:
        return {"PATH": SANDBOX_PATH, "HOME": str(self.root), "LANG": source.get("LANG") or "C.UTF-8",
                "TERM": source.get("TERM") or "dumb"}

    def _protected(self) -> list[Path]:
        # A symlinked entry (into the root) is protected where it really is; one leading out of the
        # root points at nothing inside the sandbox.
        real = [p.resolve() if p.is_symlink() else p for p in self.protected]
        return sorted({p for p in real if p.exists() and is_within(p, self.root)})

    def wrap(self, argv: Sequence[str], cwd: Path) -> list[str]:
        """The command line that runs `argv` in `cwd` (inside the root) inside the sandbox."""
        if self.backend.name == "bwrap":
            return self._bwrap(argv, cwd)
        if self.backend.name == "sandbox-exec":
            return [str(self.backend.program), "-p", self.macos_profile(), *argv]
        raise ToolError(f"no OS sandbox: {self.backend.detail}", "install bubblewrap")

    def _bwrap(self, argv: Sequence[str], cwd: Path) -> list[str]:
        root = str(self.root)
        args = [str(self.backend.program), "--unshare-all", "--die-with-parent", "--new-session"]
        if os.geteuid() == 0:
            args += ["--cap-drop", "ALL"]
        args += [*bwrap_system_args(), "--proc", "/proc", "--dev", "/dev", "--size", str(1 << 20), "--tmpfs",
                 "/dev/shm", "--size", str(self.limits.tmp_mb << 20), "--tmpfs", "/tmp", "--bind", root, root]
        for p in self._protected():
            args += ["--ro-bind", str(p), str(p)]
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
        rules.append("(deny network*)")
        return "\n".join(rules)

    def link_guard(self) -> LinkGuard:
        """Taken before a command: `LinkGuard.undo()` after it removes the links it made at `guarded` names."""
        return LinkGuard.take(self.guarded, self.kept_out, self.journal_dir)

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


def _sb_quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')
