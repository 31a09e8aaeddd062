"""A new user's first steps, as the first-use audit ran them: the built-in fake provider on its own (the
failure says how to start it, and that command works; a script that runs out says so), hints that lead with
the `hermit setup` command that fixes the problem (and that command works), a state dir under a folder the
user cannot write, an invalid agent id, Ctrl-C during setup, and typing a refused key again. An `init` or `setup`
that only makes the state dir a test starts from runs in this process (test_setup.here)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import yaml

from ciguard import need
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT, python_as, pythonpath, shared_dir
from test_setup import KEY, Terminal, env_for, here, hermit

NOBODY = {"user": 65534, "group": 65534, "extra_groups": []}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def hint_of(stderr: str) -> str:
    lines = stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("hint: "))
    return "\n".join(lines[start:])


def test_the_fake_providers_failure_gives_its_start_command_which_works(tmp_path: Path) -> None:
    home = tmp_path / "home"
    port = free_port()
    r = hermit(home, "setup", "--provider", "fake", "--base-url", f"http://127.0.0.1:{port}/v1")
    assert r.returncode == 1 and "nothing listens" in r.stderr
    hint = hint_of(r.stderr)
    assert "ollama serve" not in r.stderr and "Hermit bug" not in r.stderr
    assert f"-m hermit.testing.fake_provider --port {port} --script {home / 'fake-provider.json'}" in hint, hint
    assert not (home / "hermit.yaml").exists()  # nothing saved but the script the command needs
    command = hint.split("another terminal: ", 1)[1].splitlines()[0]
    server = subprocess.Popen(shlex.split(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().startswith("fake provider listening on"), server.stderr
        again = hermit(home, "setup", "--provider", "fake", "--base-url", f"http://127.0.0.1:{port}/v1")
        assert again.returncode == 0, again.stderr
        chat = hermit(home, "agent", "-m", "hello")
        assert chat.returncode == 0 and "fake provider" in chat.stdout, chat.stderr
    finally:
        server.terminate()
        _, err = server.communicate(timeout=PROC_TIMEOUT)
    assert "RuntimeWarning" not in err  # runpy: the module was not imported before it ran as __main__
    # The fake stopped (a new terminal, the next day): chat and agent say how to start it, not `ollama serve`.
    for args, stdin in ((["agent", "-m", "hello again"], ""), (["chat"], "hello again\n")):
        down = hermit(home, *args, stdin=stdin)
        shown = down.stdout + down.stderr
        assert "nothing listens" in shown and "ollama serve" not in shown, shown
        assert f"hint: start the fake provider in another terminal: {command}" in shown, shown


def test_the_fake_provider_module_runs_without_a_runpy_warning() -> None:
    r = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "hermit.testing.fake_provider", "--help"],
                       capture_output=True, text=True, timeout=PROC_TIMEOUT)
    assert r.returncode == 0 and "RuntimeWarning" not in r.stderr, r.stderr


def test_a_fake_script_that_runs_out_says_so_and_how_to_give_it_more(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider(["OK", "the only reply"]) as fake:
        assert here(home, "setup", "--provider", "fake", "--base-url", fake.openai_base_url).returncode == 0
        assert hermit(home, "agent", "-m", "one").stdout.strip() == "the only reply"
        out = hermit(home, "agent", "-m", "two")
    assert out.returncode == 1
    assert "script ran out of replies" in out.stderr and "Hermit bug" not in out.stderr
    assert "add steps to the script" in out.stderr and '"repeat": true' in out.stderr


def test_a_refused_key_hint_leads_with_the_setup_command_that_stores_the_right_one(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider([{"text": "OK", "repeat": True}], api_key=KEY) as fake:
        saved = here(home, "setup", "--provider", "openai-compatible", "--base-url", fake.openai_base_url,
                     "--model", "fake-model", "--api-key-stdin", "--no-check", stdin="sk-wrong\n")
        assert saved.returncode == 0, saved.stderr
        r = hermit(home, "agent", "-m", "hi")
        assert r.returncode == 1 and "rejected the credentials" in r.stderr
        hint = hint_of(r.stderr)
        command = (f"hermit setup --provider openai-compatible --base-url {fake.openai_base_url} --model fake-model "
                   "--api-key-stdin")
        assert hint.startswith("hint: store the right key with `hermit setup` (scripted: `" + command), hint
        assert hint.index("hermit setup") < hint.index("CUSTOM_API_KEY in hermit.env")
        assert "api_key in hermit.yaml" not in hint
        fixed = hermit(home, *shlex.split(command)[1:], stdin=KEY + "\n")  # the very command the hint gives
        assert fixed.returncode == 0, fixed.stderr
        assert hermit(home, "agent", "-m", "hi").stdout.strip() == "OK"


def test_a_keyless_servers_401_hint_names_setup_and_the_env_file(tmp_path: Path) -> None:
    """An Ollama behind a proxy that wants a key: the provider has no key variable at all."""
    home = tmp_path / "home"
    with FakeProvider([{"text": "OK", "repeat": True}], api_key=KEY) as fake:
        home.mkdir()
        (home / "hermit.yaml").write_text(
            "agents:\n  defaults:\n    model: ollama/llama3.1\n    memory_search: {provider: none}\n"
            f"models:\n  providers:\n    ollama: {{type: openai-compatible, base_url: \"{fake.openai_base_url}\"}}\n")
        assert here(home, "init").returncode == 0
        r = hermit(home, "agent", "-m", "hi")
        assert r.returncode == 1
        hint = hint_of(r.stderr)
        command = (f"hermit setup --provider openai-compatible --name ollama --base-url {fake.openai_base_url} "
                   "--model llama3.1 --api-key-stdin")
        assert hint.startswith("hint: if the server needs a key, store it with `hermit setup` (scripted: `"
                               + command), hint
        assert "OLLAMA_API_KEY in hermit.env" in hint
        fixed = hermit(home, *shlex.split(command)[1:], stdin=KEY + "\n")
        assert fixed.returncode == 0, fixed.stderr
        assert hermit(home, "agent", "-m", "hi").stdout.strip() == "OK"


def test_doctor_and_chat_lead_with_hermit_setup(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert here(home, "init").returncode == 0
    screen = hermit(home, "chat")
    assert screen.returncode == 1
    assert "hermit setup" in screen.stdout and "export " not in screen.stdout
    assert screen.stdout.index("hermit setup") < screen.stdout.index("hermit.yaml")
    text = (home / "hermit.yaml").read_text()
    (home / "hermit.yaml").write_text(text + "\nagents:\n  defaults:\n    model: anthropic/claude-sonnet-4-5\n"
                                      "channels:\n  telegram:\n    accounts:\n      default: {owners: ['42']}\n")
    doc = hermit(home, "doctor")
    fixes = {line.split("]", 1)[1].split()[0] + " " + line.split("]", 1)[1].split()[1]: fix
             for line, fix in zip(doc.stdout.splitlines(), doc.stdout.splitlines()[1:], strict=False)
             if line.startswith("[") and fix.strip().startswith("fix:")}
    model_fix = fixes["chat model"]
    assert "`hermit setup --provider anthropic --model claude-sonnet-4-5 --api-key-stdin`" in model_fix, doc.stdout
    assert model_fix.index("hermit setup") < model_fix.index("ANTHROPIC_API_KEY in hermit.env")
    assert "api_key in hermit.yaml" not in model_fix
    channel_fix = next(fix for name, fix in fixes.items() if name.startswith("channels"))
    assert "`hermit setup --channel telegram --account default --token-stdin`" in channel_fix, doc.stdout
    assert "export" not in channel_fix and "TELEGRAM_BOT_TOKEN=… to hermit.env" in channel_fix


def test_a_state_dir_under_a_folder_the_user_cannot_write_is_a_clear_error(tmp_path: Path) -> None:
    need(os.geteuid() == 0, "root (to run Hermit as another uid)")
    python = python_as(NOBODY)
    need(python is not None, "a Python that uid 65534 can run")
    assert python is not None
    with shared_dir("hermit-newuser-") as shared:
        parent = shared / "newuser"
        parent.mkdir(mode=0o755)  # root's, like /tmp/newuser in the audit: uid 65534 may not write it
        home = parent / "home-u1"
        for args in (["init"], ["setup", "--provider", "fake", "--no-check"]):
            r = subprocess.run([python, "-m", "hermit", "--home", str(home), *args], capture_output=True, text=True,
                               env={"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath(), "HOME": str(shared)},
                               cwd=shared, timeout=PROC_TIMEOUT, **NOBODY)  # type: ignore[call-overload]
            assert r.returncode == 1, (args, r.stdout, r.stderr)
            assert "Traceback" not in r.stderr and "PermissionError" not in r.stderr, r.stderr
            assert r.stderr.startswith(f"error: cannot create the state dir {home}: {parent} is not writable"), r.stderr
            assert "\nhint: " in r.stderr and "--home" in r.stderr
            assert list(parent.iterdir()) == []


def test_agents_add_with_an_invalid_id_says_what_an_id_may_be(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert here(home, "init").returncode == 0
    before = (home / "hermit.yaml").read_text()
    r = hermit(home, "agents", "add", "Bad Id")
    assert r.returncode == 1
    assert "'Bad Id' is not a valid agent id" in r.stderr and "lowercase letters, digits" in r.stderr
    assert "agents.list" not in r.stderr and "hint: e.g. hermit agents add bad-id" in r.stderr
    assert (home / "hermit.yaml").read_text() == before


PRESSES, PRESS_WAIT = 20, 5.0


def interrupt(term: Terminal) -> None:
    """Ctrl-C as a person presses it: again if the first one went unnoticed. A SIGINT that lands after the
    prompt is written but before input() blocks in read() is only seen by CPython when input arrives (its
    readline and fgets loops check signals on EINTR alone), so under load one SIGINT may never stop it."""
    for _ in range(PRESSES):
        os.killpg(term.proc.pid, signal.SIGINT)
        try:
            term.proc.wait(PRESS_WAIT)
            return
        except subprocess.TimeoutExpired:
            continue
    raise AssertionError(f"{PRESSES} presses of Ctrl-C did not stop setup:\n{term.seen}")


def test_ctrl_c_during_setup_of_a_fresh_state_dir_leaves_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    term = Terminal(["setup", "--ollama-url", "http://127.0.0.1:9"], env_for(home))
    try:
        term.expect("Ctrl-C stops without saving anything")
        term.expect("choice [4]: ")  # Enter: the fake provider (no Ollama, no key: s22 t17)
        interrupt(term)
    except BaseException:
        os.killpg(term.proc.pid, signal.SIGKILL)
        raise
    finally:
        code = term.close()
    assert code != 0, term.seen
    assert not home.exists() or list(home.iterdir()) == [], sorted(p.name for p in home.iterdir())


def test_a_refused_key_can_be_typed_again_on_a_terminal(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider([{"text": "OK", "repeat": True}], api_key=KEY) as fake:
        term = Terminal(["setup", "--provider", "openai-compatible", "--base-url", fake.openai_base_url,
                         "--model", "m1"], env_for(home))
        try:
            term.expect("API key for custom")
            term.send("sk-typo")
            # The model is checked before the channel's questions (a failed check costs no typed bot token).
            term.expect("Paste the key for CUSTOM_API_KEY again (Enter to stop)")
            term.send(KEY)
            term.expect("Add a chat channel account")
            term.send("")
            term.expect("next: ")
        except BaseException:
            os.killpg(term.proc.pid, signal.SIGKILL)  # not left waiting at a prompt for PROC_TIMEOUT
            raise
        finally:
            code = term.close()
        assert code == 0, term.seen
        assert "ok: custom/m1 answers" in term.seen
        env_text = (home / "hermit.env").read_text()
        assert f"CUSTOM_API_KEY={KEY}" in env_text and "sk-typo" not in env_text
        cfg = yaml.safe_load((home / "hermit.yaml").read_text())
        assert cfg["agents"]["defaults"]["model"] == "custom/m1"
