"""`hermit models list|test [REF]`: the configured model providers and models, and whether one answers.

`test` sends one tiny request ("reply with OK", at most 32 tokens) with no retries and a short deadline,
and says how long the answer took, or the provider's error with its hint (a bad key, a rate limit, a
server error, nothing listening). `hermit setup` checks a new choice the same way (`probe_model`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from hermit.cli.context import CliContext
from hermit.redaction import without_userinfo

if TYPE_CHECKING:
    from hermit.config.schema import ModelsConfig

PROBE_PROMPT = "This is a connection check. Reply with the single word OK."
PROBE_MAX_TOKENS = 32
PROBE_DEADLINE_SECONDS = 60.0


def configure(m: argparse.ArgumentParser) -> None:
    """The arguments and handler of `hermit models` (its name and help are in the table of cli/commands.py)."""
    ms = m.add_subparsers(dest="models_command", metavar="SUBCOMMAND", required=True)
    p = ms.add_parser("list", help="providers, models and which one each agent uses (* = the default)")
    p.add_argument("--json", action="store_true", help="print the providers and models as JSON")
    p.set_defaults(func=cmd_list)
    p = ms.add_parser("test", help="send a tiny request and say whether the model answers")
    p.add_argument("ref", nargs="?", help="<provider>/<model> (default: the default agent's model)")
    p.add_argument("--timeout", type=float, default=PROBE_DEADLINE_SECONDS,
                   help=f"seconds to wait for the answer (default {PROBE_DEADLINE_SECONDS:g})")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_test)


@dataclass(frozen=True)
class ProbeResult:
    ref: str
    ok: bool
    seconds: float
    reply: str = ""
    error: str = ""
    hint: str = ""
    kind: str = ""  # the error's class: AuthError, RateLimitError, ProviderError, ConfigError…


def probe_model(ref: str, models: ModelsConfig, environ: Mapping[str, str],
                timeout: float = PROBE_DEADLINE_SECONDS) -> ProbeResult:
    """One tiny completion against `ref` with no retries; never raises a HermitError."""
    from hermit.errors import HermitError
    from hermit.messages import UserMessage
    from hermit.models.base import ModelRequest
    from hermit.models.registry import build_model, parse_model_ref, provider_config

    started = time.monotonic()
    model = None
    try:
        provider, _ = parse_model_ref(ref)
        pc = provider_config(provider, models)
        quick = pc.model_copy(update={"max_retries": 0, "timeout_seconds": min(pc.timeout_seconds, timeout),
                                      "deadline_seconds": timeout})
        cfg = models.model_copy(update={"providers": {**models.providers, provider: quick}})
        model = build_model(ref, cfg, environ)
        reply = model.complete(ModelRequest(system="You are being tested by Hermit's setup.",
                                            messages=(UserMessage(PROBE_PROMPT),), max_tokens=PROBE_MAX_TOKENS))
        return ProbeResult(ref, True, time.monotonic() - started, reply.text.strip())
    except HermitError as e:
        return ProbeResult(ref, False, time.monotonic() - started, error=e.message, hint=e.hint,
                           kind=type(e).__name__)
    finally:
        close = getattr(model, "close", None)
        if callable(close):
            close()


def describe_probe(r: ProbeResult) -> str:
    if r.ok:
        said = r.reply if len(r.reply) <= 60 else r.reply[:57] + "…"
        return f"{r.ref} answers ({r.seconds:.1f} s): {said or '(an empty reply)'}"
    return f"{r.ref} does not answer: {r.error}"


def _key_source(var: str | None, ctx: CliContext) -> str:
    from hermit.config.envfile import env_file_path, read_env_file

    if not var:
        return "no key needed"
    if var in os.environ:
        return f"${var} (set in the environment)"
    if var in read_env_file(env_file_path(ctx.home)).values:
        return f"${var} (set in {env_file_path(ctx.home).name})"
    return f"${var} (NOT SET)"


def _listing(ctx: CliContext) -> dict[str, Any]:
    from hermit.cli.model_choice import NoModelConfigured, choose_model_ref
    from hermit.models.registry import WELL_KNOWN_PROVIDERS, parse_model_ref, provider_config

    loaded = ctx.config()
    configured = loaded.config.models.providers
    uses: dict[str, list[str]] = {}
    default_ref = None
    for agent in loaded.agents:
        try:
            ref = choose_model_ref(agent, loaded, ctx.environ)
        except NoModelConfigured:
            continue
        uses.setdefault(ref, []).append(agent.id)
        if agent.is_default:
            default_ref = ref
    names = list(configured)
    for ref in uses:  # a well-known provider used without a config entry (anthropic via ANTHROPIC_API_KEY)
        name = ref.partition("/")[0]
        if name not in names and name in WELL_KNOWN_PROVIDERS:
            names.append(name)
    providers = []
    for name in names:
        pc = provider_config(name, loaded.config.models)
        if pc.api_key:
            key = f"api_key in {loaded.source.name if loaded.source else 'the config'} (plaintext)"
        else:
            key = _key_source(pc.api_key_env or {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
                              .get(pc.type), ctx)
        shown = without_userinfo(pc.base_url) if pc.base_url else f"(the {pc.type} API)"  # no password shown
        providers.append({"name": name, "type": pc.type, "base_url": shown,
                          "key": key, "configured": name in configured})
    refs = [*uses, *(f"{n}/{m}" for n, pc in configured.items() for m in pc.models)]
    models = []
    for ref in dict.fromkeys(refs):
        try:
            provider, _ = parse_model_ref(ref)
        except Exception:  # noqa: BLE001 - listed as found; `models test` reports the problem
            provider = ""
        models.append({"ref": ref, "default": ref == default_ref, "agents": uses.get(ref, []),
                       "provider_configured": provider in configured or provider in WELL_KNOWN_PROVIDERS})
    return {"default": default_ref, "providers": providers, "models": models}


def cmd_list(ctx: CliContext, args: argparse.Namespace) -> int:
    out = _listing(ctx)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    if not out["providers"] and not out["models"]:
        print("no model configured yet: run `hermit setup` (or see `hermit chat` for a how-to)")
        return 0
    print("providers:")
    width = max((len(p["name"]) for p in out["providers"]), default=4) + 2
    for p in out["providers"]:
        print(f"  {p['name']:<{width}} {p['type']:<18} {p['base_url']}  key: {p['key']}")
    print("models:")
    for m in out["models"]:
        mark = "*" if m["default"] else " "
        who = f"  used by: {', '.join(m['agents'])}" if m["agents"] else "  (listed, not used by any agent)"
        print(f"{mark} {m['ref']}{who}")
    print("(* = the default agent's model; `hermit models test [REF]` checks that one answers)")
    return 0


def cmd_test(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.cli.model_choice import choose_model_ref

    loaded = ctx.config()
    ref = args.ref or choose_model_ref(ctx.agent(), loaded, ctx.environ)
    print(f"asking {ref} for a one-word reply…", file=sys.stderr, flush=True)
    result = probe_model(ref, loaded.config.models, ctx.environ, args.timeout)
    if result.kind == "AuthError":
        from dataclasses import replace

        from hermit.config.envfile import env_file_path

        result = replace(result, hint=f"{result.hint}; a key stored by `hermit setup` is in "
                                      f"{env_file_path(ctx.home)} (run setup again to replace it)")
    if args.json:
        print(json.dumps(asdict(result), ensure_ascii=False))
    elif result.ok:
        print(describe_probe(result))
    else:
        print(f"error: {describe_probe(result)}", file=sys.stderr)
        if result.hint:
            print(f"hint: {result.hint}", file=sys.stderr)
    return 0 if result.ok else 1
