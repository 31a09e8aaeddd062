"""Reserved places (s21 t15) are bounded and earned only by a sign-in: the real `Unsigned` count, fed connections
from addresses of other networks (documentation ranges: the kernel's sock_diag finds no socket of this machine for
them, so they are counted as the network's, as a LAN or internet client is)."""

from __future__ import annotations

import asyncio

from hermit.gateway.unsigned import (
    PER_SOURCE,
    RESERVED_ADDRESSES,
    RESERVED_TOTAL,
    TOTAL,
    Reserved,
    Unsigned,
    classify,
)


class Conn(asyncio.BaseTransport):
    """One client's end as `Unsigned` sees it: open until closed (or aborted, to make room)."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_addresses_used_here_are_the_networks() -> None:
    """What the other tests rely on: none of their addresses is this machine's (then it would count as a local
    user's)."""
    ips = [*(f"198.51.100.{n}" for n in range(1, 112)), "203.0.113.50", "2001:db8::50", "2001:db8::51"]
    assert [ip for ip in ips if classify((ip, 40000), None, -1)[0] != "network"] == []


def sign_in(unsigned: Unsigned, ip: str, port: int = 40000) -> None:
    assert unsigned.admit((ip, port), Conn())
    unsigned.signed_in((ip, port))


def test_at_most_so_many_addresses_are_kept_the_oldest_sign_in_dropped_first() -> None:
    unsigned = Unsigned(own_uid=-1)
    phones = [f"198.51.100.{n}" for n in range(1, RESERVED_ADDRESSES + 2)]
    for ip in phones[:RESERVED_ADDRESSES]:
        sign_in(unsigned, ip)
    sign_in(unsigned, phones[0])  # signed in again: now the newest
    sign_in(unsigned, phones[-1])  # one more than kept: the one signed in longest ago goes (phones[1])
    assert unsigned.reserved.addresses() == [*phones[2:RESERVED_ADDRESSES], phones[0], phones[-1]]
    assert unsigned.holding() == 0  # signed in: not counted


def test_a_reservation_lasts_its_days_from_the_last_sign_in() -> None:
    clock = Clock()
    unsigned = Unsigned(own_uid=-1, reserved=Reserved(seconds=7 * 86400, clock=clock))
    sign_in(unsigned, "2001:db8::50")
    clock.now += 6 * 86400
    sign_in(unsigned, "2001:db8::50", 40001)
    clock.now += 6 * 86400
    assert "2001:db8::50" in unsigned.reserved  # 6 days after its last sign-in
    clock.now += 2 * 86400
    assert "2001:db8::50" not in unsigned.reserved and unsigned.reserved.addresses() == []


def test_no_place_without_a_sign_in_nor_for_another_address_of_the_64() -> None:
    unsigned = Unsigned(own_uid=-1)
    assert unsigned.admit(("2001:db8::51", 40000), Conn())
    unsigned.release(("2001:db8::51", 40000))  # a wrong token, a page load, a socket that never signed in: gone
    unsigned.signed_in(("2001:db8::52", 40000))  # a sign-in the count never admitted (not a connection of it)
    sign_in(unsigned, "2001:db8::50")
    assert unsigned.reserved.addresses() == ["2001:db8::50"]  # the exact address, not its /64
    assert unsigned.admit(("127.0.0.1", 40000), Conn())
    unsigned.signed_in(("127.0.0.1", 40000))  # this machine's own programs have their own pools
    assert unsigned.reserved.addresses() == ["2001:db8::50"]


def test_strangers_neither_take_nor_evict_the_reserved_places() -> None:
    unsigned = Unsigned(own_uid=-1)
    sign_in(unsigned, "203.0.113.50")
    phone = [Conn() for _ in range(PER_SOURCE)]
    for n, c in enumerate(phone):
        assert unsigned.admit(("203.0.113.50", 41000 + n), c)
    strangers = [Conn() for _ in range(TOTAL + 64)]  # the network's 256 from 8 addresses, then 64 from others
    admitted = [unsigned.admit((f"198.51.100.{n // PER_SOURCE + 101}", 42000 + n), c) for n, c in enumerate(strangers)]
    assert all(admitted[:TOTAL]) and not any(c.closed for c in phone)
    assert unsigned.holding() == TOTAL + PER_SOURCE  # the pool's 256 and the phone's own 32 (RESERVED_TOTAL 64)
    assert PER_SOURCE <= RESERVED_TOTAL
    # the phone over its own 32: counted in the network's pool as anyone (its network holds none there: a fair share)
    assert unsigned.admit(("203.0.113.50", 43000), Conn())
    assert unsigned.holding() == TOTAL + PER_SOURCE and not any(c.closed for c in phone)  # a stranger's place
