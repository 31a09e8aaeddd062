"""What of a heartbeat turn's reply is an alert (SPEC §16). The rule lives in sessions/background.py, below memory's
session source, which applies it too; the names stay here for the agent and the scheduler."""

from __future__ import annotations

from hermit.sessions.background import DEFAULT_ACK_MAX_CHARS as DEFAULT_ACK_MAX_CHARS
from hermit.sessions.background import HEARTBEAT_MARK as HEARTBEAT_MARK
from hermit.sessions.background import HEARTBEAT_TOKEN as HEARTBEAT_TOKEN
from hermit.sessions.background import BeatLines as BeatLines
from hermit.sessions.background import strip_heartbeat_token as strip_heartbeat_token
