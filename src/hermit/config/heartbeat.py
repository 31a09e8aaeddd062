"""The heartbeat's section of the agent settings (`agents.defaults.heartbeat`, `agents.list[].heartbeat`,
SPEC §16): how often, when, with which prompt, and where its alerts go — and whether they may go to
someone other than an owner of the agent (`share_alerts_with_target`, off unless the owner opts in)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


# SPEC §16's heartbeat prompt; HEARTBEAT_OK at the start or end of the reply marks "nothing to report".
DEFAULT_HEARTBEAT_PROMPT = (
    "Read HEARTBEAT.md if it exists (workspace context). Follow it strictly. Do not infer or repeat old tasks "
    "from prior chats. If nothing needs attention, reply HEARTBEAT_OK."
)


class ActiveHoursConfig(Strict):
    """Local times (the agent's timezone) between which heartbeats run; start > end wraps past midnight."""

    start: str = "00:00"
    end: str = "24:00"

    @field_validator("start", "end")
    @classmethod
    def _hh_mm(cls, v: str) -> str:
        m = re.fullmatch(r"(\d{1,2}):(\d{2})", v.strip())
        if not m or int(m.group(1)) > 24 or int(m.group(2)) > 59 or (int(m.group(1)) == 24 and m.group(2) != "00"):
            raise ValueError(f"{v!r} is not a time like '08:00' or '22:30' ('24:00' is the end of the day)")
        return f"{int(m.group(1)):02d}:{m.group(2)}"


class DeliveryTargetConfig(Strict):
    """A channel peer to send to: `channel` and `account` as under channels.<name>.accounts, `to` a peer id."""

    channel: str
    account: str = "default"
    to: str
    peer_kind: Literal["dm", "group"] = "dm"


class HeartbeatConfig(Strict):
    """The periodic wake-up (SPEC §16): every `every_minutes` (0 disables) the main session gets `prompt`;
    skipped without a model call outside active_hours, while the main session is busy, or when HEARTBEAT.md
    holds only blank lines and headings. A reply that is HEARTBEAT_OK plus at most ack_max_chars is
    dropped; anything else is an alert, sent to `target` (without one it stays in the transcript)."""

    every_minutes: int = Field(30, ge=0, le=7 * 24 * 60)
    active_hours: ActiveHoursConfig | None = None
    target: DeliveryTargetConfig | None = None
    prompt: str = Field(DEFAULT_HEARTBEAT_PROMPT, min_length=1)
    ack_max_chars: int = Field(300, ge=0)
    # Alerts are main-session text (they can quote MEMORY.md and owner-only notes). Sent to a target that
    # is not an owner of the agent (a group, a contact, another agent's owner) only when this is true: the
    # owner's explicit opt-in. Otherwise such an alert is not delivered (it stays in the transcript), and
    # the gateway log and `hermit doctor` say so. Checked at every heartbeat, before its turn and again before
    # the alert is sent, against the config in force: the running gateway re-reads hermit.yaml when it
    # changes, and while the file is invalid no heartbeat runs.
    share_alerts_with_target: bool = False
