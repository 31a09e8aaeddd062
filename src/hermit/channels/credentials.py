"""Channel secrets: taken from the environment variable a config names, or (warned about) from the config."""

from __future__ import annotations

from collections.abc import Mapping

from hermit.errors import ConfigError


class MissingSecret(ConfigError):
    """A channel account's secret is neither in its config nor in the variable it names. The gateway starts
    without that account (gateway/unstarted.py); it never refuses to start for it."""

    def __init__(self, message: str, hint: str, *, where: str, field: str, env_name: str) -> None:
        super().__init__(message, hint)
        self.where, self.field, self.env_name = where, field, env_name


def resolve(value: str | None, env_name: str, environ: Mapping[str, str], *, where: str,
            field: str) -> str:
    """The secret for `where` (e.g. `channels.telegram.accounts.default`): plaintext wins, else the variable."""
    if value:
        return value
    found = environ.get(env_name, "").strip() if env_name else ""
    if found:
        return found
    raise MissingSecret(f"{where}: no {field}: environment variable {env_name or '(none named)'} is not set",
                        f"export {env_name or 'THE_VARIABLE'}=… before starting the gateway, or set "
                        f"{where}.{field}_env to the variable that holds it", where=where, field=field,
                        env_name=env_name)
