"""What the web app's pages read of the sessions (gateway/webchat_api.py): chat.history, chat.image and
sessions.list, where a session the page names is (`locate`) and whether the page may write to it (`writable`),
and live sessions.

Live sessions: every tab showing a session follows it. A session changes from this gateway (another tab, a
channel, cron) and from other processes (`hermit chat` on the same session), and the transcript is where every one
of them writes: so the gateway looks at the transcript (its size, under the session's current id) of each session
a page shows, and tells that page `session.changed` when it differs from what the page last loaded (or was told),
and every page `sessions.changed` when an agent's sessions.json changed (the list, its unread marks). A page then
loads the history again; the page that sent a message ignores the changes of its own turn and loads once at its end.

These are WebchatApi's methods (`_history`, `_locate`, `_writable`, `_watch_sessions`, ...), kept here so
webchat_api.py holds the connection, its sign-in and the request dispatch; each takes the api first.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from hermit.errors import SessionError
from hermit.gateway.history import (
    EndReason,
    chat_history,
    describe_session,
    end_reason,
    ended_session,
    ended_sessions,
    list_sessions,
    session_image,
)
from hermit.gateway.image_index import Inbox
from hermit.gateway.protocol import HistoryParams, ImageParams, ProtocolError
from hermit.sessions.keys import agent_id_of

if TYPE_CHECKING:
    from hermit.agent.runtime import AgentRuntime
    from hermit.gateway.webchat_api import WebchatApi, _Socket

log = logging.getLogger("hermit.gateway.webchat")


def image(api: WebchatApi, params: ImageParams) -> dict[str, Any]:
    """chat.image: an image of a user turn of one of the owner's own sessions (as chat.history gives images
    only of those), found in that session's transcript by the SHA-256 of its bytes."""
    agent_id, key = api._locate(params.session_key, params.agent_id)
    view = describe_session(key, api._owner_dm)
    if view["mode"] != "chat":
        raise ProtocolError("read_only", f"{key} is not one of your own sessions: its photos are not sent "
                            "to the page", "open the main session (or one of your own) to see your photos")
    try:
        runtime = api.host.runtime(agent_id)
        found = session_image(runtime.store, key, params.session_id, params.sha256, api.photos,
                              session_inbox(runtime, key))
    except SessionError as e:
        raise ProtocolError("bad_params", e.message, e.hint) from None
    if found is None:
        raise ProtocolError("not_found", f"no photo {params.sha256[:12]}… in a message of {key}",
                            "ask only for what chat.history of that session named")
    return found


def session_inbox(runtime: AgentRuntime, key: str) -> Inbox:
    """Where an owner's session files what it is sent (gateway/attachments.py): the workspace's inbox/, or the
    inbox/ of the session's own room when it works in one (an owner's DM that is a sandboxed session of its own)."""
    if runtime.confinement.roomed(key):
        return Inbox("room", runtime.confinement.room(key).path / "inbox")
    return Inbox("workspace", runtime.agent.workspace / "inbox")


def locate(api: WebchatApi, key: str | None, agent_id: str | None) -> tuple[str, str]:
    """(agent id, session key) of a session the page names; ProtocolError for one no agent here has."""
    if key is None:
        return api.default_agent, api.default_session
    named = agent_id_of(key)
    if named is not None:
        if named in api.host.runtimes and agent_id in (None, named):
            return named, key
    else:  # `cron:<job>` or a CLI name: the agent whose store holds it
        for a in [agent_id] if agent_id else sorted(api.host.runtimes):
            runtime = api.host.runtimes.get(a or "")
            if runtime is not None and runtime.store.get(key) is not None:
                return runtime.agent.id, key
    raise ProtocolError("bad_params", f"unknown session {key!r}", "pick a session from sessions.list")


def writable(api: WebchatApi, key: str, agent_id: str | None, session_id: str | None = None) -> tuple[str, str]:
    """(agent, key) of a session the page may write to; `read_only` for one that may only be read, and for
    `session_id` naming a session of the key that has ended (a tab still showing it)."""
    found = api._locate(key, agent_id)
    view = describe_session(found[1], api._owner_dm)
    if view["mode"] != "chat":
        raise ProtocolError("read_only", f"{found[1]} is read-only in the web app: {view['why']}",
                            "open the main session (or one of your own) to talk to the assistant")
    if session_id is not None:
        record = api.host.runtime(found[0]).store.get(found[1])
        if record is None or record.session_id != session_id:
            ended = api._ended(found[0], found[1], session_id)
            why = ended["why"] if ended else "this session has ended; nothing more can be added to it"
            raise ProtocolError("read_only", f"{found[1]} is read-only: {why}",
                                "open the chat's current session to go on")
    return found


def agent_end_reason(api: WebchatApi, agent_id: str) -> EndReason:
    runtime = api.host.runtime(agent_id)
    return end_reason(runtime.store, runtime.agent.settings.session, runtime.timezone)


def ended(api: WebchatApi, agent_id: str, key: str, session_id: str) -> dict[str, Any] | None:
    return ended_session(api.host.runtime(agent_id).store, agent_id, key, session_id, api._owner_dm,
                         api._end_reason(agent_id))


def history(api: WebchatApi, agent_id: str, key: str, params: HistoryParams) -> dict[str, Any]:
    """chat.history: the current session of the key, or (`sessionId`) one of its sessions, read-only with
    when and why it ended once it has. The current one comes with its `version` and `busy` (a turn running),
    taken before the transcript is read: a line written meanwhile makes the next look differ."""
    version, busy = api._state(agent_id, key)
    view = describe_session(key, api._owner_dm)
    try:
        # Images only of the owner's own sessions (main, the owner's DMs, CLI names): a group's or a
        # contact's history shows their turns as text, as it always has.
        mine = view["mode"] == "chat"
        runtime = api.host.runtime(agent_id)
        payload = chat_history(runtime.store, key, params.limit, params.session_id,
                               images=(params.images or params.image_refs) and mine, image_refs=params.image_refs,
                               photos=api.photos, inbox=session_inbox(runtime, key) if mine else None)
    except SessionError as e:  # a session id that is no session of this key (any more)
        raise ProtocolError("bad_params", e.message, e.hint) from None
    payload.update(agentId=agent_id, **view)
    ended = api._ended(agent_id, key, params.session_id) if params.session_id is not None else None
    if ended is not None:
        payload.update(mode="read-only", why=ended["why"], ended={
            k: ended[k] for k in ("startedAt", "endedAt", "reason", "messages", "bytes")})
    else:
        payload.update(version=version, busy=busy)
    return payload


def state(api: WebchatApi, agent_id: str, key: str) -> tuple[str, bool]:
    """(version, busy) of a session's current transcript: `<sessionId>:<size>` ("" when it has none yet),
    and whether a turn runs in it in this gateway now."""
    runtime = api.host.runtimes.get(agent_id)
    if runtime is None:
        return "", False
    record = runtime.store.get(key)
    version = ""
    if record is not None:
        try:
            version = f"{record.session_id}:{runtime.store.transcript_path(record.session_id).stat().st_size}"
        except OSError:
            version = f"{record.session_id}:0"
    return version, runtime.session_busy(key)


def follow(api: WebchatApi, sock: _Socket, agent_id: str, key: str, history: dict[str, Any]) -> None:
    """The session a chat.history showed is the one the socket follows if it is current (an ended one does
    not change), with `waiting` taken now (a turn of it waits for a turn slot)."""
    if "version" not in history:
        sock.viewing = sock.seen = None
        return
    history["waiting"] = api._waiting(agent_id, key)
    sock.viewing = (agent_id, key)
    sock.seen = (history["version"], history["busy"], history["waiting"])


def waiting(api: WebchatApi, agent_id: str, key: str) -> bool:
    """Whether the session's next turn waits for a turn slot now; on the event loop, as the bus is."""
    return api.slot_wait is not None and api.slot_wait(agent_id, key)


def look(api: WebchatApi, shown: set[tuple[str, str]]) -> tuple[dict[tuple[str, str], tuple[str, bool]], dict[str, Any]]:
    stores: dict[str, Any] = {}
    for agent_id, runtime in api.host.runtimes.items():
        try:
            st = runtime.store.path.stat()
            stores[agent_id] = (st.st_size, st.st_mtime_ns)
        except OSError:
            stores[agent_id] = None
    return {v: api._state(*v) for v in shown}, stores


async def watch_sessions(api: WebchatApi) -> None:
    stores: dict[str, Any] | None = (await asyncio.to_thread(api._look, set()))[1]  # as the first page found it
    while api._sockets:
        await asyncio.sleep(api.watch_interval)
        try:
            looked, now = await asyncio.to_thread(api._look, {s.viewing for s in api._sockets if s.viewing})
            states = {v: (*looked[v], api._waiting(*v)) for v in looked}
            for sock in list(api._sockets):
                state = states.get(sock.viewing) if sock.viewing else None
                if state is not None and state != sock.seen and sock.viewing is not None:
                    sock.seen = state
                    agent_id, key = sock.viewing
                    await api._tell(sock, "session.changed", {"sessionKey": key, "agentId": agent_id,
                                                               "version": state[0], "busy": state[1],
                                                               "waiting": state[2]})
                if stores is not None and now != stores:
                    await api._tell(sock, "sessions.changed", {})
            stores = now
        except Exception:  # noqa: BLE001 - supervision boundary: the pages still work, only not live
            log.exception("web app session watch failed; looking again")


async def tell(sock: _Socket, event: str, payload: dict[str, Any]) -> None:
    try:
        await sock.send_event(event, payload)
    except Exception as e:  # noqa: BLE001 - a socket closing now: its endpoint cleans up
        log.debug("web app event %s not delivered: %s", event, e)


def sessions(api: WebchatApi, everything: bool) -> dict[str, Any]:
    """sessions.list: the current sessions; with `everything`, the ended ones too (`ended`) and on each
    current session `earlier`, how many of its key's sessions ended before it."""
    stores = {a: r.store for a, r in api.host.runtimes.items()}
    sessions = list_sessions(stores, api._owner_dm)
    if not everything:
        return {"sessions": sessions}
    ended = [e for a in sorted(stores) for e in ended_sessions(stores[a], a, api._owner_dm, api._end_reason(a))]
    ended.sort(key=lambda e: str(e["endedAt"]), reverse=True)
    counts: dict[tuple[str, str], int] = {}
    for e in ended:
        counts[(e["agentId"], e["key"])] = counts.get((e["agentId"], e["key"]), 0) + 1
    for s in sessions:
        s["earlier"] = counts.get((s["agentId"], s["key"]), 0)
    return {"sessions": sessions, "ended": ended}
