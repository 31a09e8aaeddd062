"""`hermit setup`: choose a language model and add a chat channel account without editing YAML.

Interactive on a terminal (it asks only what its flags did not say), fully scriptable with flags
otherwise. The model choices: a local Ollama (offered when one answers at --ollama-url), Anthropic,
OpenAI, any OpenAI-compatible server, or the built-in fake provider (canned replies, for trying Hermit
without a model). The choice is checked with one tiny request before anything is written. Keys and
bot tokens go into the owner-only env file `<state>/hermit.env` (config/envfile.py), never into
hermit.yaml, which names the variables. Nothing is written before the last question and the checks (Ctrl-C
leaves a fresh state dir as it was). The model is checked before the channel's questions: when that check
fails (and the model is not saved anyway) the channel account is still asked, checked and saved, and setup
says the model was not saved and the command that finishes it (a failed check of the fake provider also
leaves its script, which the hint's start command needs). The config is edited in place keeping comments
(config/edit.py), validated before it is replaced, and only the parts chosen change: re-running setup
for a channel leaves the model alone and the other way round.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermit.cli.channel_check import DISCORD_API, TokenCheck, refuse_inner_whitespace
from hermit.cli.config_file import ConfigText, config_text, edit_config
from hermit.cli.context import CliContext
from hermit.cli.setup_agent import for_agent, other_agent
from hermit.cli.setup_channel import plan_channel, token_kept
from hermit.cli.setup_keys import (
    configured_provider,
    key_var,
    note_shell_only,
)
from hermit.cli.setup_prompt import Prompter, read_stdin_line
from hermit.cli.terminal import warn
from hermit.errors import ConfigError, HermitError
from hermit.models.fake_start import FAKE_SCRIPT, FAKE_URL, fake_start_command
from hermit.models.fake_start import stopped_fake_hint as fake_hint

KINDS = ("ollama", "anthropic", "openai", "openai-compatible", "fake")
DM_POLICIES = ("pairing", "allowlist", "open", "disabled")
OLLAMA_URL = "http://127.0.0.1:11434"
DEFAULT_MODELS = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-4.1", "ollama": "llama3.1", "fake": "test-model"}
PROBE_SECONDS = 1.5  # how long a local server may take to answer the probe


def configure(p: argparse.ArgumentParser) -> None:
    from hermit.config.channels import platforms

    """The arguments and handler of `hermit setup` (its name and help are in the table of cli/commands.py)."""
    p.add_argument("--provider", choices=KINDS, help="the model provider to use (skip to leave the model as it is)")
    p.add_argument("--model", help="model id, e.g. claude-sonnet-4-5, gpt-4.1, llama3.1")
    p.add_argument("--name", help="the provider's name in the config (default: the provider kind; 'custom' "
                                  "for openai-compatible)")
    p.add_argument("--base-url", help="the server's API base URL (openai-compatible, fake; or a proxy for "
                                      "anthropic/openai)")
    p.add_argument("--ollama-url", default=OLLAMA_URL, help=f"where a local Ollama answers (default {OLLAMA_URL})")
    p.add_argument("--api-key", help="the provider's API key (stored in <state>/hermit.env; prefer "
                                     "--api-key-stdin, which keeps it out of the shell history)")
    p.add_argument("--api-key-stdin", action="store_true", help="read the API key from the first line of stdin")
    p.add_argument("--key-var", help="the variable that holds the key (default: ANTHROPIC_API_KEY, "
                                     "OPENAI_API_KEY or <NAME>_API_KEY)")
    p.add_argument("--no-check", action="store_true", help="do not send the test request before saving")
    p.add_argument("--channel", choices=tuple(platforms()), help="add or change a chat channel account")
    p.add_argument("--account", default=None, help="the channel account id (default: 'default')")
    p.add_argument("--token", help="the bot token (stored in <state>/hermit.env); Slack: the bot token")
    p.add_argument("--token-stdin", action="store_true", help="read the bot token from the first line of stdin")
    p.add_argument("--token-var", help="the variable that holds the token (default: the platform's, e.g. "
                                       "TELEGRAM_BOT_TOKEN)")
    p.add_argument("--secret", action="append", default=[], metavar="FIELD=VALUE",
                   help="another secret of the account, e.g. app_token=xapp-… (Slack) or app_secret=… (WhatsApp); "
                        "prefer --secret-stdin, which keeps it out of the command line")
    p.add_argument("--secret-stdin", action="append", default=[], metavar="FIELD",
                   help="read that secret from the next line of stdin (repeatable; after the API key's and the "
                        "token's lines when those are read from stdin too)")
    p.add_argument("--phone-number-id", help="WhatsApp: the Cloud API phone number id")
    p.add_argument("--api-base", metavar="URL", help="Telegram: a Bot API server of your own (default "
                   "https://api.telegram.org); Slack, WhatsApp: the API's base_url; the token is checked there. "
                   f"Discord: where only the token check goes (default {DISCORD_API}; not saved)")
    p.add_argument("--owner", action="append", default=[], metavar="ID",
                   help="your own sender id on the channel (repeatable): your DMs reach your main session")
    p.add_argument("--dm-policy", choices=DM_POLICIES, help="what strangers' DMs get (default: pairing)")
    p.add_argument("--non-interactive", action="store_true", help="never prompt, even on a terminal")
    p.set_defaults(func=run)


@dataclass
class Plan:
    """What this run of setup changes: config keys, env file values, and what to print afterwards."""

    updates: list[tuple[tuple[str, ...], Any]] = field(default_factory=list)
    secrets: dict[str, str] = field(default_factory=dict)
    model_ref: str | None = None
    kind: str | None = None
    notes: list[str] = field(default_factory=list)
    channel: str | None = None
    account: tuple[str, str] | None = None  # (channel, account id) of `channel`
    key_var: str | None = None  # the variable the model's key is stored as, when it needs one
    fake_start: str | None = None  # the command that starts the fake provider this plan points at
    token_check: TokenCheck | None = None  # a bot or access token given this run: checked before saving
    agent: str | None = None  # --agent named another agent than the default: the model and account are its own


def _get_json(url: str) -> Any:
    import httpx

    from hermit.direct_http import DirectHereClient

    try:  # a local Ollama's list never goes through a proxy from the environment (the proxy could answer it)
        with DirectHereClient(timeout=PROBE_SECONDS) as client:
            r = client.get(url)
    except httpx.HTTPError:
        return None
    try:
        return r.json()
    except ValueError:
        return {}


def ollama_models(url: str) -> list[str] | None:
    """The models of an Ollama (or any server) answering at `url`, [] when it answers without a list,
    None when nothing answers."""
    tags = _get_json(url.rstrip("/") + "/api/tags")
    if tags is None:
        return None
    names = [m.get("name", "") for m in tags.get("models", [])] if isinstance(tags, dict) else []
    if not names:
        listed = _get_json(url.rstrip("/") + "/v1/models")
        data = listed.get("data", []) if isinstance(listed, dict) else []
        names = [m.get("id", "") for m in data if isinstance(m, dict)]
    return [n.removesuffix(":latest") for n in names if n]


def _warn_command_line_secrets(args: argparse.Namespace) -> None:
    """A value given as an argument is in the process's command line while setup runs (other local users
    read it with `ps`) and in the shell's history."""
    given = [flag for flag, value in (("--api-key", args.api_key), ("--token", args.token),
                                      ("--secret", args.secret)) if value]
    if given:
        warn(f"{', '.join(given)} put secrets in the command line, which other users of this machine can read "
             "while setup runs, and in your shell's history; next time use --api-key-stdin, --token-stdin or "
             "--secret-stdin FIELD")


def _current_model(ctx: CliContext) -> str | None:
    from hermit.cli.model_choice import NoModelConfigured, choose_model_ref

    try:
        return choose_model_ref(ctx.agent(), ctx.config(), ctx.environ)
    except NoModelConfigured:
        return None


def plan_model(ctx: CliContext, args: argparse.Namespace, ui: Prompter, plan: Plan) -> None:
    kind = args.provider
    if kind is None:
        if not ui.interactive:
            return
        found = ollama_models(args.ollama_url)
        options: list[tuple[str, str]] = []
        if found is not None:
            listing = f": {', '.join(found[:4])}" if found else ""
            options.append(("ollama", f"Ollama on this machine (answering at {args.ollama_url}{listing})"))
        options += [("anthropic", "Anthropic (Claude) — needs an API key"),
                    ("openai", "OpenAI — needs an API key"),
                    ("openai-compatible", "another OpenAI-compatible server (LM Studio, vLLM, llama.cpp, OpenRouter…)"),
                    ("fake", "the built-in fake provider: canned replies, to try Hermit without a model")]
        current = _current_model(ctx)
        options.append(("keep", f"keep the current model ({current})" if current else "no model for now"))
        # Enter keeps what [brackets] show, as the first line says: on a second run that is the current model,
        # not the first option (which switched a working model to Anthropic and asked for its key).
        kind = ui.choose("Which language model should Hermit talk to?", options,
                         default=len(options) if current else _first_use(options))
        if kind == "keep":
            return
    name = args.name or {"openai-compatible": "custom"}.get(kind, kind)
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise ConfigError(f"provider name {name!r} may only have letters, digits, '-' and '_'", "e.g. --name local")
    mine = configured_provider(ctx, name)  # a second run keeps the first one's server unless given another
    kept = mine.base_url if mine is not None and kind != "ollama" and mine.type == _ptype(kind) else None
    base_url = args.base_url or kept
    listed: list[str] = []
    if kind == "ollama":
        base_url = base_url or args.ollama_url.rstrip("/") + "/v1"
        listed = ollama_models(base_url.removesuffix("/v1")) or []
    elif kind == "openai-compatible" and not base_url:
        base_url = ui.text("The server's API base URL (ending in /v1 for most servers)", None, "--base-url",
                           "the server's base URL")
    elif kind == "fake":
        base_url = base_url or FAKE_URL
    model = args.model or ui.text("Model", listed[0] if listed else DEFAULT_MODELS.get(kind), "--model", "a model id")
    prefix = ("models", "providers", name)
    plan.updates += [((*prefix, "type"), _ptype(kind))]
    from hermit.config.edit import DELETE

    plan.updates.append(((*prefix, "base_url"), base_url or DELETE))
    _plan_key(ctx, args, ui, plan, kind, name, prefix)
    plan.model_ref, plan.kind = f"{name}/{model}", kind
    if plan.agent is None:  # another agent's model goes into its own entry (setup_agent.py)
        plan.updates.append((("agents", "defaults", "model"), plan.model_ref))
    if kind == "fake":
        script = ctx.home / FAKE_SCRIPT
        plan.fake_start = fake_start_command(base_url or FAKE_URL, script)
        plan.notes.append(f"the fake provider answers with canned replies; it runs in a terminal of its own:\n"
                          f"    {plan.fake_start}\n"
                          f"  (edit {script.name} to script other replies; docs/guide.md: 'Without a real model')\n"
                          f"  for a real model later: hermit setup --provider anthropic (or openai, ollama, "
                          f"openai-compatible), the key on a terminal or --api-key-stdin")


def _first_use(options: list[tuple[str, str]]) -> int:
    """Enter's choice with no model yet (no key in the environment either: one would be the current model, kept by
    Enter): a local Ollama that answers, else the fake provider — never a provider that needs a key nobody has
    (Anthropic was, and its key was asked for until Ctrl-C)."""
    kinds = [k for k, _ in options]
    return kinds.index("ollama" if "ollama" in kinds else "fake") + 1


def _ptype(kind: str) -> str:
    return kind if kind in ("anthropic", "openai") else "openai-compatible"


def stopped_fake_hint(ctx: CliContext, e: HermitError) -> str | None:
    """For a model call refused because the fake provider that `hermit setup --provider fake` configured is
    not running: the command that starts it, instead of the hint for a local model server (`ollama serve`)."""
    return fake_hint(ctx.home, e)


def _plan_key(ctx: CliContext, args: argparse.Namespace, ui: Prompter, plan: Plan, kind: str, name: str,
              prefix: tuple[str, ...]) -> None:
    from hermit.config.edit import DELETE

    if kind in ("ollama", "fake") and not (args.api_key or args.api_key_stdin or args.key_var):
        plan.updates.append(((*prefix, "api_key_env"), DELETE))
        plan.updates.append(((*prefix, "api_key"), DELETE))
        return
    var = args.key_var or key_var(ctx, kind, name)
    key = args.api_key or (read_stdin_line("API key", "--api-key-stdin") if args.api_key_stdin else None)
    key = key and refuse_inner_whitespace(key, f"API key for {name}", "--api-key-stdin")
    have = ctx.environ.get(var)
    if key is None and ui.interactive:
        if have:
            key = ui.secret(f"{var} is already set; press Enter to keep it, or paste a new key") or None
        else:
            optional = kind == "openai-compatible"
            key = ui.secret(f"API key for {name}{' (Enter if the server needs none)' if optional else ''}") or None
            # On a terminal an empty answer is asked again (its way out said), not an error that ends setup
            # telling a person at a terminal to "run it on a terminal".
            while key is None and kind in ("anthropic", "openai"):
                print(f"  ({name} needs an API key: paste it, or press Ctrl-C to stop without saving anything; "
                      "`hermit setup` again can choose a model that needs no key, such as the fake provider)")
                key = ui.secret(f"API key for {name}") or None
    if key is None and not have and kind in ("anthropic", "openai"):
        raise ui.need("--api-key-stdin (or --api-key)", f"an API key for {name} (or {var} in the environment)")
    plan.updates.append(((*prefix, "api_key"), DELETE))  # a plaintext key would win over the variable
    if key is None and not have:
        plan.updates.append(((*prefix, "api_key_env"), DELETE))  # a server that needs no key
        return
    plan.updates.append(((*prefix, "api_key_env"), var))
    plan.key_var = var
    if key is not None:
        plan.secrets[var] = key
    else:
        note_shell_only(ctx, plan.notes, var, f"--provider {kind} --api-key-stdin")


def _write_fake_script(home: Path) -> Path:
    from hermit.workspace import write_new

    path = home / FAKE_SCRIPT
    write_new(path, json.dumps([{"text": "Hello from Hermit's fake provider: this reply is canned, not from a "
                                         "model. Edit fake-provider.json to script replies and tool calls.",
                                 "repeat": True}], indent=2) + "\n")
    return path


def _failure_hint(plan: Plan, error: str, kind: str, hint: str) -> str:
    """The hint for a failed model check, in setup's own terms."""
    if plan.fake_start and "nothing listens" in error:
        return (f"start the fake provider in another terminal: {plan.fake_start}\n"
                "      then run this setup again (or pass --no-check to save without the test request)")
    if kind == "AuthError" and plan.key_var:
        return f"the key for {plan.key_var} was refused (nothing was saved): run setup again with the right one"
    return hint


def _check_model(plan: Plan, ui: Prompter, models: Any, env: dict[str, str]) -> bool:
    """The tiny request, until it answers or the user stops: True to save. A refused key may be typed again
    on a terminal."""
    from hermit.cli.models import describe_probe, probe_model

    assert plan.model_ref is not None
    while True:
        print(f"checking {plan.model_ref} with a tiny request…", flush=True)
        result = probe_model(plan.model_ref, models, env)
        if result.ok:
            print(f"ok: {describe_probe(result)}")
            return True
        print(f"error: {describe_probe(result)}", file=sys.stderr)
        hint = _failure_hint(plan, result.error, result.kind, result.hint)
        if hint and not (ui.interactive and result.kind == "AuthError" and plan.key_var):
            print(f"hint: {hint}", file=sys.stderr)
        if ui.interactive and result.kind == "AuthError" and plan.key_var:
            key = ui.secret(f"That key was refused. Paste the key for {plan.key_var} again (Enter to stop)")
            if key:
                plan.secrets[plan.key_var] = env[plan.key_var] = key
                continue
        # On a terminal, the built-in fake provider not started yet (the hint above says how): Enter saves it. A new
        # user pressing Enter at every question (the fake is the default choice) ended with no model and exit 1.
        # Off a terminal `yes` gives its default: the flags path still saves nothing.
        fake_not_started = ui.interactive and bool(plan.fake_start) and "nothing listens" in result.error
        return ui.yes("Save this choice anyway?", default=fake_not_started)


def _refuse_uncreatable(ctx: CliContext) -> None:
    from hermit.cli.preflight import creatable_problem

    problem = creatable_problem(ctx.home, fill=ctx.paths.config_file() is None)
    if problem is not None:
        raise problem


def run(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.cli.init import run as init_run
    from hermit.cli.preflight import check_environment
    from hermit.cli.running_gateway import after_change_note
    from hermit.config.edit import set_values
    from hermit.config.envfile import env_file_path, set_env_values
    from hermit.config.load import LoadedConfig, build_config, parse_config_text

    interactive = not args.non_interactive and sys.stdin.isatty() and sys.stdout.isatty()
    if not interactive and not args.provider and not args.channel:
        raise ConfigError("nothing to set up: no terminal to ask on and no --provider or --channel given",
                          "e.g. hermit setup --provider anthropic --api-key-stdin, or --provider ollama")
    _warn_command_line_secrets(args)
    check_environment(ctx)
    _refuse_uncreatable(ctx)  # before any question: a state dir that cannot be made is said now
    ui = Prompter(interactive)
    plan = Plan(agent=other_agent(ctx))
    if interactive:
        whose = f" for agent {plan.agent}" if plan.agent else ""
        print(f"Hermit setup{whose} — state dir {ctx.home}. Enter keeps what [brackets] show; Ctrl-C stops "
              "without saving anything.")
    plan_model(ctx, args, ui, plan)
    # The model is checked before the channel's questions: a failed check then costs no typed bot token, and
    # a channel account given with it is still saved (its token checked on its own), the model left as it was.
    dropped = _drop_failed_model(ctx, args, ui, plan)
    plan_channel(ctx, args, ui, plan)
    if not plan.updates:
        if dropped:
            print(f"nothing was saved{dropped}", file=sys.stderr)
            return 1
        print("nothing changed")
        return 0

    sandboxed: list[str] = []  # the line saying setup sandboxed the agent's main session (setup_agent.py)

    def updated(current: ConfigText) -> tuple[str, LoadedConfig]:
        new_text = set_values(current.text, plan.updates, is_yaml=current.is_yaml, source=str(current.path))
        data, where = parse_config_text(new_text, str(current.path), current.is_yaml)
        if plan.agent is not None:
            new_text, note = for_agent(new_text, is_yaml=current.is_yaml, source=str(current.path),
                                       agent_id=plan.agent, model_ref=plan.model_ref, account=plan.account)
            sandboxed[:] = [note] if note else []
            data, where = parse_config_text(new_text, str(current.path), current.is_yaml)
        return new_text, build_config(data, ctx.paths, current.path, where)  # a bad id or URL: before saving

    updated(config_text(ctx))  # a bad id or URL is said before anything is saved
    title = plan.token_check.title if plan.token_check else ""
    left_out = token_kept(ui, plan) if plan.token_check and not args.no_check else None
    if left_out == "":
        print(f"nothing was saved{dropped and ' (the model neither)'} (use --no-check to save without asking "
              f"{title})", file=sys.stderr)
        return 1
    if left_out and not plan.updates:
        print(f"nothing was saved{dropped and ' (the model neither)'}: {left_out}", file=sys.stderr)
        return 1
    # Saving starts here, after the last question: a fresh state dir gets the config template and the
    # workspace first, as `hermit init` makes them, so Ctrl-C before this point leaves nothing behind.
    if ctx.paths.config_file() is None:
        init_run(ctx, args)
    if plan.kind == "fake":
        _write_fake_script(ctx.home)
    if plan.secrets:
        set_env_values(env_file_path(ctx.home), plan.secrets)
        print(f"stored {', '.join(sorted(plan.secrets))} in {env_file_path(ctx.home)} (owner-only)")
    # The model check took seconds: the updates go into the file as it is now (`hermit agents add` may have
    # changed it meanwhile), under the config lock.
    path = edit_config(ctx, lambda current: updated(current)[0]).path
    mine = f" (agent {plan.agent}'s)" if plan.agent else ""
    print(f"updated {path}" + (f": model {plan.model_ref}{mine}" if plan.model_ref else "")
          + (f"{';' if plan.model_ref else ':'} channel account {plan.channel}" if plan.channel else "")
          + (f", answered by agent {plan.agent}" if plan.agent and plan.channel else ""))
    for note in [*plan.notes, *sandboxed, after_change_note(ctx.home)]:
        if note:
            print(f"note: {note}")
    # Without a model the gateway does not start ("no language model is configured"): that step comes first.
    gateway = ("hermit gateway run   (or `hermit service install` to keep it running)" if plan.model_ref or
               _current_model(ctx) else "hermit setup   (choose a language model first: the gateway needs one)")
    nxt = ["hermit chat" if plan.model_ref else None, gateway if plan.channel else None, "hermit doctor"]
    print("next: " + " · ".join(n for n in nxt if n))
    return _what_was_left_out(dropped, left_out)


def _what_was_left_out(dropped: str, left_out: str | None) -> int:
    """The exit code once saved: 1, with what was left out and how to add it, when the model or the account was."""
    if left_out:
        print(left_out, file=sys.stderr)
    if dropped:
        print(f"the model was not saved{dropped}", file=sys.stderr)
    return 1 if dropped or left_out else 0


def _drop_failed_model(ctx: CliContext, args: argparse.Namespace, ui: Prompter, plan: Plan) -> str:
    """Check the planned model (unless --no-check); when it fails and is not saved anyway, take it out of the
    plan (its config keys and key) and return what to say about it: '' when it stays in."""
    from hermit.config.edit import set_values
    from hermit.config.load import build_config, parse_config_text
    from hermit.config.paths import ensure_private_dir

    if not plan.model_ref or args.no_check:
        return ""
    current = config_text(ctx)
    text = set_values(current.text, plan.updates, is_yaml=current.is_yaml, source=str(current.path))
    data, where = parse_config_text(text, str(current.path), current.is_yaml)
    models = build_config(data, ctx.paths, current.path, where).config.models  # a bad URL: before any check
    if _check_model(plan, ui, models, {**ctx.environ, **plan.secrets}):
        return ""
    import shlex

    flags = [("--name", args.name), ("--base-url", args.base_url), ("--model", plan.model_ref.split("/", 1)[1])]
    again = f"hermit setup --provider {plan.kind}" + "".join(f" {f} {shlex.quote(v)}" for f, v in flags if v)
    if plan.key_var and plan.key_var in plan.secrets:  # a key never stored alone: the config would not name it
        again += " --api-key-stdin"
    said = f" (to finish: `{again}` once the check can pass, or with --no-check to save it untested)"
    if plan.fake_start:  # the failure's hint starts the fake with this file: it must be there
        ensure_private_dir(ctx.home, own=True, what="the state dir")
        said = (f"; {_write_fake_script(ctx.home)} holds the fake provider's replies for the command above;"
                f" to finish: `{again}` once it runs, or with --no-check to save it untested")
    plan.updates.clear()
    if plan.key_var:
        plan.secrets.pop(plan.key_var, None)
    plan.notes.clear()
    plan.model_ref = plan.kind = plan.key_var = plan.fake_start = None
    if ui.interactive:
        print("  (the model is not saved; setup goes on with the rest)")
    return said
