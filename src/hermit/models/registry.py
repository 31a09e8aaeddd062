"""Building a Model from config: "<provider>/<model>" refs, API keys, and known model limits.

A ref names a provider configured under `models.providers` (or one of the well-known names that work
without config: anthropic, openai, openrouter, ollama) and a model id, which may itself contain
slashes ("openrouter/anthropic/claude-sonnet-4"). Context window and output cap come from the
provider's `models` entry, else from the table of common models below, else 128k / 8192. Whether the model
reads images comes from the entry's `input` (["text", "image"]), else from the pattern of models known to
(Claude 3 and later, GPT-4o/4.1/5, o1/o3/o4-mini, Gemini) — except on a server on this machine or the local
network, which may serve any weights under any name and answers 400 to an image it cannot read: text only
there unless its entry says `input: [text, image]`.

Keys come from the provider's `api_key`, else the environment variable `api_key_env`, else the
provider's usual variable (ANTHROPIC_API_KEY...). The environment is passed in, never read here.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from hermit.config.schema import ModelsConfig, ProviderConfig
from hermit.errors import AuthError, ConfigError
from hermit.models.base import Model, ModelProfile

if TYPE_CHECKING:  # the provider clients (httpx) load in build_model: `models list` and the doctor only read here
    import httpx

DEFAULT_CONTEXT_WINDOW = 128_000
DEFAULT_MAX_OUTPUT_TOKENS = 8192
ANTHROPIC_CACHE_TTL_SECONDS = 300.0

# (model id prefix, context window, max output tokens); the longest matching prefix wins. Ids are matched
# on their last path segment, so "anthropic/claude-sonnet-4" on OpenRouter finds "claude-sonnet-4".
KNOWN_MODELS: tuple[tuple[str, int, int], ...] = (
    ("claude-opus-4", 200_000, 32_000),
    ("claude-opus-4-5", 200_000, 64_000),
    ("claude-sonnet-4", 200_000, 64_000),
    ("claude-haiku-4", 200_000, 64_000),
    ("claude-3-7-sonnet", 200_000, 64_000),
    ("claude-3-5", 200_000, 8192),
    ("claude-3", 200_000, 4096),
    ("claude", 200_000, 8192),
    ("gpt-5", 400_000, 128_000),
    ("gpt-4.1", 1_047_576, 32_768),
    ("gpt-4o", 128_000, 16_384),
    ("gpt-4-turbo", 128_000, 4096),
    ("gpt-4", 8192, 4096),
    ("gpt-3.5-turbo", 16_385, 4096),
    ("o1", 200_000, 100_000),
    ("o3", 200_000, 100_000),
    ("o4-mini", 200_000, 100_000),
    ("gemini-1.5", 1_048_576, 8192),
    ("gemini-2", 1_048_576, 65_536),
    ("llama-3", 128_000, 8192),
    ("llama3.1", 128_000, 8192),
    ("llama3.2", 128_000, 8192),
    ("llama3.3", 128_000, 8192),
    ("qwen2.5", 32_768, 8192),
    ("qwen3", 40_960, 8192),
    ("mistral-large", 128_000, 8192),
    ("deepseek", 128_000, 8192),
)

# Model ids (their last path segment) of models that read images: Claude 3 and later (not claude-2 or
# claude-instant), GPT-4 Turbo/4o/4.1/4.5/5, o1 (not o1-mini/preview), o3 (not o3-mini), o4-mini, Gemini (not 1.0).
_READS_IMAGES = re.compile(r"claude-(?!2|instant)|(?:chatgpt-)?gpt-4o|gpt-4\.1|gpt-4\.5|gpt-4-turbo|gpt-5"
                           r"|o1(?!-mini|-preview)|o3(?!-mini)|o4-mini|gemini-(?!1\.0|pro$)")
_LOCAL_SUFFIXES = (".localhost", ".local", ".lan", ".internal", ".home.arpa")

# Providers that work with no config entry at all.
WELL_KNOWN_PROVIDERS: dict[str, ProviderConfig] = {
    name: ProviderConfig.model_validate(raw)
    for name, raw in {
        "anthropic": {"type": "anthropic"},
        "openai": {"type": "openai"},
        "openrouter": {
            "type": "openai-compatible",
            "base_url": "https://openrouter.ai/api/v1",
            "api_key_env": "OPENROUTER_API_KEY",
        },
        "ollama": {"type": "openai-compatible", "base_url": "http://127.0.0.1:11434/v1"},
    }.items()
}
_DEFAULT_KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


def known_limits(model_id: str) -> tuple[int, int]:
    """(context window, max output tokens) of a model id from the table, else the defaults."""
    name = model_id.rsplit("/", 1)[-1].lower()
    best: tuple[str, int, int] | None = None
    for entry in KNOWN_MODELS:
        if name.startswith(entry[0]) and (best is None or len(entry[0]) > len(best[0])):
            best = entry
    return (best[1], best[2]) if best else (DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_OUTPUT_TOKENS)


def known_reads_images(model_id: str) -> bool:
    """Whether a model id is one of the known image-reading models (see _READS_IMAGES)."""
    return _READS_IMAGES.match(model_id.rsplit("/", 1)[-1].lower()) is not None


def local_server(pc: ProviderConfig) -> bool:
    """Whether an OpenAI-compatible provider is a server on this machine or the local network (Ollama, LM
    Studio, vLLM…): a loopback, private or link-local address, or a name no public host has."""
    if pc.type != "openai-compatible":
        return False
    host = (urlsplit(pc.base_url or "").hostname or "").lower().rstrip(".")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host == "localhost" or "." not in host or host.endswith(_LOCAL_SUFFIXES)
    return ip.is_loopback or ip.is_private or ip.is_link_local


def parse_model_ref(ref: str) -> tuple[str, str]:
    provider, sep, model = ref.strip().partition("/")
    if not sep or not provider or not model:
        raise ConfigError(
            f"model {ref!r} is not of the form <provider>/<model>",
            "write it like anthropic/claude-sonnet-4-5 or openai/gpt-4.1",
        )
    return provider, model


def provider_config(name: str, config: ModelsConfig) -> ProviderConfig:
    if name in config.providers:
        return config.providers[name]
    if name in WELL_KNOWN_PROVIDERS:
        return WELL_KNOWN_PROVIDERS[name]
    known = sorted({*config.providers, *WELL_KNOWN_PROVIDERS})
    raise ConfigError(
        f"unknown model provider {name!r} (known: {', '.join(known)})",
        f"add it under models.providers.{name} with type anthropic, openai or openai-compatible",
    )


def model_profile(provider: str, model_id: str, pc: ProviderConfig) -> ModelProfile:
    info = pc.models.get(model_id)
    context_window, max_output = known_limits(model_id)
    if info is not None:
        context_window = info.context_window or context_window
        max_output = info.max_output_tokens or max_output
    if info is not None and info.input is not None:
        images = "image" in info.input
    else:
        images = known_reads_images(model_id) and not local_server(pc)
    anthropic = pc.type == "anthropic"
    return ModelProfile(
        provider=provider,
        model_id=model_id,
        context_window=context_window,
        max_output_tokens=max_output,
        supports_prompt_caching=anthropic,
        cache_ttl_seconds=ANTHROPIC_CACHE_TTL_SECONDS if anthropic else None,
        tool_call_style="anthropic" if anthropic else "openai",
        supports_images=images,
    )


def setup_command(provider: str, pc: ProviderConfig, model_id: str | None = None) -> str:
    """The `hermit setup` command line that stores a key for this provider in hermit.env (`--api-key-stdin`:
    the key on its first line) and keeps the rest as configured: the same name, URL, model and variable."""
    kind = pc.type if pc.type in _DEFAULT_KEY_ENV else "openai-compatible"
    words = ["hermit setup --provider", kind]
    default_name = kind if kind in _DEFAULT_KEY_ENV else "custom"
    if provider != default_name:
        words += ["--name", provider]
    if pc.base_url:
        words += ["--base-url", pc.base_url]
    words += ["--model", model_id or "<model>"]
    setup_var = _DEFAULT_KEY_ENV.get(kind) or _setup_var(provider)
    if pc.api_key_env and pc.api_key_env != setup_var:
        words += ["--key-var", pc.api_key_env]
    return " ".join([*words, "--api-key-stdin"])


def _setup_var(provider: str) -> str:
    """The variable `hermit setup` names for an OpenAI-compatible provider's key (cli/setup.py)."""
    return "".join(c if c.isascii() and c.isalnum() else "_" for c in provider.upper()) + "_API_KEY"


def resolve_api_key(provider: str, pc: ProviderConfig, environ: Mapping[str, str],
                    model_id: str | None = None) -> tuple[str | None, str]:
    """(key or None, hint saying how to store a right key: `hermit setup` first, which checks it and keeps it
    in the owner-only hermit.env; the variable or hermit.yaml second)."""
    env = pc.api_key_env or _DEFAULT_KEY_ENV.get(pc.type)
    var = env or _setup_var(provider)
    setup = (f"`hermit setup` (scripted: `{setup_command(provider, pc, model_id)}` with the key on stdin), which "
             f"checks it and keeps it in hermit.env as {var}")
    if pc.api_key:
        return pc.api_key, (f"store the right key with {setup} and takes models.providers.{provider}.api_key out "
                            "of hermit.yaml; or fix that value")
    if env and environ.get(env):
        return environ[env], f"store the right key with {setup}; or fix {env} in hermit.env (or the environment)"
    if env:
        return None, f"store one with {setup}; or set {env} in hermit.env (or the environment)"
    return None, (f"if the server needs a key, store it with {setup}; or set {var} in hermit.env and api_key_env: "
                  f"{var} under models.providers.{provider} in hermit.yaml")


def build_model(
    ref: str,
    config: ModelsConfig,
    environ: Mapping[str, str],
    *,
    sleep: Callable[[float], None] | None = None,
    transport: httpx.BaseTransport | None = None,
    notify: Callable[[str], None] | None = None,
) -> Model:
    """The adapter for "<provider>/<model>". Raises ConfigError, or AuthError when a key is required
    (anthropic, openai) and none is configured. `notify` receives retry notices (default: logged)."""
    provider, model_id = parse_model_ref(ref)
    pc = provider_config(provider, config)
    profile = model_profile(provider, model_id, pc)
    key, hint = resolve_api_key(provider, pc, environ, model_id)
    if key is None and (pc.type != "openai-compatible" or pc.api_key_env):
        raise AuthError(f"no API key for model provider {provider!r}", hint)
    from hermit.models.anthropic import AnthropicModel
    from hermit.models.openai_compat import OpenAIModel

    if pc.type == "anthropic":
        assert key is not None
        return AnthropicModel(
            profile,
            key,
            base_url=pc.base_url,
            key_hint=hint,
            timeout_seconds=pc.timeout_seconds,
            deadline_seconds=pc.deadline_seconds,
            max_retries=pc.max_retries,
            sleep=sleep,
            notify=notify,
            transport=transport,
        )
    return OpenAIModel(
        profile,
        key,
        base_url=pc.base_url,
        key_hint=hint,
        max_tokens_param="max_completion_tokens" if pc.type == "openai" else "max_tokens",
        timeout_seconds=pc.timeout_seconds,
        deadline_seconds=pc.deadline_seconds,
        max_retries=pc.max_retries,
        sleep=sleep,
        notify=notify,
        transport=transport,
    )
