"""`hermit backup` → `hermit restore` into a new state dir finds the same notes; hostile archives are refused;
`hermit completion` scripts complete the real commands."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import write
from hermit.cli.main import main
from prochelpers import PROC_TIMEOUT
from test_backup_live import here


def hermit(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(HERMIT_HOME=str(home), OMP_WAIT_POLICY="PASSIVE")
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=PROC_TIMEOUT, input=stdin)


def search(home: Path, query: str) -> list[tuple[str, int, int, str]]:
    r = hermit(home, "memory", "search", query, "--json")
    assert r.returncode == 0, r.stderr
    return [(x["path"], x["startLine"], x["endLine"], x["snippet"]) for x in json.loads(r.stdout)["results"]]


def search_here(home: Path, query: str, capsys: pytest.CaptureFixture[str]) -> list[tuple[str, int, int, str]]:
    """`search`, in this process: what the old state dir finds, which the restored one must find too."""
    capsys.readouterr()
    assert main(["--home", str(home), "memory", "search", query, "--json"]) == 0
    return [(x["path"], x["startLine"], x["endLine"], x["snippet"]) for x in json.loads(capsys.readouterr().out)["results"]]


def test_backup_then_restore_into_a_new_home_finds_the_same_notes(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    # The old state dir is set up in this process (setup, cron add, index, the searches to compare with); the
    # backup, the restores and the searches of the restored state dir are processes of their own.
    home = tmp_path / "old"
    assert here(home, "setup", "--provider", "openai-compatible", "--base-url", "http://127.0.0.1:9/v1",
                "--model", "m", "--api-key-stdin", "--no-check", stdin="sk-secret-key\n") == 0
    ws = home / "workspace"
    write(ws / "MEMORY.md", "# Memory\n\n- Prefers oat milk flat whites.\n- The boat is moored at pier 7.\n")
    write(ws / "memory" / "2026-11-20.md", "- Moved the database to db.internal:5432 (ticket OPS-1142).\n")
    write(home / "agents" / "main" / "sessions" / "s1.jsonl", '{"type": "session", "id": "s1"}\n')
    write(home / "credentials" / "allow-telegram-default.json", '{"allow": ["42"]}\n')
    assert here(home, "cron", "add", "--id", "tea", "--every", "2h", "-m", "stretch") == 0
    assert here(home, "memory", "index") == 0
    queries = ("where is the boat", "OPS-1142", "coffee order")
    before = {q: search_here(home, q, capsys) for q in queries}
    assert before["where is the boat"][0][0] == "MEMORY.md" and before["OPS-1142"][0][0] == "memory/2026-11-20.md"
    (home / "logs").mkdir()
    (home / "logs" / "gateway.log").write_text("derived\n")

    archive = tmp_path / "out" / "hermit.tar.gz"
    archive.parent.mkdir()
    r = hermit(home, "backup", str(archive))
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    assert archive.read_bytes()[8] == 0  # gzip's header: neither "fastest" (1) nor "best" (9), the default 6
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    assert "hermit-backup/home/hermit.env" in names and "hermit-backup/home/cron/jobs.json" in names
    assert "hermit-backup/home/workspace/MEMORY.md" in names
    assert "hermit-backup/home/agents/main/sessions/s1.jsonl" in names
    assert "hermit-backup/home/credentials/allow-telegram-default.json" in names
    assert not [n for n in names if n.endswith(".sqlite") or "/cache" in n or "/logs" in n or n.endswith(".lock")]
    assert hermit(home, "backup", str(archive)).returncode == 1  # never overwrites an archive

    new = tmp_path / "new"
    r = hermit(new, "restore", str(archive))
    assert r.returncode == 0, r.stderr
    assert "rebuilt on the first search" in r.stdout
    assert {q: search(new, q) for q in queries} == before
    assert stat.S_IMODE((new / "hermit.env").stat().st_mode) == 0o600 and stat.S_IMODE(new.stat().st_mode) == 0o700
    assert "sk-secret-key" in (new / "hermit.env").read_text()
    assert [j["id"] for j in json.loads(hermit(new, "cron", "list", "--json").stdout)["jobs"]] == ["tea"]
    assert (new / "credentials" / "allow-telegram-default.json").is_file()

    again = hermit(new, "restore", str(archive))
    assert again.returncode == 1 and "is not empty" in again.stderr and "--force" in again.stderr
    (new / "workspace" / "MEMORY.md").write_text("changed\n")
    assert hermit(new, "restore", str(archive), "--force").returncode == 0
    assert "pier 7" in (new / "workspace" / "MEMORY.md").read_text()


def _archive(path: Path, *members: tuple[tarfile.TarInfo, bytes | None]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        manifest = json.dumps({"format": 1}).encode()
        info = tarfile.TarInfo("hermit-backup/manifest.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _special(name: str, kind: bytes, link: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info, None


@pytest.mark.parametrize("member, why", [
    (_file("/etc/hermit-pwned"), "unsafe path"),
    (_file("hermit-backup/home/../../escaped"), "unsafe path"),
    (_file("elsewhere/x"), "unsafe path"),
    (_special("hermit-backup/home/workspace/link", tarfile.SYMTYPE, "/etc/passwd"), "a link"),
    (_special("hermit-backup/home/workspace/hard", tarfile.LNKTYPE, "/etc/passwd"), "a link"),
    (_special("hermit-backup/home/dev", tarfile.CHRTYPE), "a device or FIFO"),
    (_special("hermit-backup/home/fifo", tarfile.FIFOTYPE), "a device or FIFO"),
])
def test_hostile_archives_are_refused_before_anything_is_written(tmp_path: Path, member: object, why: str) -> None:
    archive = _archive(tmp_path / "bad.tar.gz", _file("hermit-backup/home/hermit.yaml", b"agents: {}\n"),
                       member)  # type: ignore[arg-type]
    new = tmp_path / "new"
    r = hermit(new, "restore", str(archive))
    assert r.returncode == 1 and why in r.stderr and "Traceback" not in r.stderr
    assert not new.exists()
    assert not (tmp_path / "escaped").exists()


def test_restore_never_writes_through_a_symlink_in_the_target(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "a.tar.gz", _file("hermit-backup/home/workspace/MEMORY.md", b"mine\n"))
    new = tmp_path / "new"
    new.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (new / "workspace").symlink_to(outside)
    r = hermit(new, "restore", str(archive), "--force")
    assert r.returncode == 1 and "is a symlink" in r.stderr
    assert not (outside / "MEMORY.md").exists()


def test_completion_scripts_complete_the_real_commands(tmp_path: Path) -> None:
    bash = hermit(tmp_path, "completion", "bash")
    assert bash.returncode == 0
    script = tmp_path / "hermit.bash"
    script.write_text(bash.stdout)
    probe = (f"source {script}; COMP_WORDS=(hermit gateway ''); COMP_CWORD=2; COMP_LINE='hermit gateway '; "
             "COMP_POINT=15; _shtab_hermit; echo \"${COMPREPLY[@]}\"")
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=PROC_TIMEOUT)
    assert set(out.stdout.split()) >= {"run", "status", "install", "uninstall"}, out.stderr
    zsh = hermit(tmp_path, "completion", "zsh")
    assert zsh.returncode == 0 and zsh.stdout.startswith("#compdef hermit") and "setup" in zsh.stdout
