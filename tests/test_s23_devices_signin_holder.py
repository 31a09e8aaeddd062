"""Session 23, t5: a device's sign-in looks again whether the socket unit still holds the gateway's port.

s22 (t3) turned devices off when a running gateway's socket unit stopped holding its port (`systemctl --user stop
<name>.socket`), by a look once a second: a device signing in within that second of the stop was still let in,
though the port would go free the moment the gateway stopped. Now each device's sign-in looks itself, and turns
devices off at once; the once-a-second watch then says nothing twice.

A real `hermit gateway run` handed its listening sockets by this test process acting as the service manager
(LISTEN_FDS, test_s21_socket_activation.py); a real device signing in over the web app's WebSocket.
"""

from __future__ import annotations

from pathlib import Path

from gatewayhelpers import free_port, write_config
from hermit.testing import FakeProvider
from test_s20_devices_protocol import Key, device_conn, sign_in
from test_s21_socket_activation import ActivatedGateway, listening
from test_s22_devices_holder import lock_changes


def test_a_device_signing_in_right_after_the_socket_unit_stopped_is_refused(tmp_path: Path) -> None:
    port = free_port()
    socks = listening(port)
    home = tmp_path / "home"
    with FakeProvider(["hi"] * 4) as fake:
        write_config(home, fake.openai_base_url)  # remember_devices: auto
        gw = ActivatedGateway(home, socks)
        try:
            gw.wait_ready()
            key = Key()
            did = sign_in(gw, key)["device"]["id"]
            with device_conn(gw, key, did) as (_, reply):
                assert reply["ok"], reply  # on while the unit holds the port
            for s in socks:  # the socket unit stopped: the manager's copies closed…
                s.close()
            with device_conn(gw, key, did) as (_, reply):  # …and a device signs in at once, before the watch looks
                assert not reply["ok"] and reply["error"]["code"] == "devices_off", reply
            info = lock_changes(home, gw.proc.pid, held=False)  # published, as when the watch finds it
            assert info["devices"]["on"] is False and "stopped holding" in info["devices"]["why"], info
        finally:
            gw.stop()
            for s in socks:
                s.close()
    log = (home / "logs" / "gateway.log").read_text(encoding="utf-8")
    assert log.count("no longer holds its listening sockets") == 1, log[-2000:]
    assert gw.proc.returncode == 0, gw.stderr()[-2000:]
