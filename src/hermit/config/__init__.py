"""Config: schema, loading with actionable errors, and state paths."""

from hermit.config.load import AgentConfig, LoadedConfig, load_config, parse_config_text
from hermit.config.paths import DEFAULT_AGENT_ID, StatePaths, default_home
from hermit.config.schema import HermitConfig, MemorySearchConfig

__all__ = [
    "DEFAULT_AGENT_ID",
    "AgentConfig",
    "HermitConfig",
    "LoadedConfig",
    "MemorySearchConfig",
    "StatePaths",
    "default_home",
    "load_config",
    "parse_config_text",
]
