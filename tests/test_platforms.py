"""Each chat platform is declared once per side: its settings class on the config side (one ChannelsConfig
field, its sender-id rules), its PLATFORM next to its adapter (one ADAPTERS line). They must agree."""

from __future__ import annotations

from hermit.channels.platforms import ADAPTERS, names, platform
from hermit.config.allowlist import SENDER_IDS
from hermit.config.channels import platforms


def test_the_config_the_allowlist_and_the_adapters_name_the_same_platforms() -> None:
    assert list(names()) == list(platforms()) == list(ADAPTERS) == list(SENDER_IDS)


def test_every_platform_declares_what_the_rest_of_hermit_asks_of_it() -> None:
    for name, settings in platforms().items():
        declared = platform(name)
        assert declared.name == name == settings.platform
        assert declared.capabilities.max_chars and callable(declared.create)
        assert settings.title and settings.id_name and settings.owner_hint and settings.secret_fields
        for field in settings().secrets_wanted():
            assert field in settings.model_fields and f"{field}_env" in settings.model_fields
