"""`hermit memory status|index|search|get|watch` — thin faces over MemoryService."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from hermit.cli.context import CliContext, is_tty
from hermit.cli.preflight import init_hint
from hermit.cli.terminal import warn
from hermit.errors import ConfigError, HermitError
from hermit.messages import valid_json

if TYPE_CHECKING:  # loaded by the commands themselves, so `hermit --help` stays quick
    from hermit.memory.index.sync import SyncReport
    from hermit.memory.service import MemoryService


def configure(mem: argparse.ArgumentParser) -> None:
    """The arguments and handler of `hermit memory` (its name and help are in the table of cli/commands.py)."""
    ms = mem.add_subparsers(dest="memory_command", metavar="SUBCOMMAND", required=True)

    p = ms.add_parser("status", help="provider, model, files, chunks, index health")
    p.add_argument("--json", action="store_true", help="print the status as a JSON object")
    p.set_defaults(func=cmd_status)

    p = ms.add_parser("index", help="bring the index up to date (incremental)")
    p.add_argument("--force", action="store_true", help="rebuild from scratch (atomically)")
    p.add_argument("--json", action="store_true", help="print the sync report as JSON")
    p.set_defaults(func=cmd_index)

    p = ms.add_parser("search", help="hybrid search over memory",
                      epilog='a query that starts with "-" also works after --: hermit memory search -- "-x flag"')
    p.add_argument("query", nargs="?", help="what to look for (words, a question, an id; quote it)")
    p.add_argument("--max-results", type=int, default=None, metavar="N",
                   help="return at most N results (default: memory_search.query.max_results)")
    p.add_argument("--min-score", type=float, default=None, metavar="S",
                   help="drop results scoring below S, 0..1 (default: memory_search.query.min_score)")
    p.add_argument("--json", action="store_true", help="print exactly the memory_search result object")
    p.add_argument("--queries", help="batch mode: JSONL file of {\"id\", \"query\"} ('-' = stdin); "
                                     "prints one {\"id\", \"results\"} line per query")
    p.add_argument("--no-sync", action="store_true", help="search the index as it is")
    p.set_defaults(func=cmd_search)

    p = ms.add_parser("get", help="read a memory file or a line range of it")
    p.add_argument("path", help="path relative to the workspace, e.g. MEMORY.md or memory/2026-12-02.md")
    p.add_argument("--from", dest="from_line", type=int, default=None, help="1-based first line")
    p.add_argument("--lines", type=int, default=None, help="number of lines")
    p.add_argument("--json", action="store_true", help='print {"path", "text"} as JSON')
    p.set_defaults(func=cmd_get)

    p = ms.add_parser("watch", help="watch memory files and re-index on change (Ctrl-C to stop)")
    p.set_defaults(func=cmd_watch)

    from hermit.cli.memory_claim import register_claim
    from hermit.cli.memory_migrate import register_migrate

    register_migrate(ms)  # `memory migrate` lives in its own module
    register_claim(ms)  # and `memory claim`


def _sync(svc: MemoryService, *, show_progress: bool, force: bool = False, log: bool = False) -> SyncReport:
    """Sync, drawing a progress bar on a terminal; with `log` (no terminal: cron, `ssh -T`, a pipe), plain
    progress lines to stderr instead. Neither with --json."""
    from hermit.cli.progress import IndexProgress, LogProgress

    if not show_progress and not log:
        return svc.sync(force=force)
    local = svc.cfg.provider == "local"
    with IndexProgress(local_model=local) if show_progress else LogProgress(local_model=local) as bar:
        return svc.sync(force=force, progress=bar.files, chunk_progress=bar.chunks, ready=bar.ready)


@contextlib.contextmanager
def _term_as_interrupt() -> Iterator[None]:
    """A SIGTERM (`timeout`, a supervisor, `kill`) stops the index as Ctrl-C does: the stop line says what the
    index keeps, where the process died without a word. Every embedded batch is committed as it goes."""
    import signal

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread (main() called from a thread): the default stands
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _print_warnings(report: SyncReport) -> None:
    for w in report.warnings:
        warn(w)


def _print_server_store(store: dict[str, Any]) -> None:
    """The PostgreSQL lines of `memory status` (server host:port/db only, never the DSN)."""
    print(f"store      postgres {store['server_version']} at {store['server']}, schema {store['schema']}")
    if store["hnsw_index"]:
        recall = store["hnsw_recall_at_10"]
        how = (f"HNSW index, recall@10 {recall:.3f} vs exact on {store['recall_sample']} stored vectors"
               if recall is not None else "HNSW index")
    else:
        how = f"exact scan (HNSW index from {store['hnsw_threshold']:,} vectors)"
    print(f"vector     pgvector {store['pgvector']}: {store['vectors']:,} vector{'' if store['vectors'] == 1 else 's'}, {how}")
    print("fts        FTS5 tokens + BM25 over a GIN-indexed tsvector (CJK bigrams)")


def cmd_status(ctx: CliContext, args: argparse.Namespace) -> int:
    svc = ctx.memory_service()
    try:
        st = svc.status()
    finally:
        svc.close()
    if args.json:
        print(json.dumps(st, ensure_ascii=False, indent=2))
        return 0
    vec = st["vector"]
    print(f"agent      {st['agent']}")
    print(f"workspace  {st['workspace']}")
    print(f"index      {st['db']}")
    print(f"provider   {st['provider']}  model {st['model']}  dims {st['dims']}")
    print(f"indexed    {st['files']} files, {st['chunks']} chunks, {st['line_vectors']} line vectors"
          + (f" ({st['files_without_vectors']} files keyword-only)" if st["files_without_vectors"] else "")
          + (f" — built with {st['indexed_with']}" if st["indexed_with"] else " — never indexed"))
    if "store" in st:
        _print_server_store(st["store"])
    else:
        print(f"vector     {'sqlite-vec ' + vec['sqlite_vec'] if vec['available'] else 'unavailable: ' + str(vec['error'])}"
              f" (backend: {vec['backend'] or 'none yet'})")
        print("fts        FTS5 BM25 (CJK bigrams)")
    if st["chunks_without_vectors"] and st["provider"] != "none":
        print(f"embedding  {st['chunks_without_vectors']:,} chunks of {st['files_without_vectors']:,} files still to embed"
              " (found by keyword only until then)")
    print(f"cache      {st['cache_entries']} embeddings")
    print(f"dirty      {'yes — run `hermit memory index`' if st['dirty'] else 'no'}")
    _print_skipped(st["skipped"], stale=st["dirty"])
    _print_coverage(svc, st["sources"], st["sessions_indexed"], label="sources   ")
    return 0


SKIPPED_SHOWN = 20


def _print_skipped(skipped: list[dict[str, str]], *, stale: bool) -> None:
    """Each file the index leaves out, once, with why and what to do (the JSON lists them all)."""
    if not skipped:
        return
    print(f"skipped    {len(skipped):,} file{'' if len(skipped) == 1 else 's'} not indexed"
          + (" (as of the last sync)" if stale else "") + ":")
    for s in skipped[:SKIPPED_SHOWN]:
        print(f"           {s['path']}: {s['reason']} — {s['fix']}")
    if len(skipped) > SKIPPED_SHOWN:
        print(f"           … and {len(skipped) - SKIPPED_SHOWN:,} more (`hermit memory status --json` lists them)")


def _print_coverage(svc: MemoryService, sources: dict[str, Any], sessions: bool, *, label: str) -> None:
    """Where the indexed files come from, and a note when Markdown files elsewhere are not indexed."""
    from hermit.memory.index.coverage import describe_sources, uncovered_markdown

    print(f"{label} {describe_sources(sources, sessions)}")
    missed = uncovered_markdown(svc.workspace, svc.cfg.extra_paths)
    if missed.count:
        print(f"note: {missed.hint()}", file=sys.stderr)


def cmd_index(ctx: CliContext, args: argparse.Namespace) -> int:
    svc = ctx.memory_service()
    try:
        if not svc.workspace.exists():
            raise ConfigError(f"workspace {svc.workspace} does not exist", init_hint(ctx))
        if svc.indexer.lock.acquire(blocking=False):
            svc.indexer.lock.release()
        else:
            print("another process is indexing; waiting for it…", file=sys.stderr)
        with _term_as_interrupt():
            report = _sync(svc, show_progress=is_tty() and not args.json, force=args.force,
                           log=not is_tty() and not args.json)
        sources = svc.status()["sources"]
    finally:
        svc.close()
    _print_warnings(report)
    if args.json:
        print(json.dumps({**dataclasses.asdict(report), "sources": sources}, ensure_ascii=False))
    else:
        print(report.summary())
        _print_coverage(svc, sources, "sessions" in svc.cfg.sources, label="from:")
    return 0


def _search_batch(svc: MemoryService, args: argparse.Namespace) -> int:
    """One result line per query line; a bad line gets an error line and the batch goes on."""
    # Bytes, decoded per line: one line that is not UTF-8 must not end the batch.
    try:
        src = sys.stdin.buffer if args.queries == "-" else open(args.queries, "rb")  # noqa: SIM115
    except OSError as e:
        raise ConfigError(f"cannot read --queries {args.queries}: {e.strerror or e}",
                          "pass a JSONL file of {\"id\", \"query\"} lines, or - for stdin") from e
    failed = 0
    with src:
        for n, raw in enumerate(src, start=1):
            line = raw.decode("utf-8", errors="replace")
            if not line.strip():
                continue
            item: Any = None
            try:
                item = json.loads(line)
                qid, query = item["id"], item["query"]
                if not isinstance(query, str):
                    raise TypeError("'query' must be a string")
            except (ValueError, KeyError, TypeError) as e:
                err = (f"line {n}: expected a JSON object with a string 'id' and 'query' ({e}); "
                       'each line must look like {"id": "q1", "query": "..."}')
                out: dict[str, Any] = {"id": valid_json(item.get("id") if isinstance(item, dict) else None),
                                       "results": [], "error": err}
            else:
                try:
                    out = {"id": valid_json(qid), **svc.search(query, args.max_results, args.min_score)}
                except Exception as e:  # noqa: BLE001 - supervision boundary: one query must not end the batch
                    out = {"id": valid_json(qid), "results": [], "error": f"line {n}: search failed: {e}"}
            if "error" in out:
                failed += 1
            print(json.dumps(out, ensure_ascii=False), flush=True)
    if failed:
        print(f"error: {failed} query line(s) failed; their output lines carry an \"error\"", file=sys.stderr)
    return 1 if failed else 0


def cmd_search(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.cli.search_view import render_results, wants_colour

    if args.queries is None and not (args.query or "").strip():
        raise ConfigError("nothing to search for: the query is empty",
                          'pass the words to look for, e.g. hermit memory search "database move" '
                          "(or --queries FILE for batch mode)")
    svc = ctx.memory_service(long_lived=args.queries is not None)
    try:
        if args.no_sync:
            svc.cfg = svc.cfg.model_copy(update={"sync": svc.cfg.sync.model_copy(update={"on_search": False})})
        if args.queries is not None:
            return _search_batch(svc, args)
        res = svc.search(args.query, args.max_results, args.min_score)
        shown = "" if args.json or not res.get("results") else render_results(
            res["results"], args.query, lambda path: _file_lines(svc, path), wants_colour(sys.stdout))
        finish = None if args.json else _embedding_hint(svc, res)
    finally:
        svc.close()
    if args.json:
        print(json.dumps(res, ensure_ascii=False))
        return 0 if not res.get("error") else 1
    if res.get("error"):  # disabled, or a query the service refused (over MAX_QUERY_CHARS)
        print(f"error: {res.get('error')}", file=sys.stderr)
        return 1
    if res.get("mode"):
        print(f"({res['mode']}: {res['reason']})" if res.get("reason") else f"({res['mode']})", file=sys.stderr)
    for w in res.get("warnings", []):
        warn(w)
    if finish:
        print(f"hint: {finish}", file=sys.stderr)
    if not res["results"]:
        print("no results")
        if res.get("unmatched"):
            print(f"hint: {res['unmatched']} (--min-score {svc.cfg.query.min_score} shows them)", file=sys.stderr)
        _hint_uncovered(svc)
        return 0
    print(shown)
    return 0


def _embedding_hint(svc: MemoryService, res: dict[str, Any]) -> str | None:
    """When notes still wait for their vectors (a first index stopped midway): who embeds them. A search does
    not (minutes of the model on CPU before any answer): it answers by keyword for those notes."""
    if "indexing" not in res:
        return None
    if svc.indexer.lock.acquire(blocking=False):
        svc.indexer.lock.release()
        return "nothing is embedding them now: run `hermit memory index` to finish (it goes on from where it stopped)"
    return "another process (`hermit memory index` or the gateway) is embedding them now"


def _hint_uncovered(svc: MemoryService) -> None:
    """After an empty search: Markdown files lying outside what is indexed may be where the answer is."""
    from hermit.memory.index.coverage import uncovered_markdown

    missed = uncovered_markdown(svc.workspace, svc.cfg.extra_paths)
    if missed.count:
        print(f"hint: {missed.hint()}", file=sys.stderr)


def _file_lines(svc: MemoryService, path: str) -> list[str] | None:
    """A result's file as lines (to mark where a snippet was cut); None if it cannot be read now. As the
    index holds them: origin markers blank, as in snippets."""
    from hermit.memory.index.chunking import index_lines

    try:
        return index_lines(str(svc.get(path)["text"]))
    except HermitError:
        return None


def cmd_get(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.cli.memory_read import read_memory  # the file itself: no memory service, index or model

    res = read_memory(ctx.agent(), args.path, args.from_line, args.lines)
    if args.json:
        print(json.dumps(res, ensure_ascii=False))
    else:
        sys.stdout.write(res["text"] if res["text"].endswith("\n") else res["text"] + "\n")
    return 0


def cmd_watch(ctx: CliContext, args: argparse.Namespace) -> int:
    import logging

    from hermit.memory.index.watch import watch_memory

    if not ctx.debug:  # watchfiles logs its own "KeyboardInterrupt caught" warning on Ctrl-C
        logging.getLogger("watchfiles").setLevel(logging.ERROR)
    svc = ctx.memory_service(long_lived=True)
    cfg = svc.cfg
    try:
        report = _sync(svc, show_progress=is_tty())
        _print_warnings(report)
        print(report.summary(), flush=True)
        print(f"watching {svc.workspace} (MEMORY.md, memory/**/*.md"
              + (", " + ", ".join(cfg.extra_paths) if cfg.extra_paths else "")
              + f"); debounce {cfg.sync.debounce_ms} ms — Ctrl-C to stop", flush=True)

        def after(r: SyncReport) -> None:
            _print_warnings(r)
            if r.files_indexed or r.files_deleted:
                print(time.strftime("%H:%M:%S ") + r.summary(), flush=True)

        with contextlib.suppress(KeyboardInterrupt):
            watch_memory(svc.workspace, cfg.extra_paths, svc.sync, debounce_ms=cfg.sync.debounce_ms,
                         on_report=after)
    finally:
        svc.close()
    return 0
