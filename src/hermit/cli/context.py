"""What every CLI command needs: global options, the loaded config, and services built from them.

The CLI is a composition root: it alone reads the environment and config files. Its environment is the
process's over the state dir's owner-only env file (`hermit.env`, written by `hermit setup`): a variable
already set in the environment wins, so `ANTHROPIC_API_KEY=… hermit chat` still overrides the stored key.
Reading it registers its secrets for masking (hermit.redaction): every value of hermit.env and every
variable named like a key, whatever the config names.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hermit.cli.terminal import warn
from hermit.config.paths import StatePaths, default_home
from hermit.errors import HermitError
from hermit.redaction import environment_secrets, header_secret, register, url_passwords

# The proxies httpx (every provider and platform client) takes from the environment: a password in one may be
# quoted by a connection error.
PROXY_VARS = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy")
# The model providers' key variables, masked whatever the config names (here, not in cli/assistant.py: masking
# runs in every command, and that module loads the agent runtime).
PROVIDER_KEY_VARS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY", "GEMINI_API_KEY",
                     "GOOGLE_API_KEY")

if TYPE_CHECKING:  # the config schema (pydantic) and memory (numpy) load only when a command needs them
    from hermit.config.load import AgentConfig, LoadedConfig
    from hermit.memory.service import MemoryService


@dataclass
class CliContext:
    home: Path
    agent_id: str | None = None
    workspace: Path | None = None
    debug: bool = False
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    _loaded: LoadedConfig | None = None

    @classmethod
    def from_args(cls, home: str | None, agent: str | None, workspace: str | None, debug: bool) -> CliContext:
        # Resolved once, HERMIT_HOME too: the checks (preflight.ownership_problem) and every later use name the
        # same folder, never a link another user may re-point in between.
        state = (Path(home).expanduser() if home else default_home(dict(os.environ))).resolve()
        env = environment_with_env_file(state, os.environ)
        return cls(
            home=state,
            agent_id=agent,
            workspace=Path(workspace).expanduser().resolve() if workspace else None,
            debug=debug,
            environ=env,
        )

    @property
    def paths(self) -> StatePaths:
        return StatePaths(self.home)

    def config_as_is(self) -> LoadedConfig:
        """The config this command loaded, or the file as it is now without keeping it: masking reads the
        config's secrets at the first line printed, which may come before a command (`init`, `setup`) writes
        the file it then loads."""
        if self._loaded is not None:
            return self._loaded
        from hermit.config.load import load_config

        return load_config(self.paths)

    def config(self) -> LoadedConfig:
        if self._loaded is None:
            from hermit.config.load import load_config

            self._loaded = load_config(self.paths)
        return self._loaded

    def agent(self) -> AgentConfig:
        from hermit.config.load import AgentConfig, agent_paths_problem, sandbox_reach_problem

        a = self.config().agent(self.agent_id)
        if self.workspace is not None:
            a = AgentConfig(a.id, self.workspace, a.index_path, a.sessions_dir, a.settings, a.is_default)
            # the configured paths were judged at load; --workspace is judged by the same rule
            if (problem := agent_paths_problem(a, "--workspace:", option="--workspace")) is not None:
                raise problem
            if (problem := sandbox_reach_problem(a, self.config().agents, self.home, "--workspace:",
                                                 option="--workspace")) is not None:
                raise problem
        return a

    def memory_service(self, agent: AgentConfig | None = None, *, long_lived: bool = False) -> MemoryService:
        from hermit.memory.embedders import create_embedder
        from hermit.memory.service import MemoryKey, MemoryService

        agent = agent or self.agent()
        cfg = agent.settings.memory_search
        embedder = create_embedder(cfg, self.environ, stamp_dir=self.home / "cache")
        return MemoryService(MemoryKey(agent.id, agent.workspace), agent.index_path, cfg, embedder,
                             long_lived=long_lived, sessions_dir=agent.sessions_dir, cache_dir=self.home / "cache",
                             environ=self.environ, state_dir=self.home)


def environment_with_env_file(home: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` over the variables of `<home>/hermit.env`; lines it cannot use are reported on stderr. Every
    secret the two hold is registered for masking: all of hermit.env's values (it is for keys and tokens: the
    other Slack mode's, a removed channel's, an extra GITHUB_TOKEN), the variables named like a key, and URL
    passwords (redaction.environment_secrets)."""
    from hermit.config.envfile import env_file_path, read_env_file

    path = env_file_path(home)
    stored = read_env_file(path)
    merged = {**stored.values, **environ}
    register(*environment_secrets(merged, stored.values.values()))
    for problem in stored.problems:
        warn(f"{path}: {problem}")
    return merged


def is_tty(stream: object = None) -> bool:
    s = stream or sys.stderr
    return bool(getattr(s, "isatty", lambda: False)())


def configured_secrets(ctx: CliContext) -> list[str]:
    """Every secret value the config names (provider API keys, channel tokens, by value or by variable),
    for masking; nothing when the config cannot be read (the error being shown may say why). Each channel
    account's every secret field counts, whatever its mode uses (Slack's socket and HTTP secrets both)."""
    from hermit.channels.platforms import accounts as channel_accounts
    from hermit.channels.platforms import secrets as channel_secrets

    try:
        loaded = ctx.config_as_is()
    except HermitError:
        return [ctx.environ.get(n, "") for n in PROVIDER_KEY_VARS]
    names = set(PROVIDER_KEY_VARS)
    names.update(pc.api_key_env for pc in loaded.config.models.providers.values() if pc.api_key_env)
    values: list[str | None] = [ctx.environ.get(n, "") for n in names]
    values += [pc.api_key for pc in loaded.config.models.providers.values() if pc.api_key]
    values += [p for pc in loaded.config.models.providers.values() for p in url_passwords(pc.base_url)]
    values += [p for n in PROXY_VARS for p in url_passwords(ctx.environ.get(n))]  # httpx reads these
    for name, _, account in channel_accounts(loaded.config.channels):  # bot tokens, app secrets
        values += [s.plaintext or ctx.environ.get(s.env_name, "")
                   for s in channel_secrets(name, account, every=True)]
    for agent in loaded.agents:  # the embeddings endpoint's key, headers and URL; the PostgreSQL password
        ms = agent.settings.memory_search
        r = ms.remote
        values += [r.api_key, ctx.environ.get(r.api_key_env or "", ""), *url_passwords(r.base_url),
                   *(header_secret(n, v) for n, v in r.headers.items())]
        values += url_passwords(ctx.environ.get(ms.store.postgres.dsn_env, ""))
    return [v for v in values if v]

