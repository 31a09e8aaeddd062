"""`hermit pairing approve` killed (SIGKILL) between its two writes, then the owner denies the code it still
lists as pending: the sender must not be let in.

Approving writes the allow file and then drops the request from pairing.json. Killed between the two, the
request stayed pending while the sender was already allowed: `hermit pairing deny` said "denied" and the
sender was still admitted. The request now leaves pairing.json first, so a kill between the writes fails
closed (the sender is not let in; their next message gets a new code). Played as this process's uid and, when
the tests run as root, as uid 65534 too (CI and containers run as root).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from ciguard import need
from prochelpers import PROC_TIMEOUT, python_as, pythonpath

# Loaded into every Python process the test starts (sitecustomize). With HERMIT_TEST_KILL_AFTER=N the process
# SIGKILLs itself right after its N-th atomic write of a pairing file lands, the way a crash or an OOM kill would.
KILLER = """
import os, signal
after = int(os.environ.get("HERMIT_TEST_KILL_AFTER") or 0)
if after:
    import hermit.channels.pairing as pairing
    _write, _done = pairing.write_atomic, [0]
    def _killing(path, *a, **k):
        _write(path, *a, **k)
        _done[0] += 1
        if _done[0] == after:
            os.kill(os.getpid(), signal.SIGKILL)
    pairing.write_atomic = _killing
"""
# The gateway's side, run as the same uid as the CLI: a DM from sender 666 checked by access control.
CHECK = """
import json, sys
from pathlib import Path
from hermit.channels.access import AccessControl, PairingStore
from hermit.config.schema import ChannelsConfig
store = PairingStore(Path(sys.argv[1]))
ac = AccessControl(ChannelsConfig.model_validate({"telegram": {"accounts": {"bot": {}}}}), store)
d = ac.check("telegram", "bot", "dm", "666", "666", sender_name="Mallory")
print(json.dumps({"allowed": d.allowed, "reply": d.reply, "pending": [r.code for r in store.pending()],
                  "approved": sorted(store.approved_senders("telegram", "bot"))}))
"""

AS_USERS: list[dict[str, Any]] = [{}]
if os.geteuid() == 0:
    AS_USERS.append({"user": 65534, "group": 65534, "extra_groups": []})


def _env(home: Path, hooks: Path, **extra: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "PYTHONPATH": os.pathsep.join([str(hooks), pythonpath()]),
            **extra}


def _hermit(python: str, home: Path, hooks: Path, as_user: dict[str, Any], *args: str,
            **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, "-m", "hermit.cli.main", "--home", str(home), *args], env=_env(home, hooks, **env),
                          text=True, capture_output=True, timeout=PROC_TIMEOUT, **as_user)


def _dm(python: str, home: Path, hooks: Path, as_user: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run([python, "-c", CHECK, str(home)], env=_env(home, hooks), text=True, capture_output=True,
                          timeout=PROC_TIMEOUT, **as_user)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize("as_user", AS_USERS, ids=lambda u: "uid-" + str(u.get("user", os.geteuid())))
def test_an_approval_killed_half_way_then_denied_does_not_let_the_sender_in(as_user: dict[str, Any]) -> None:
    python = python_as(as_user)
    need(python is not None, f"an interpreter that can import this checkout as uid {as_user.get('user')}")
    assert python is not None
    base = Path(tempfile.mkdtemp(prefix="hermit-crash-pairing-"))  # not under /root: the other uid reaches it
    try:
        os.chmod(base, 0o755)
        home, hooks = base / "home", base / "hooks"
        hooks.mkdir()
        (hooks / "sitecustomize.py").write_text(KILLER)
        home.mkdir()
        if as_user:
            os.chown(home, as_user["user"], as_user["group"])
        first = _dm(python, home, hooks, as_user)
        assert not first["allowed"] and first["reply"] and len(first["pending"]) == 1
        code = first["pending"][0]

        # Killed right after the first of the approval's two writes.
        killed = _hermit(python, home, hooks, as_user, "pairing", "approve", "telegram", code,
                         HERMIT_TEST_KILL_AFTER="1")
        assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr)

        # The owner, seeing the approval fail, turns the sender down while the code is still listed.
        listed = _hermit(python, home, hooks, as_user, "pairing", "list", "telegram", "--json")
        assert listed.returncode == 0, listed.stderr
        if code in [r["code"] for r in json.loads(listed.stdout)["pending"]]:
            denied = _hermit(python, home, hooks, as_user, "pairing", "deny", "telegram", code)
            assert denied.returncode == 0, denied.stderr
        after = _dm(python, home, hooks, as_user)
        assert not after["allowed"], after
        assert "666" not in after["approved"]
    finally:
        shutil.rmtree(base, ignore_errors=True)
