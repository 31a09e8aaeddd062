"""What `hermit service install` warns of: a chat account's secret the installed gateway will not have.

The service's gateway reads `<state>/hermit.env`, never the shell that ran `hermit service install`: a bot token
exported in this shell only (or set nowhere) leaves that account down in the service (the gateway starts without
it, gateway/unstarted.py). Each such variable is named with the command that stores it, as `hermit setup` does for
a model key (cli/setup_keys.note_shell_only).
"""

from __future__ import annotations

from hermit.cli.context import CliContext
from hermit.errors import HermitError


def missing_in_service(ctx: CliContext) -> list[str]:
    """One line per enabled account's secret that is not in hermit.env (nor plaintext in hermit.yaml)."""
    from hermit.channels.platforms import accounts, secrets
    from hermit.config.envfile import env_file_path, read_env_file

    try:
        channels = ctx.config().config.channels
    except HermitError:
        return []
    env_file = env_file_path(ctx.home)
    stored = read_env_file(env_file).values
    out: list[str] = []
    for name, account_id, cfg in accounts(channels):
        if not cfg.enabled:
            continue
        for i, s in enumerate(secrets(name, cfg)):
            if s.plaintext or not s.env_name or s.env_name in stored:
                continue
            flag = "--token-stdin" if i == 0 else f"--secret-stdin {s.field}"
            setup = f"hermit setup --channel {name} --account {account_id} {flag}"
            if ctx.environ.get(s.env_name):  # hermit.env is not it: this shell
                out.append(f"{s.env_name} ({name}/{account_id}) is set in this shell only, not in {env_file}: the "
                           f"service's gateway will not have it and starts without {name}/{account_id}; store it "
                           f"with printf '%s\\n' \"${s.env_name}\" | {setup}")
            else:
                out.append(f"{s.env_name} ({name}/{account_id}) is not set, in {env_file} or this shell: the "
                           f"service's gateway starts without {name}/{account_id}; store it with {setup} (the "
                           "value on stdin)")
    return out


def warn_missing(ctx: CliContext) -> None:
    from hermit.cli.terminal import warn

    for line in missing_in_service(ctx):
        warn(line)
