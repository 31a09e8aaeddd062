"""(after the wiring) A raised max_concurrent_turns in hermit.yaml starts a waiting turn in a running gateway: its
config watch reloads the saved file and the turn slots are told."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from agenthelpers import fixed_clock
from channelhelpers import run
from gatewayhelpers import RecordingChannel
from hermit.agent.runtime import AgentRuntime
from hermit.cli.gateway import slot_lines
from hermit.config.load import load_config
from hermit.config.paths import StatePaths
from hermit.gateway.config_watch import ConfigWatcher
from hermit.gateway.supervisor import Gateway
from hermit.models.registry import build_model
from test_turn_bound import CONTACTS, OWNER, HeldProvider, arrives, dm, lined_up


def write(home: Path, provider: HeldProvider, bound: int) -> None:
    tmp = home / "hermit.yaml.new"
    tmp.write_text(f"""agents:
  defaults:
    model: fake/model-x
    timezone: Europe/Paris
    max_concurrent_turns: {bound}
    memory_search:
      provider: none
models:
  providers:
    fake:
      type: openai-compatible
      base_url: {provider.openai_base_url}
      max_retries: 0
channels:
  telegram:
    accounts:
      default:
        owners: ["{OWNER}"]
        allow_from: {list(CONTACTS)}
""")
    os.chmod(tmp, 0o600)
    os.replace(tmp, home / "hermit.yaml")


def test_raising_the_bound_in_hermit_yaml_starts_a_waiting_turn(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    provider = HeldProvider(("tag-c1", "tag-c2", "tag-c3"))
    caplog.set_level(logging.INFO, "hermit.gateway")

    async def main() -> None:
        write(tmp_path, provider, 1)
        loaded = load_config(StatePaths(tmp_path))
        model = build_model("fake/model-x", loaded.config.models, {}, sleep=lambda s: None)
        rt = AgentRuntime(loaded.agent(), model, clock=fixed_clock, fsync=False, home=tmp_path)
        gw = Gateway(loaded, tmp_path, {}, {"main": rt}, "t" * 40, host="127.0.0.1", port=0,
                     channels=[RecordingChannel()], service_factories=[])
        watch = next(s for s in gw.services if isinstance(s, ConfigWatcher))  # started by `serve`, here by hand
        await watch.start()
        assert await asyncio.to_thread(watch.watching.wait, 20)
        try:
            await gw.bus.publish(dm("hi tag-c1", CONTACTS[0]))
            await arrives(provider, "tag-c1")
            await gw.bus.publish(dm("hi tag-c2", CONTACTS[1]))
            await gw.bus.publish(dm("hi tag-c3", CONTACTS[2]))
            await lined_up(gw, provider, 2, bound=1)
            write(tmp_path, provider, 2)  # no restart, no new message
            await arrives(provider, "tag-c2")
            assert not provider.arrived["tag-c3"].is_set()
            assert slot_lines(gw.bus.status()) == [
                "  agent main: 2 of 2 turn slots in use, waiting: owner 0, scheduled 0, contacts 1"]
            write(tmp_path, provider, 1)  # lowered: both go on
            assert slot_lines(gw.bus.status()) == [
                "  agent main: 1 of 1 turn slots in use, +1 started before the bound was lowered to 1, waiting: owner 0, "
                "scheduled 0, contacts 1"]
            provider.let_all_go()
            assert await gw.bus.drain(20)
        finally:
            provider.let_all_go()
            await watch.stop()
        assert sorted(provider.started) == ["tag-c1", "tag-c2", "tag-c3"]
        assert "applied agents.main.max_concurrent_turns" in caplog.text

    with provider:
        run(main)
