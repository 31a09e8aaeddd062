"""`hermit doctor` on proxy variables: HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and NO_PROXY as this process sees them
(credentials masked), and which of the configured endpoints each would carry.

httpx reads them from the process's environment (hermit.env is not put there: a proxy written only in it is not
used). A request for this machine never goes through one (hermit.direct_http); a
request for another host does, unless NO_PROXY names it: HTTPS through a proxy is a tunnel it cannot read, plain
HTTP is read whole (a model server on another machine at `http://…:11434` gets its prompts, MEMORY.md and the main
session, copied to the proxy). Discord's client (discord.py, aiohttp) reads no proxy variable. httpx loads only when
a variable is set, so a doctor without one pays nothing for this check.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from hermit.cli.checks import Check, check

if TYPE_CHECKING:
    from hermit.cli.context import CliContext
    from hermit.config.load import LoadedConfig

NAME = "proxy"
PROXY_VARS = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY")
_SHOWN = 8


def proxy_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """The proxy variables set (either case, the lower-case one first as httpx and curl read them), by upper-case
    name."""
    found: dict[str, str] = {}
    for name in PROXY_VARS:
        value = environ.get(name.lower()) or environ.get(name)
        if value:
            found[name] = value
    return found


def masked_url(value: str) -> str:
    """A proxy URL with its password as `***` (and a user name kept: it says whose proxy account it is)."""
    try:
        parts = urllib.parse.urlsplit(value.strip() if "://" in value else f"http://{value.strip()}")
        password = parts.password
    except ValueError:
        return "(not a URL)"
    if password is None and "@" not in parts.netloc:
        return value
    host = parts.netloc.rpartition("@")[2]
    user = parts.username or ""
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{host}" if user else f"***@{host}"))


def endpoints(loaded: LoadedConfig) -> Iterator[tuple[str, str]]:
    """(what, URL) for every endpoint the config sends requests to: each agent's model provider, each agent's
    remote embeddings, each chat account's platform API."""
    from hermit.channels.local_api import base_setting
    from hermit.channels.platforms import accounts
    from hermit.errors import HermitError
    from hermit.memory.embedders.remote import GEMINI_BASE_URL, OPENAI_BASE_URL
    from hermit.models.registry import parse_model_ref, provider_config

    defaults = {"anthropic": "https://api.anthropic.com", "openai": OPENAI_BASE_URL}
    for agent in loaded.agents:
        if agent.settings.model:
            try:
                provider, _ = parse_model_ref(agent.settings.model)
                pc = provider_config(provider, loaded.config.models)
            except HermitError:
                pass  # the model's own check says what is wrong
            else:
                yield f"model {provider}", pc.base_url or defaults.get(pc.type, OPENAI_BASE_URL)
        ms = agent.settings.memory_search
        if ms.provider in ("openai", "gemini", "openai-compatible"):
            url = ms.remote.base_url or {"openai": OPENAI_BASE_URL, "gemini": GEMINI_BASE_URL}.get(ms.provider, "")
            if url:
                yield f"embeddings of {agent.id}", url
    for platform, account_id, cfg in accounts(loaded.config.channels):
        found = base_setting(cfg)
        if found is not None:
            yield f"{platform}/{account_id}", found[1]


def carried_by(urls: list[tuple[str, str]], found: dict[str, str]) -> list[tuple[str, str, str | None]]:
    """(what, URL, the variable whose proxy carries it or None for direct) for each endpoint, as httpx decides
    (with hermit.direct_http's rule for this machine)."""
    import httpx

    from hermit.direct_http import DirectHereClient, goes_direct

    out: list[tuple[str, str, str | None]] = []
    with DirectHereClient(trust_env=True) as client:
        for what, url in urls:
            try:
                direct = goes_direct(client, url)
                scheme = httpx.URL(url).scheme
            except (httpx.InvalidURL, ValueError):
                continue
            var = None if direct else next((v for v in (f"{scheme.upper()}_PROXY", "ALL_PROXY") if v in found),
                                           "ALL_PROXY")
            out.append((what, url, var))
    return out


def _without_path(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


@check(NAME, needs=("config",))
def proxy_check(ctx: CliContext) -> str | Check:
    found = proxy_variables(os.environ)
    if not [v for v in found if v != "NO_PROXY"]:
        return "no proxy variable set (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY): every request goes direct"
    shown = ", ".join(f"{name}={value if name == 'NO_PROXY' else masked_url(value)}" for name, value in found.items())
    try:
        routes = carried_by(list(dict.fromkeys(endpoints(ctx.config()))), found)
    except ImportError as e:  # httpx builds no client at all then: every model, embeddings and channel call fails
        return Check(NAME, "fail", f"{shown}: httpx cannot use this proxy ({e})",
                     "install httpx's SOCKS support (pip install 'httpx[socks]', the socksio package), or unset "
                     "the variable or name an http:// proxy in it")
    proxied = [(what, url, var) for what, url, var in routes if var is not None]
    plain = [(what, url, var) for what, url, var in proxied if url.startswith("http://")]
    lines = [f"{what} {_without_path(url)} through {var}" for what, url, var in proxied]
    direct = [f"{what} {_without_path(url)}" for what, url, var in routes if var is None]
    said = "; ".join(lines[:_SHOWN]) + (f"; and {len(lines) - _SHOWN} more" if len(lines) > _SHOWN else "")
    detail = (f"{shown} (this shell's environment; a gateway run as a service has its own). "
              + (f"Through the proxy: {said}. " if lines else "No configured endpoint goes through it. ")
              + (f"Direct: {', '.join(direct[:_SHOWN])}." if direct else "")
              + " This machine's own addresses never go through a proxy.")
    if plain:
        names = ", ".join(f"{what} {_without_path(url)}" for what, url, _ in plain)
        return Check(NAME, "warn", f"{detail} Plain HTTP through a proxy is read whole by it: {names}",
                     "add those hosts to NO_PROXY, or use https:// for them")
    return detail.strip()


DOCTOR_CHECKS = [proxy_check]
