"""The types of a binding's `team_id` (Slack workspace) and `guild_id` (Discord server): normalised at load by
config/allowlist.py, as `owners` entries and peer ids are, so a binding written `t0123` or ` T0123` matches
the workspace T0123 instead of silently routing it to the default agent. A `guild_id` that is not a server
id (a name, an invite link) is a config error with a hint; a `team_id` that does not look like a Slack id is
flagged by `hermit doctor` (agent/routing.py `binding_problems`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

from hermit.config.allowlist import AllowlistEntryError, normalize_guild_id, normalize_team_id


def _guild_id(raw: str) -> str:
    try:
        return normalize_guild_id(raw)
    except AllowlistEntryError as e:  # the hint rides in the error's context: config/load.py shows it
        raise PydanticCustomError("binding_guild_id", "{message}", {"message": e.message, "hint": e.hint}) from None


TeamId = Annotated[str, AfterValidator(normalize_team_id)]
GuildId = Annotated[str, AfterValidator(_guild_id)]
