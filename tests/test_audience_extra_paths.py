"""The files of `memory_search.extra_paths` are the owner's: a notes folder or a vault listed there is searched
for the owner and never shown to a contact, a group, a cron job or an MCP client (they see `memory/` only).
They used to count as hand-written shared notes, so the README's own example (`extra_paths: [notes]` beside
a Telegram account with pairing) put a personal notes folder in every approved chat's searches. And since the
rule went by the stored name, a second spelling of `memory/private/` in `extra_paths` (`notes/../memory/private`,
or the real folder of a workspace configured through a symlink) indexed private notes under a name that
looked shared (audit Z). Both stores, the real MemoryService and memory tools."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import write
from hermit.config.schema import MemorySearchConfig
from hermit.errors import HermitError
from hermit.memory.policy.audience import MCP, Reader, is_private_path, memory_view, reader_for_session
from hermit.sessions.keys import dm_session_key
from hermit.tools.memory import MemoryTools
from memhelpers import HashEmbedder, service

CHAT = reader_for_session(dm_session_key("main", "telegram", "777"))
READERS = {"chat": CHAT, "mcp": Reader(MCP)}


def test_extra_paths_are_searched_for_the_owner_only(tmp_path: Path, store_backend: str) -> None:
    ws, vault = tmp_path / "ws", tmp_path / "vault"
    write(ws / "notes" / "health.md", "- biopsy result: benign, tell nobody yet\n")
    write(vault / "diary.md", "- biopsy appointment went fine, diary entry\n")
    write(ws / "memory" / "2026-01-20.md", "- biopsy of the old oak tree in the park, shared talk\n")
    cfg = MemorySearchConfig.model_validate({"provider": "local", "extra_paths": ["notes", str(vault)]})
    svc = service(ws, tmp_path / "x.sqlite", HashEmbedder(), cfg)
    svc.sync()
    owner = {r["path"] for r in MemoryTools(svc).memory_search("biopsy", min_score=0.0)["results"]}
    assert {"notes/health.md", str(vault / "diary.md"), "memory/2026-01-20.md"} <= owner
    for name, reader in READERS.items():
        tools = MemoryTools(svc, reader=reader)
        seen = tools.memory_search("biopsy result diary", min_score=0.0)["results"]
        assert [r["path"] for r in seen] == ["memory/2026-01-20.md"], name
        with pytest.raises(HermitError, match="file not found: notes/health.md"):
            svc.get("notes/health.md", reader=reader)
    assert [p for p, _ in memory_view(ws, cfg.extra_paths, CHAT)] == ["memory/2026-01-20.md"]
    svc.close()


@pytest.mark.parametrize("how", ["dot-dot", "symlinked-workspace"])
def test_a_second_spelling_of_memory_private_stays_private(tmp_path: Path, store_backend: str, how: str) -> None:
    real = tmp_path / "real-ws"
    write(real / "memory" / "private" / "health.md", "- biopsy result: malignant, tell nobody\n")
    write(real / "memory" / "2026-01-20.md", "- walked the dog\n")
    (real / "notes").mkdir()
    if how == "symlinked-workspace":  # ~/hermit -> ~/Dropbox/hermit; the owner lists the real folder
        ws = tmp_path / "ws-link"
        os.symlink(real, ws)
        extra = [str(real / "memory")]
    else:
        ws, extra = real, ["notes/../memory/private"]
    cfg = MemorySearchConfig.model_validate({"provider": "local", "extra_paths": extra})
    svc = service(ws, tmp_path / "x.sqlite", HashEmbedder(), cfg)
    svc.sync()
    assert any("malignant" in r["snippet"] for r in MemoryTools(svc).memory_search("biopsy result")["results"])
    for name, reader in READERS.items():
        found = MemoryTools(svc, reader=reader).memory_search("biopsy result", min_score=0.0)["results"]
        assert not any("malignant" in r["snippet"] for r in found), (name, found)
    assert all("private" not in p for p, _ in memory_view(ws, extra, CHAT))
    svc.close()


def test_the_rule_reads_the_normalised_path() -> None:
    for private in ("MEMORY.md", "memory/private/x.md", "Memory/Private/x.md", "notes/x.md", "/home/u/vault/x.md",
                    "memory/../MEMORY.md", "memory/../memory/private/x.md", "./notes/../memory/private/x.md",
                    "notes/USER.md", "Memory/x.md", "MEMORY/2026-01-20.md", "user.md",
                    "HEARTBEAT.md", "heartbeat.md", "memory/../HEARTBEAT.md"):  # the owner's checklist, as MEMORY.md
        assert is_private_path(private), private
    for shared in ("memory/2026-01-20.md", "memory/projects/x.md", "./memory/x.md", "USER.md", "TOOLS.md"):
        assert not is_private_path(shared), shared
