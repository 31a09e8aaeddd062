"""Where Hermit keeps things: the state dir ($HERMIT_HOME), config, workspaces, indexes, sessions — owner-only.

The state dir holds the index (MEMORY.md's text), transcripts and config, so whatever creates it
— `hermit init` or any command run before it — creates it 0700, and Hermit's own files in it 0600
(`ensure_private_dir`, `private_file`). The index dir and index files are tightened if an older
version left them readable to others.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

DEFAULT_AGENT_ID = "main"
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def ensure_private_dir(path: Path) -> None:
    """Create `path` and any missing parents with mode 0700; existing directories are left alone."""
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(directory, PRIVATE_DIR_MODE)  # mkdir's mode is filtered by the umask


def not_own_private_dir(st: os.stat_result) -> str | None:
    """Why an existing directory (`st` from lstat) cannot receive owner-only files as it is — a symlink or not a
    folder, another uid's, or one its group or others may write (they could plant a name in it first, or swap
    one). None when it is the current user's and only they write into it. `ensure_private_dir` leaves existing
    directories alone; a command about to write secrets into one it did not create (`hermit restore`) asks this."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    return not_own_file(st, group_ok=False)


def _written_by_others(st: os.stat_result, group_ok: bool) -> str | None:
    """Who besides the owner may write `st` ("its group or by others" / "every user"), as an error's text."""
    if st.st_mode & (0o002 if group_ok else 0o022):
        who = "every user" if group_ok else "its group or by others"
        return f"can be written by {who} (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def not_safe_parent(st: os.stat_result, *, group_ok: bool = False) -> str | None:
    """Why a directory is no place to keep (or create and rename into place) a private folder: owned by a user
    other than the current one or root, or writable by its group or others (with `group_ok`: by every user)
    without the sticky bit (they could rename the folder away, or put their own in its place). /tmp (root's,
    sticky) is a safe parent."""
    if st.st_uid not in (os.geteuid(), 0):
        return f"belongs to another user (uid {st.st_uid})"
    return None if st.st_mode & stat.S_ISVTX else _written_by_others(st, group_ok)


def not_own_file(st: os.stat_result, *, group_ok: bool = True) -> str | None:
    """Why a file or folder Hermit keeps its keys, config or notes in (`st` from stat: a symlinked dotfile is
    judged by what it names) cannot be trusted: another user's, or one every user may write (they would
    choose the model server, the proxy, the commands). None when it is the current user's. Group write is
    accepted (unless not `group_ok`): with a umask of 002 each user's files are group-writable for their own
    one-member group."""
    if st.st_uid != os.geteuid():
        return f"belongs to another user (uid {st.st_uid})"
    return _written_by_others(st, group_ok)


def private_file(path: Path) -> None:
    """Make sure `path` exists as an owner-only file (created 0600; an existing one tightened to 0600).

    An existing file is changed by path, never opened: closing a descriptor would drop the POSIX locks
    SQLite holds on it in this process."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    except FileExistsError:
        if os.stat(path).st_mode & 0o077:
            os.chmod(path, PRIVATE_FILE_MODE)
        return
    os.close(fd)


def tighten_dir(path: Path) -> None:
    """An existing directory Hermit owns (the index dir, logs/) made owner-only.

    Never a directory shared on purpose or someone else's: one with the sticky bit (/tmp, /var/tmp: as
    root, 0700 there breaks every other user's temporary files), one owned by another uid (root running
    Hermit on a user's files), the home directory or /. Those keep their mode; Hermit's files in them
    are still 0600."""
    # Judged and changed through one descriptor: a directory swapped for another (or for a link) between
    # the check and the chmod is not the one changed.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if st.st_mode & 0o077 and _may_tighten(path, st):
            os.fchmod(fd, PRIVATE_DIR_MODE)
    finally:
        os.close(fd)


def _may_tighten(path: Path, st: os.stat_result) -> bool:
    """Whether Hermit may change this existing directory's mode (see tighten_dir)."""
    if st.st_mode & stat.S_ISVTX or st.st_uid != os.geteuid():
        return False
    real = path.resolve()
    try:
        home = Path.home().resolve()
    except (RuntimeError, KeyError):  # no $HOME and no passwd entry (a bare container's uid)
        home = None
    return real != real.parent and real != home


def default_home(environ: dict[str, str] | None = None) -> Path:
    """$HERMIT_HOME, else ~/.hermit. Only composition roots should call this."""
    env = os.environ if environ is None else environ
    raw = env.get("HERMIT_HOME")
    return Path(raw).expanduser() if raw else Path.home() / ".hermit"


@dataclass(frozen=True)
class StatePaths:
    home: Path

    @property
    def config_candidates(self) -> tuple[Path, Path, Path]:
        return (self.home / "hermit.yaml", self.home / "hermit.yml", self.home / "hermit.json")

    def config_file(self) -> Path | None:
        for p in self.config_candidates:
            if p.exists():
                return p
        return None

    def default_workspace(self, agent_id: str) -> Path:
        name = "workspace" if agent_id == DEFAULT_AGENT_ID else f"workspace-{agent_id}"
        return self.home / name

    def index_path(self, agent_id: str) -> Path:
        return self.home / "memory" / f"{agent_id}.sqlite"

    def sessions_dir(self, agent_id: str) -> Path:
        return self.home / "agents" / agent_id / "sessions"

    def agent_dir(self, agent_id: str) -> Path:
        return self.home / "agents" / agent_id
