"""The seccomp filter a room-mode sandbox runs under: the kernel keyring, other processes' memory, inotify refused.

bubblewrap separates namespaces but not the kernel keyring: every process of a uid reaches that uid's
user keyring (`_uid.65534`), so without this a sandboxed command could leave keys there that another
room's later command reads, and read what the host put there. This filter makes `add_key`,
`request_key` and `keyctl` fail with EPERM, as Docker's default profile does (`/proc/keys` and
`/proc/key-users` are hidden by the sandbox's mounts, os_sandbox.room_mode_args).

It also refuses `ptrace`, `process_vm_readv`, `process_vm_writev` and `pidfd_getfd`: the command runs as
the same uid as the sandbox's wrapper shell, which holds the socket the room goes back out on, so it cannot
attach to the wrapper or copy that socket out of it. Debuggers (gdb, strace) do not work in a room.
`pidfd_open` stays allowed (alone it only signals, which `kill` does anyway). This does not keep the command
out of the wrapper: it can open /proc/<pid>/mem of the wrapper and of bubblewrap's pid 1 read-write (same uid,
same namespace, both dumpable) and change their code and data. So it can make the wrapper hand back a tar of
its own (what comes back is trusted in no case, room_sandbox.unpack), skip the wrapper's `kill -KILL -1`, or
clear pid 1's parent-death signal and keep it from exiting: Hermit itself kills pid 1, and with it the whole
pid namespace, and the command's cgroup when the command ends (room_end.py).

Where no cgroup bounds the command, it also refuses `memfd_create`, `memfd_secret` and SysV `shmget` (i386's
`ipc` too), EPERM: their pages are in no process's address space, so RLIMIT_AS does not see them (SHARED_MEMORY).
POSIX shared memory goes through /dev/shm, a 1 MB tmpfs in the sandbox (os_sandbox.room_mode_args).

And it refuses `inotify_init`, `inotify_init1` and `fanotify_init`: the kernel counts inotify instances (128)
and fanotify groups per user, up through the user namespaces, so a command of Hermit's own uid (Hermit run as an
ordinary user) that holds them leaves every other program of the owner without (`inotify_init: Too many open
files` for editors, file managers, `tail -f`); as root it would take them from the other rooms. Programs that
watch files fall back to polling (`tail -f`) or say they cannot watch.

It is a classic BPF program, assembled here (no library, no system package), and handed to bubblewrap
on a pipe (`--seccomp FD`), which installs it with no_new_privs before the command runs. It checks the
architecture first: the host's native one and its 32-bit compat one (x86_64 + i386 + x32, or
aarch64 + arm) have their keyring syscall numbers refused; any other architecture is killed, so a
compat entry point cannot go around it. On a machine whose architecture is not listed there is no
filter (`filter_program()` is None) and the sandbox is not used (fail closed, os_sandbox.detect).
"""

from __future__ import annotations

import os
import platform
import struct

# Classic BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h).
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K
RET_ALLOW = 0x7FFF0000
RET_KILL_PROCESS = 0x80000000
RET_EPERM = 0x00050000 | 1  # SECCOMP_RET_ERRNO | EPERM
_NR, _ARCH = 0, 4  # offsets of nr and arch in struct seccomp_data

X32_BIT = 0x40000000
# audit arch -> the [first, last] syscall numbers refused: ptrace; add_key, request_key, keyctl (consecutive);
# process_vm_readv, process_vm_writev (consecutive); pidfd_getfd (438 on every architecture); then inotify_init
# (aarch64 has none), inotify_init1, fanotify_init. x32 has its own numbers for ptrace (521) and process_vm_*
# (539, 540); the 64-bit ones with the x32 bit are refused too.
FILTERS: dict[str, dict[int, tuple[tuple[int, int], ...]]] = {
    "x86_64": {0xC000003E: ((101, 101), (248, 250), (310, 311), (438, 438),  # x86_64
                            (253, 253), (294, 294), (300, 300)),
               0x40000003: ((26, 26), (286, 288), (347, 348), (438, 438),  # i386
                            (291, 291), (332, 332), (338, 338))},
    "aarch64": {0xC00000B7: ((117, 117), (217, 219), (270, 271), (438, 438),  # aarch64
                             (26, 26), (262, 262)),
                0x40000028: ((26, 26), (309, 311), (376, 377), (438, 438),  # arm (compat)
                             (316, 316), (360, 360), (367, 367))},
}
FILTERS["x86_64"][0xC000003E] += tuple((X32_BIT | lo, X32_BIT | hi) for lo, hi in (
    (101, 101), (248, 250), (310, 311), (438, 438), (521, 521), (539, 540),
    (253, 253), (294, 294), (300, 300)))  # x32: same arch, nr | X32_BIT
# Without a cgroup (Hermit as an ordinary user without delegation) nothing bounds memory that is in no process's
# address space: memfd_create and memfd_secret files and SysV shared memory segments (a room held 6 GB of memfds
# under a 256 MB RLIMIT_AS). Then these are refused too: memfd_create, memfd_secret (447 everywhere; unassigned on
# arm, refused all the same), shmget (and i386's `ipc` multiplexer, 117), from the kernel's syscall tables. With a
# cgroup their pages are charged to it and they stay allowed.
SHARED_MEMORY: dict[str, dict[int, tuple[tuple[int, int], ...]]] = {
    "x86_64": {0xC000003E: ((29, 29), (319, 319), (447, 447),  # x86_64
                            (X32_BIT | 29, X32_BIT | 29), (X32_BIT | 319, X32_BIT | 319), (X32_BIT | 447, X32_BIT | 447)),
               0x40000003: ((117, 117), (356, 356), (395, 395), (447, 447))},  # i386
    "aarch64": {0xC00000B7: ((194, 194), (279, 279), (447, 447)),  # aarch64
                0x40000028: ((307, 307), (385, 385), (447, 447))},  # arm (compat)
}
_MACHINES = {"amd64": "x86_64", "x86_64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> tuple[int, int, int, int]:
    return code, jt, jf, k


def assemble(table: dict[int, tuple[tuple[int, int], ...]]) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions: load the arch, jump to its block (unknown: kill);
    in a block, load the syscall number and refuse it when it falls in one of the (sorted) ranges."""
    arches = list(table)
    blocks: list[list[tuple[int, int, int, int]]] = []
    for arch in arches:
        ranges = sorted(table[arch])
        n = len(ranges)
        block = [_insn(_LD_W_ABS, _NR)]
        for i, (lo, hi) in enumerate(ranges):
            left = 2 * (n - i)  # instructions after this one before ALLOW (this range's second test included)
            block.append(_insn(_JGE_K, lo, 0, left - 1))  # nr < lo: allowed (earlier ranges lie below)
            block.append(_insn(_JGE_K, hi + 1, 0, left - 1))  # nr <= hi: refused (jf lands on EPERM)
        block += [_insn(_RET_K, RET_ALLOW), _insn(_RET_K, RET_EPERM)]
        blocks.append(block)
    head = [_insn(_LD_W_ABS, _ARCH)]
    dispatch_len = len(arches) + 1  # one jeq per arch, then kill
    program = head
    offset = dispatch_len - 1  # from after the first jeq to the first block
    for i, arch in enumerate(arches):
        program.append(_insn(_JEQ_K, arch, offset - i + sum(len(b) for b in blocks[:i]), 0))
    program.append(_insn(_RET_K, RET_KILL_PROCESS))
    for block in blocks:
        program += block
    return program


def encode(program: list[tuple[int, int, int, int]]) -> bytes:
    """struct sock_filter[] in the machine's byte order, as bubblewrap's --seccomp reads it."""
    return b"".join(struct.pack("=HBBI", code, jt, jf, k) for code, jt, jf, k in program)


def host_arch(machine: str | None = None) -> str | None:
    return _MACHINES.get((machine or platform.machine()).lower())


def table(arch: str, shared_memory: bool = True) -> dict[int, tuple[tuple[int, int], ...]]:
    """The ranges refused on `arch`'s entry points; `shared_memory` False: SHARED_MEMORY's too (no cgroup)."""
    if shared_memory:
        return FILTERS[arch]
    return {nr: FILTERS[arch][nr] + SHARED_MEMORY[arch][nr] for nr in FILTERS[arch]}


def filter_program(machine: str | None = None, *, shared_memory: bool = True) -> bytes | None:
    """The encoded filter for this machine, or None when its architecture is not supported; `shared_memory`
    False (no cgroup bounds the command) refuses memfds and SysV shared memory too."""
    arch = host_arch(machine)
    return encode(assemble(table(arch, shared_memory))) if arch is not None else None


def filter_fd(program: bytes) -> int:
    """A pipe's read end holding `program`, for `--seccomp FD` (inherited by the child: pass_fds). The
    caller closes it after starting the sandbox; a pipe is read once, so every sandbox gets its own."""
    r, w = os.pipe()
    try:
        os.write(w, program)  # a few hundred bytes: far below a pipe's buffer
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
    return r
