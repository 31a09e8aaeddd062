"""Building the agent runtime for `hermit agent` / `hermit chat`: model choice from config and keys,
memory service, and the one-screen help shown when no model provider is configured.

Model choice, in order: the agent's `model` setting; the only model listed under
`models.providers`; anthropic/claude-sonnet-4-5 when ANTHROPIC_API_KEY is set; openai/gpt-4.1 when
OPENAI_API_KEY is set. Nothing matching raises NoModelConfigured, which chat turns into the help screen.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from hermit.agent.runtime import AgentRuntime
from hermit.channels.access import AccessControl
from hermit.channels.pairing import PairingStore
from hermit.cli.context import CliContext
from hermit.config.load import AgentConfig, LoadedConfig
from hermit.errors import ConfigError
from hermit.models.registry import build_model
from hermit.scheduler import CronJobs

PROVIDER_KEY_VARS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY", "GEMINI_API_KEY",
                     "GOOGLE_API_KEY")
KEY_DEFAULTS = (("ANTHROPIC_API_KEY", "anthropic/claude-sonnet-4-5"), ("OPENAI_API_KEY", "openai/gpt-4.1"))


class NoModelConfigured(ConfigError):
    """No model is set and none can be inferred from the config or the environment."""


def choose_model_ref(agent: AgentConfig, loaded: LoadedConfig, environ: Mapping[str, str]) -> str:
    if agent.settings.model:
        return agent.settings.model
    listed = [f"{name}/{model}" for name, pc in loaded.config.models.providers.items() for model in pc.models]
    if len(listed) == 1:
        return listed[0]
    for env, ref in KEY_DEFAULTS:
        if environ.get(env):
            return ref
    raise NoModelConfigured(
        "no language model is configured",
        "run `hermit setup` (it asks which model, checks it and keeps the key in hermit.env); or put "
        "ANTHROPIC_API_KEY / OPENAI_API_KEY in hermit.env, or agents.defaults.model in the config",
    )


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
    model = build_model(choose_model_ref(agent, loaded, ctx.environ), loaded.config.models, ctx.environ,
                        notify=lambda text: print(text, file=sys.stderr, flush=True))
    memory = ctx.memory_service(agent, long_lived=long_lived) if agent.settings.memory_search.enabled else None
    # The cron tool (main session only) edits the job file; the gateway's scheduler runs the jobs. The
    # owner's ids (channels' `owners`) mark the owner's own messages in a group (agent/speakers.py): the
    # gateway, where group messages arrive, replaces this check with hermit.yaml as it is now
    # (LiveAccess.is_owner in gateway/live_config.py).
    return AgentRuntime(agent, model, memory=memory, exec_env=exec_environment(ctx.environ, loaded),
                        cron=CronJobs(ctx.home, loaded, for_model=True),
                        owner_check=AccessControl(loaded.config.channels, PairingStore(ctx.home)).is_owner)
