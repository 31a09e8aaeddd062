"""Re-audit s21 (t12): hermit.yaml saved in place in pieces is never read as the prefix written so far.

An editor that saves in place (nano, a JSON writer) truncates the file and writes it in pieces. The gateway reads
hermit.yaml at every admission, and a prefix of a two-agent config can parse: the one ending after `group_allow_from`
lets the family group in and routes it to the default agent `main` (its MEMORY.md, the owner's tools), because the
binding to `family` is not written yet. config/load.read_settled reads a file changed under SETTLE_NS ago only once
it is that old, and again when it changed during the read.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

import hermit.config.load as load_module
from hermit.agent.routing import RouteInput, Router
from hermit.config import StatePaths, load_config
from hermit.gateway.live_config import LiveConfig

FULL = """# Hermit config
agents:
  defaults:
    model: fake/test-model
    timezone: UTC
  list:
    - id: main
    - id: family
      workspace: family-ws
      sandbox: {mode: all}
models:
  providers:
    fake: {type: openai-compatible, base_url: "http://127.0.0.1:9/v1"}
channels:
  telegram:
    accounts:
      default:
        token: "123:TEST"
        owners: ["1001"]
        dm_policy: allowlist
        allow_from: ["2002"]
        group_policy: allowlist
        groups: ["-100500"]
        group_allow_from: ["2002"]
bindings:
  - match: {channel: telegram, peer: {kind: group, id: "-100500"}}
    agent_id: family
"""
# Where the editor's first piece ends: a config that loads, lets the group in and routes it to main.
CUT = FULL.index("bindings:")
GROUP = RouteInput("telegram", "default", "group", "-100500")


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / "family-ws").mkdir(parents=True)
    os.chmod(home, 0o700)
    return home


def _save_in_place(path: Path, pause_done: threading.Event, gap: float) -> threading.Thread:
    """An editor saving in place: truncate, write the first piece, and the rest `gap` seconds later."""
    with open(path, "w") as f:
        f.write(FULL[:CUT])

    def rest() -> None:
        time.sleep(gap)  # the editor's own pause between its writes (not the test waiting for anything)
        with open(path, "r+") as f:
            f.seek(CUT)
            f.write(FULL[CUT:])
        pause_done.set()

    t = threading.Thread(target=rest)
    t.start()
    return t


def test_the_prefix_alone_routes_the_family_group_to_main(tmp_path: Path) -> None:
    """The control: the first piece on its own is a valid config sending the family group to the default agent."""
    home = _home(tmp_path)
    (home / "hermit.yaml").write_text(FULL[:CUT])
    loaded = load_config(StatePaths(home))
    assert Router.from_config(loaded).resolve(GROUP).agent_id == "main"
    assert loaded.config.channels.accounts_of("telegram")["default"].groups == ["-100500"]


@pytest.mark.parametrize("through_live", [False, True])
def test_a_save_in_place_in_pieces_is_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 through_live: bool) -> None:
    # The settle time raised from 50 ms so that the editor's pause (0.2 s here, microseconds in a real save) is
    # inside it on a loaded machine; the reader is otherwise the real one.
    monkeypatch.setattr(load_module, "SETTLE_NS", 1_500_000_000, raising=False)
    monkeypatch.setattr(load_module, "SETTLE_MAX_S", 10.0, raising=False)
    home = _home(tmp_path)
    path = home / "hermit.yaml"
    path.write_text(FULL.replace("-100500", "-100999"))  # the config in force before the save
    live = LiveConfig(load_config(StatePaths(home))) if through_live else None
    done = threading.Event()
    writer = _save_in_place(path, done, 0.2)
    try:
        loaded = live.current() if live is not None else load_config(StatePaths(home))
    finally:
        writer.join()
    assert done.is_set()
    assert Router.from_config(loaded).resolve(GROUP).agent_id == "family", \
        "the half-written file was taken for the config: the family group went to agent main"
    assert len(loaded.config.bindings) == 1

