"""`hermit backup` while Hermit (or the owner's editor) writes files (audit 2A): a note saved in place and
shrunk in the middle of its copy left a header and half its data in the archive, every later member lost and
`restore` failing with a traceback, all with exit 0 (F2); a note, MEMORY.md, sessions.json or the cron jobs
rewritten by rename during the backup were left out, with exit 0 (F3). Now every file is stored whole, in its
old or its new version, the archive is read back before it is kept, what cannot be stored is named with exit
1, and a damaged archive is refused by `restore` in plain words.

Real `hermit backup` / `hermit restore` processes on real files. The writer acts at a known point of the
copy: the backup runs under a hook (HOOK) whose file object, at the first read of a chosen file, does what an
editor or Hermit does — or, in the last test, a real writer thread acts the moment the backup has the file
open."""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from hermit.cli.main import main
from prochelpers import PROC_TIMEOUT

# Runs `hermit ARGS` (as `python -m hermit.cli.main` does) with os.fdopen wrapped: the first read() of the file
# named in BACKUP_HOOK's "on" — after it returned its data — does the hook's "act", once ("every": at each
# read); "corrupt" flips one byte of what is written to the archive itself, as a failing disk would.
HOOK = r"""
import json, os, sys
from pathlib import Path
from hermit.durable import write_atomic
spec = json.loads(os.environ["BACKUP_HOOK"])
real_fdopen = os.fdopen

def act():
    fired = Path(spec["fired"])
    if fired.exists() and not spec.get("every"):
        return
    fired.write_text("fired\n")
    kind = spec["act"]
    if kind == "shrink":  # an editor saving in place (nano): truncate, then write the shorter text
        with open(spec["on"], "r+b") as f:
            f.truncate(0)
            f.write(spec["text"].encode())
    elif kind == "grow":
        with open(spec["on"], "ab") as f:
            f.write(b"- one more line\n")
    elif kind == "rename":  # Hermit's own rewrites: a new file renamed over the old one
        for path, text in spec["rewrite"].items():
            write_atomic(Path(path), text)
    elif kind == "replace":  # another name renamed over a listed file
        for path, by in spec["rewrite"].items():
            os.rename(by, path)

class Hooked:
    def __init__(self, f):
        self._f = f
    def read(self, *args):
        data = self._f.read(*args)
        act()
        return data
    def __getattr__(self, name):
        return getattr(self._f, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return self._f.__exit__(*exc)

class Corrupting:
    def __init__(self, f):
        self._f, self._done = f, 0
    def write(self, data):
        if self._done < 200_000 <= self._done + len(data):
            data = bytearray(data)
            data[200_000 - self._done] ^= 0xFF
            Path(spec["fired"]).write_text("fired\n")
        self._done += len(data)
        return self._f.write(bytes(data))
    def __getattr__(self, name):
        return getattr(self._f, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return self._f.__exit__(*exc)

def fdopen(fd, mode="r", *args, **kwargs):
    f = real_fdopen(fd, mode, *args, **kwargs)
    if spec["act"] == "corrupt":
        return Corrupting(f) if mode == "wb" else f
    try:
        path = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f
    return Hooked(f) if mode == "rb" and path == spec["on"] else f

os.fdopen = fdopen
from hermit.cli.main import main
sys.exit(main())
"""

NOBODY = 65534
NEW_TEXT = "# 2026-01-01\n\n- trimmed by hand\n"


def env(home: Path, **extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    out.update(HERMIT_HOME=str(home), OMP_WAIT_POLICY="PASSIVE", **extra)
    return out


def hermit(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], capture_output=True, text=True,
                          env=env(home), timeout=PROC_TIMEOUT, input=stdin)


def here(home: Path, *args: str, stdin: str = "") -> int:
    """`hermit ARGS` on `home` in this process, for what only sets a test up (the same CLI code without a Python
    start); the backups and restores a test asserts on stay processes of their own."""
    real, sys.stdin = sys.stdin, io.StringIO(stdin)
    try:
        return main(["--home", str(home), *args])
    finally:
        sys.stdin = real


def hooked_backup(home: Path, archive: Path, spec: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """`hermit backup ARCHIVE` under HOOK; asserts the hook acted."""
    fired = archive.parent / "hook-fired"
    fired.unlink(missing_ok=True)
    spec = {**spec, "fired": str(fired)}
    r = subprocess.run([sys.executable, "-c", HOOK, "backup", str(archive)], capture_output=True, text=True,
                       env=env(home, BACKUP_HOOK=json.dumps(spec)), timeout=PROC_TIMEOUT)
    print("backup:", r.returncode, r.stdout, r.stderr)
    assert fired.exists(), "the hook never acted: the backup no longer reads files the way it did"
    return r


def big_note(path: Path, lines: int = 40_000) -> str:
    """About 3 MB of text that does not compress to nothing: larger than one read of the copy."""
    rnd = random.Random(1)
    text = "".join(f"- note {i} {rnd.getrandbits(256):x}\n" for i in range(lines))
    path.write_text(text)
    return text


@pytest.fixture(scope="module")
def set_up(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state dir made by the real `hermit setup` and `hermit cron add` (in this process), once per module."""
    home = tmp_path_factory.mktemp("backup-live") / "old"
    assert here(home, "setup", "--provider", "openai-compatible", "--base-url", "http://127.0.0.1:9/v1",
                "--model", "m", "--api-key-stdin", "--no-check", stdin="sk-live-backup-key\n") == 0
    assert here(home, "cron", "add", "--id", "tea", "--every", "2h", "-m", "stretch") == 0
    return home


@pytest.fixture
def home(set_up: Path, tmp_path: Path) -> Path:
    """A state dir (this test's own copy of `set_up`, modes kept) with a large note and nineteen small ones, a
    session store and a cron job."""
    home = tmp_path / "old"
    shutil.copytree(set_up, home, symlinks=True)
    ws = home / "workspace"
    (ws / "MEMORY.md").write_text("# Long-term\n\n- my bank PIN hint: blue\n")
    (ws / "memory").mkdir(exist_ok=True)
    big_note(ws / "memory" / "2026-01-01.md")
    for d in range(2, 20):
        (ws / "memory" / f"2026-01-{d:02d}.md").write_text(f"# day {d}\n\n- important note of day {d}\n")
    sessions = home / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    (sessions / "sessions.json").write_text('{"agent:main:main": {"sessionId": "s1", "updatedAt": 1}}\n')
    return home


def members(archive: Path) -> dict[str, bytes]:
    """Every file of the archive with its data: reading it whole is the test that it reads back."""
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]


NOTE = "hermit-backup/home/workspace/memory/2026-01-{:02d}.md"


def test_a_note_saved_in_place_and_shrunk_during_its_copy_is_stored_whole(home: Path, tmp_path: Path) -> None:
    note = home / "workspace" / "memory" / "2026-01-01.md"
    archive = tmp_path / "b.tar.gz"
    r = hooked_backup(home, archive, {"act": "shrink", "on": str(note), "text": NEW_TEXT})
    assert r.returncode == 0, r.stderr
    files = members(archive)  # reads every member back: the archive is whole
    assert "skipped" not in r.stdout and "2026-01-01" not in r.stdout
    assert files[NOTE.format(1)] == NEW_TEXT.encode()  # the version after the save, whole
    assert all(NOTE.format(d) in files for d in range(1, 20))
    assert "hermit-backup/home/agents/main/sessions/sessions.json" in files

    new = tmp_path / "new"
    r = hermit(new, "restore", str(archive))
    assert r.returncode == 0, r.stderr
    assert (new / "workspace" / "memory" / "2026-01-01.md").read_text() == NEW_TEXT
    assert (new / "workspace" / "memory" / "2026-01-19.md").read_text() == "# day 19\n\n- important note of day 19\n"


def test_files_hermit_rewrites_by_rename_during_the_backup_are_stored_as_their_new_version(
        home: Path, tmp_path: Path) -> None:
    ws = home / "workspace"
    rewrite = {
        str(ws / "memory" / "2026-01-05.md"): "# day 5\n- dentist moved to Friday\n\n- important note of day 5\n",
        str(ws / "MEMORY.md"): "# Long-term\n\n- my bank PIN hint: green\n",
        str(home / "agents" / "main" / "sessions" / "sessions.json"): '{"agent:main:main": {"updatedAt": 2}}\n',
        str(home / "cron" / "jobs.json"): (home / "cron" / "jobs.json").read_text().replace(
            '"message": "stretch"', '"message": "stretch, then water"'),
    }
    # the first file stored (the config, at the top of the state dir): every file above is replaced after it
    # was listed and before it is copied, as the gateway does while a backup runs
    archive = tmp_path / "b.tar.gz"
    r = hooked_backup(home, archive, {"act": "rename", "on": str(home / "hermit.yaml"), "rewrite": rewrite})
    assert r.returncode == 0, r.stderr
    assert "skipped" not in r.stdout and "replaced" not in r.stdout
    files = members(archive)
    for path, text in rewrite.items():
        arc = "hermit-backup/home/" + Path(path).relative_to(home).as_posix()
        assert files.get(arc) == text.encode(), arc

    new = tmp_path / "new"
    r = hermit(new, "restore", str(archive))
    assert r.returncode == 0, r.stderr
    for path, text in rewrite.items():
        assert (new / Path(path).relative_to(home)).read_text() == text
    assert [j["message"] for j in json.loads(hermit(new, "cron", "list", "--json").stdout)["jobs"]] == [
        "stretch, then water"]


def test_a_file_that_keeps_changing_is_named_and_the_backup_fails(home: Path, tmp_path: Path) -> None:
    note = home / "workspace" / "memory" / "2026-01-03.md"
    archive = tmp_path / "b.tar.gz"
    r = hooked_backup(home, archive, {"act": "grow", "on": str(note), "every": True})
    assert r.returncode == 1
    assert "workspace/memory/2026-01-03.md (it changed while it was read" in r.stderr
    assert "is not in" in r.stderr and "run `hermit backup` again" in r.stderr and "Traceback" not in r.stderr
    files = members(archive)  # everything else, and readable
    assert NOTE.format(3) not in files and all(NOTE.format(d) in files for d in range(4, 20))


def test_a_listed_file_replaced_by_a_link_or_another_users_file_is_not_stored(home: Path, tmp_path: Path) -> None:
    """What keeps a planted file out of the archive (test_backup_planted.py) holds for a replacement too."""
    mem = home / "workspace" / "memory"
    secret = tmp_path / "outside-secret.txt"
    secret.write_text("OUTSIDE-SECRET-771\n")
    (tmp_path / "by-link").symlink_to(secret)
    other = tmp_path / "by-hardlink"
    os.link(secret, other)
    rewrite = {str(mem / "2026-01-07.md"): str(tmp_path / "by-link"), str(mem / "2026-01-08.md"): str(other)}
    if os.geteuid() == 0:
        theirs = tmp_path / "by-nobody"
        theirs.write_text("planted by another user\n")
        os.chown(theirs, NOBODY, NOBODY)
        rewrite[str(mem / "2026-01-09.md")] = str(theirs)
    archive = tmp_path / "b.tar.gz"
    r = hooked_backup(home, archive, {"act": "replace", "on": str(home / "hermit.yaml"), "rewrite": rewrite})
    assert r.returncode == 1
    assert "2026-01-07.md (replaced by a symlink" in r.stderr
    assert "2026-01-08.md (replaced by a file with a second name (hard link)" in r.stderr
    if os.geteuid() == 0:
        assert f"2026-01-09.md (replaced by a file of another user (uid {NOBODY})" in r.stderr
    files = members(archive)
    assert not any(b"OUTSIDE-SECRET" in data or b"planted" in data for data in files.values())
    assert all(NOTE.format(d) in files for d in (1, 2, 10, 19))


def test_restore_of_a_cut_short_or_corrupted_archive_says_so_and_writes_nothing(home: Path, tmp_path: Path) -> None:
    archive = tmp_path / "b.tar.gz"
    assert hermit(home, "backup", str(archive)).returncode == 0
    data = archive.read_bytes()
    middle = len(data) // 2
    broken = {"cut at 100 bytes": data[:100], "cut in the middle": data[:middle],
              "all but its last byte": data[:-1],  # only the gzip checksum is cut: every member still reads
              "one byte changed": data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1:]}
    for what, damaged in broken.items():
        bad = tmp_path / "bad.tar.gz"
        bad.write_bytes(damaged)
        new = tmp_path / "new"
        r = hermit(new, "restore", str(bad))
        assert r.returncode == 1 and "Traceback" not in r.stderr, (what, r.stderr)
        assert "bad.tar.gz is damaged or incomplete" in r.stderr and "nothing was restored" in r.stderr, what
        assert "hint: restore from another copy of the backup" in r.stderr, what
        assert not new.exists(), what


def test_an_archive_that_does_not_read_back_is_never_kept(home: Path, tmp_path: Path) -> None:
    archive = tmp_path / "b.tar.gz"
    r = hooked_backup(home, archive, {"act": "corrupt"})
    assert r.returncode == 1 and "is damaged" in r.stderr and "was not kept" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hook-fired", "old"]  # no archive, no temp file


def test_a_backup_while_a_real_writer_saves_notes_holds_each_whole(home: Path, tmp_path: Path) -> None:
    """No hook: the moment the backup has the big note open, a writer saves it in place (shorter) and Hermit
    rewrites another note by rename. Whatever the interleaving, each is stored as its old or its new version."""
    from hermit.durable import write_atomic

    ws = home / "workspace" / "memory"
    old_big = big_note(ws / "2026-01-01.md", lines=300_000)  # ~25 MB: its copy takes a while
    old_five = (ws / "2026-01-05.md").read_text()
    new_five = old_five.replace("# day 5\n", "# day 5\n- dentist moved to Friday\n")
    archive = tmp_path / "b.tar.gz"
    proc = subprocess.Popen([sys.executable, "-m", "hermit.cli.main", "backup", str(archive)], env=env(home),
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    opened = threading.Event()

    def watch() -> None:
        target = str(ws / "2026-01-01.md")
        while proc.poll() is None and not opened.is_set():
            try:
                links = [os.readlink(f"/proc/{proc.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{proc.pid}/fd")]
            except OSError:
                links = []
            if target in links:
                opened.set()
            time.sleep(0.001)

    watcher = threading.Thread(target=watch)
    watcher.start()
    watcher.join(PROC_TIMEOUT)  # the backup has the note open (or has finished)
    with open(ws / "2026-01-01.md", "r+") as f:
        f.truncate(0)
        f.write(NEW_TEXT)
    write_atomic(ws / "2026-01-05.md", new_five)
    out, err = proc.communicate(timeout=PROC_TIMEOUT)
    print("backup:", proc.returncode, out, err, "opened:", opened.is_set())
    assert proc.returncode == 0, err
    files = members(archive)
    big = files[NOTE.format(1)].decode()
    with tarfile.open(archive) as tar:  # a note stored again (changed after its read) has several members
        sizes = [m.size for m in tar if m.name == NOTE.format(1)]
    print("stored the note:", "old" if big == old_big else "new" if big == NEW_TEXT else "torn", sizes)
    assert big in (old_big, NEW_TEXT), f"the last of its members ({sizes} bytes) is {big[:60]!r}"
    assert files[NOTE.format(5)].decode() in (old_five, new_five)
    assert all(NOTE.format(d) in files for d in range(1, 20))
    new = tmp_path / "new"
    assert hermit(new, "restore", str(archive)).returncode == 0


@pytest.mark.parametrize("tmpfile", [True, False])
def test_the_archive_is_read_back_before_it_gets_its_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          tmpfile: bool) -> None:
    """write_new_file's read-back sees exactly what was written, in an unnamed file or under a random name
    (file systems without O_TMPFILE); what it finds wrong keeps the name free and leaves nothing behind."""
    from hermit.cli.backup import BackupError, write_new_file

    if not tmpfile:
        monkeypatch.delattr(os, "O_TMPFILE", raising=False)
    seen: list[bytes] = []
    write_new_file(tmp_path / "good.bin", lambda raw: raw.write(b"archive bytes"),
                   check=lambda raw: seen.append(raw.read()) or None)
    assert seen == [b"archive bytes"] and (tmp_path / "good.bin").read_bytes() == b"archive bytes"
    with pytest.raises(BackupError, match="bad.bin is damaged: cut short; it was not kept"):
        write_new_file(tmp_path / "bad.bin", lambda raw: raw.write(b"arch"), check=lambda raw: "cut short")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.bin"]
