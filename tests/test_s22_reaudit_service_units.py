"""s22 re-audit of install's content stamp (cli/service_units.py) — held, shown here.

The stamp is a plain SHA-256 of the unit's text, not a secret: anyone who can write a unit file can write a matching
one. It only tells Hermit's own file from one a person wrote; it never lets anything be written elsewhere:
- a unit file that is a link to another user's file (the owner's dotfiles pointing at a shared one), unstamped:
  install stops, the link and the file it points to are left as they are;
- the same with a forged stamp: install takes it for its own and replaces the link itself with its own file — the
  other user's file is not written through the link, and the unit systemd reads is Hermit's, not theirs.
Real `hermit` processes, a fake `systemctl` (test_service_homes.py), as root."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from hermit.cli.service_units import stamped
from test_s22_devices_service_units import installed
from test_service import hermit
from test_service_homes import calls, started


def their_file(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "theirs"
    folder.mkdir()
    path = folder / "shared.socket"
    path.write_text(text, encoding="utf-8")
    for p in (folder, path):
        os.chown(p, 65534, 65534)
    return path


def test_a_unit_file_linked_to_another_users_file_is_never_written_through(tmp_path: Path) -> None:
    env, service, socket_unit = installed(tmp_path)
    theirs = their_file(tmp_path, "[Socket]\nListenStream=0.0.0.0:40571\n\n[Install]\nWantedBy=sockets.target\n")
    original = theirs.read_bytes()
    socket_unit.unlink()
    socket_unit.symlink_to(theirs)
    r = hermit(env, "service", "install", "--port", "40571")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"{socket_unit} is not the file `hermit service install` wrote" in r.stderr, r.stderr
    assert socket_unit.is_symlink() and theirs.read_bytes() == original and calls(tmp_path) == []

    forged = stamped("[Socket]\nListenStream=0.0.0.0:40571\n\n[Install]\nWantedBy=sockets.target\n")
    theirs.write_text(forged, encoding="utf-8")
    before = theirs.read_bytes()
    r = hermit(env, "service", "install", "--port", "40571")
    assert r.returncode == 0, r.stderr
    assert theirs.read_bytes() == before and theirs.stat().st_uid == 65534  # nothing written through the link
    st = os.lstat(socket_unit)
    assert stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o644
    text = socket_unit.read_text(encoding="utf-8")
    assert "ListenStream=127.0.0.1:40571" in text and "0.0.0.0" not in text, text
    assert calls(tmp_path) == started(service.stem)
