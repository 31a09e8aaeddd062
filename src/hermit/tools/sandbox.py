"""Where tool paths point: resolving them against the workspace, and the strict sandbox that confines them.

Relative paths are relative to the agent's workspace. In a confined (sandboxed) session every path a
file tool touches must resolve — after expanding `~`, collapsing `..` and following symlinks — to the
workspace or something inside it (SPEC §12); anything else is a PathPolicyError naming the rule.

exec is checked the same way on a best-effort basis: the command line is tokenised like a shell
would, and every path-like word (absolute, `~`, or containing `..`) must resolve inside the
workspace, except programs found on PATH in command position and a few /dev files. That check only
gives a clear early message: a command can compute a path at run time, so a confined session's exec
also runs inside the OS sandbox (os_sandbox.py), which is the guarantee.

Hidden files (MEMORY.md outside the main session) are matched by file identity, and while any are
hidden, hard-linked files are refused too: a hard link is the same file under another name.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hermit.errors import PathPolicyError
from hermit.memory.policy.privacy import is_hard_linked, is_same_file

SANDBOX_RULE = ("sandbox rule: in this session, tools may only use paths inside the workspace {ws} "
                "(checked after resolving '..', '~' and symlinks)")
PRIVACY_RULE = ("privacy rule: MEMORY.md is only used in the main private session, never in group, "
                "channel or other people's chats")
_DEV_ALLOWED = frozenset({"/dev/null", "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/zero",
                          "/dev/urandom", "/dev/random", "/dev/tty"})
_OPERATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", "|&", ";;", "\n"})
_REDIRECTS = frozenset({"<", ">", ">>", "<<", "<<<", ">&", "<&", "&>", "&>>", ">|"})


def is_within(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


@dataclass(frozen=True)
class ResolvedPath:
    real: Path  # absolute, symlinks resolved
    shown: str  # workspace-relative when inside the workspace, else absolute


@dataclass(frozen=True)
class PathResolver:
    """Resolves tool paths for one session. `home` is what `~` means (injected for tests)."""

    workspace: Path
    confined: bool
    home: Path | None = None
    # Files no tool may touch in this session (MEMORY.md outside the main session), resolved paths;
    # matched by identity, and when any are hidden, hard-linked files are refused too.
    hidden: frozenset[Path] = frozenset()

    @property
    def root(self) -> Path:
        return self.workspace.resolve()

    def rule(self) -> str:
        return SANDBOX_RULE.format(ws=self.root)

    def expand(self, raw: str) -> Path:
        if raw.startswith("~"):
            home = self.home if self.home is not None else Path.home()
            first, _, rest = raw[1:].partition("/")
            if first:  # ~otheruser/...
                return Path(os.path.expanduser(raw))
            return home / rest if rest else home
        return Path(raw)

    def resolve(self, raw: str, *, what: str = "path") -> ResolvedPath:
        if not raw or not raw.strip():
            raise PathPolicyError(f"empty {what}", "pass a file path relative to the workspace")
        if "\x00" in raw:
            raise PathPolicyError(f"{what} contains a NUL byte", "pass a plain file path")
        given = self.expand(raw.strip())
        candidate = given if given.is_absolute() else self.workspace / given
        real = Path(os.path.realpath(candidate))
        root = self.root
        if self.confined and not is_within(real, root):
            why = "a symlink that leads" if _has_symlink(candidate, root) else "a path"
            raise PathPolicyError(f"{what} {raw!r} is {why} outside the workspace (resolves to {real})",
                                  self.rule())
        self._check_hidden(raw, real)
        return ResolvedPath(real, self.shown(real))

    def _check_hidden(self, raw: str, real: Path) -> None:
        # By file identity, not name: a hard link is MEMORY.md under another name (memory/policy/privacy.py).
        if not self.hidden:
            return
        if real in self.hidden or is_same_file(real, self.hidden):
            raise PathPolicyError(f"{raw!r} is owner-only (private long-term memory, the heartbeat checklist) and "
                                  "is not available in this session", PRIVACY_RULE)
        if is_within(real, self.root) and is_hard_linked(real):  # system files (perl) may be hard-linked
            raise PathPolicyError(f"{raw!r} is a hard-linked file, which may be private long-term memory under "
                                  "another name; it is not available in this session",
                                  PRIVACY_RULE + "; the owner can remove the extra link")

    def shown(self, real: Path) -> str:
        root = self.root
        if is_within(real, root):
            rel = real.relative_to(root).as_posix()
            return rel if rel != "." else "."
        return str(real)

    def check_command(self, command: str, program_dirs: Sequence[Path], cwd: Path | None = None) -> None:
        """In a confined session, refuse a shell command that names a path outside the workspace."""
        if not self.confined:
            return
        base = cwd or self.workspace
        try:
            lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            lexer.commenters = ""
            words = list(lexer)
        except ValueError as e:
            raise PathPolicyError(f"cannot parse the command ({e})",
                                  "check the quoting; " + self.rule()) from e
        command_position = True
        for word in words:
            if word in _OPERATORS:
                command_position = True
                continue
            if word in _REDIRECTS:
                continue
            for candidate in _path_candidates(word, base):
                self._check_word(candidate, base, command_position, program_dirs)
            if command_position and "=" in word and not word.startswith(("/", "~", ".")):
                continue  # VAR=value before the command
            command_position = False

    def _check_word(self, word: str, base: Path, command_position: bool, program_dirs: Sequence[Path]) -> None:
        if word in _DEV_ALLOWED or word.startswith("/proc/self/fd/"):
            return
        given = self.expand(word)
        candidate = given if given.is_absolute() else base / given
        real = Path(os.path.realpath(candidate))
        self._check_hidden(word, real)
        if is_within(real, self.root):
            return
        if command_position and any(is_within(real, d.resolve()) for d in program_dirs) and real.is_file():
            return  # running /usr/bin/env is fine; reading /etc/passwd with it is not
        raise PathPolicyError(f"exec refused: {word!r} is outside the workspace (resolves to {real})",
                              self.rule())


def _path_candidates(word: str, base: Path) -> list[str]:
    """The parts of a shell word that could be paths (the word, `--opt=value` / `VAR=value` values):
    path-looking text, or a name that exists relative to the command's cwd (it may be a symlink)."""
    parts = [word]
    if "=" in word:
        parts.append(word.split("=", 1)[1])
    out = []
    for p in parts:
        if not p:
            continue
        looks_like_path = (p.startswith(("/", "~")) or p == ".." or p.startswith("../") or "/../" in p
                           or p.endswith("/.."))
        if looks_like_path or os.path.lexists(base / p):
            out.append(p)
    return out


def _has_symlink(candidate: Path, root: Path) -> bool:
    probe = Path(os.path.abspath(candidate))
    while probe != probe.parent:
        if probe.is_symlink():
            return True
        if probe == root:
            break
        probe = probe.parent
    return False
