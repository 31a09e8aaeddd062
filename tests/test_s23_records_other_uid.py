"""`hermit channels accept-routes` run by another uid on a state dir shared with it (s23 t13, a held attack).

The trust records (owner routes, the accounts' bots, the agents' workspaces) are what makes a start refuse a changed
bot or an owner moved to another agent; accept-routes rewrites them from hermit.yaml. A second local user who can
reach the owner's state dir (its group shares it) and runs accept-routes with another bot's token must neither write
a record nor leave the owner's start adopting that bot: the command refuses the state dir (another user's) and every
record keeps its bytes, so the owner's bot change is still caught. Real processes, as uid 65534 against root's state
dir.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ciguard import need
from hermit.channels import account_identity
from hermit.channels.pairing import PairingStore
from hermit.config import StatePaths, load_config
from hermit.gateway import owner_routes
from prochelpers import PROC_TIMEOUT, python_as, pythonpath, shared_dir
from test_s23_records_trust import RECORDS, TOKEN, _home, _ran

OTHER_BOT = {"TG_FAM": "99:secret-of-another-bot"}


def test_accept_routes_by_another_uid_on_a_shared_state_dir_writes_no_record(tmp_path: Path) -> None:
    need(os.geteuid() == 0, "root, to run the command as uid 65534")
    user = {"user": 65534, "group": 65534, "extra_groups": []}
    python = python_as(user)
    assert python is not None, "a Python that can import this checkout as uid 65534"
    with shared_dir("t13-records-", mode=0o755) as base:
        home = _home(base)
        _ran(home)  # the owner's gateway ran: all three records written, a sender approved on the family bot
        paths = [home / "channels" / "owner-routes.json", *(home.joinpath(*RECORDS[w]) for w in RECORDS)]
        before = {p: p.read_bytes() for p in paths}
        # The state dir shared with the group of uid 65534 (folders only: hermit.yaml stays the owner's alone).
        for folder in [home, *(p for p in home.rglob("*") if p.is_dir())]:
            os.chown(folder, 0, 65534)
            folder.chmod(0o770)
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath(), "HERMIT_HOME": str(home), "HOME": str(base),
               "CI": os.environ.get("CI", ""), **OTHER_BOT}
        done = subprocess.run([python, "-m", "hermit.cli.main", "channels", "accept-routes", "--yes"],
                              capture_output=True, text=True, env=env, timeout=PROC_TIMEOUT, **user)
        assert done.returncode != 0, done.stdout + done.stderr
        assert "belongs to another user (uid 0)" in done.stderr, done.stderr
        assert {p: p.read_bytes() for p in paths} == before  # no record written, none replaced
        assert all(p.stat().st_uid == 0 for p in paths)
        # The owner's start still trusts its records, and the other bot under the family account is still caught.
        for folder in [home, *(p for p in home.rglob("*") if p.is_dir())]:
            os.chown(folder, 0, 0)
            folder.chmod(0o700)
        loaded = load_config(StatePaths(home))
        owner_routes.check_start(home, loaded)
        retired = account_identity.retire_changed(PairingStore(home), loaded, OTHER_BOT)
        assert retired and not PairingStore(home).allow_file("telegram", "family").exists(), retired
        assert account_identity.retire_changed(PairingStore(home), loaded, OTHER_BOT) == []  # recorded once
        assert TOKEN  # the family bot's token the records were made with
