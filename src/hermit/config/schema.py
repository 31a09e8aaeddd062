"""The config schema: pydantic models with extra=forbid, snake_case keys, every default of SPEC.md."""

from __future__ import annotations

import builtins
import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from hermit.config.binding_ids import GuildId, TeamId

# The `channels:` section lives in its own module; its names stay importable from here.
from hermit.config.channels import ChannelAccessConfig as ChannelAccessConfig
from hermit.config.channels import ChannelsConfig as ChannelsConfig
from hermit.config.channels import DiscordAccountConfig as DiscordAccountConfig
from hermit.config.channels import DmPolicy as DmPolicy
from hermit.config.channels import GroupPolicy as GroupPolicy
from hermit.config.channels import SlackAccountConfig as SlackAccountConfig
from hermit.config.channels import TelegramAccountConfig as TelegramAccountConfig
from hermit.config.channels import WebchatConfig as WebchatConfig
from hermit.config.channels import WhatsAppAccountConfig as WhatsAppAccountConfig

# So does the heartbeat's (`agents.*.heartbeat`).
from hermit.config.heartbeat import DEFAULT_HEARTBEAT_PROMPT as DEFAULT_HEARTBEAT_PROMPT
from hermit.config.heartbeat import ActiveHoursConfig as ActiveHoursConfig
from hermit.config.heartbeat import DeliveryTargetConfig as DeliveryTargetConfig
from hermit.config.heartbeat import HeartbeatConfig as HeartbeatConfig

# So does `memory_search:`'s; only its top model is imported from here by many (the rest: config.memory_search).
from hermit.config.memory_search import MemorySearchConfig as MemorySearchConfig

MAX_CONCURRENT_TURNS = 256  # agents.*.max_concurrent_turns: more is no bound at all


class Strict(BaseModel):
    # defer_build: a model's validator is built when the model is first used, not when its class is defined:
    # the models only HermitConfig's validator reaches (account kinds, bindings, providers) are not built one
    # by one at import (~0.01-0.02 s of CPU on every command that loads the config).
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class SandboxConfig(Strict):
    mode: Literal["off", "non-main", "all"] = "non-main"
    # Sessions other than the owner's main one: "all" lets them add notes to memory (marked with
    # their origin); "main-only" refuses every memory write from them.
    memory_writes: Literal["all", "main-only"] = "all"
    # Extra environment variable names exec may see (the default is a short whitelist, no secrets).
    env_allow: tuple[str, ...] = ()
    # Limits of a sandboxed exec: the memory of all its processes together (a cgroup where the machine
    # allows one, else fewer tasks with a quarter of it each; docs/security.md), the size of any file it writes.
    exec_memory_mb: int = Field(1024, ge=64)
    exec_max_file_mb: int = Field(64, ge=1)
    # How many tasks (processes and threads) a sandboxed command may add, and the size of its /tmp.
    exec_max_processes: int = Field(128, ge=8)
    exec_tmp_mb: int = Field(64, ge=1)
    # What a non-owner session's room (its own folder, <state>/agents/<id>/rooms/) may hold.
    room_mb: int = Field(256, ge=1)
    # How many sandboxed commands this agent's chats may run at once (each may hold exec_memory_mb plus its
    # tmpfs copies): every topic or thread of a group is a session of its own, so without a bound one member
    # could hold the machine's memory, and the owner's other agents with it. More are refused until one ends.
    max_commands: int = Field(4, ge=1, le=256)
    # The uid sandboxed commands run as when Hermit runs as root (root keeps its capabilities inside a
    # user namespace, and the process limit is counted per uid). Not 0. A uid an account has (65534 is
    # nobody, whose daemons could reach a room through /proc) is replaced at run time by the first free
    # one from 2,000,000,000 (tools.os_sandbox.unused_uid).
    uid: int = Field(65534, ge=1)


class SoftTrimConfig(Strict):
    """How an old, long tool result is shortened: its first and last characters survive."""

    max_chars: int = Field(4000, ge=1)
    head_chars: int = Field(1500, ge=0)
    tail_chars: int = Field(1500, ge=0)

    @model_validator(mode="after")
    def _keeps_less_than_max(self) -> SoftTrimConfig:
        if self.head_chars + self.tail_chars >= self.max_chars:
            raise ValueError(
                f"head_chars + tail_chars ({self.head_chars + self.tail_chars}) must be smaller than "
                f"max_chars ({self.max_chars}), or trimming would not shorten anything"
            )
        return self


class HardClearConfig(Strict):
    enabled: bool = True
    # The tool-call id and a pointer to the tool_output re-read tool are added to this text.
    placeholder: str = Field("[Old tool result content cleared]", min_length=1)


class PruningToolsConfig(Strict):
    """Glob patterns on tool names whose results may be pruned; deny wins, an empty allow means all."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()


class ContextPruningConfig(Strict):
    """Tool-output pruning of the request sent to the model (SPEC §10); the JSONL is never touched.

    mode "auto" means cache-ttl for models whose profile has a prompt-cache TTL (Anthropic), off for
    the others (their prefix caches would only miss more often; compaction keeps them bounded)."""

    mode: Literal["off", "cache-ttl", "auto"] = "auto"
    ttl_seconds: float = Field(300.0, gt=0)
    keep_last_assistants: int = Field(3, ge=0)
    soft_trim_ratio: float = Field(0.3, ge=0, le=1)
    soft_trim: SoftTrimConfig = SoftTrimConfig()
    hard_clear_ratio: float = Field(0.5, ge=0, le=1)
    min_prunable_tool_chars: int = Field(50_000, ge=0)
    hard_clear: HardClearConfig = HardClearConfig()
    tools: PruningToolsConfig = PruningToolsConfig()

    @model_validator(mode="after")
    def _ratios_ordered(self) -> ContextPruningConfig:
        if self.soft_trim_ratio > self.hard_clear_ratio:
            raise ValueError(
                f"soft_trim_ratio ({self.soft_trim_ratio}) must not exceed hard_clear_ratio "
                f"({self.hard_clear_ratio})"
            )
        return self


# SPEC §9 defaults, verbatim; "YYYY-MM-DD" becomes today's date in the user's time zone at run time.
DEFAULT_MEMORY_FLUSH_SYSTEM_PROMPT = (
    "Pre-compaction memory flush turn. The session is near auto-compaction; capture durable memories to disk."
)
DEFAULT_MEMORY_FLUSH_PROMPT = (
    "Pre-compaction memory flush. Store durable memories now (use memory/YYYY-MM-DD.md; create memory/ if "
    "needed). If nothing to store, reply with NO_REPLY."
)


class MemoryFlushConfig(Strict):
    """The silent turn before compaction (SPEC §9), at window − reserve_tokens_floor − soft_threshold_tokens.

    A custom `prompt` without NO_REPLY gets the NO_REPLY hint appended when it is used."""

    enabled: bool = True
    soft_threshold_tokens: int = Field(4000, ge=0)
    system_prompt: str = Field(DEFAULT_MEMORY_FLUSH_SYSTEM_PROMPT, min_length=1)
    prompt: str = Field(DEFAULT_MEMORY_FLUSH_PROMPT, min_length=1)


class CompactionConfig(Strict):
    """Summarising old turns when the context nears the window (SPEC §8).

    Automatic when the context exceeds context_window − max(reserve_tokens, reserve_tokens_floor);
    the last ~keep_recent_tokens of turns stay verbatim. For small windows the reserve is capped at half
    the window and the kept tail at half of what remains, so compaction still makes room. `enabled:
    false` turns off automatic and overflow-recovery compaction and the memory flush; `/compact` still
    works. `verbose` adds "🧹 Auto-compaction complete (count N)" to the turn's notices.
    """

    enabled: bool = True
    reserve_tokens: int = Field(16_384, ge=0)
    reserve_tokens_floor: int = Field(20_000, ge=0)
    keep_recent_tokens: int = Field(20_000, ge=0)
    summary_max_tokens: int = Field(4096, ge=256)
    verbose: bool = False
    memory_flush: MemoryFlushConfig = MemoryFlushConfig()


ResetModeName = Literal["daily", "idle", "both", "off"]


class ResetConfig(Strict):
    """When a session expires (SPEC §11): daily at at_hour local time, after idle_minutes, both, or off."""

    mode: ResetModeName = "daily"
    at_hour: int = Field(4, ge=0, le=23)
    idle_minutes: int = Field(60, ge=1)


class ResetOverride(Strict):
    """A partial ResetConfig: the keys given replace the default's, the others are inherited."""

    mode: ResetModeName | None = None
    at_hour: int | None = Field(None, ge=0, le=23)
    idle_minutes: int | None = Field(None, ge=1)


class SessionMemoryHookConfig(Strict):
    """On /new and /reset: the last `messages` user/assistant messages of the ending session are saved to
    memory/YYYY-MM-DD-<slug>.md (slug from the model within slug_timeout_seconds, else from keywords)."""

    enabled: bool = True
    messages: int = Field(15, ge=1, le=500)
    slug_from_model: bool = True
    slug_timeout_seconds: float = Field(15.0, gt=0, le=300)


class SessionHooksConfig(Strict):
    session_memory: SessionMemoryHookConfig = SessionMemoryHookConfig()


DmScope = Literal["main", "per-peer", "per-channel-peer", "per-account-channel-peer"]


class SessionConfig(Strict):
    """Session lifecycle: reset policy with per-chat-type and per-channel overrides, reset commands.

    Precedence: reset_by_channel over reset_by_type over reset. `hooks.session_memory` saves the end of a
    session to memory/ on /new and /reset. `dm_scope` groups the *owners'* DMs (SPEC §15, §18): `main`
    puts them into the main session, the others give each owner (per channel, per account) a non-main
    session of their own. A contact's DM (approved by pairing, in `allow_from`, or let in by
    `dm_policy: open`) never reaches the main session: under `main` it gets the
    per-account-channel-peer key, otherwise the configured scope's key. Only
    `dangerously_share_main_session_with_contacts` brings back the original's behaviour (every DM in
    the main session, with MEMORY.md and an unsandboxed exec), and `hermit doctor` warns about it.
    """

    dm_scope: DmScope = "main"
    dangerously_share_main_session_with_contacts: bool = False
    reset: ResetConfig = ResetConfig()
    reset_by_type: dict[Literal["dm", "group", "thread"], ResetOverride] = Field(default_factory=dict)
    reset_by_channel: dict[str, ResetOverride] = Field(default_factory=dict)
    reset_triggers: tuple[str, ...] = ("/new", "/reset")
    hooks: SessionHooksConfig = SessionHooksConfig()
    # Where sessions.json, transcripts and session locks live: `<store_dir>/agents/<agentId>/sessions`.
    # Default: the state dir. Point two hosts' configs at one directory on shared storage (NFSv4, SMB with
    # byte-range locks) and a gateway on either host lists and continues the same sessions (docs/guide.md
    # "Sessions on several hosts"). Relative paths are relative to the state dir; `~` is expanded.
    store_dir: str | None = None

    @field_validator("reset_triggers")
    @classmethod
    def _triggers_are_words(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for trigger in v:
            if not trigger or any(ch.isspace() for ch in trigger):
                raise ValueError(f"reset trigger {trigger!r} must be one non-empty word like '/new'")
        return v

    @field_validator("reset_by_channel")
    @classmethod
    def _channels_lowercase(cls, v: dict[str, ResetOverride]) -> dict[str, ResetOverride]:
        return {k.lower(): o for k, o in v.items()}


class AgentSettings(Strict):
    """Everything an agent can have; agents.defaults holds these, agents.list entries override them."""

    workspace: str | None = None
    model: str | None = None
    timezone: str | None = None
    memory_search: MemorySearchConfig = MemorySearchConfig()
    sandbox: SandboxConfig = SandboxConfig()
    context_pruning: ContextPruningConfig = ContextPruningConfig()
    session: SessionConfig = SessionConfig()
    compaction: CompactionConfig = CompactionConfig()
    max_tool_iterations: int = Field(25, ge=1, le=500)
    # How many of this agent's turns run at once in the gateway; more wait, the owner's first
    # (gateway/turn_slots.py). 4: a local model serves about that many at once (ollama's parallel
    # default), a provider's lower tiers take it without 429s, and the owner keeps a slot of their own.
    max_concurrent_turns: int = 4
    bootstrap_max_chars: int = Field(20_000, ge=1000)
    bootstrap_total_max_chars: int = Field(150_000, ge=1000)
    heartbeat: HeartbeatConfig = HeartbeatConfig()
    # In groups that require a mention, a message matching one of these (case-insensitive regexes, e.g.
    # "\\bhermit\\b") counts as mentioning this agent, as does a platform @mention or a reply to the bot.
    mention_patterns: tuple[str, ...] = ()

    @field_validator("max_concurrent_turns", mode="before")
    @classmethod
    def _turns_whole(cls, v: object) -> object:
        """A whole number, written as one: "4" (quoted) or 2.5 is refused rather than read as something else."""
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_CONCURRENT_TURNS:
            raise PydanticCustomError(
                "max_concurrent_turns", "must be a whole number from 1 to {top}: how many turns of the agent "
                "may run at once (more wait for a free slot, the owner's first)", {
                    "top": MAX_CONCURRENT_TURNS,
                    "hint": "write it without quotes, e.g. max_concurrent_turns: 4 (the default); 1 runs one "
                            "turn at a time"})
        return v

    @field_validator("mention_patterns")
    @classmethod
    def _patterns_compile(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        import re

        for pattern in v:
            try:
                re.compile(pattern, re.IGNORECASE)
            except re.error as e:
                raise ValueError(f"mention pattern {pattern!r} is not a valid regular expression: {e}") from e
        return v


class AgentEntry(AgentSettings):
    id: str
    name: str | None = None
    default: bool = False

    @field_validator("id")
    @classmethod
    def _id_ok(cls, v: str) -> str:
        import re

        if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,63}", v):
            raise ValueError("agent id must be lowercase letters, digits, '-' or '_' (max 64 chars)")
        return v


class AgentsConfig(Strict):
    defaults: dict[str, object] = Field(default_factory=dict)
    list: builtins.list[dict[str, object]] = Field(default_factory=builtins.list)


class ModelInfo(Strict):
    """What a provider's model takes and holds. A field left out comes from Hermit's table of known models
    (models/registry.py), else the defaults: 128k context, 8192 output tokens, text only."""

    context_window: int | None = Field(None, ge=1024)
    max_output_tokens: int | None = Field(None, ge=1)
    # What the model reads, as OpenClaw writes it: ["text"] or ["text", "image"]. "image": photos sent to
    # the assistant are shown to it; a text-only server answers 400 to an image, so unknown ones get none.
    input: builtins.list[Literal["text", "image"]] | None = Field(None, min_length=1)


class ProviderConfig(Strict):
    type: Literal["anthropic", "openai", "openai-compatible"]
    base_url: str | None = None
    api_key: str | None = None
    api_key_env: str | None = None
    timeout_seconds: float = Field(120.0, gt=0)
    max_retries: int = Field(3, ge=0, le=20)
    models: dict[str, ModelInfo] = Field(default_factory=dict)
    # The whole of one model call, retries included, even if the server keeps the stream alive: the
    # SDKs' own 10-minute request timeout. Raise it for a slow local model on CPU.
    deadline_seconds: float = Field(600.0, gt=0)


class ModelsConfig(Strict):
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)


class BindingPeer(Strict):
    """One exact conversation: a DM with a sender or one group/channel."""

    kind: Literal["dm", "group"]
    id: str = Field(min_length=1)


class BindingMatch(Strict):
    """What a binding matches; every field given must be equal (channel is required).
    `account_id: "*"` matches every account of the channel (ranked like a channel-wide binding)."""

    channel: str = Field(min_length=1)
    account_id: str | None = None
    peer: BindingPeer | None = None
    guild_id: GuildId | None = None  # Discord server (digits)
    team_id: TeamId | None = None  # Slack workspace (upper case)

    @field_validator("channel")
    @classmethod
    def _channel_lowercase(cls, v: str) -> str:
        return v.lower()


class BindingConfig(Strict):
    """Routes messages to an agent (SPEC §15): exact peer > guild/team > account > channel > default agent."""

    match: BindingMatch
    agent_id: str


class GatewayConfig(Strict):
    host: str = "127.0.0.1"  # loopback by default; another address needs the token (always on)
    port: int = Field(18789, ge=1, le=65535)
    shutdown_grace_seconds: float = Field(10.0, ge=0, le=600)  # in-flight turns may finish, then are cancelled
    queue_max_per_session: int = Field(8, ge=1, le=1000)  # waiting messages per session; more get "busy"
    allowed_origins: builtins.list[str] = Field(default_factory=builtins.list)  # extra web chat origins
    log_max_bytes: int = Field(5_000_000, ge=10_000)  # <state>/logs/gateway.log rotates at this size
    log_backups: int = Field(3, ge=0, le=100)
    # A connection must send a whole request's headers, and a web app socket complete its sign-in, within this
    # (gateway/unsigned.py): about ten times what two round trips take on a bad mobile network.
    sign_in_seconds: float = Field(30.0, ge=0.1, le=600)
    # Browsers signed in with a link or QR code stay signed in as *devices* (gateway/devices.py): a key of their own
    # in the browser. Another local user's program that takes the port while the gateway is down can serve a page at
    # the web app's address whose script uses that key, so `auto` (the default) is on only when the service's socket
    # unit holds the port (gateway/device_policy.py); true: always; false: never. Read at start (a restart applies it).
    remember_devices: bool | Literal["auto"] = "auto"

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, value: builtins.list[str]) -> builtins.list[str]:
        """Origins as browsers send them, http(s)://host[:port], default port left out ("null", "*" or a bare
        name would let file: pages and sandboxed frames in, or be dropped from the Host check in silence)."""
        out = [re.sub(r"^(https://.*?):443$|^(http://.*?):80$", r"\1\2", r.strip().rstrip("/").lower()) for r in value]
        for raw, o in zip(value, out, strict=True):
            u = urlsplit(o)
            if u.scheme not in ("http", "https") or not u.hostname or u.path or u.query or u.fragment or "@" in o:
                raise ValueError(f"{raw!r} is not an origin: write scheme and host (and port), e.g. "
                                 "https://hermit.example or http://mybox.local:18789")
        return out


class McpConfig(Strict):
    """`hermit mcp serve`: what other agents (Claude Code, Cursor, Codex…) may see and do through MCP.

    MEMORY.md and session transcripts are the owner's most private memory (SPEC §3 keeps MEMORY.md to
    the main session) and an MCP client forwards what it reads to its own model provider, so they are
    withheld unless `share_private_memory` is on, as are memory/private/ and extra paths (memory/'s other notes are not).
    """

    share_private_memory: bool = False
    allow_append: bool = True  # the memory_append tool (today's daily log, append only)


class HermitConfig(Strict):
    agents: AgentsConfig = AgentsConfig()
    models: ModelsConfig = ModelsConfig()
    bindings: builtins.list[BindingConfig] = Field(default_factory=builtins.list)
    gateway: GatewayConfig = GatewayConfig()
    channels: ChannelsConfig = ChannelsConfig()
    mcp: McpConfig = McpConfig()
