"""Two WhatsApp accounts naming one phone number are refused when the config loads (found by the s18 platforms
guard: both adapters answered the same webhooks and shared one seen-messages file, and nothing said so)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermit.config import StatePaths, load_config
from hermit.errors import ConfigError

TWO = """channels:
  whatsapp:
    accounts:
      personal: {{phone_number_id: "1055501"}}
      familybot: {{phone_number_id: "{second}"{extra}}}
"""


def _load(tmp_path: Path, second: str, extra: str = "") -> object:
    (tmp_path / "hermit.yaml").write_text(TWO.format(second=second, extra=extra), encoding="utf-8")
    return load_config(StatePaths(tmp_path))


def test_two_accounts_with_one_phone_number_id_are_refused_naming_both(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, "1055501")
    msg = str(e.value)
    assert "'personal'" in msg and "'familybot'" in msg and "1055501" in msg, msg
    assert "hermit.yaml" in msg and "its own number's phone_number_id" in msg, msg


def test_two_numbers_or_a_disabled_second_account_load(tmp_path: Path) -> None:
    loaded = _load(tmp_path, "1055502")
    accounts = loaded.config.channels.whatsapp.accounts  # type: ignore[attr-defined]
    assert [a.phone_number_id for a in accounts.values()] == ["1055501", "1055502"]
    loaded = _load(tmp_path, "1055501", ", enabled: false")
    assert not loaded.config.channels.whatsapp.accounts["familybot"].enabled  # type: ignore[attr-defined]
