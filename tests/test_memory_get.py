"""memory_get: line ranges, and refusing '..', absolute paths, symlinks and non-Markdown files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import write
from hermit.config.schema import MemorySearchConfig
from hermit.errors import PathPolicyError
from memhelpers import service


@pytest.fixture
def svc(workspace: Path, tmp_path: Path):  # type: ignore[no-untyped-def]
    write(workspace / "MEMORY.md", "# M\nline2\nline3\nline4\n")
    write(workspace / "memory" / "2026-01-20.md", "a\nb\nc\nd\ne\n")
    write(workspace / "AGENTS.md", "# agents\n")
    write(workspace / "memory" / "notes.txt", "plain text\n")
    s = service(workspace, tmp_path / "idx.sqlite", None, MemorySearchConfig.model_validate({"provider": "none"}))
    yield s
    s.close()


def test_reads_whole_file_and_line_ranges(svc) -> None:  # type: ignore[no-untyped-def]
    assert svc.get("MEMORY.md") == {"path": "MEMORY.md", "text": "# M\nline2\nline3\nline4\n"}
    assert svc.get("memory/2026-01-20.md", 2, 2) == {"path": "memory/2026-01-20.md", "text": "b\nc"}
    assert svc.get("memory/2026-01-20.md", 4)["text"] == "d\ne\n"
    assert svc.get("memory/2026-01-20.md", lines=1)["text"] == "a"
    assert svc.get("./memory/2026-01-20.md", 1, 1)["text"] == "a"


@pytest.mark.parametrize(("path", "rule"), [
    ("../outside.md", "escapes the workspace"),
    ("memory/../../outside.md", "escapes the workspace"),
    ("/etc/passwd", "absolute path refused"),
    ("memory/notes.txt", "not a Markdown file"),
    ("AGENTS.md", "not a memory file"),
    ("", "empty path"),
    ("memory/missing.md", "no such memory file"),
])
def test_refusals_name_the_rule(svc, path: str, rule: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(PathPolicyError) as e:
        svc.get(path)
    assert rule in e.value.message
    assert e.value.hint


def test_absolute_path_inside_workspace_is_refused(svc, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(PathPolicyError, match="absolute path refused"):
        svc.get(str(workspace / "MEMORY.md"))


def test_symlinks_are_refused(svc, workspace: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    secret = write(tmp_path / "secret.md", "top secret\n")
    os.symlink(secret, workspace / "memory" / "link.md")
    with pytest.raises(PathPolicyError, match="symlinks are not followed"):
        svc.get("memory/link.md")
    os.symlink(tmp_path, workspace / "memory" / "dirlink")
    with pytest.raises(PathPolicyError, match="symlinks are not followed"):
        svc.get("memory/dirlink/secret.md")


def test_bad_line_arguments(svc) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(PathPolicyError):
        svc.get("MEMORY.md", 0)
    with pytest.raises(PathPolicyError):
        svc.get("MEMORY.md", 1, 0)
