"""What a contact's command may take of what the kernel counts per user or outside every process, through the real
sandbox, with Hermit as this process (root in CI) and, when the tests run as root, as uid 65534 (test_sandbox_quotas
runs Hermit that way).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from test_sandbox_quotas import UIDS, as_owner

# As many descriptors in flight (SCM_RIGHTS on unix datagram sockets) as the room can hold, 250 per message.
IN_FLIGHT = r'''python3 - <<'PY'
import array, os, resource, socket
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
fds = array.array('i', [os.open('/dev/null', os.O_RDONLY)] * 250)
n, pairs, why = 0, [], 'none'
try:
    while True:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        a.setblocking(False); pairs.append((a, b))
        sent = 0
        while True:
            try:
                a.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)]); n += 250; sent += 1
            except BlockingIOError:
                break
        if not sent:
            break
except OSError as e:
    why = e.strerror
print('in flight', n, 'stopped by', why, 'nofile', soft, hard)
PY'''


@pytest.mark.parametrize("uid", UIDS)
def test_a_command_cannot_take_the_owners_descriptors_in_flight(tmp_path: Path, uid: int | None) -> None:
    """A room held 20,250 descriptors in flight on unix sockets; the kernel counts those per user and refuses a
    sender once the user's count passes the sender's RLIMIT_NOFILE, so the owner's programs (1,024) got
    ETOOMANYREFS from sendmsg until the command ended. Now a room's processes may hold 256 descriptors each."""
    text = as_owner(tmp_path, uid, IN_FLIGHT)
    held = int(text.split("in flight ")[1].split()[0])
    assert "nofile 256 256" in text, text
    assert held <= 256 + 250, text
