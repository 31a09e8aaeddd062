"""Workspace files: creating them from templates (never overwriting) and reading bootstrap files with caps.

The workspace holds the owner's notes, so what Hermit creates there is owner-only (directories 0700,
files 0600) whatever the umask; files and folders the owner made by hand keep their own modes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from hermit.config.paths import PRIVATE_FILE_MODE, ensure_private_dir, not_own_note
from hermit.durable import create_new
from hermit.redaction import mask
from hermit.textfile import decode_text, read_regular_stat

log = logging.getLogger("hermit.workspace")

HEARTBEAT_FILE = "HEARTBEAT.md"
BOOTSTRAP_ORDER = ("AGENTS.md", "SOUL.md", "TOOLS.md", "IDENTITY.md", "USER.md", HEARTBEAT_FILE, "BOOTSTRAP.md")
MEMORY_FILE = "MEMORY.md"
# The owner's own files: read into the main private session only (SPEC §3: MEMORY.md, and HEARTBEAT.md, the
# checklist only the main session's heartbeat follows), and owner-only whole for every other reader
# (memory/policy/audience.py `is_private_path`; the file tools of an unsandboxed chat hide them too).
MAIN_SESSION_FILES = (HEARTBEAT_FILE, MEMORY_FILE)
TEMPLATE_FILES = (*BOOTSTRAP_ORDER, MEMORY_FILE)


def template_text(name: str) -> str:
    return resources.files("hermit").joinpath("templates", name).read_text(encoding="utf-8")


def write_new(path: Path, text: str, mode: int = PRIVATE_FILE_MODE) -> bool:
    """Create `path` with `text` unless it exists (never overwrites, even in a race); a crash while writing
    leaves no partial file under the name."""
    return create_new(path, text, mode)


@dataclass(frozen=True)
class InitReport:
    created: list[str]
    kept: list[str]


def ensure_workspace(workspace: Path) -> InitReport:
    """Create the workspace and its template files; existing files are kept untouched.

    BOOTSTRAP.md (the first-run ritual) is only written into a brand-new workspace.

    The workspace and its memory/ are judged again here, found or made (config.paths.ensure_private_dir with
    `own`): the config's check saw a workspace that did not exist yet (a /tmp one after a reboot) by the folders
    above it, and another user who makes it before this runs would get the templates written into their
    folder and their notes indexed as the owner's. NotOwnFolder then, and nothing is written.
    """
    brand_new = _brand_new(workspace)
    # Only what is created is made 0700 (the state dir too, for the default workspace): an existing folder
    # keeps its mode.
    ensure_private_dir(workspace, own=True, what="the workspace")
    ensure_private_dir(workspace / "memory", own=True, what="the workspace's memory folder")
    _clear_dead_watch(workspace)
    created, kept = [], []
    # BOOTSTRAP.md first: a start killed after it leaves the ritual in place for the next, and one killed before
    # it leaves no file, so the next start still finds the workspace brand-new.
    for name in sorted(TEMPLATE_FILES, key=lambda n: n != "BOOTSTRAP.md"):
        if name == "BOOTSTRAP.md" and not brand_new:
            continue
        if write_new(workspace / name, template_text(name)):
            created.append(name)
        else:
            kept.append(name)
    return InitReport(created, kept)


def _brand_new(workspace: Path) -> bool:
    """No file in the workspace yet: it is missing, empty, or holds only the empty memory/ folder a first start
    killed before its first template file made (that start's ritual must not be lost)."""
    try:
        entries = list(workspace.iterdir())
    except FileNotFoundError:
        return True
    return all(e.name == "memory" and e.is_dir() and not e.is_symlink() and not any(e.iterdir()) for e in entries)


def _clear_dead_watch(workspace: Path) -> None:
    """The journal of notes other chats added while an owner's command ran, left by a watcher killed mid-command
    (memory/policy/added_notes.py): removed at an agent's start rather than at the owner's next command."""
    from hermit.memory.policy import added_notes

    added_notes.clear_dead_now(workspace)


@dataclass(frozen=True)
class BootstrapFile:
    name: str
    text: str | None  # None = missing
    original_chars: int
    truncated: bool
    left_out: str = ""  # why what it says is not in the prompt: another user's, or others may write it


def cap_text(name: str, text: str, max_chars: int) -> tuple[str, bool]:
    """Keep the first 70% and last 20% of an over-long file, with a marker naming the file and the cut."""
    if len(text) <= max_chars:
        return text, False
    head = int(max_chars * 0.7)
    tail = int(max_chars * 0.2)
    marker = (f"\n\n[… {name} truncated: kept the first {head:,} and last {tail:,} of {len(text):,} chars; "
              f"read the file for the rest …]\n\n")
    return text[:head] + marker + text[-tail:], True


def read_bootstrap(
    workspace: Path, *, include_memory: bool, max_chars: int = 20_000, total_max_chars: int = 150_000,
    render: Callable[[str, str], str | None] | None = None,
) -> list[BootstrapFile]:
    """Bootstrap files in prompt order; MEMORY.md and HEARTBEAT.md (MAIN_SESSION_FILES) only when
    `include_memory` (the main private session): no other session sees them at all, not even as missing.
    `render(name, text)` is the file as the session may see it (None: nothing), applied before the caps; then
    every registered secret (hermit.redaction) is masked, for every session.

    A file another user owns or may write (`not_own_note`, judged on the descriptor read) is left out with a
    warning, not obeyed: in the owner's folder it was made before the folder was handed over, copied in with
    its owner kept, or opened up to a shared group. The turn goes on with the owner's other files."""
    names = [n for n in BOOTSTRAP_ORDER if include_memory or n not in MAIN_SESSION_FILES]
    names += [MEMORY_FILE] if include_memory else []
    out: list[BootstrapFile] = []
    budget = total_max_chars
    for name in names:
        p = workspace / name
        try:
            data, st = read_regular_stat(p)  # never open() a FIFO: it would block the turn
        except OSError:  # missing, a directory, a FIFO, unreadable: the prompt says it is missing
            if name == "BOOTSTRAP.md":
                continue  # only exists for a brand-new workspace; its absence is normal
            out.append(BootstrapFile(name, None, 0, False))
            continue
        if (why := not_own_note(st)) is not None:
            log.warning("%s was left out of the prompt: it %s; if what it says is yours, make it yours alone: "
                        "chown $(id -u) %s && chmod 600 %s", p, why, p, p)
            out.append(BootstrapFile(name, f"[{name} left out: another user owns it or may change it, so what it "
                                           "says is not the owner's word]", 0, False, left_out=why))
            continue
        raw = decode_text(data).text
        if render is not None:
            shown = render(name, raw)
            raw = shown if shown is not None else f"[{name}: nothing in it is shared with this chat]"
        # A key a command appended here (its tool result showed `***`) would reach every prompt: masked as
        # read, before the caps, so no cut leaves half a key; the file itself keeps what was written.
        raw = mask(raw)
        text, cut = cap_text(name, raw, min(max_chars, max(budget, 0)))
        if budget <= 0:
            text, cut = f"[{name} omitted: the {total_max_chars:,}-char bootstrap budget is used up]", True
        budget -= len(text)
        out.append(BootstrapFile(name, text, len(raw), cut))
    return out
