"""Which model an agent talks to, from its config and the keys in the environment (no model client loaded:
`hermit models list`, `setup` and the doctor ask this too; cli/assistant.py builds the runtime from it).

Model choice, in order: the agent's `model` setting; the only model listed under
`models.providers`; anthropic/claude-sonnet-4-5 when ANTHROPIC_API_KEY is set; openai/gpt-4.1 when
OPENAI_API_KEY is set. Nothing matching raises NoModelConfigured, which chat turns into the help screen.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from hermit.errors import ConfigError

if TYPE_CHECKING:
    from hermit.config.load import AgentConfig, LoadedConfig

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
