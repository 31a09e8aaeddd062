"""Loading hermit.yaml / hermit.json: parse, merge agent overrides, validate with actionable errors.

Errors name the key path and, for YAML, the file and line; an unknown key gets a close-match hint
(reading the text and naming the errors' lines: parse.py).
"""

from __future__ import annotations

import dataclasses
import difflib
import errno
import hashlib
import os
import re
import time
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hermit.config import workspaces_check
from hermit.config.parse import _format_errors, _list_forms, _Located
from hermit.config.parse import parse_config_text as parse_config_text
from hermit.config.paths import DEFAULT_AGENT_ID, StatePaths, not_own_file, unsafe_folder
from hermit.config.schema import AgentEntry, AgentSettings, HermitConfig
from hermit.errors import ConfigError
from hermit.textfile import NotRegularFile, read_regular_stat


@dataclass(frozen=True)
class WithheldDefault:
    """A loosening setting agents.defaults gives (`section.key: value`) that an agent other than the default one
    does not get (_own_opt_ins): it has the built-in value, as its own agents.list entry does not set it."""

    section: str
    key: str
    value: object


@dataclass(frozen=True)
class AgentConfig:
    """One resolved agent: its id, its workspace and state paths, and its merged settings."""

    id: str
    workspace: Path
    index_path: Path
    sessions_dir: Path
    settings: AgentEntry
    is_default: bool
    withheld: tuple[WithheldDefault, ...] = ()  # what of agents.defaults it does not get (`hermit doctor` says)


@dataclass(frozen=True)
class LoadedConfig:
    paths: StatePaths
    source: Path | None
    config: HermitConfig
    defaults: AgentSettings
    agents: tuple[AgentConfig, ...]

    def agent(self, agent_id: str | None = None) -> AgentConfig:
        if agent_id is None:
            return next(a for a in self.agents if a.is_default)
        for a in self.agents:
            if a.id == agent_id:
                return a
        known = ", ".join(a.id for a in self.agents)
        close = difflib.get_close_matches(agent_id, [a.id for a in self.agents], n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise ConfigError(
            f"no agent '{agent_id}' (configured: {known})",
            f"{hint}add it with `hermit agents add {agent_id}` or under agents.list in the config",
        )


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def build_config(
    data: dict[str, Any], paths: StatePaths, source: Path | None = None, where: _Located | None = None
) -> LoadedConfig:
    src = str(source) if source else "<config>"
    where = where or _Located("", False)
    data = _list_forms(data, where, src)
    try:
        cfg = HermitConfig.model_validate(data)
    except ValidationError as e:
        raise _format_errors(e, HermitConfig, (), where, src) from e
    raw_defaults: dict[str, Any] = dict(cfg.agents.defaults)
    try:
        defaults = AgentSettings.model_validate(raw_defaults)
    except ValidationError as e:
        raise _format_errors(e, AgentSettings, ("agents", "defaults"), where, src) from e

    entries = list(cfg.agents.list) or [{"id": DEFAULT_AGENT_ID}]
    agents: list[AgentConfig] = []
    seen: set[str] = set()
    raws: dict[str, dict[str, Any]] = {}
    for i, raw in enumerate(entries):
        if not isinstance(raw, dict):
            raise ConfigError(f"{src}: agents.list[{i}] must be a mapping", "use `- id: work`")
        merged = deep_merge(_key_with_its_endpoint(raw_defaults, raw), dict(raw))
        try:
            entry = AgentEntry.model_validate(merged)
        except ValidationError as e:
            raise _format_errors(e, AgentEntry, ("agents", "list", i), where, src) from e
        if entry.id in seen:
            raise ConfigError(f"{src}: agent id '{entry.id}' appears twice in agents.list", "ids must be unique")
        seen.add(entry.id)
        raws[entry.id] = raw
        # agents.defaults.workspace applies to the main agent only: two agents sharing one workspace
        # would share memory, which is exactly what isolation forbids.
        own = raw.get("workspace") or (raw_defaults.get("workspace") if entry.id == DEFAULT_AGENT_ID else None)
        workspace = Path(str(own)).expanduser() if own else paths.default_workspace(entry.id)
        if not workspace.is_absolute():
            workspace = paths.home / workspace
        workspace = workspace.resolve()  # judged once (agent_paths_problem) and used where it was judged
        store_path = entry.memory_search.store.path
        index_path = (
            Path(store_path.replace("{agent_id}", entry.id)).expanduser() if store_path
            else paths.index_path(entry.id)
        )
        if not index_path.is_absolute():
            index_path = paths.home / index_path
        index_path = index_path.parent.resolve() / index_path.name  # the file itself is never followed (db.py)
        agents.append(
            AgentConfig(
                id=entry.id,
                workspace=workspace,
                index_path=index_path,
                sessions_dir=_sessions_dir(paths, entry),
                settings=entry,
                is_default=False,
            )
        )
    default_ids = [a.id for a in agents if a.settings.default]
    if len(default_ids) > 1:
        raise ConfigError(f"{src}: more than one agent has default: true ({', '.join(default_ids)})",
                          "mark exactly one agent as default")
    chosen = default_ids[0] if default_ids else (
        DEFAULT_AGENT_ID if DEFAULT_AGENT_ID in seen else agents[0].id
    )
    agents = [a if a.id == chosen else _own_opt_ins(_own_extra_paths(a, raws[a.id]), raws[a.id]) for a in agents]
    _one_each(agents, paths.home, src)
    for a in agents:
        if (problem := agent_paths_problem(a, f"{src}: agent '{a.id}':")) is not None:
            raise problem
        if (problem := sandbox_reach_problem(a, agents, paths.home, f"{src}: agent '{a.id}':")) is not None:
            raise problem
    _one_schema_each(agents, src)
    workspaces_check.check(agents, paths, src)  # nor one another agent id used before
    agents = [AgentConfig(a.id, a.workspace, a.index_path, a.sessions_dir, a.settings, a.id == chosen, a.withheld)
              for a in agents]
    return LoadedConfig(paths=paths, source=source, config=cfg, defaults=defaults, agents=tuple(agents))


def _one_each(agents: list[AgentConfig], home: Path, src: object) -> None:
    """Agents are isolated: two that share a workspace or a SQLite index would see each other's notes, and a
    workspace inside another's would be that agent's memory files (its MEMORY.md read as a shared note).
    Paths are compared as they resolve (symlinks, `//`), not as written."""
    seen: list[tuple[str, Path, str]] = []  # (what, resolved path, agent id)
    seen_dirs = {a.id: a.sessions_dir.parent for a in agents}
    for a in agents:
        mine = [("workspace", Path(os.path.realpath(a.workspace)))]
        if a.settings.memory_search.store.backend != "postgres":  # PostgreSQL: one schema per agent id
            mine.append(("memory index", Path(os.path.realpath(a.index_path))))
        # Its sessions and its chats' rooms: a link made at <state>/agents/<id> would have two agents share them.
        mine.append(("folder of sessions and rooms", Path(os.path.realpath(a.sessions_dir.parent))))
        for what, where in mine:
            for other_what, other, other_id in seen:
                if other_id == a.id or what != other_what:
                    continue
                nested = what != "memory index" and _overlap(where, other)
                if where == other or nested:
                    hint = ('put "{agent_id}" in agents.defaults.memory_search.store.path (e.g. '
                            '~/indexes/{agent_id}.sqlite)' if what == "memory index" else
                            "give each agent a workspace of its own, side by side (agents.list[].workspace)"
                            if what == "workspace" else f"remove the link at {a.sessions_dir.parent} or "
                            f"{seen_dirs[other_id]}: each agent keeps its own folder there")
                    how = "share one" if where == other else "have nested"
                    raise ConfigError(f"{src}: agents '{other_id}' and '{a.id}' {how} {what} ({other}, {where}): "
                                      "each agent's memory is its own", hint)
        seen += [(what, where, a.id) for what, where in mine]
    for a in agents:
        _extra_paths_are_its_own(a, agents, home, src)


def agent_paths_problem(a: AgentConfig, who: str, *, option: str = "agents.list[].workspace") -> ConfigError | None:
    """Why agent `a`'s workspace or memory index may not be used: it (or a folder above it) lets another local
    user plant or read files there — the state dir's rule (config.paths.unsafe_folder). A workspace is the
    owner's notes and the instructions (AGENTS.md, SOUL.md) read into the main session's prompt; MEMORY.md's
    text lands in the index: a workspace another user made first (`/tmp/shared/ws`) would let them steer the
    assistant and read what it remembers. Group write is accepted (umask 002 with one group per user).
    `who` starts each message; `option` names what to change."""
    workspace = a.workspace
    checks = [("the workspace", workspace), ("the workspace's memory folder", workspace / "memory")]
    if a.settings.memory_search.store.backend != "postgres":
        checks.append(("the memory index folder", a.index_path.parent))
    for what, path in checks:
        found = unsafe_folder(path)
        if found is None:
            continue
        folder, why = found
        if folder == path.resolve():
            take = f"chown -R $(id -u) {folder} && chmod go-w {folder}"
            hint = (f"pick a folder of your own ({option}), or take this one over after checking what is in it: "
                    f"{take}" if what != "the memory index folder" else
                    "point memory_search.store.path at a folder of your own (the default is the state dir's "
                    f"memory/), or take this one over: {take}")
            return ConfigError(f"{who} {what} {path} {why}; Hermit keeps your notes there, so it must be yours", hint)
        place = option if what != "the memory index folder" else "memory_search.store.path"
        return ConfigError(f"{who} {what} {path} is inside {folder}, which {why}: they could swap it for their own",
                           f"move it ({place}) to a folder only you and root can write")
    return sessions_problem(a, who)


def sessions_problem(a: AgentConfig, who: str) -> ConfigError | None:
    """Why agent `a`'s sessions may not be kept where they are: session.store_dir (when set), the agent's folder
    in it and its sessions folder must each be the user's, by the state dir's rule (config.paths.unsafe_folder).
    sessions.json names each session's transcript, and a transcript is the history sent to the model as the
    owner's own words (the main session runs exec unsandboxed); the agent's folder holds its contacts' rooms. A
    store_dir another user made first (`/tmp/shared/sess`) let them swap in a sessions.json pointing the main
    session at a transcript they wrote, and read every turn appended to it. (Each file in it is judged again as
    it is opened: sessions/files.py.)"""
    store = a.settings.session.store_dir
    sessions = a.sessions_dir
    checks = [("the session store folder (session.store_dir)", sessions.parent.parent.parent)] if store else []
    checks += [("the agent's folder", sessions.parent), ("the sessions folder", sessions)]
    for what, path in checks:
        found = unsafe_folder(path)
        if found is None:
            continue
        folder, why = found
        take = f"chown -R $(id -u) {folder} && chmod -R go-w {folder}"
        if folder != path.resolve():
            return ConfigError(f"{who} {what} {path} is inside {folder}, which {why}: they could swap it for their "
                               "own", "move session.store_dir to a folder only you and root can write" if store
                               else f"make {folder} yours and written by nobody else: {take}")
        check_first = f"take this one over only after checking every file in it (sessions.json, the transcripts): {take}"
        return ConfigError(f"{who} {what} {path} {why}; Hermit keeps your conversations there (sessions.json and the "
                           "transcripts sent to the model as your own words), so it must be yours",
                           f"point session.store_dir at a new folder of your own, or {check_first}" if store
                           else check_first[0].upper() + check_first[1:])
    return None


def _one_schema_each(agents: list[AgentConfig], src: object) -> None:
    """Agents on PostgreSQL each own the schema `schema_prefix` + id names: prefix `hermit_` with agent `x_y`
    and prefix `hermit_x_` with agent `y` are both `hermit_x_y`, one index for two agents. Compared per
    DSN variable (two variables may name two servers; one server under two names is not seen here)."""
    seen: dict[tuple[str, str], tuple[str, str]] = {}  # (dsn_env, schema) -> (agent id, prefix)
    for a in agents:
        store = a.settings.memory_search.store
        if store.backend != "postgres":
            continue
        prefix = store.postgres.schema_prefix
        name = pg_schema_name(prefix, a.id)
        other = seen.setdefault((store.postgres.dsn_env, name), (a.id, prefix))
        if other[0] != a.id:
            raise ConfigError(f"{src}: agents '{other[0]}' and '{a.id}' share one PostgreSQL memory schema, {name} "
                              f"(schema_prefix {other[1]!r} + '{other[0]}', {prefix!r} + '{a.id}'): each agent's "
                              "memory is its own", f"give agent '{a.id}' another memory_search.store.postgres."
                              "schema_prefix (agents.list[]), one that no other agent's prefix + id spells")


def pg_schema_name(prefix: str, agent_id: str) -> str:
    """An agent's PostgreSQL schema: `hermit_main` for agent `main`; other characters become `_`, plus a short
    hash when anything changed (memory.store.postgres.schema names its schemas with this)."""
    raw = agent_id.lower()
    safe = _PG_UNSAFE.sub("_", raw)
    name = prefix + safe
    if safe != agent_id or len(name) > PG_SCHEMA_MAX:
        tag = hashlib.blake2b(agent_id.encode(), digest_size=4).hexdigest()
        name = name[: PG_SCHEMA_MAX - 9] + "_" + tag
    return name


PG_SCHEMA_MAX = 48  # PostgreSQL names stop at 63 bytes; a rebuild's staging schemas add a suffix
_PG_UNSAFE = re.compile(r"[^a-z0-9_]")


# What authenticates to an embeddings endpoint: it goes where it was configured to go, with that endpoint.
_ENDPOINT_KEYS = ("provider",)
_REMOTE_ENDPOINT_KEYS = ("base_url",)
_REMOTE_CREDENTIALS = ("api_key", "api_key_env", "headers")


def _key_with_its_endpoint(raw_defaults: dict[str, Any], raw: dict[str, Any]) -> dict[str, Any]:
    """agents.defaults for the agent entry `raw`, without the defaults' embeddings credentials
    (memory_search.remote.api_key, api_key_env, headers) when the entry names an endpoint of its own
    (memory_search.provider or remote.base_url) but no credentials: merged, the owner's OpenAI key went to the
    other endpoint — a relative's family agent pointed at the relative's Ollama server got it as its Bearer
    token, over plain HTTP. The entry's own credentials (or none: a local server needs none) go with its endpoint."""
    ms, defaults_ms = raw.get("memory_search"), raw_defaults.get("memory_search")
    if not isinstance(ms, dict) or not isinstance(defaults_ms, dict) or not isinstance(defaults_ms.get("remote"), dict):
        return raw_defaults
    own = ms.get("remote")
    remote: dict[str, Any] = own if isinstance(own, dict) else {}
    defaults_remote: dict[str, Any] = defaults_ms["remote"]
    moved = (any(k in ms and ms[k] != defaults_ms.get(k) for k in _ENDPOINT_KEYS)
             or any(k in remote and remote[k] != defaults_remote.get(k) for k in _REMOTE_ENDPOINT_KEYS))
    if not moved or any(k in remote for k in _REMOTE_CREDENTIALS):
        return raw_defaults
    kept = {k: v for k, v in defaults_remote.items() if k not in _REMOTE_CREDENTIALS}
    return {**raw_defaults, "memory_search": {**defaults_ms, "remote": kept}}


def _own_extra_paths(a: AgentConfig, raw: dict[str, Any]) -> AgentConfig:
    """Agent `a` (not the default agent) without the folders outside its workspace that only
    agents.defaults.memory_search.extra_paths names. Such a folder (a notes folder, a vault: owner-only notes)
    belongs to the default agent, as agents.defaults.workspace does: an agent added later inherited it, and a
    relative's family bot (its main session its owners', the relative) then searched and read the owner's
    vault. An agent indexes it when its own entry lists it; a folder inside each agent's workspace (`notes`)
    is every agent's own and stays."""
    ms = raw.get("memory_search")
    if isinstance(ms, dict) and "extra_paths" in ms:
        return a
    own = Path(os.path.realpath(a.workspace))
    kept = [e for e in a.settings.memory_search.extra_paths
            if Path(os.path.realpath(a.workspace / Path(e).expanduser())).is_relative_to(own)]
    if kept == a.settings.memory_search.extra_paths:
        return a
    search = a.settings.memory_search.model_copy(update={"extra_paths": kept})
    return dataclasses.replace(a, settings=a.settings.model_copy(update={"memory_search": search}))


# Opt-ins that widen who reaches an agent's private text or its machine: (section, key, is the value looser
# than the built-in one, the schema's default). Given only under agents.defaults, such an opt-in is the default
# agent's alone (docs/security.md): another agent, e.g. a relative's family bot whose main session is the
# relative's, falls back to the built-in unless its own agents.list entry sets it. A stricter value (sandbox.mode
# all) stays every agent's.
_DEFAULT_AGENTS_OPT_INS: tuple[tuple[str, str, typing.Callable[[object], bool]], ...] = (
    # alerts are main-session text (HEARTBEAT.md, MEMORY.md); inherited, they went to the owner's family group
    ("heartbeat", "share_alerts_with_target", bool),
    # contacts' DMs in the main session: its MEMORY.md, owner-only notes and an unsandboxed shell
    ("session", "dangerously_share_main_session_with_contacts", bool),
    # off: contacts' and groups' sessions run exec and file tools unsandboxed as Hermit's uid
    ("sandbox", "mode", lambda mode: mode == "off"),
)


def _own_opt_ins(a: AgentConfig, raw: dict[str, Any]) -> AgentConfig:
    """Agent `a` (not the default agent) without the opt-ins in _DEFAULT_AGENTS_OPT_INS that only agents.defaults
    gives: each set back to its built-in value (the schema's default) unless `a`'s own entry (`raw`) sets it."""
    settings = a.settings
    withheld = []
    for section, key, looser in _DEFAULT_AGENTS_OPT_INS:
        own = raw.get(section)
        current = getattr(settings, section)
        if not looser(getattr(current, key)) or (isinstance(own, dict) and key in own):
            continue
        built_in = type(current).model_fields[key].default
        withheld.append(WithheldDefault(section, key, getattr(current, key)))
        settings = settings.model_copy(update={section: current.model_copy(update={key: built_in})})
    return a if settings is a.settings else dataclasses.replace(a, settings=settings, withheld=tuple(withheld))


def _extra_paths_are_its_own(a: AgentConfig, agents: list[AgentConfig], home: Path, src: object) -> None:
    """An agent's memory_search.extra_paths may not reach another agent's workspace (its MEMORY.md and
    memory/private/ would be this agent's shared notes, found by its contacts) nor Hermit's state dir
    outside the agent's own workspace, nor any agent's folder where session.store_dir put it (contacts' rooms
    hold their files, another agent's people's among them)."""
    own = Path(os.path.realpath(a.workspace))
    state = Path(os.path.realpath(home))
    for raw in a.settings.memory_search.extra_paths:
        given = Path(raw).expanduser()
        root = Path(os.path.realpath(given if given.is_absolute() else a.workspace / given))
        others = [b.id for b in agents if b.id != a.id and _overlap(root, Path(os.path.realpath(b.workspace)))]
        # session.store_dir moves each agent's folder (its sessions and its chats' rooms) out of the state dir.
        stores = [b.id for b in agents if _overlap(root, Path(os.path.realpath(b.sessions_dir.parent)))]
        if others:
            problem = f"reaches agent '{others[0]}''s workspace"
        elif _overlap(root, state) and not root.is_relative_to(own):
            problem = f"reaches Hermit's state dir ({state})"
        elif stores:
            problem = f"reaches the sessions and chats' rooms of agent '{stores[0]}' (session.store_dir)"
        else:
            continue
        raise ConfigError(f"{src}: agent '{a.id}': memory_search.extra_paths entry {raw!r} {problem}: each "
                          "agent's memory is its own", "point extra_paths at folders of notes outside every "
                          "agent's workspace and the state dir")


def sandbox_reach_problem(a: AgentConfig, agents: typing.Sequence[AgentConfig], home: Path, who: str, *,
                          option: str = "agents.list[].workspace") -> ConfigError | None:
    """Under sandbox.mode all the owner's main session is confined to its workspace (its file tools, and its
    commands in a sandbox that binds the workspace read-write): a workspace holding Hermit's state dir or an agent's
    sessions and rooms (session.store_dir) gave them the gateway token, the config's keys, every chat's transcripts
    and the sandbox's own guard journals (tools/bind_guard.py), which the next turn replays."""
    if a.settings.sandbox.mode != "all":
        return None
    own = Path(os.path.realpath(a.workspace))
    state = Path(os.path.realpath(home))
    stores = [b.id for b in agents if Path(os.path.realpath(b.sessions_dir.parent)).is_relative_to(own)]
    if state.is_relative_to(own):
        problem = f"holds Hermit's state dir {state} (the gateway token, the config's keys, every chat's transcripts)"
    elif stores:
        problem = f"holds the sessions and rooms of agent '{stores[0]}' (session.store_dir)"
    else:
        return None
    return ConfigError(f"{who} the workspace {own} {problem}, and with sandbox.mode all its commands and file tools "
                       "may use all of the workspace",
                       f"set {option} to a folder that does not hold them (e.g. ~/hermit-notes, or the default "
                       "in the state dir), or move the state dir out of the workspace (HERMIT_HOME)")


def _overlap(a: Path, b: Path) -> bool:
    return a.is_relative_to(b) or b.is_relative_to(a)


def _sessions_dir(paths: StatePaths, entry: AgentEntry) -> Path:
    """The agent's sessions directory: under session.store_dir when set (shared storage), else the state dir."""
    raw = entry.session.store_dir
    if not raw:
        return paths.sessions_dir(entry.id)
    base = Path(raw).expanduser()
    # Resolved: judged (sessions_problem) and used where it resolves, so a symlink on the way cannot be swapped
    # between the two.
    return StatePaths((base if base.is_absolute() else paths.home / base).resolve()).sessions_dir(entry.id)


# An editor that saves in place (nano, a JSON writer) truncates the file and writes it in pieces microseconds
# apart; the gateway reads hermit.yaml at every admission, and a prefix of a two-agent config can parse and route the
# family group to the default agent (12 of 620 prefixes did, audit s21). A file whose content changed (mtime) under
# SETTLE_NS ago is read once it is that old, and a read of a file whose content changed meanwhile (the same inode,
# another size or mtime) is read again, for SETTLE_MAX_S at most: a save in progress is never taken for the config.
# A file replaced by rename is a whole file whichever one was read, and renames and links change only the ctime, so
# a file swapped as fast as a process can (tests/test_reaudit17_config_swap.py) is never waited on.
# An editor may pause longer than SETTLE_NS between its writes (an fsync on a busy disk, a slow mount; audit s22):
# while any process holds the file open for writing (`writer_holds`: the editor, from its truncate to its close) it
# is not read as settled either; still held after SETTLE_MAX_S, the read fails (StillWriting) rather than take what
# is there so far.
SETTLE_NS = 50_000_000
SETTLE_MAX_S = 1.0


class StillWriting(OSError):
    """The config file stayed open for writing by some process for SETTLE_MAX_S: a save that has not finished."""


def _content(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def writer_holds(source: Path, st: os.stat_result) -> bool | None:
    """Whether some process has the file read (`st`, still named `source`) open for writing — an editor mid-save
    holds it from its truncate to its close, whatever it pauses between writes. Asked of the kernel as a read lease,
    which it grants only while no one has the file open for writing, released at once. None where a lease cannot be
    had (a network or FUSE mount, leases turned off, not this system): the time rule alone decides there."""
    import fcntl
    import signal

    setlease = getattr(fcntl, "F_SETLEASE", None)
    if setlease is None:
        return None
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return None
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            return False  # replaced by rename since: what was read is a whole file
        try:
            # A writer opening it while the lease is held breaks the lease, and the kernel signals the holder: SIGURG
            # (ignored unless handled), not the default SIGIO, which would end this process.
            fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)
            fcntl.fcntl(fd, setlease, fcntl.F_RDLCK)
        except OSError as e:
            return True if e.errno == errno.EAGAIN else None
        fcntl.fcntl(fd, setlease, fcntl.F_UNLCK)
        return False
    finally:
        os.close(fd)


def read_settled(source: Path) -> tuple[bytes, os.stat_result]:
    """The bytes of the config file and the fstat of what was read, once no save in place is writing it: read again
    while that file's content changed during the read, changed under SETTLE_NS ago (an mtime in the future, a clock
    set back, waits for nothing) or is open for writing by some process (`writer_holds`). Costs a stat, an open and
    two fcntl more per read; a read within SETTLE_NS of a save waits for the rest, one during a save for its end.
    Raises StillWriting when the file is still open for writing after SETTLE_MAX_S."""
    deadline = time.monotonic() + SETTLE_MAX_S
    while True:
        raw, st = read_regular_stat(source)
        try:
            now = os.stat(source)
            changed = (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino) and _content(now) != _content(st)
        except OSError:
            changed = False  # moved away mid-read (a save by rename): what was read is a whole file
        changed = changed or len(raw) != st.st_size
        age = time.time_ns() - st.st_mtime_ns
        young = 0 <= age < SETTLE_NS
        writing = not (changed or young) and writer_holds(source, st) is True
        if not (changed or young or writing):
            return raw, st
        if time.monotonic() >= deadline:
            if writing:
                raise StillWriting(errno.EBUSY, f"open for writing by another program for {SETTLE_MAX_S:g} s", str(source))
            return raw, st
        time.sleep((SETTLE_NS - age) / 1e9 if young and not changed else 0.005 if writing else 0.002)


def load_config(paths: StatePaths, explicit: Path | None = None) -> LoadedConfig:
    """Load and validate the config under `paths.home` (or `explicit`); no file means all defaults."""
    source = explicit or paths.config_file()
    if source is None:
        return build_config({}, paths)
    try:
        why = not_own_file(os.stat(source))
    except OSError:
        why = None  # the read below says what is wrong
    if why is not None:  # it names the model server, the proxy and the commands: never another user's choice
        raise ConfigError(f"the config file {source} {why}",
                          f"check what it says, then make it yours: chown $(id -u) {source} && chmod 600 {source}")
    try:
        # The file judged is the file read (the descriptor's fstat): the name may be swapped between the look
        # above and the read (a symlinked hermit.yaml names a file in a folder someone else may write), and the
        # gateway reloads at every admission, so a swap gets as many tries as it likes.
        raw, st = read_settled(source)
        why = not_own_file(st)
        # Text mode's universal newlines, as a text read gives them.
        text = raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except FileNotFoundError as e:
        raise ConfigError(f"config file not found: {source}",
                          "run `hermit setup` to create one (or `hermit init` for memory only)") from e
    except NotRegularFile as e:
        raise ConfigError(f"the config path {source} is {e.kind}, not a file",
                          f"move that {e.kind.removeprefix('a ')} away; `hermit init` then writes a fresh {source.name}") from e
    except StillWriting as e:
        raise ConfigError(f"the config file {source} is being saved: another program has held it open for writing "
                          f"for {SETTLE_MAX_S:g} s, so what it holds so far is not taken for the config",
                          "wait for the save to finish (or close the program holding the file open), then try again") from e
    except PermissionError as e:
        raise ConfigError(f"cannot read the config file {source}: permission denied",
                          f"make it readable by you (chmod u+r {source})") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"{source}: not UTF-8 text", "save the config as UTF-8") from e
    if why is not None:
        raise ConfigError(f"the config file {source} {why}",
                          f"check what it says, then make it yours: chown $(id -u) {source} && chmod 600 {source}")
    is_yaml = source.suffix.lower() in (".yaml", ".yml")
    data, where = parse_config_text(text, str(source), is_yaml)
    return build_config(data, paths, source, where)
