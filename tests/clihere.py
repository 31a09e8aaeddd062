"""`hermit ARGS` run in this process, for a test whose subject is something else: the `hermit init` or `hermit
setup` that only makes the state dir a test starts from. The same CLI code as the subprocess it replaces (its
`main`, the environment that subprocess would have had, piped stdin), without the Python start and imports of a
new process (about a second of CPU each, several on a loaded machine). What a test asserts on — the real CLI's
output and exit status, a prompt on a terminal, Ctrl-C, a killed process — stays a subprocess.

Like the subprocess it replaces, the call leaves nothing behind in this process: os.environ, stdin/stdout/stderr
and the secrets the command registered for masking (redaction.KNOWN is process-wide: a key a setup stored would
otherwise be masked in what later tests on this pytest worker print) are as they were before it."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from hermit import redaction
from hermit.cli.main import main


@contextlib.contextmanager
def environment(env: Mapping[str, str]) -> Iterator[None]:
    """os.environ is exactly `env` for the duration (restored after)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def secrets_kept_to_the_call() -> Iterator[None]:
    """The process-wide masker's secrets (and the sources it has yet to read) are as before, after the block."""
    known = redaction.KNOWN
    with known._lock:
        secrets, pending = known._secrets, list(known._pending)
    try:
        yield
    finally:
        with known._lock:
            known._secrets, known._pending[:] = secrets, pending


def hermit_here(home: Path, *args: str, env: Mapping[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    """`hermit --home HOME ARGS` in this process under environment `env` (the one the subprocess would get) with
    `stdin` piped in: its exit status and what it printed, as subprocess.run gives them."""
    argv = ["--home", str(home), *args]
    out, err = io.StringIO(), io.StringIO()
    saved_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with environment(env), secrets_kept_to_the_call(), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        sys.stdin = saved_stdin
    return subprocess.CompletedProcess(["hermit", *argv], code, out.getvalue(), err.getvalue())
