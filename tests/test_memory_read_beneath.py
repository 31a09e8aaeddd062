"""The indexer reads notes beneath the workspace's (or extra folder's) descriptor, no link followed at any
component: a folder swapped for a link to a private one mid-sync is refused, not read through (audit L4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import write
from hermit import textfile
from hermit.config.schema import MemorySearchConfig
from memhelpers import HashEmbedder, service, sql


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """With the kernel's openat2, and with the O_NOFOLLOW walk of kernels without it."""
    if request.param == "walk":
        monkeypatch.setattr(textfile, "_openat2_works", False, raising=False)
    return str(request.param)


@pytest.mark.parametrize("where", ["memory", "extra path"])
def test_a_folder_swapped_for_a_link_during_a_sync_is_not_read_through(tmp_path: Path, resolver: str,
                                                                        where: str) -> None:
    """The audit's swap (repro/swap2.py): someone who may write the memory folder exchanges sub/ for a link
    to a folder the owner keeps private while the sync runs; the private note was indexed as sub/secret.md.
    Here the swap happens at the exact moment (after the listing, before the read) instead of by luck."""
    ws = tmp_path / "ws"
    folder = ws / "memory" if where == "memory" else tmp_path / "shared"
    write(folder / "sub" / "secret.md", "# Decoy\n- nothing here\n")
    write(tmp_path / "private" / "secret.md", "# Private\n- The vault code is 4417.\n")
    write(ws / "MEMORY.md", "# Memory\n- The database is Postgres 16.\n")
    svc = service(ws, tmp_path / "index.sqlite", HashEmbedder(), MemorySearchConfig.model_validate(
        {"extra_paths": [] if where == "memory" else [str(folder)]}))
    swapped: list[str] = []

    def swap(_n: int, _total: int, rel: str) -> None:
        if rel.endswith("sub/secret.md") and not swapped:
            (folder / "sub").rename(folder / "subreal")
            (folder / "sub").symlink_to(tmp_path / "private", target_is_directory=True)
            swapped.append(rel)

    try:
        report = svc.sync(progress=swap)
        texts = " ".join(str(r[0]) for r in sql(svc, "select text from {t}chunks"))
    finally:
        svc.close()
    assert swapped
    assert "4417" not in texts and "Postgres 16" in texts
    kind = "a symlink or under a symlinked folder" if resolver == "openat2" else \
        "under a folder swapped for a symlink or a file"  # the walk meets the link as "not a folder"
    assert report.warnings == [f"{swapped[0]}: skipped, it is {kind}; memory files must be regular files"]
