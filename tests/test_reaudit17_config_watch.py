"""Re-audit of the config watch (gateway/config_watch.py): a hermit.yaml that is a symlink (a dotfiles checkout).

The loader reads a symlinked hermit.yaml through its link (judging the file it names), and every reader's look
stats through it; the watch looked only at the state dir, where a save of the file the link names changes
nothing: a raised `max_concurrent_turns` waited for the next message. The real watch (watchfiles, inotify),
real files, and a listener told by the real LiveConfig; waits are on events, with a bound that fails the test."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

from hermit.config.load import LoadedConfig, load_config
from hermit.config.paths import StatePaths
from hermit.gateway.config_watch import ConfigWatcher
from hermit.gateway.live_config import LiveConfig


def _save(folder: Path, bound: int) -> None:
    tmp = folder / "hermit.yaml.new"
    tmp.write_text("agents:\n  defaults:\n    memory_search:\n      provider: none\n"
                   f"    max_concurrent_turns: {bound}\n", encoding="utf-8")
    os.chmod(tmp, 0o600)
    os.replace(tmp, folder / "hermit.yaml")


def _bound(loaded: LoadedConfig) -> int:
    return loaded.agent().settings.max_concurrent_turns


def test_a_save_of_the_file_a_symlinked_hermit_yaml_names_is_seen(tmp_path: Path) -> None:
    home, dotfiles = tmp_path / "home", tmp_path / "dotfiles"
    home.mkdir(mode=0o700)
    dotfiles.mkdir(mode=0o700)
    _save(dotfiles, 1)
    (home / "hermit.yaml").symlink_to(dotfiles / "hermit.yaml")
    live = LiveConfig(load_config(StatePaths(home)))
    assert _bound(live.current()) == 1
    raised = threading.Event()
    live.listen(lambda new: raised.set() if _bound(new) == 3 else None)
    watch = ConfigWatcher(live)

    async def main() -> None:
        await watch.start()
        try:
            assert await asyncio.to_thread(watch.watching.wait, 20)
            _save(dotfiles, 3)  # replaced by rename, as editors save
            assert await asyncio.to_thread(raised.wait, 20), "the watch never saw the save"
            raised.clear()
            with open(dotfiles / "hermit.yaml", "r+", encoding="utf-8") as f:  # and edited in place
                text = f.read()
                f.seek(0)
                f.write(text.replace("max_concurrent_turns: 3", "max_concurrent_turns: 5"))
            assert await asyncio.to_thread(_wait_bound, live, watch, 5), "the watch never saw the edit in place"
        finally:
            await watch.stop()

    asyncio.run(main())


def _wait_bound(live: LiveConfig, watch: ConfigWatcher, want: int) -> bool:
    """Whether the watch's own looks reach `want` (each look sets `seen`); bounded by the events it gets."""
    for _ in range(50):
        if _bound(live.last_good()) == want:
            return True
        watch.seen.clear()
        if not watch.seen.wait(20):
            return False
    return False
