"""`hermit gateway install|uninstall` as root with HOME (or XDG_CONFIG_HOME) in another user's home, as in a
shell opened with `su` without `-` (audit 2C F3): the user had made ~/.config/systemd/user a link to a root-only
folder, and root wrote hermit-gateway.service there. HOME and XDG_CONFIG_HOME are trusted only when they name a
folder of the current user's; below it a link is followed only when the user (or root) made it, and every
folder on the way is judged by the state dir's rule. The other user is uid 65534 (files chowned to it)."""

from __future__ import annotations

import os
from pathlib import Path

from ciguard import need
from test_service import env_for, hermit

THEIRS = 65534


def their_home(tmp_path: Path) -> tuple[Path, Path]:
    """Their home, whose .config/systemd/user is their link to a root-only folder; returns (home, that folder)."""
    rootonly = tmp_path / "rootonly"
    rootonly.mkdir(mode=0o700)
    user = tmp_path / "their-home"
    (user / ".config" / "systemd").mkdir(parents=True)
    for d in (user, user / ".config", user / ".config" / "systemd"):
        os.chown(d, THEIRS, THEIRS)
    link = user / ".config" / "systemd" / "user"
    link.symlink_to(rootonly)
    os.lchown(link, THEIRS, THEIRS)
    return user, rootonly


def test_install_and_uninstall_refuse_a_home_or_xdg_config_home_of_another_user(tmp_path: Path) -> None:
    need(os.geteuid() == 0, "root (to hand a folder to another uid)")
    user, rootonly = their_home(tmp_path)
    home = tmp_path / "state"
    assert hermit(env_for(home, user), "init").returncode == 0

    r = hermit(env_for(home, user), "gateway", "install", "--no-start")
    assert r.returncode == 1, r.stdout
    assert f"error: HOME={user} belongs to another user (uid {THEIRS})" in r.stderr, r.stderr
    assert "su -" in r.stderr and "Traceback" not in r.stderr
    assert list(rootonly.iterdir()) == []

    own = tmp_path / "own-home"  # their XDG_CONFIG_HOME with a home of one's own: the same
    r = hermit(env_for(home, own, XDG_CONFIG_HOME=str(user / ".config")), "gateway", "install", "--no-start")
    assert r.returncode == 1 and f"XDG_CONFIG_HOME={user / '.config'} belongs to another user" in r.stderr, r.stderr
    assert list(rootonly.iterdir()) == []

    unit = rootonly / "hermit-gateway.service"  # a file of root's where their link points: never removed
    unit.write_text("[Service]\n")
    r = hermit(env_for(home, user), "gateway", "uninstall")
    assert r.returncode == 1 and "belongs to another user" in r.stderr and unit.exists(), r.stderr


def test_in_ones_own_home_only_ones_own_links_and_folders_are_used(tmp_path: Path) -> None:
    from hermit.cli.service import unit_name_for

    need(os.geteuid() == 0, "root (to hand a folder to another uid)")
    home = tmp_path / "state"
    own = tmp_path / "own-home"
    (own / ".config").mkdir(parents=True)
    assert hermit(env_for(home, own), "init").returncode == 0
    dotfiles = tmp_path / "dotfiles" / "systemd"  # one's units kept in a repository: a link of one's own
    dotfiles.mkdir(parents=True)
    link = own / ".config" / "systemd"
    link.symlink_to(dotfiles)

    os.lchown(link, THEIRS, THEIRS)  # the same link, made by another user: not followed
    r = hermit(env_for(home, own), "gateway", "install", "--no-start")
    assert r.returncode == 1 and f"{link} is a symlink another user made (uid {THEIRS})" in r.stderr, r.stderr
    assert list(dotfiles.iterdir()) == []

    os.lchown(link, 0, 0)
    r = hermit(env_for(home, own), "gateway", "install", "--no-start")
    assert r.returncode == 0, r.stderr
    unit = dotfiles / "user" / f"{unit_name_for(home, own)}.service"
    assert f"wrote {unit}" in r.stdout and unit.is_file()
    assert oct(os.stat(dotfiles / "user").st_mode & 0o777) == "0o700"

    os.chown(dotfiles / "user", THEIRS, THEIRS)  # a folder of theirs on the way
    r = hermit(env_for(home, own), "gateway", "install", "--no-start")
    assert r.returncode == 1 and f"{dotfiles / 'user'} belongs to another user" in r.stderr, r.stderr
    r = hermit(env_for(home, own), "gateway", "uninstall")
    assert r.returncode == 1 and unit.exists()

    os.chown(dotfiles / "user", 0, 0)
    os.chmod(dotfiles / "user", 0o777)  # one's own, but every user may write it
    r = hermit(env_for(home, own), "gateway", "install", "--no-start")
    assert r.returncode == 1 and "can be written by every user (mode 777)" in r.stderr, r.stderr
