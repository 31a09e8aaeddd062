"""The light `hermit` commands load only what they use: `init`, `pairing list`, `cron list`, `backup`, `--help`…
start no agent runtime, no model client (httpx), no numpy or memory service, no web server. Each is a real
`hermit` process (what `python -m hermit …` runs, as `__main__`), which writes the names in its sys.modules to a
file as it exits. A module-level import that drags one of these back in (a package `__init__` importing
all its submodules, a constant taken from cli/assistant.py) fails here, naming the command and the module.

Users run these commands by hand, and the suite runs several hundred of them as subprocesses: the runtime's
imports were about 0.5 s of CPU each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clihere import hermit_here
from prochelpers import PROC_TIMEOUT

# The agent runtime and what only it needs (cli/assistant.py builds it; scheduler/host.py runs its turns).
RUNTIME = ("hermit.cli.assistant", "hermit.agent.runtime", "hermit.agent.context", "hermit.tools.toolset",
           "hermit.tools.exec")
# The model providers' clients.
MODEL_CLIENTS = ("hermit.models.anthropic", "hermit.models.openai_compat")
HTTP = ("httpx",)
# Memory search: the service, the embedding models, numpy and the vector extension.
MEMORY = ("hermit.memory.service", "hermit.memory.embedders", "hermit.memory.embedders.local_e5", "numpy",
          "sqlite_vec")
# The gateway's web server.
WEB = ("starlette", "uvicorn", "hermit.gateway.app")
EVERYTHING_HEAVY = RUNTIME + MODEL_CLIENTS + HTTP + MEMORY + WEB
# asyncio's package (~0.05-0.1 s of CPU): a command that reads the gateway's lock file (gateway/state.py) or
# opens the memory index has no event loop; hermit.loopback names asyncio's socket wrapper only for type hints.
ASYNC = ("asyncio",)

# What only touching a vector needs (~0.1-0.15 s of CPU): memory modules use numpy through memory.lazy_numpy, and
# the vector extension is loaded from its file without importing the sqlite_vec package (which imports numpy).
VECTORS = ("numpy", "sqlite_vec")

# command -> what it must not import. The doctor checks the memory index (the service, the vector extension) and
# probes local servers (a local model, a channel's local API: httpx); the jobs' health needs the heartbeat's rules,
# not the agent's context. `memory status` opens the index (and builds the local model's embedder, not its model).
NOT_IMPORTED: dict[tuple[str, ...], tuple[str, ...]] = {
    ("--help",): EVERYTHING_HEAVY + ("pydantic",),
    ("--version",): EVERYTHING_HEAVY + ("pydantic",),
    ("gateway", "--help"): EVERYTHING_HEAVY,
    ("pairing", "list"): EVERYTHING_HEAVY + ASYNC,
    ("cron", "list"): EVERYTHING_HEAVY + ASYNC,
    ("sessions", "list"): EVERYTHING_HEAVY + ASYNC,
    ("agents", "list"): EVERYTHING_HEAVY + ASYNC,
    ("channels", "list"): EVERYTHING_HEAVY + ASYNC,
    ("channels", "status"): EVERYTHING_HEAVY + ASYNC,
    ("models", "list"): EVERYTHING_HEAVY,
    ("completion", "bash"): EVERYTHING_HEAVY,
    ("memory", "status"): RUNTIME + MODEL_CLIENTS + HTTP + WEB + ASYNC + VECTORS,
    ("doctor",): RUNTIME + MODEL_CLIENTS + WEB,
}


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "PYTHONPROFILEIMPORTTIME", "PYTHONSTARTUP")}
    env.update(HERMIT_HOME=str(home), OMP_WAIT_POLICY="PASSIVE")
    return env


# `python -m hermit ARGS`, then sys.modules' names written to the file named first (-X importtime would not
# report the modules a package's __getattr__ loads with importlib.import_module).
PROBE = ("import atexit, json, runpy, sys\n"
         "out = sys.argv.pop(1)\n"
         "atexit.register(lambda: open(out, 'w', encoding='utf-8').write(json.dumps(sorted(sys.modules))))\n"
         "runpy.run_module('hermit', run_name='__main__', alter_sys=True)\n")


def imported_by(home: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """`hermit ARGS` as its own process, and every module it imported."""
    out = home.parent / "modules.json"
    out.unlink(missing_ok=True)
    p = subprocess.run([sys.executable, "-c", PROBE, str(out), *args], capture_output=True, text=True,
                       env=env_for(home), stdin=subprocess.DEVNULL, timeout=PROC_TIMEOUT)
    found: list[str] = json.loads(out.read_text(encoding="utf-8"))
    out.unlink()
    return p, set(found)


def loaded(found: set[str], names: tuple[str, ...]) -> list[str]:
    return [n for n in names if n in found]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    h = tmp_path_factory.mktemp("lazy") / "state"
    init = hermit_here(h, "init", env=env_for(h))  # only the state dir the commands below read
    assert init.returncode == 0, init.stderr
    return h


def test_the_heavy_modules_are_named_as_they_are(tmp_path: Path) -> None:
    """The names checked below exist: a process that loads the runtime, the web app and the embedding model has
    every one in sys.modules, so a renamed module cannot make a check pass by being absent under its old name."""
    code = ("import json, sys, hermit.cli.assistant, hermit.gateway.app, hermit.memory.embedders.local_e5, "
            "hermit.memory.service, hermit.models.anthropic, hermit.models.openai_compat, hermit.tools.toolset, "
            "sqlite_vec, uvicorn; print(json.dumps(sorted(sys.modules)))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=env_for(tmp_path / "state"), timeout=PROC_TIMEOUT)
    assert p.returncode == 0, p.stderr
    found = set(json.loads(p.stdout))
    missing = [n for n in EVERYTHING_HEAVY if n not in found]
    assert not missing, f"no such module (renamed?): {missing}"


@pytest.mark.parametrize("args", list(NOT_IMPORTED), ids=" ".join)
def test_a_light_command_does_not_load_what_it_does_not_use(home: Path, args: tuple[str, ...]) -> None:
    p, found = imported_by(home, *args)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "hermit.cli.main" in found  # the report is the command's own
    unwanted = loaded(found, NOT_IMPORTED[args])
    assert not unwanted, f"`hermit {' '.join(args)}` imported {unwanted}"


def test_init_in_a_new_state_dir_loads_no_runtime(tmp_path: Path) -> None:
    home = tmp_path / "state"
    p, found = imported_by(home, "init")
    assert p.returncode == 0, p.stderr[-2000:]
    assert (home / "hermit.yaml").is_file()
    unwanted = loaded(found, EVERYTHING_HEAVY)
    assert not unwanted, f"`hermit init` imported {unwanted}"


def test_backup_loads_no_runtime(home: Path, tmp_path: Path) -> None:
    archive = tmp_path / "b.tar.gz"
    p, found = imported_by(home, "backup", str(archive))
    assert p.returncode == 0, p.stderr[-2000:]
    assert archive.stat().st_size > 0
    unwanted = loaded(found, EVERYTHING_HEAVY + ASYNC)
    assert not unwanted, f"`hermit backup` imported {unwanted}"


def test_gateway_status_with_no_gateway_loads_no_http_client(home: Path) -> None:
    """`hermit gateway status` with no gateway running answers so without importing httpx (~0.1-0.2 s of CPU,
    rich and click with it): the client is needed only once there is a gateway to ask."""
    p, found = imported_by(home, "gateway", "status")
    assert p.returncode == 1
    assert "no gateway is running" in p.stderr
    unwanted = loaded(found, EVERYTHING_HEAVY)
    assert not unwanted, f"`hermit gateway status` (no gateway) imported {unwanted}"


def test_a_command_that_runs_the_agent_still_loads_it(home: Path) -> None:
    """The other side: `hermit agent` builds the runtime (here up to 'no language model is configured'), so the
    lazy imports moved the runtime's loading, they did not lose it."""
    p, found = imported_by(home, "agent", "-m", "hi")
    assert p.returncode == 1
    assert "no language model is configured" in p.stderr
    assert loaded(found, ("hermit.cli.assistant", "hermit.agent.runtime")) == ["hermit.cli.assistant",
                                                                              "hermit.agent.runtime"]


def test_only_a_search_builds_the_translation_lexicon(tmp_path: Path) -> None:
    """The EN↔ZH lexicon (memory.search.lexicon) is built from the dictionary into the state dir's cache the first
    time it is needed: about 2 s of CPU. `memory status`, `get` and `index` do not use it, so in a new state dir they
    leave it unbuilt; the first search builds it and finds a Chinese note by its English words with it. With
    keyword-only memory none of them touches a vector, so none imports numpy or the sqlite_vec package."""
    home = tmp_path / "state"
    assert hermit_here(home, "init", env=env_for(home)).returncode == 0
    # Keyword-only memory: what finds the note below for an English question is the lexicon, not a model.
    (home / "hermit.yaml").write_text("agents:\n  defaults:\n    memory_search: {provider: none}\n", encoding="utf-8")
    (home / "workspace" / "MEMORY.md").write_text("# 家\n\n- 女儿每周二下午上钢琴课\n", encoding="utf-8")
    for args in (("memory", "status"), ("memory", "get", "MEMORY.md"), ("memory", "index")):
        p, found = imported_by(home, *args)
        assert p.returncode == 0, p.stderr[-2000:]
        assert not list((home / "cache").glob("lexicon-*")), f"`hermit {' '.join(args)}` built the lexicon"
        assert not loaded(found, VECTORS), f"keyword-only `hermit {' '.join(args)}` imported {loaded(found, VECTORS)}"
    p, found = imported_by(home, "memory", "search", "piano lesson", "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    assert not loaded(found, VECTORS), f"keyword-only `hermit memory search` imported {loaded(found, VECTORS)}"
    assert [f.name for f in (home / "cache").glob("lexicon-*")] == ["lexicon-cedict-v3.sqlite"]
    hits = json.loads(p.stdout)["results"]
    assert [h["path"] for h in hits] == ["MEMORY.md"] and "钢琴课" in hits[0]["snippet"], hits


# `python -m hermit ARGS` with an audit hook that writes every child process the command starts to the file named
# first.
CHILDREN_PROBE = ("import atexit, json, runpy, sys\n"
                  "out, started = sys.argv.pop(1), []\n"
                  "sys.addaudithook(lambda event, args: started.append([event, repr(args)[:300]]) if event in\n"
                  "                 ('subprocess.Popen', 'os.posix_spawn', 'os.fork', 'os.exec', 'os.system') else None)\n"
                  "atexit.register(lambda: open(out, 'w', encoding='utf-8').write(json.dumps(started)))\n"
                  "runpy.run_module('hermit', run_name='__main__', alter_sys=True)\n")


@pytest.mark.parametrize("args", [("memory", "status"), ("sessions", "list"), ("cron", "list"), ("channels", "status"),
                                  ("agents", "list")], ids=" ".join)
def test_a_command_that_runs_no_program_starts_no_child_process(home: Path, args: tuple[str, ...]) -> None:
    """Making the process non-dumpable (redaction.keep_environment_private, in every command) found libc with
    ctypes.util.find_library, which runs `ldconfig -p` as a child: a fork and exec in each of the ~1,100 `hermit`
    processes the suite starts (~20-50 ms of wall time each on a loaded machine). The process's own symbols hold
    prctl, as they do for main.py's first call."""
    out = home.parent / "children.json"
    p = subprocess.run([sys.executable, "-c", CHILDREN_PROBE, str(out), *args], capture_output=True, text=True,
                       env=env_for(home), stdin=subprocess.DEVNULL, timeout=PROC_TIMEOUT)
    assert p.returncode == 0, p.stderr[-2000:]
    started = json.loads(out.read_text(encoding="utf-8"))
    out.unlink()
    assert started == [], f"`hermit {' '.join(args)}` started {started}"


def test_a_command_refused_before_init_loads_no_event_loop(tmp_path: Path) -> None:
    """Every error a command reports takes its hint from cli/setup.py, which imports cli/channel_check.py: that
    module imported asyncio (~0.03-0.05 s of CPU) for the token checks `hermit setup` runs, in each refused command."""
    home = tmp_path / "state"
    p, found = imported_by(home, "memory", "search", "anything")
    assert p.returncode == 1
    assert "hermit init" in p.stderr
    assert "hermit.cli.setup" in found  # the hint's module was loaded: the check below is about what it imports
    unwanted = loaded(found, EVERYTHING_HEAVY + ASYNC)
    assert not unwanted, f"`hermit memory search` before init imported {unwanted}"
