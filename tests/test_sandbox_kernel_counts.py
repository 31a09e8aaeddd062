"""What a contact's command may take of what the kernel counts per user or outside every process, through the real
sandbox, with Hermit as this process (root in CI) and, when the tests run as root, as uid 65534 (test_sandbox_quotas
runs Hermit that way).
"""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from ciguard import need
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


# memfd_create, memfd_secret, SysV shmget, with the errno of each; then what /dev/shm (POSIX shm_open) may hold.
SHARED = r'''python3 - <<'PY'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print('memfd_create', libc.syscall(319, b'x', 0) >= 0, ctypes.get_errno())
print('memfd_secret', libc.syscall(447, 0) >= 0, ctypes.get_errno())
print('shmget', libc.shmget(0, 1 << 20, 0o1600) >= 0, ctypes.get_errno())
try:
    with open('/dev/shm/fill', 'wb') as f:
        f.write(b'z' * (2 << 20))
    print('dev/shm took 2 MB')
except OSError as e:
    print('dev/shm refused', e.errno)
PY'''
SHARED_CASES = [(None, "machine"), (None, "fallback")] + ([(65534, "fallback")] if 65534 in UIDS else [])


@pytest.mark.parametrize(("uid", "bound"), SHARED_CASES)
def test_memory_outside_every_process_is_refused_without_a_cgroup(tmp_path: Path, uid: int | None, bound: str) -> None:
    """memfd and SysV shared memory pages are in no process's address space: without a cgroup a room held 6 GB of
    memfds under a 256 MB RLIMIT_AS. Without a cgroup the seccomp filter refuses them (EPERM); with one (which
    charges their pages) they stay allowed. /dev/shm is a 1 MB tmpfs either way."""
    need(platform.machine() == "x86_64", "an x86_64 machine (the probe calls x86_64 syscall numbers)")
    text = as_owner(tmp_path, uid, SHARED, bound=bound)
    if bound == "fallback":
        assert "memfd_create False 1" in text and "memfd_secret False 1" in text, text
        assert "shmget False 1" in text, text
    else:
        assert "memfd_create True" in text and "shmget True" in text, text
    assert "dev/shm refused 28" in text, text  # ENOSPC


def test_the_filter_refuses_shared_memory_only_without_a_cgroup_on_every_architecture() -> None:
    from hermit.tools.seccomp import FILTERS, RET_ALLOW, RET_EPERM, X32_BIT, assemble, table
    from test_sandbox_limits import _run_bpf

    refused = {"x86_64": {0xC000003E: (29, 319, 447, X32_BIT | 29, X32_BIT | 319, X32_BIT | 447),
                          0x40000003: (117, 356, 395, 447)},
               "aarch64": {0xC00000B7: (194, 279, 447), 0x40000028: (307, 385, 447)}}
    for machine, arches in refused.items():
        strict, machine_default = assemble(table(machine, shared_memory=False)), assemble(FILTERS[machine])
        for arch, numbers in arches.items():
            assert all(_run_bpf(strict, arch, nr) == RET_EPERM for nr in numbers), (machine, hex(arch))
            assert all(_run_bpf(machine_default, arch, nr) == RET_ALLOW for nr in numbers), (machine, hex(arch))
            for kept in (0, 1, 3, 438):  # read/exit/…, and pidfd_getfd still refused
                assert _run_bpf(strict, arch, kept) == _run_bpf(machine_default, arch, kept), (machine, kept)


# What the sandbox's own root tmpfs and /dev take: 8 MB into each (2 MB past /dev/shm's bound), and /dev/null.
BASE_FILL = r'''for d in / /dev; do
  if head -c 8000000 /dev/zero > "$d/fill" 2>/dev/null; then echo "$d: wrote 8 MB"; else echo "$d: refused"; fi
done
echo x > /dev/null && echo devnull-ok'''


@pytest.mark.parametrize("bound", ["machine", "fallback"])
@pytest.mark.parametrize("uid", UIDS)
def test_the_sandboxs_own_root_and_dev_hold_nothing(tmp_path: Path, uid: int | None, bound: str) -> None:
    """bubblewrap's root tmpfs and /dev are sized by nothing: without a cgroup a room wrote 60 × 60 MB into each
    (7 GB of host RAM, with RLIMIT_AS at 256 MB; audit R). Both are read-only once every mount is in place."""
    text = as_owner(tmp_path, uid, BASE_FILL, bound=bound)
    assert "/: refused" in text and "/dev: refused" in text, text
    assert "devnull-ok" in text, text
