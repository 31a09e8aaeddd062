"""Signing a phone in: the address a phone can reach the web app at, and the sign-in link as a QR code.

`hermit dashboard --phone` and the web app's "Sign in a phone" (the owner-only `tickets.create`) both make a
one-time ticket (tickets.py) and show `<address>/#ticket=…` as a QR code. The address is one a phone can
reach, in this order: the first origin in `gateway.allowed_origins` that is not this machine's loopback (a
TLS proxy's `https://hermit.example`, a Tailscale name: the Host and Origin checks pass it because it is
listed), else the address the gateway listens on when that is not loopback (for 0.0.0.0 or `::`, the first
of this machine's network addresses, which those checks pass too). A gateway that listens on loopback only
and lists no other origin cannot be reached from a phone: no ticket is made and the owner is told what to
change. A link over plain http on the network comes with a warning: the ticket is one-time, but the page it
opens then holds the gateway token over an unencrypted connection.

The QR code is drawn by segno (pure Python, no dependencies): as Unicode half blocks for a terminal, as an
SVG data: URI for the page (the web app's CSP allows `img-src data:`, no script runs in an SVG shown by
`<img>`). It encodes the link and nothing else: never the token.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from hermit.errors import HermitError
from hermit.gateway.state import HowRun, read_lock_info
from hermit.gateway.tickets import Tickets
from hermit.loopback import url_host

if TYPE_CHECKING:
    import segno

log = logging.getLogger("hermit.gateway.phone")

QR_ERROR = "m"  # 15% of the symbol may be unreadable (a glare on a screen) and the code still scans
QR_BORDER = 4  # the quiet zone the standard asks for, in modules: scanners need it to find the code
LOOPBACK_ONLY = ("your gateway listens on {host} only, and gateway.allowed_origins lists no other address: a phone "
                 "cannot reach it")
PLAIN_HTTP = ("this link is plain http across your network: the ticket in it works once, but the page it opens then "
              "holds the gateway token over an unencrypted connection; prefer https (a TLS proxy such as Tailscale "
              "Serve or Caddy, its origin listed in gateway.allowed_origins)")


@dataclass(frozen=True)
class PhoneAddress:
    """Where a phone opens the web app (`base`, ending in "/"), and a warning to show with it ("" for none)."""

    base: str
    warning: str


def _loopback_name(host: str) -> bool:
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def lan_addresses(ipv6: bool = False) -> list[str]:
    """This machine's non-loopback, non-link-local addresses, found without sending anything: the host name's
    addresses and the source address a UDP socket connected to a private address would use (connect() on UDP
    only picks a route)."""
    found: list[str] = []
    families = [(socket.AF_INET, "10.254.254.254")] + ([(socket.AF_INET6, "fd00::1")] if ipv6 else [])
    for family, probe in families:
        with contextlib.suppress(OSError, UnicodeError):
            found += [str(a[4][0]) for a in socket.getaddrinfo(socket.gethostname(), None, family)]
        with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((probe, 9))
            found.append(str(s.getsockname()[0]))
    out: list[str] = []
    for a in found:
        ip = ipaddress.ip_address(a.split("%", 1)[0])
        if not (ip.is_loopback or ip.is_link_local or ip.is_unspecified) and str(ip) not in out:
            out.append(str(ip))
    return out


def _http_base(address: str, port: int) -> str:
    return f"http://{url_host(address)}:{port}/"


def _listened_address(host: str) -> str | None:
    """The address a phone reaches a gateway listening on `host` at: `host` itself when it is an address (or a
    name resolving to one) other than loopback, this machine's first network address for 0.0.0.0 or `::`."""
    if host in ("0.0.0.0", "::", ""):
        found = lan_addresses(host == "::")
        return found[0] if found else None
    if _loopback_name(host):
        return None
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    # A name: what the gateway bound (bind_socket resolves it the same way). The Host check passes the
    # machine's addresses, not a name that allowed_origins does not list, so the link carries the address.
    with contextlib.suppress(OSError, UnicodeError):
        for a in socket.getaddrinfo(host, None, socket.AF_INET6 if ":" in host else socket.AF_INET):
            address = str(a[4][0])
            if not _loopback_name(address):
                return address
    return None


def phone_address(host: str, port: int, allowed_origins: Sequence[str], how: HowRun | None = None
                  ) -> PhoneAddress:
    """Where a phone can open the web app of the gateway listening on `host`:`port` with `allowed_origins`
    (in their configured order); HermitError saying what to change when it listens on loopback only, and how to
    restart that gateway (`how` it runs: under a service manager `hermit gateway run --host` would be a second)."""
    for origin in allowed_origins:
        parts = urlsplit(origin)
        if parts.hostname and not _loopback_name(parts.hostname):
            return PhoneAddress(origin.rstrip("/") + "/", PLAIN_HTTP if parts.scheme == "http" else "")
    address = _listened_address(host)
    if address is not None:
        return PhoneAddress(_http_base(address, port), PLAIN_HTTP)
    lan = lan_addresses()
    example = lan[0] if lan else "this machine's network address"
    how = how or HowRun(None)  # not known: by hand, its pid unnamed
    restart = (f"in hermit.yaml and restart the gateway: {how.restart()} (a service installed with --host keeps "
               "that address: install it again with `hermit service install --host 0.0.0.0`, then restart it)") if how.managed else \
        f"and restart the gateway: {how.restart(f'hermit gateway run --host {example}')}"
    raise HermitError(LOOPBACK_ONLY.format(host=host or "127.0.0.1"),
                      f"set gateway.host to this machine's network address ({', '.join(lan) or 'see `ip addr`'}) "
                      f"or 0.0.0.0 {restart}; or put it behind a TLS proxy (Tailscale Serve, Caddy) and list the "
                      "proxy's origin, e.g. https://hermit.example, in gateway.allowed_origins")


def qr_code(link: str) -> segno.QRCode:
    """The QR code of `link` (a regular QR code, never a Micro one: phone cameras read only those)."""
    import segno

    return segno.make(link, error=QR_ERROR, micro=False)


def qr_text(link: str) -> str:
    """The QR code of `link` in Unicode half blocks, two module rows a line, quiet zone included. A full block
    is two light modules and a space two dark ones: drawn light on dark, as a terminal's default colours are
    (the terminal printer adds those colours when it can, for a light theme)."""
    import io

    out = io.StringIO()
    qr_code(link).terminal(out=out, border=QR_BORDER, compact=True)
    return out.getvalue().rstrip("\n")


def qr_svg_uri(link: str) -> str:
    """The QR code of `link` as an SVG `data:` URI for an `<img>`: dark modules on white, 4 px a module."""
    uri: str = qr_code(link).svg_data_uri(scale=4, border=QR_BORDER, dark="#000", light="#fff")
    return uri


def phone_ticket(home: Path, gateway_pid: int, base: str, lock_info: Mapping[str, Any]) -> str:
    """`hermit dashboard --phone`'s one-time ticket for a link at `base`: device-only (tickets.py) when `base` is https
    and the running gateway keeps devices (its decision in `lock_info`, device_policy.py), as the web app's phone links
    are (device_sockets.sign_in_method): the phone's page there keeps a key of its own, and never the token."""
    from hermit.gateway.device_policy import DevicePolicy
    from hermit.gateway.tickets import issue_ticket

    ticket = issue_ticket(home, gateway_pid)
    policy = DevicePolicy.from_published(lock_info.get("devices"))
    if base.startswith("https://") and policy is not None and policy.on:
        Tickets(home, pid=gateway_pid).restrict(ticket)
    return ticket


def running_address(home: Path, pid: int, server: tuple[str, int] | None) -> tuple[str, int] | None:
    """(host it listens on, port) of the gateway running as `pid`: what it published in its lock file, else
    the local end of the asking connection (`server`: a gateway run without the lock, as tests embed it)."""
    info = read_lock_info(home)
    if info and info.get("pid") == pid and isinstance(info.get("port"), int):
        return str(info.get("host", "")), int(info["port"])
    return (str(server[0]), int(server[1])) if server else None


def phone_sign_in(tickets: Tickets, allowed_origins: Sequence[str], server: tuple[str, int] | None) -> dict[str, Any]:
    """`tickets.create`: a new one-time ticket of this gateway's as a link a phone can reach and its QR code
    (`link`, `qr`: an SVG data: URI, `expiresIn` seconds, `warning`); HermitError, and no ticket, when no
    phone can reach the gateway."""
    where = running_address(tickets.home, tickets.pid, server)
    how = HowRun.this_process()
    if where is None:
        raise HermitError("the gateway does not know the address it listens on", f"restart it: {how.restart()}")
    address = phone_address(where[0], where[1], allowed_origins, how)
    link = f"{address.base}#ticket={tickets.issue()}"
    log.info("the web app made a one-time sign-in link for a phone at %s (good for %.0f minutes)", address.base,
             tickets.ttl / 60)  # the owner's log says when one was made, never the ticket
    return {"link": link, "qr": qr_svg_uri(link), "expiresIn": int(tickets.ttl), "warning": address.warning}
