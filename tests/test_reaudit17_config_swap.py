"""Re-audit of the live config (gateway/live_config.py, config-watch): a hermit.yaml swapped while it is loaded.

hermit.yaml may be a symlink (a dotfiles checkout); the loader judges what it names: another user's file, or one
every user may write, is refused (it names the model server, the proxy, the commands). The gateway reloads the
file at every admission and at every save the watch sees, so whoever can swap the file the link names gets
as many tries as they like: the judgement and the read must be of the same file. Real files, a real child
process swapping them as fast as it can, and the real LiveConfig."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from hermit.config.load import load_config
from hermit.config.paths import StatePaths
from hermit.errors import ConfigError
from hermit.gateway.live_config import LiveConfig

ATTACKER = "U0EVIL99"
_SWAP = """
import os, sys
target, good, evil = sys.argv[1:4]
print("swapping", flush=True)
n = 0
while not os.path.exists(sys.argv[4]):
    src = good if n % 2 else evil
    tmp = f"{target}.{n % 2}"
    os.link(src, tmp)
    os.replace(tmp, target)
    n += 1
"""


def _config(owner: str) -> str:
    return yaml.safe_dump({"agents": {"defaults": {"memory_search": {"provider": "none"}}},
                           "channels": {"slack": {"accounts": {"work": {"owners": [owner]}}}}})


def test_a_file_swapped_between_the_ownership_check_and_the_read_is_never_applied(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    dotfiles = tmp_path / "dotfiles"  # the folder the link names: someone else may write there
    dotfiles.mkdir(mode=0o777)
    os.chmod(dotfiles, 0o777)
    good, evil = tmp_path / "good.yaml", tmp_path / "evil.yaml"
    good.write_text(_config("U0OWNER1"), encoding="utf-8")
    os.chmod(good, 0o600)
    evil.write_text(_config(ATTACKER), encoding="utf-8")
    os.chmod(evil, 0o666)  # every user may write it: never the user's own choice (and, as root, not root's)
    if os.geteuid() == 0:
        os.chown(evil, 65534, 65534)
    target = dotfiles / "hermit.yaml"
    os.link(good, target)
    (home / "hermit.yaml").symlink_to(target)
    live = LiveConfig(load_config(StatePaths(home)))
    stop = tmp_path / "stop"

    swapper = subprocess.Popen([sys.executable, "-c", _SWAP, str(target), str(good), str(evil), str(stop)],
                               stdout=subprocess.PIPE, text=True)
    applied: list[str] = []
    refused = 0
    try:
        assert swapper.stdout is not None and swapper.stdout.readline() == "swapping\n"
        for _ in range(4000):
            try:
                cfg = live.current()
            except ConfigError:
                refused += 1
                continue
            applied.extend(cfg.config.channels.accounts_of("slack")["work"].owners)
    finally:
        stop.touch()
        assert swapper.wait(timeout=60) == 0
    assert refused, "the swap never showed the attacker's file: the race was not run"
    assert ATTACKER not in applied, f"the attacker's config was applied {applied.count(ATTACKER)} time(s)"
