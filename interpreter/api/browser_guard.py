"""Requests a web page sent to a service without API keys, refused.

Without keys the service binds loopback only, but a browser on the same machine reaches
loopback too. A page of any site can send it a "simple" cross-site POST (a form, or
``fetch`` with ``mode: "no-cors"`` and ``Content-Type: text/plain``): no preflight asks
first, so the code in it ran, although the page never reads the answer. And through DNS
rebinding (the page's own host name made to resolve to 127.0.0.1) the page is same-origin
with the service and reads the answers too: every keyless session's notebook and files.

A browser always says where a request comes from: ``Origin`` on every cross-origin
request and on every POST, ``Sec-Fetch-Site`` on all of them (current browsers). So a
keyless service refuses a request that carries an ``Origin`` other than its own, or says
it is ``cross-site`` or ``same-site``, and one whose ``Host`` is not a loopback name (what
a rebinding page sends is its own). Programs (curl, the SDK, Jupyter and E2B clients) send
neither header and a loopback ``Host``. With keys, nothing here applies: a page cannot
send a key (a custom header needs a preflight, which this service answers with no CORS
grant), and nothing is served without one.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from urllib.parse import urlsplit

#: ``Sec-Fetch-Site`` values of a request a page of another origin made.
_FOREIGN_FETCH = frozenset({"cross-site", "same-site"})
#: What to do instead, said in every refusal.
_INSTEAD = (
    " A service without API keys answers programs on this machine only, not web pages. "
    "To serve a browser, start it with an API key (INTERP_API_KEY) and send the key."
)


def refusal(headers: Mapping[str, str]) -> str | None:
    """Why a keyless service refuses a request with these ``headers``; None if it does not."""
    host = headers.get("Host")
    if host is not None and not is_loopback_host(host):
        return (
            f"Refused: the request names the host {host[:100]!r}, not a loopback name "
            "(localhost, 127.0.0.1, [::1]): a web page whose name was made to point here "
            "sends that." + _INSTEAD
        )
    origin = headers.get("Origin")
    if origin is not None and not _same_origin(origin, host):
        return f"Refused: the request comes from a web page ({origin[:100]})." + _INSTEAD
    site = headers.get("Sec-Fetch-Site", "").strip().lower()
    if site in _FOREIGN_FETCH:
        return f"Refused: the request comes from a web page of another site ({site})." + _INSTEAD
    return None


def is_loopback_host(host: str) -> bool:
    """Whether a ``Host`` header (a name or address, with or without a port) names this
    machine's loopback: ``localhost`` (and names under it), 127.0.0.0/8, ``[::1]``."""
    name = _host_name(host)
    if name is None:
        return False
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _host_name(host: str) -> str | None:
    """The name or address of a ``Host`` value, without its port; None if malformed."""
    try:
        parts = urlsplit(f"//{host.strip()}")
        name = parts.hostname
        parts.port  # noqa: B018  (raises ValueError for a port that is not a number)
    except ValueError:
        return None
    return name.rstrip(".").lower() if name else None


def _same_origin(origin: str, host: str | None) -> bool:
    """Whether ``origin`` is the service's own (http on the host and port the request
    names): a page the service itself served."""
    if host is None:
        return False
    try:
        parts = urlsplit(origin.strip())
    except ValueError:
        return False
    return parts.scheme == "http" and parts.netloc.lower() == host.strip().lower()
