"""The gateway process: composes agents, the bus, channels, services and the HTTP server, and runs
them until SIGTERM/SIGINT, then shuts down in order.

Shutdown: stop taking messages (new ones are answered "not processed"), let running turns finish for
`gateway.shutdown_grace_seconds`, then cancel their tokens (checked between steps, and the transport
ends a provider call in flight) and give them a few seconds to stop (the runtime records an
`interrupted` entry); a turn still not done after that is marked interrupted here and abandoned with
its daemon thread. Then services and
channels stop, the HTTP server closes, runtimes close and the lock is released; the exit code is 0.
A second signal skips the grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

from hermit.agent.routing import WEBCHAT, RouteInput, Router, session_key_for
from hermit.agent.runtime import AgentRuntime
from hermit.channels.access import PARENT_GROUP, AccessControl, PairingStore
from hermit.channels.base import Channel, ChannelDeps, InboundMessage
from hermit.channels.chunking import chunk_text
from hermit.channels.webchat import WebchatChannel
from hermit.config.load import LoadedConfig
from hermit.errors import ConfigError
from hermit.gateway.agents import AgentHost
from hermit.gateway.app import build_app
from hermit.gateway.bus import Admission, Bus, Routed
from hermit.gateway.channels import build_channels, webhook_routes
from hermit.gateway.config_watch import ConfigWatcher
from hermit.gateway.console import Console
from hermit.gateway.deletes_store import RememberedDeletes, deletes_path
from hermit.gateway.device_policy import HOLDER_POLL_SECONDS, DevicePolicy, decide, lost
from hermit.gateway.listen import Holder, exec_in_place, kept_for_restart, open_listeners, watch_holder
from hermit.gateway.live_config import LiveAccess, LiveConfig
from hermit.gateway.protocol import MAX_FRAME_BYTES
from hermit.gateway.reserved_file import ReservedFile
from hermit.gateway.services import MemoryWatcher, Service, ServiceContext, build_services
from hermit.gateway.state import GatewayLock, HowRun, launchd_job
from hermit.gateway.tickets import Tickets
from hermit.gateway.turn_slots import live_turn_limits
from hermit.gateway.unsigned import Reserved, Unsigned, uvicorn_options
from hermit.gateway.webchat_api import WebchatApi
from hermit.loopback import url_host
from hermit.models.fake_start import stopped_fake_hint
from hermit.scheduler.control import CronJobs
from hermit.sessions.keys import agent_id_of

log = logging.getLogger("hermit.gateway")

CANCEL_WAIT_SECONDS = 3.0  # after the grace period: how long cancelled turns get to stop between steps


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}",
                          "pick another port with --port (or gateway.port), or stop what uses it") from e
    sock.listen(128)
    sock.setblocking(False)
    return sock


def split_chunks(text: str, max_chars: int, max_lines: int | None = None) -> list[str]:
    """Replies at the channel's limits: paragraphs first, never inside a code fence or an emoji."""
    return chunk_text(text, max_chars, max_lines)


def route_with(router: Router, access: AccessControl) -> Callable[[InboundMessage], Routed]:
    """Routing needs to know whether a DM's sender is an owner (only owners reach the main session); the
    owners are config, so this is a cheap check done before admission, which may read pairing files."""
    def route(msg: InboundMessage) -> Routed:
        owner = msg.peer_kind == "dm" and access.is_owner(msg.channel, msg.account_id, msg.sender_id,
                                                          msg.sender_username)
        inp = RouteInput(msg.channel, msg.account_id, msg.peer_kind, msg.peer_id, msg.thread_id, msg.topic_id,
                         msg.guild_id, msg.team_id, sender_is_owner=owner)
        parent = msg.meta.get(PARENT_GROUP) if msg.peer_kind == "group" else None
        if not parent:
            r = router.resolve(inp)
            return Routed(r.agent_id, r.session_key)
        # A sub-group (a Discord private thread) is answered by the agent its parent's bindings name, as a
        # public thread is, but in a session of its own: its members are not the parent's.
        agent_id = router.resolve(dataclasses.replace(inp, peer_id=parent)).agent_id
        return Routed(agent_id, session_key_for(agent_id, router.dm_scopes[agent_id], inp))

    return route


def admit_with(access: AccessControl, loaded: LoadedConfig) -> Callable[[InboundMessage, str], Admission]:
    patterns = {a.id: a.settings.mention_patterns for a in loaded.agents}

    def admit(msg: InboundMessage, agent_id: str) -> Admission:
        # A sub-group is let in by its parent's `groups` entry (access.PARENT_GROUP).
        group = (msg.meta.get(PARENT_GROUP) or msg.peer_id) if msg.peer_kind == "group" else msg.peer_id
        d = access.check(msg.channel, msg.account_id, msg.peer_kind, group, msg.sender_id, text=msg.text,
                         mentioned=msg.mentioned, reply_to_bot=msg.reply_to_bot,
                         mention_patterns=patterns.get(agent_id, ()), sender_name=msg.sender_name,
                         sender_username=msg.sender_username)
        return Admission(d.allowed, d.reply, d.reason)

    return admit


def live_route(state: LiveAccess, running: Collection[str]) -> Callable[[InboundMessage], Routed]:
    """`route_with` by the config in force (gateway/live_config.py). While it is invalid a channel's message
    is not routed (the bus logs the ConfigError and drops it) and the web chat, the token holder's, is
    routed by the last good config. An agent the config names but this gateway did not start answers
    nothing until a restart."""
    def route(msg: InboundMessage) -> Routed:
        view = state.owner_view() if msg.channel == WEBCHAT else state.view()
        routed = route_with(view.router, view.access)(msg)
        if routed.agent_id not in running:
            raise ConfigError(f"agent {routed.agent_id!r} is in the config but was not started with the gateway",
                              f"restart the gateway to start it: {HowRun.this_process().restart()}")
        return routed

    return route


def live_admit(state: LiveAccess) -> Callable[[InboundMessage, str], Admission]:
    """`admit_with` by the config in force; everyone refused, and sent nothing, while it is invalid."""
    def admit(msg: InboundMessage, agent_id: str) -> Admission:
        try:
            view = state.view()
        except ConfigError as e:
            return Admission(False, None, f"the config is invalid, so no sender is let in: {e.message}")
        return admit_with(view.access, view.loaded)(msg, agent_id)

    return admit


class Gateway:
    def __init__(self, loaded: LoadedConfig, home: Path, environ: Mapping[str, str],
                 runtimes: Mapping[str, AgentRuntime], token: str, *, host: str, port: int,
                 clock: Callable[[], float] = time.time, channels: list[Channel] | None = None,
                 service_factories: list[str] | None = None) -> None:
        self.loaded = loaded
        self.home = home
        self.cfg = loaded.config.gateway
        self.host_name = host
        self.port = port
        self.clock = clock
        self.token = token
        self.agents = AgentHost(runtimes)
        # connections not signed in yet, capped per address; addresses that signed in lately kept across restarts
        self.unsigned = Unsigned(reserved=Reserved(store=ReservedFile(home, token)))  # (gateway/unsigned.py)
        # Received files wait in the state dir until their sender is let in (gateway/attachments.py).
        self.webchat = WebchatChannel(clock, inbox_dir=home / "inbox")
        restart = f"restart the gateway: {HowRun.this_process().restart()}"  # for a hint whose fix needs it
        deps = ChannelDeps(home, environ, clock, inbox_dir=home / "inbox", restart=restart)
        extra = build_channels(loaded, deps) if channels is None else channels
        self.channels: list[Channel] = ([self.webchat] if loaded.config.channels.webchat.enabled else []) + extra
        # hermit.yaml as it is now, at every admission, routing decision and scheduled delivery: an edit that
        # revokes someone counts at their next message, an invalid file lets no channel sender in.
        self.live = LiveConfig(loaded)
        for a in loaded.agents:  # a loosening default is the default agent's alone (config/load._own_opt_ins)
            if a.withheld:
                log.warning("agent %s does not get %s from agents.defaults (a loosening default is the default "
                            "agent's only); if you mean it for %s too, `hermit doctor` gives the lines for its own "
                            "agents.list entry", a.id, ", ".join(f"{w.section}.{w.key}" for w in a.withheld), a.id)
        state = LiveAccess(self.live, PairingStore(home, clock), clock, environ)
        router = state.owner_view().router
        self.bus = Bus(self.agents, route=live_route(state, set(runtimes)), admit=live_admit(state),
                       channels={(c.name, c.account_id): c for c in self.channels}, chunk=chunk_text,
                       queue_limit=self.cfg.queue_max_per_session,
                       deletes=RememberedDeletes(deletes_path(home), clock=clock),  # kept across restarts
                       turn_limit=live_turn_limits(self.live))  # max_concurrent_turns as hermit.yaml says it now
        self.bus.hint_for = partial(stopped_fake_hint, home)  # the fake provider's start command, not `ollama serve`
        for agent_id, rt in runtimes.items():  # the group sender marks' owner checks, live too: each agent's own
            rt.owner_check = state.owner_of(agent_id)
            if isinstance(rt.cron, CronJobs):  # the cron tool's
                rt.cron.current, rt.cron.restart = self.live.current, restart
        ctx = ServiceContext(self.bus, loaded, home, environ, clock, config=self.live.current, restart=restart)
        self.services: list[Service] = [ConfigWatcher(self.live)]  # reloaded when saved: turn slots are told
        self.services += [MemoryWatcher(a, r.memory) for a, r in runtimes.items()
                          if r.memory is not None and r.memory.cfg.sync.watch]
        self.services += build_services(ctx, service_factories)
        owner = router.resolve(RouteInput("webchat", "default", "dm", "owner", sender_is_owner=True)).session_key
        console = Console(self.agents, loaded, home, agent_id_of(owner) or router.default_agent, status=self._status,
                          channels=self.channels, services=self.services, clock=clock, view=state.view)
        self.api = api = WebchatApi(self.webchat, self.agents, token, owner, self.cfg.allowed_origins, console,
                         tickets=Tickets(home),  # `hermit dashboard`'s, with the real clock its process writes by
                         slot_wait=self.bus.waiting_for_slot, sign_in_seconds=self.cfg.sign_in_seconds,
                         unsigned=self.unsigned, remember_devices=self.cfg.remember_devices is True)
        # Built from the config: each webhook answers while its account is on in the config in force.
        hooks = webhook_routes(extra, self.live.current if channels is None else None)
        self.app = build_app(api, token, self._status, hooks,
                             webchat=loaded.config.channels.webchat.enabled)
        self.started_at = clock()
        self.stopping = asyncio.Event()
        self.force = asyncio.Event()
        self.restarting = False

    async def _status(self) -> dict[str, Any]:
        services: dict[str, Any] = {}
        for s in self.services:
            try:
                services[s.name] = s.status()
            except Exception as e:  # noqa: BLE001 - status must answer even when one service is broken
                services[s.name] = {"error": str(e)}
        return {"pid": os.getpid(), "host": self.host_name, "port": self.port,
                "uptime_seconds": round(self.clock() - self.started_at, 1), "agents": sorted(self.agents.runtimes),
                "bus": self.bus.status(), "channels": [asdict(c.status()) for c in self.channels],
                "webchat_clients": self.webchat.clients(), "services": services}

    def request_restart(self) -> None:
        """SIGUSR1: stop as for SIGTERM, then start again in this process keeping the listening sockets (listen.py
        exec_in_place): the port is never free for another program while the gateway restarts. Not on a config the
        new start would refuse (invalid, or an owner move: gateway/owner_routes.refusal, the start's own check): it
        would stop and stay down; said in the log, and this gateway keeps running (failing closed as it does)."""
        from hermit.gateway.owner_routes import refusal

        try:
            refused = refusal(self.home, self.live.current())
        except ConfigError as e:
            refused = e
        if refused is not None:
            log.error("not restarting: the gateway would not start again on %s: %s (%s); it keeps running",
                      self.live.where, refused.message, refused.hint)
            return
        self.restarting = True
        self.request_stop()

    def request_stop_for_good(self) -> None:
        """SIGTERM/SIGINT: stop, and not start again even when a restart was asked before."""
        self.restarting = False
        self.request_stop()

    def request_stop(self) -> None:
        if self.stopping.is_set():
            self.force.set()  # a second signal: skip the grace period
        self.stopping.set()

    async def serve(self, lock: GatewayLock | None = None, on_ready: Callable[[str], None] | None = None) -> int:
        import uvicorn

        # A service's socket unit's sockets (LISTEN_FDS), else bound here, [::1] beside 127.0.0.1 (listen.py)
        listeners = open_listeners(self.host_name, self.port, bind_socket)
        sockets = listeners.sockets
        if listeners.inherited:
            self.host_name = listeners.host
        self.port = listeners.port
        devices = decide(self.cfg.remember_devices, listeners.held)  # gateway/device_policy.py
        self.api.remember_devices, self.api.device_policy = devices.on, devices
        self.held = listeners.held
        self.published: dict[str, Any] = {}
        if not is_loopback(self.host_name):
            log.warning("listening on %s, reachable from other machines: every client needs the token, and the "
                        "connection is not encrypted (put a TLS proxy in front of it)", self.host_name)
        # proxy_headers off: uvicorn would otherwise take a loopback client's X-Forwarded-For as its address,
        # and the WebSocket endpoint checks whose program the real client socket is (models/loopback).
        config = uvicorn.Config(self.app, log_config=None, access_log=False, lifespan="off", proxy_headers=False,
                                ws_max_size=4 * MAX_FRAME_BYTES, ws_ping_interval=20, ws_ping_timeout=20,
                                timeout_graceful_shutdown=2,
                                **uvicorn_options(self.unsigned, self.cfg.sign_in_seconds))  # idle strangers go
        config.load()
        server = uvicorn.Server(config)
        server.lifespan = config.lifespan_class(config)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop_for_good)
        loop.add_signal_handler(signal.SIGUSR1, self.request_restart)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})  # blocked across a restart in place (listen.py)
        await server.startup(sockets=sockets)
        self.bus.scrubs.resume()  # deleted messages a killed gateway hid but did not scrub yet (gateway/scrub_batch.py)
        # One channel or service that cannot start (a revoked bot token) must not take the others down;
        # its status says why.
        for ch in self.channels:
            try:
                await ch.start(self.bus)
            except Exception:  # noqa: BLE001 - supervision boundary
                log.exception("channel %s/%s did not start", ch.name, ch.account_id)
        for service in self.services:
            try:
                await service.start()
            except Exception:  # noqa: BLE001 - supervision boundary
                log.exception("service %s did not start", service.name)
        url = f"http://{url_host(self.host_name)}:{self.port}/"
        if lock is not None:
            launchd = launchd_job(os.environ.get("XPC_SERVICE_NAME"))  # run as a launchd agent: its restart hint
            self.published = {"pid": os.getpid(), "host": self.host_name, "port": self.port, "url": url,
                              "started": self.started_at, "held": listeners.held, "devices": devices.published(),
                              **({"launchd": launchd} if launchd else {})}
            lock.publish(self.published)
        log.info("web app devices: %s", devices.why)
        watch = None if listeners.holder is None else self._watch(listeners.holder, lock)
        log.info("gateway listening on %s (agents: %s; channels: %s)", url, ", ".join(sorted(self.agents.runtimes)),
                 ", ".join(f"{c.name}/{c.account_id}" for c in self.channels) or "none")
        if on_ready is not None:
            on_ready(url)
        await self.stopping.wait()
        if watch is not None:
            watch.cancel()
        if lock is not None:  # from here the port is no longer served: nothing should be sent to it
            lock.publish({"pid": os.getpid(), "stopping": True})
        kept = kept_for_restart(sockets) if self.restarting else []
        await self.shutdown(server, sockets)
        if kept and not self.restarting:  # a SIGTERM after the SIGUSR1: stopped for good
            for fd in kept:
                os.close(fd)
        elif kept:
            log.info("starting again in place (pid %d), keeping the port", os.getpid())
            logging.shutdown()
            exec_in_place(kept, held=self.held)
        return 0

    def _watch(self, holder: Holder, lock: GatewayLock | None) -> asyncio.Task[None]:
        """Whether the socket unit still holds the port: looked at once a second, and again at each device's sign-in
        (the web app's `devices_still_on`; the watch alone left a window of up to a second, s23 t5)."""
        async def still_on() -> bool:
            if self.held and not await asyncio.to_thread(holder.holds):
                self._holder_lost(lock)
            return bool(self.api.remember_devices)

        self.api.devices_still_on = still_on
        return asyncio.create_task(watch_holder(holder, lambda: self._holder_lost(lock), HOLDER_POLL_SECONDS),
                                   name="socket unit watch")

    def _holder_lost(self, lock: GatewayLock | None) -> None:
        """The socket unit stopped holding the port (listen.py watch_holder): devices off under `auto` from now on
        (device_policy.lost), published, and carried over a restart in place."""
        if not self.held:
            return  # said already (a device's sign-in looked before the watch did)
        devices: DevicePolicy = lost(self.cfg.remember_devices)
        self.held = False
        self.api.remember_devices, self.api.device_policy = devices.on, devices
        if lock is not None and self.published and not self.stopping.is_set():
            self.published = {**self.published, "held": False, "devices": devices.published()}
            lock.publish(self.published)
        log.warning("the process that started the gateway no longer holds its listening sockets (its socket unit "
                    "stopped?): the port goes free when the gateway stops; web app devices: %s", devices.why)

    async def shutdown(self, server: Any, sockets: list[socket.socket]) -> None:
        grace = self.cfg.shutdown_grace_seconds
        log.info("stopping: no new messages; %d turn(s) running get up to %.0f s to finish", self.bus.running(), grace)
        self.bus.close_intake()
        drained = await self._drain(grace)
        if not drained:
            n = self.agents.cancel_all()
            log.warning("grace period over: cancelling %d turn(s)", n)
            drained = await self.bus.drain(CANCEL_WAIT_SECONDS)
        if not drained:
            stuck = self.agents.mark_stuck_interrupted()
            log.warning("abandoning %d turn(s) still waiting on the model; marked interrupted: %s", len(stuck),
                        ", ".join(stuck))
        for service in reversed(self.services):
            try:
                await asyncio.wait_for(service.stop(), 10)
            except Exception:  # noqa: BLE001 - supervision boundary: stop the rest anyway
                log.exception("service %s did not stop cleanly", service.name)
        for ch in reversed(self.channels):
            try:
                await asyncio.wait_for(ch.stop(), 10)
            except Exception:  # noqa: BLE001 - supervision boundary: stop the rest anyway
                log.exception("channel %s/%s did not stop cleanly", ch.name, ch.account_id)
        server.should_exit = True
        with contextlib.suppress(Exception):  # connections already closed by the channels
            await asyncio.wait_for(server.shutdown(sockets=sockets), 5)
        if drained:
            self.agents.close()
        log.info("gateway stopped")

    async def _drain(self, grace: float) -> bool:
        drain = asyncio.create_task(self.bus.drain(grace))
        force = asyncio.create_task(self.force.wait())
        await asyncio.wait({drain, force}, return_when=asyncio.FIRST_COMPLETED)
        force.cancel()
        if drain.done():
            return drain.result()
        drain.cancel()
        return False
