"""`hermit channels list` with no account told the user to add one under channels.<platform>.accounts.<id> in
hermit.yaml by hand — where the token would then sit unchecked, or in plaintext. It now gives each platform's
`hermit setup` command (secrets on stdin, the token checked before saving). And `hermit doctor` said "no chat channel
accounts configured" twice (its "channels" and "channel errors" checks): the two are one check now, which says it once.

Real `hermit` processes on a real state dir."""

from __future__ import annotations

import json
from pathlib import Path

import test_setup as setup_cli  # its hermit (a module attribute: its tests are not collected here)


def test_channels_list_without_accounts_gives_the_setup_command_of_each_platform(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert setup_cli.hermit(home, "init").returncode == 0
    r = setup_cli.hermit(home, "channels", "list")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("no chat channel accounts configured; `hermit setup` adds one"), r.stdout
    assert "hermit.yaml" not in r.stdout
    for line in ("    hermit setup --channel telegram --token-stdin\n",
                 "    hermit setup --channel discord --token-stdin\n",
                 "    hermit setup --channel slack --token-stdin --secret-stdin app_token\n",
                 "    hermit setup --channel whatsapp --phone-number-id ID --token-stdin --secret-stdin app_secret "
                 "--secret-stdin verify_token\n"):
        assert line in r.stdout, r.stdout


def test_the_doctor_says_once_that_no_channel_is_configured(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert setup_cli.hermit(home, "init").returncode == 0
    doc = setup_cli.hermit(home, "doctor", "--json")
    checks = json.loads(doc.stdout)
    said = [c for c in checks if "no chat channel accounts configured" in c["detail"]]
    assert [c["name"] for c in said] == ["channels"], said
    assert said[0]["status"] == "ok" and "hermit setup --channel telegram --token-stdin" in said[0]["detail"]
    assert not [c for c in checks if c["name"] == "channel errors"]
