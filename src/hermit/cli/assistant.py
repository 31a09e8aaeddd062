"""Building the agent runtime for `hermit agent` / `hermit chat` / the gateway: the model (chosen by
cli/model_choice.py), the memory service, the exec environment and the cron tool.

This module loads the agent runtime and the model clients: only commands that run the agent import it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from hermit.agent.runtime import AgentRuntime
from hermit.channels.access import AccessControl
from hermit.channels.pairing import PairingStore
from hermit.cli.context import PROVIDER_KEY_VARS, CliContext
from hermit.cli.model_choice import NoModelConfigured, choose_model_ref
from hermit.cli.running_gateway import start_or_restart
from hermit.config.load import AgentConfig, LoadedConfig
from hermit.models.registry import build_model
from hermit.scheduler import CronJobs

# Model choice and the provider key names live in light modules (masking and `models list` need them); they are
# named here too for callers that build the runtime.
__all__ = ["PROVIDER_KEY_VARS", "NoModelConfigured", "build_runtime", "choose_model_ref", "exec_environment"]


def exec_environment(environ: Mapping[str, str], loaded: LoadedConfig) -> dict[str, str]:
    """The environment exec commands get: Hermit's own provider keys removed, so a command the
    model runs (`env`, a prompt-injected `curl`) cannot read them."""
    secret = set(PROVIDER_KEY_VARS)
    secret.update(pc.api_key_env for pc in loaded.config.models.providers.values() if pc.api_key_env)
    secret.update(a.settings.memory_search.remote.api_key_env for a in loaded.agents
                  if a.settings.memory_search.remote.api_key_env)
    return {k: v for k, v in environ.items() if k not in secret}


def build_runtime(ctx: CliContext, agent: AgentConfig | None = None, *, long_lived: bool = False) -> AgentRuntime:
    """The runtime of `agent` (default: the CLI's agent); `long_lived` processes (the gateway) keep the
    search matrix in memory."""
    loaded = ctx.config()
    agent = agent or ctx.agent()
    if not long_lived:  # (the gateway finishes every agent's at its start: cli/gateway.py)
        from hermit.tools.room_sweep import finish_left

        finish_left(agent.sessions_dir.parent / "rooms")  # a room a killed Hermit left half-merged: whole before a turn
    model = build_model(choose_model_ref(agent, loaded, ctx.environ), loaded.config.models, ctx.environ,
                        notify=lambda text: print(text, file=sys.stderr, flush=True))
    memory = ctx.memory_service(agent, long_lived=long_lived) if agent.settings.memory_search.enabled else None
    # The cron tool (main session only) edits the job file; the gateway's scheduler runs the jobs. The
    # owner's ids (channels' `owners`) mark the owner's own messages in a group (agent/speakers.py): the
    # gateway, where group messages arrive, replaces this check with hermit.yaml as it is now
    # (LiveAccess.is_owner in gateway/live_config.py).
    return AgentRuntime(agent, model, memory=memory, exec_env=exec_environment(ctx.environ, loaded),
                        cron=CronJobs(ctx.home, loaded, for_model=True, restart=lambda: start_or_restart(ctx)),
                        owner_check=AccessControl(loaded.config.channels, PairingStore(ctx.home)).is_owner)
