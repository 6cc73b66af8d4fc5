"""Who may reach a listening socket: the one rule for binding beyond this machine.

``interp serve`` and ``interp mcp --http`` both refuse a non-loopback address unless
clients must authenticate; this is that rule and its message, written once.
"""

from __future__ import annotations

import errno
import ipaddress
import os

#: How ``interp serve`` is given keys; other commands name their own flag.
SERVE_KEY_HINT = "pass --api-key KEY (or set INTERP_API_KEY)"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable only from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, *, authenticated: bool, hint: str = SERVE_KEY_HINT) -> None:
    """Refuse to expose an unauthenticated listener beyond this machine (``SystemExit``)."""
    if not authenticated and not is_loopback(host):
        raise SystemExit(f"Refusing to bind {host} without an API key: {hint}, or bind 127.0.0.1.")


def cannot_bind(what: str, host: str, port: int, exc: OSError, port_flag: str = "") -> str:
    """The one line that says why ``what`` cannot listen on ``host:port`` and what to do
    (``port_flag`` names the flag that chooses another port, if any)."""
    if exc.errno == errno.EADDRINUSE:
        hint = "stop what listens there, or choose another port" + (
            f" ({port_flag})" if port_flag else ""
        )
    elif exc.errno == errno.EACCES:
        hint = "ports below 1024 need privileges; choose a higher port"
    else:
        hint = "check the address, or choose another"
    why = os.strerror(exc.errno) if exc.errno else str(exc)
    return f"cannot serve {what} on {host}:{port}: {why}; {hint}."
