"""The doctor's chat-model check: is a model configured, is its key set, does a local server answer?

Memory works without a model, so "nothing configured" is a warning; a model that is configured but
cannot work (unknown provider, missing key, local server down) is a failure. Only servers on this
machine or the local network are probed, with a short timeout; cloud APIs are not called (that would
need the key and cost a request).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from hermit.cli.checks import Check
from hermit.cli.context import CliContext
from hermit.cli.model_choice import NoModelConfigured, choose_model_ref
from hermit.errors import ConfigError
from hermit.models.loopback import HINT, guard_stream
from hermit.models.registry import parse_model_ref, provider_config, resolve_api_key
from hermit.redaction import without_userinfo

NAME = "chat model"
PROBE_TIMEOUT_SECONDS = 2.0


def is_local_url(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".local"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_private or ip.is_link_local


def probe(base_url: str, timeout: float = PROBE_TIMEOUT_SECONDS) -> str | None:
    """None when something answers HTTP at `base_url` (any status), else why not. A server another login
    user runs there is a ConfigError: the chat would refuse it (hermit.models.loopback)."""
    import httpx  # only when there is a local server to probe: the doctor's other checks need no HTTP client

    from hermit.direct_http import DirectHereClient

    def trace(event: str, info: Mapping[str, Any]) -> None:
        if event == "connection.connect_tcp.complete":
            guard_stream(info.get("return_value"), lambda holder: ConfigError(holder.describe(), HINT))

    try:
        with DirectHereClient(timeout=timeout) as client:  # no proxy to this machine
            client.get(base_url.rstrip("/") + "/models", extensions={"trace": trace})
    except httpx.TimeoutException:
        return f"no answer within {timeout:g}s"
    except httpx.HTTPError as e:
        return f"cannot connect ({type(e).__name__})"
    return None


def describe_chat_model(ctx: CliContext) -> str | Check:
    loaded = ctx.config()
    try:
        ref = choose_model_ref(ctx.agent(), loaded, ctx.environ)
    except NoModelConfigured:
        return Check(NAME, "warn", "not configured: chat and agent need a model (memory works without one)",
                     "run `hermit setup` (a local Ollama, Anthropic, OpenAI, any OpenAI-compatible server or the "
                     "built-in fake provider); or set agents.defaults.model to <provider>/<model> in hermit.yaml")
    provider, _ = parse_model_ref(ref)
    pc = provider_config(provider, loaded.config.models)
    key, hint = resolve_api_key(provider, pc, ctx.environ, parse_model_ref(ref)[1])
    if key is None and (pc.type != "openai-compatible" or pc.api_key_env):
        raise ConfigError(f"{ref}: no API key for provider {provider!r}", hint)
    shown = without_userinfo(pc.base_url) if pc.base_url else ""  # the URL without its password
    where = shown or f"the {pc.type} API"
    if pc.base_url and is_local_url(pc.base_url):
        why = probe(pc.base_url)
        if why is not None:
            raise ConfigError(f"{ref}: the server at {shown} is not reachable: {why}", _start_hint(ctx, provider,
                                                                                                 pc.base_url))
        return f"{ref} at {shown} (answering)"
    key_note = "no key needed" if key is None else "key set"
    return f"{ref} via {where} ({key_note}; not called)"


def _start_hint(ctx: CliContext, provider: str, base_url: str) -> str:
    """How to start the server: the fake provider's own command when it is the one `hermit setup` made."""
    from hermit.cli.setup import FAKE_SCRIPT, fake_start_command

    script = ctx.home / FAKE_SCRIPT
    if provider == "fake" and script.is_file():
        return f"start the fake provider: {fake_start_command(base_url, script)}"
    return f"start it, or fix models.providers.{provider}.base_url"
