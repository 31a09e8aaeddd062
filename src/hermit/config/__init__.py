"""Config: schema, loading with actionable errors, and state paths.

Names are resolved on first use (PEP 562), so `hermit.config.paths` is cheap to import: the CLI parses
its arguments without loading pydantic and the schema.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermit.lazy import names_from

if TYPE_CHECKING:
    from hermit.config.load import AgentConfig, LoadedConfig, load_config, parse_config_text
    from hermit.config.paths import DEFAULT_AGENT_ID, StatePaths, default_home
    from hermit.config.schema import HermitConfig, MemorySearchConfig

_WHERE = {
    "AgentConfig": "load", "LoadedConfig": "load", "load_config": "load", "parse_config_text": "load",
    "DEFAULT_AGENT_ID": "paths", "StatePaths": "paths", "default_home": "paths",
    "HermitConfig": "schema", "MemorySearchConfig": "schema",
}

__getattr__ = names_from(__name__, _WHERE)


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
