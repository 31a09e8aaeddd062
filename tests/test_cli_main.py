"""The `hermit` entry point: `python -m hermit`, a lean start (no schema or numpy for --help), help for every option."""

from __future__ import annotations

import argparse
import subprocess
import sys

from hermit.cli.main import build_parser
from prochelpers import PROC_TIMEOUT

# Loaded by a command when it runs, never for parsing arguments or printing help.
HEAVY = ("pydantic", "numpy", "httpx", "yaml", "rich", "ruamel", "sqlean", "starlette", "cronsim",
         "hermit.agent", "hermit.memory", "hermit.models", "hermit.gateway", "hermit.scheduler")


def test_python_dash_m_hermit_works() -> None:
    r = subprocess.run([sys.executable, "-m", "hermit", "--version"], capture_output=True, text=True, timeout=PROC_TIMEOUT)
    assert r.returncode == 0 and r.stdout.startswith("hermit ")
    r = subprocess.run([sys.executable, "-m", "hermit", "memory", "--help"], capture_output=True, text=True,
                       timeout=PROC_TIMEOUT)
    assert r.returncode == 0 and "search" in r.stdout


def test_help_loads_no_heavy_module() -> None:
    for argv in (["--help"], ["memory", "--help"], ["sessions", "list", "--help"], ["init", "--help"]):
        code = ("import sys\nfrom hermit.cli.main import main\ntry:\n    main(" + repr(argv) + ")\n"
                "except SystemExit:\n    pass\n"
                "print(sorted({m.split('.')[0] if not m.startswith('hermit') else '.'.join(m.split('.')[:2]) "
                "for m in sys.modules} & set(" + repr(HEAVY) + ")), file=sys.stderr)")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        assert "usage: hermit" in r.stdout
        assert r.stderr.strip() == "[]", f"hermit {' '.join(argv)} imported {r.stderr.strip()}"


def test_top_level_help_lists_every_command_without_importing_it() -> None:
    from hermit.cli.commands import COMMANDS

    lean = build_parser().format_help()
    full = build_parser(full=True).format_help()
    assert lean == full
    assert len(COMMANDS) >= 7 and "memory" in lean and "sessions" in lean


def _parsers(p: argparse.ArgumentParser, path: str = "hermit") -> list[tuple[str, argparse.ArgumentParser]]:
    out = [(path, p)]
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                out.extend(_parsers(sub, f"{path} {name}"))
    return out


def test_every_option_and_argument_has_help() -> None:
    missing = [f"{path}: {'/'.join(a.option_strings) or a.dest}"
               for path, p in _parsers(build_parser(full=True)) for a in p._actions
               if not isinstance(a, argparse._SubParsersAction) and not (a.help and a.help.strip())]
    assert not missing, "options without help text:\n" + "\n".join(missing)


def _hermit(home: object, *args: str) -> subprocess.CompletedProcess[str]:
    import os

    env = {**os.environ, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"}
    return subprocess.run([sys.executable, "-m", "hermit", *args], env=env, capture_output=True, text=True,
                          timeout=PROC_TIMEOUT)


def test_empty_query_with_json_prints_a_json_error(tmp_path: object) -> None:
    import json
    from pathlib import Path

    home = Path(str(tmp_path)) / "home"
    (home / "workspace").mkdir(parents=True)
    (home / "hermit.yaml").write_text("agents:\n  defaults:\n    memory_search: {provider: none}\n")
    for query in ("", "   "):
        r = _hermit(home, "memory", "search", query, "--json")
        assert r.returncode == 1
        err = json.loads(r.stdout)
        assert err["results"] == [] and "nothing to search for" in err["error"] and err["hint"]
    r = _hermit(home, "memory", "search", "")
    assert r.returncode == 1 and r.stdout == "" and "error: nothing to search for" in r.stderr


def test_query_starting_with_a_dash(tmp_path: object) -> None:
    import json
    from pathlib import Path

    home = Path(str(tmp_path)) / "home"
    (home / "workspace").mkdir(parents=True)
    (home / "workspace" / "MEMORY.md").write_text("# M\n- run the tests with -timeout 30 so slow ones fail\n")
    (home / "hermit.yaml").write_text("agents:\n  defaults:\n    memory_search: {provider: none}\n")
    for args in (["--", "-timeout"], ["-timeout"], ["-timeout", "--json"], ["--json", "--", "-timeout"]):
        r = _hermit(home, "memory", "search", *args)
        assert r.returncode == 0, (args, r.stderr)
        assert "MEMORY.md" in r.stdout, (args, r.stdout)
        if "--json" in args:
            assert json.loads(r.stdout)["results"][0]["path"] == "MEMORY.md"
    r = _hermit(home, "memory", "search", "kiwi", "--max-resluts", "3")
    assert r.returncode == 2 and "unrecognized arguments: --max-resluts" in r.stderr


def test_global_options_may_follow_the_command() -> None:
    """`hermit memory search --workspace DIR q` means `hermit --workspace DIR memory search q`; an option a
    command defines itself (agents add --workspace, mcp serve --agent, memory migrate --agent) stays its own."""
    from hermit.cli.main import hoist_global_options

    p = build_parser(full=True)
    assert hoist_global_options(["memory", "search", "--workspace", "W", "--home", "H", "q", "--json"]) == [
        "--workspace", "W", "--home", "H", "memory", "search", "q", "--json"]
    assert hoist_global_options(["memory", "search", "--agent=a", "--debug", "q"]) == [
        "--agent=a", "--debug", "memory", "search", "q"]
    for own in (["agents", "add", "x", "--workspace", "W"], ["mcp", "serve", "--agent", "a"],
                ["memory", "migrate", "--to", "sqlite", "--agent", "a"],
                ["--home", "memory", "memory", "search", "q"], ["memory", "search", "--", "--workspace"]):
        assert hoist_global_options(own) == own
    assert hoist_global_options(["memory", "search", "migrate", "--agent", "a"]) == [
        "--agent", "a", "memory", "search", "migrate"]  # a query that looks like a subcommand is a query
    args = p.parse_args(hoist_global_options(["agents", "add", "x", "--workspace", "W", "--home", "H"]))
    assert (args.agent_workspace, args.home, args.workspace) == ("W", "H", None)


def test_the_command_table_says_which_global_options_each_subcommand_defines_itself() -> None:
    """own_options in hermit.cli.commands is what the parsers define: a subcommand that starts defining
    --agent, --workspace, --home or --debug must say so there, or its option would be taken as the global one."""
    from hermit.cli.commands import COMMANDS
    from hermit.cli.main import GLOBAL_FLAGS, GLOBAL_OPTIONS_WITH_VALUES

    globals_ = set(GLOBAL_OPTIONS_WITH_VALUES) | set(GLOBAL_FLAGS)
    defined = {}
    for path, parser in _parsers(build_parser(full=True)):
        words = path.split()[1:]
        if len(words) == 2:
            own = sorted(o for a in parser._actions for o in a.option_strings if o in globals_)
            if own:
                defined[(words[0], words[1])] = tuple(own)
        elif len(words) == 1:
            assert not [o for a in parser._actions for o in a.option_strings if o in globals_], path
    declared = {(c.name, sub): tuple(sorted(opts)) for c in COMMANDS for sub, opts in c.own_options.items()}
    assert defined == declared


def test_a_search_names_its_workspace_after_the_command(tmp_path: object) -> None:
    import json
    from pathlib import Path

    home = Path(str(tmp_path)) / "home"
    (home / "workspace").mkdir(parents=True)
    (home / "workspace" / "MEMORY.md").write_text("# M\n- nothing about birds here\n")
    (home / "hermit.yaml").write_text("agents:\n  defaults:\n    memory_search: {provider: none}\n")
    other = Path(str(tmp_path)) / "conv"
    (other / "memory").mkdir(parents=True)
    (other / "memory" / "2026-05-01.md").write_text("# 2026-05-01\n- Ana: my heron sketch won the prize\n")
    r = _hermit(home, "memory", "search", "--workspace", str(other), "--json", "--max-results", "6", "heron sketch")
    assert r.returncode == 0, r.stderr
    assert [h["path"] for h in json.loads(r.stdout)["results"]] == ["memory/2026-05-01.md"]
