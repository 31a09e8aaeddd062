"""The `hermit doctor` check for the exec sandbox: which OS sandbox non-main sessions get and the proof that it
confines them (probed inside it: the uid, no capabilities, mounts refused), or that they get no exec."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermit.cli.checks import Check, check
from hermit.cli.context import CliContext
from hermit.errors import HermitError

if TYPE_CHECKING:
    from hermit.tools.os_sandbox import Backend

FIX = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) to give them a sandboxed exec"


def describe(backend: Backend) -> str | Check:
    if backend.available:
        proof = f" ({'; '.join(backend.proof)})" if backend.proof else ""
        return (f"{backend.detail}: non-main sessions run exec sandboxed in their own room (no network, "
                f"no capabilities, limited processes and disk){proof}")
    return Check("exec sandbox", "warn", f"{backend.detail}: exec is not offered to non-main sessions (groups, "
                                         "channels, other people's DMs); the main session is not affected", FIX)


@check("exec sandbox", fix=FIX)
def exec_sandbox(ctx: CliContext) -> str | Check:
    from hermit.tools.os_sandbox import detect  # the tools package is heavy: only when doctor runs

    try:
        uid = ctx.config().agent().settings.sandbox.uid
    except HermitError:  # a broken config is the config check's to report; probe with the default uid
        uid = 65534
    return describe(detect(sandbox_uid=uid))
