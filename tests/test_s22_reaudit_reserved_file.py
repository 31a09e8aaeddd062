"""s22 re-audit of the reserved places' file (gateway/reserved_file.py, `<state>/gateway/reserved.json`).

Found: a FIFO at that path hung whatever read it — the gateway's start (Reserved is built with the gateway), for good:
the open waited for a writer (O_NOFOLLOW stops a link, not a FIFO). Now it is opened without waiting and refused as
not a file, like the owner-routes record. Held: a folder, a link (to the token), a hard link to the token, a huge
file, another user's file and a 0644 file restore nothing and leak nothing of the token; the next save replaces
the thing planted (the token is untouched); another user cannot create anything in the gateway folder; entries
written under another token are not reserved. As root and as uid 65534 (each in a state dir of its own)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermit.gateway.reserved_file import ReservedFile
from hermit.gateway.state import ensure_token
from prochelpers import PROC_TIMEOUT, run_python_as, shared_dir

SEVEN_DAYS = 7 * 86400.0
NOBODY: dict[str, object] = {"user": 65534, "group": 65534, "extra_groups": []}

PLANTS = """
import json, os, sys, threading
from pathlib import Path
from hermit.gateway.reserved_file import ReservedFile
from hermit.gateway.state import ensure_token, token_path

home = Path(sys.argv[1])
token = ensure_token(home)
store = ReservedFile(home, token)
path, out = store.path, {}

def load():
    box = []
    t = threading.Thread(target=lambda: box.append(store.load(7 * 86400.0)), daemon=True)
    t.start()
    t.join(float(sys.argv[2]))
    return "hung" if t.is_alive() else box[0]

def clear():
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    elif os.path.lexists(path):
        path.unlink()

assert store.save([("192.0.2.7", store.wall() - 60.0)])
out["genuine"] = load()
os.chmod(path, 0o644); out["0644"] = load(); clear()
os.mkfifo(path, 0o600); out["fifo"] = load()
assert store.save([("192.0.2.8", store.wall())]) and path.is_file() and not path.is_symlink(); clear()
path.mkdir(); out["folder"] = load(); clear()
path.symlink_to(token_path(home)); out["symlink"] = load(); clear()
os.link(token_path(home), path); out["hardlink"] = load()
assert store.save([("192.0.2.9", store.wall())]); out["token_kept"] = token_path(home).read_text().strip() == token
clear()
path.write_bytes(b'{"entries": [' + b" " * 10_000_000 + b"]}"); os.chmod(path, 0o600); out["huge"] = load(); clear()
out["other_token"] = (store.save([("192.0.2.10", store.wall())]), ReservedFile(home, "x" * 43).load(7 * 86400.0))
print(json.dumps(out))
"""


def as_user(user: dict[str, object], *args: str) -> subprocess.CompletedProcess[str]:
    return run_python_as(user, "-c", *args, timeout=PROC_TIMEOUT * 2)


def planted(home: Path, user: dict[str, object]) -> dict[str, object]:
    home.mkdir(mode=0o700)
    if user:
        os.chown(home, 65534, 65534)
    done = as_user(user, PLANTS, str(home), str(PROC_TIMEOUT))
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout))


@pytest.fixture
def reachable() -> Iterator[Path]:
    """A folder uid 65534 can enter (tmp_path's parents are root's 0700 ones), removed afterwards."""
    with shared_dir("hermit-t10-reserved-", mode=0o755) as base:
        yield base


def test_what_is_planted_at_reserved_json_restores_nothing_and_hangs_nothing(reachable: Path) -> None:
    for home, user in ((reachable / "root", {}), (reachable / "nobody", NOBODY)):
        out = planted(home, user)
        assert [ip for ip, _ in out.pop("genuine")] == ["192.0.2.7"], (home, out)  # type: ignore[attr-defined]
        assert out.pop("fifo") == [], (home, out)  # before: "hung"
        assert out.pop("token_kept") is True
        assert out.pop("other_token") == [True, []], out
        assert out == {"0644": [], "folder": [], "symlink": [], "hardlink": [], "huge": []}, (home, out)


def test_another_user_cannot_plant_anything_in_the_gateway_folder(reachable: Path) -> None:
    home = reachable / "home"
    home.mkdir(mode=0o755)  # a state dir others may enter: the gateway folder (0700) alone keeps them out
    token = ensure_token(home)
    store = ReservedFile(home, token)
    assert store.save([("192.0.2.7", store.wall())])
    tries = ("import os, sys; p = sys.argv[1]\n"
             "for make in (lambda: os.symlink('/etc/passwd', p + '.x'), lambda: os.mkfifo(p + '.y'),\n"
             "             lambda: open(p, 'a'), lambda: os.rename(p, p + '.z'), lambda: open(p)):\n"
             "    try:\n        make()\n    except PermissionError:\n        continue\n"
             "    print('got in'); sys.exit(1)\n")
    done = as_user(NOBODY, tries, str(store.path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert [ip for ip, _ in store.load(SEVEN_DAYS)] == ["192.0.2.7"]
    assert token not in store.path.read_text(encoding="utf-8")  # entries carry an HMAC keyed with it, not it
