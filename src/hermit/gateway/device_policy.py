"""Whether this gateway keeps browsers signed in as devices (gateway/devices.py), from `gateway.remember_devices` and
how its port is held.

The risk devices bring (docs/security.md, "Another user on the gateway's port"): while the gateway's port is free
(the gateway stopped, restarting, crashed) another local user's program can listen there, and a page the owner opens
then runs that program's script in the web app's origin — which can *use* a device's non-extractable key and, once the
gateway is back, sign in as the device. Nothing in the page can tell. So devices are used only where the port cannot
go free:

- `auto` (the default): on exactly when the gateway's listening sockets were handed in by the process that started
  it and that process holds them too (gateway/listen.py `Listeners.held`: systemd's socket activation, the .socket
  unit `hermit service install` writes) — the port stays taken while the gateway restarts or is down. Off otherwise
  (`hermit gateway run` by hand, a service without its socket unit, a wrapper that exec'd the gateway).
- `true`: on whatever holds the port (only on a computer no one else logs in to); `false`: off.

The gateway does not serve https itself, so "an https origin" does not decide it: a TLS proxy forwards to this port,
which can be squatted the same way. The decision is taken at start, published in the lock file (`devices`), and shown by
`hermit doctor`, `hermit devices list` and Operations → Devices. It is taken back once while the gateway runs: when
the process that held the sockets stops holding them (its socket unit stopped: `systemctl --user stop <name>.socket`,
or it exited; gateway/listen.py `watch_holder`), `auto` turns devices off (`lost`) until a restart decides again — the
port would go free as soon as this gateway stops. A restart in place (SIGUSR1) keeps it off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Setting = bool | Literal["auto"]

HOW_ON = ("run the gateway as a service, whose socket unit keeps its port taken across restarts: `hermit service "
          "install` (then `hermit service restart`); or set `gateway.remember_devices: true` in hermit.yaml and restart "
          "the gateway (only on a computer no one else logs in to)")
WHY_UNHELD = ("its port goes free whenever the gateway stops or restarts (no socket unit of its service holds it), and "
              "another local user's program could take it meanwhile")


@dataclass(frozen=True)
class DevicePolicy:
    """`on`: devices are used. `why`: one line saying why (the setting, and how the port is held). `hint`: how to turn
    it on ("" when on)."""

    on: bool
    why: str
    hint: str = ""

    def published(self) -> dict[str, Any]:
        """For the lock file (gateway/state.py): what the CLI shows of a running gateway."""
        return {"on": self.on, "why": self.why, "hint": self.hint}

    @classmethod
    def from_published(cls, info: object) -> DevicePolicy | None:
        if not isinstance(info, dict) or not isinstance(info.get("on"), bool):
            return None
        return cls(info["on"], str(info.get("why", "")), str(info.get("hint", "")))


def decide(setting: Setting, held: bool) -> DevicePolicy:
    """The policy for a gateway whose port is `held` (Listeners.held) under `gateway.remember_devices: setting`."""
    if setting is True:
        return DevicePolicy(True, "on (gateway.remember_devices: true): browsers stay signed in"
                            + ("; its port is held by the service's socket unit" if held else
                               "; its port goes free while the gateway is down, so another local user's program "
                               "that takes it could sign in as one — only on a computer no one else logs in to"))
    if setting is False:
        return DevicePolicy(False, "off (gateway.remember_devices: false): a browser signed in with a link stays "
                            "signed in for its tab only", "set `gateway.remember_devices: auto` (or true) in hermit.yaml "
                            "and restart the gateway")
    if held:
        return DevicePolicy(True, "on (gateway.remember_devices: auto): the service's socket unit holds the "
                            "gateway's port, so no other program can take it while the gateway restarts")
    return DevicePolicy(False, f"off (gateway.remember_devices: auto): {WHY_UNHELD}; a browser signed in with a link "
                        "stays signed in for its tab only", HOW_ON)


HOLDER_POLL_SECONDS = 1.0  # how often a running gateway looks whether its socket unit still holds its port


def lost(setting: Setting) -> DevicePolicy:
    """The policy once the process that held the gateway's port has stopped holding it while the gateway runs."""
    if setting != "auto":
        return decide(setting, held=False)
    return DevicePolicy(False, "off (gateway.remember_devices: auto): the service's socket unit stopped holding the "
                        "gateway's port while it ran (`systemctl --user stop …socket`?), so the port goes free when "
                        "the gateway stops, and another local user's program could take it; a browser signed in with "
                        "a link stays signed in for its tab only", "restart the service, which starts its socket unit "
                        "again: `hermit service restart` (or `systemctl --user restart <name>.service`)")


def not_running(setting: Setting) -> DevicePolicy:
    """What can be said while no gateway runs: the setting, and for `auto` what it will depend on."""
    if setting == "auto":
        return DevicePolicy(False, "auto (gateway.remember_devices): decided when the gateway starts — on when it "
                            "runs as the service with its socket unit (`hermit service install`), off when started by "
                            "hand", HOW_ON)
    return decide(setting, held=False)


def shown(setting: Setting, lock_info: dict[str, Any] | None) -> DevicePolicy:
    """What `hermit doctor` and `hermit devices list` say: the running gateway's decision (its lock file), else what
    the setting alone says."""
    running = DevicePolicy.from_published((lock_info or {}).get("devices"))
    return running if running is not None else not_running(setting)


def doctor_line(setting: Setting, lock_info: dict[str, Any] | None) -> str:
    """`hermit doctor`'s "web app devices" line."""
    if setting is True:
        return ("browsers stay signed in (gateway.remember_devices): another local user's program that takes the "
                "port while the gateway is down could sign in as one — only on a computer no one else logs in to"
                + ("" if not (lock_info or {}).get("held") else " (this gateway's port is held by its socket unit: "
                   "`auto` would keep them signed in too)"))
    if setting is False:
        return "off: a browser signed in with a link stays signed in for its tab only (gateway.remember_devices)"
    policy = shown(setting, lock_info)
    return policy.why + (f" — to keep browsers signed in: {policy.hint}" if policy.hint else "")
