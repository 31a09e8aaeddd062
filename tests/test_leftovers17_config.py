"""LiveConfig and a same-size edit in place within one tick of the kernel's coarse clock.

File stamps (mtime, ctime) come from a coarse clock: on an older kernel, or a filesystem with whole-second
stamps, an edit of hermit.yaml in place that keeps its size, made in the same tick as the gateway's last read,
leaves the stat key (device, inode, size, mtime, ctime) as it was. The half-old text read then would stay in
force until the next save: a removed owner still an owner. This kernel gives a fine-grained ctime after a stat,
so the test stands in for such a filesystem: LiveConfig's `os.stat` reports each file's stamps as first seen
(the clock did not tick during the test), and its wall clock is set to that tick (no sleep, no real time).
Everything else is real: the file, the loader, the edit in place.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from hermit.config import StatePaths, load_config
from hermit.config.load import LoadedConfig
from hermit.gateway import live_config
from hermit.gateway.live_config import LiveConfig
from hermit.memory.policy.audience import RACY_NS

OLD, NEW = "1001", "2002"  # the same length: the edit keeps the file's size


def text(owner: str) -> str:
    return f'channels: {{telegram: {{accounts: {{default: {{owners: ["{owner}"]}}}}}}}}\n'


class FrozenStamps(ModuleType):
    """`os` as LiveConfig uses it, on a filesystem whose clock has not ticked since each file was first seen:
    stat reports that first mtime and ctime (device, inode, size and mode as they are)."""

    def __init__(self) -> None:
        super().__init__("os")
        self.first: dict[str, tuple[int, int]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def stat(self, path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        st = os.stat(path, *args, **kwargs)
        mtime, ctime = self.first.setdefault(os.fspath(path), (st.st_mtime_ns, st.st_ctime_ns))
        fields = list(st[:10]) + [mtime / 1e9, mtime / 1e9, ctime / 1e9, st.st_atime_ns, mtime, ctime]
        return os.stat_result(fields)

    def tick(self, path: Path) -> int:
        return self.stat(path).st_ctime_ns


def owners(loaded: LoadedConfig) -> list[str]:
    return loaded.config.channels.telegram.accounts["default"].owners


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> FrozenStamps:
    fs = FrozenStamps()
    monkeypatch.setattr(live_config, "os", fs)
    return fs


def test_a_same_size_edit_in_the_reads_tick_is_applied_at_the_next_look(tmp_path: Path,
                                                                       frozen: FrozenStamps) -> None:
    path = tmp_path / "hermit.yaml"
    path.write_text(text(OLD), encoding="utf-8")
    live = LiveConfig(load_config(StatePaths(tmp_path)))
    tick = frozen.tick(path)
    live.clock = lambda: tick + 1_000_000  # the gateway's look, 1 ms into the tick the file was written in
    seen: list[list[str]] = []
    live.listen(lambda new: seen.append(owners(new)))
    assert owners(live.current()) == [OLD]
    before, key = os.stat(path), live_config.file_key(live.started.paths)
    with path.open("r+", encoding="utf-8") as f:  # an edit in place, same size: the owner replaced
        f.write(text(NEW))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert live_config.file_key(live.started.paths) == key  # the key LiveConfig sees did not change
    assert owners(live.current()) == [NEW]  # was [OLD] (until the next save)
    assert seen[-1] == [NEW]


def test_a_recent_file_is_read_again_only_until_its_stamp_is_old_enough(tmp_path: Path,
                                                                       frozen: FrozenStamps) -> None:
    """Within RACY_NS of the file's ctime each look reads it again; an unchanged text keeps the config object
    (the access views cached by it are not rebuilt) and tells no listener. Once a read is later than that,
    the key is trusted again: no more reads."""
    path = tmp_path / "hermit.yaml"
    path.write_text(text(OLD), encoding="utf-8")
    reads: list[int] = []

    def load(paths: StatePaths) -> LoadedConfig:
        reads.append(1)
        return load_config(paths)

    live = LiveConfig(load_config(StatePaths(tmp_path)), load=load)
    tick = frozen.tick(path)
    now = [tick + 1_000_000]
    live.clock = lambda: now[0]
    told: list[LoadedConfig] = []
    live.listen(told.append)
    first = live.current()
    assert len(reads) == 1 and told == [first]
    assert live.current() is first and live.current() is first
    assert len(reads) == 3 and told == [first]  # read again, nothing changed, nobody told
    now[0] = tick + RACY_NS + 1
    assert live.current() is first and len(reads) == 4  # the read that is late enough to trust the key
    for _ in range(3):
        assert live.current() is first
    assert len(reads) == 4 and told == [first]


def test_a_recent_file_made_invalid_in_the_same_tick_fails_closed(tmp_path: Path, frozen: FrozenStamps) -> None:
    """The same edit made invalid (a YAML error of the same size) is seen too: no channel sender is an owner."""
    from hermit.errors import ConfigError

    path = tmp_path / "hermit.yaml"
    path.write_text(text(OLD), encoding="utf-8")
    live = LiveConfig(load_config(StatePaths(tmp_path)))
    tick = frozen.tick(path)
    live.clock = lambda: tick
    assert owners(live.current()) == [OLD]
    with path.open("r+", encoding="utf-8") as f:
        f.write(text(OLD).replace("{", "[", 1))
    with pytest.raises(ConfigError):
        live.current()
