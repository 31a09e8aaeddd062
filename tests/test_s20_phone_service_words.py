"""The phone sign-in's hint for a gateway run as a service that listens on loopback only says to install it again with
`hermit service install --host 0.0.0.0` (the group a user types for the service; `hermit gateway install` is the same
command). The real phone_address (gateway/phone.py) with a HowRun as under a systemd user unit."""

from __future__ import annotations

import pytest

from hermit.errors import HermitError
from hermit.gateway.phone import phone_address
from hermit.gateway.state import HowRun


def test_the_phone_hint_for_a_service_on_loopback_says_hermit_service_install() -> None:
    with pytest.raises(HermitError) as e:
        phone_address("127.0.0.1", 18789, [], HowRun(4242, systemd="hermit-gateway.service"))
    assert "restart the gateway: `systemctl --user restart hermit-gateway.service` (a service installed with --host " \
           "keeps that address: install it again with `hermit service install --host 0.0.0.0`, then restart it)" \
        in e.value.hint, e.value.hint
