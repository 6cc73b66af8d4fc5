"""When the SDK sends a call again, and how long it waits first (no I/O of its own).

A call is sent again when the failure says the service did not act on it, or when acting
twice cannot happen:

- ``429`` (queue or session limit full) and failures to connect: the service never saw or
  refused the request, so any call is retried;
- ``503`` of a kind the service answers before it acts (all its uploads or large bodies
  are taken: ``too_many_uploads``, ``too_many_large_bodies``): any call is retried too;
- other ``502``, ``503``, ``504``, a dropped connection, a broken answer or a timeout: only calls
  that are safe to repeat: ``GET``, ``PUT``, ``DELETE``, and ``POST`` calls that carry an
  ``Idempotency-Key`` (``execute`` and session creation always do: the service then hands
  a repeat the first request's result, and the code never runs twice).

The wait is the service's ``Retry-After`` (seconds or an HTTP date) when it gave one, else
exponential backoff with jitter. A ``Retry-After`` longer than :data:`MAX_RETRY_AFTER_S` is
not waited for: the error is raised at once, with ``retry_after`` set.

Each wait is logged at INFO on the ``interpreter.client`` logger (the call, why, how long),
so a program that shows INFO logs, as the ``interp`` CLI does, says why it pauses.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from interpreter.client._errors import ConnectionFailed, InvalidArgumentError
from interpreter.client.protocol import (
    IDEMPOTENCY_HEADER,
    Call,
    error_from_response,
    parse_retry_after,
)

log = logging.getLogger("interpreter.client")

DEFAULT_MAX_RETRIES = 2
DEFAULT_BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0
MAX_RETRY_AFTER_S = 60.0

#: Answers that mean "not now": worth another try after a pause.
RETRY_STATUSES = frozenset({429, 502, 503, 504})
#: Answers after which the service surely did nothing, so even an unsafe call is retried.
REFUSED_STATUSES = frozenset({429})
#: Error types of a 503 that the service gives before acting on the request (its bodies
#: of that kind are all taken), so even an unsafe call is retried.
REFUSED_TYPES = frozenset({"too_many_uploads", "too_many_large_bodies"})
#: Methods whose repetition has the effect of a single request (RFC 9110, 9.2.2).
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
#: Failures before the request left this process: nothing reached the service.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
#: Failures after the request may have reached it: retried for repeatable calls only.
_MAYBE_SENT = (
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
    httpx.ReadTimeout,
    httpx.WriteTimeout,
)


def check_max_retries(value: Any, source: str) -> int:
    """``value`` as a retry count, or an InvalidArgumentError (a ValueError) naming where the
    bad value came from."""
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(
            f"{source} must be a whole number of retries (0 or more), got {value!r}"
        )
    return value


def repeatable(call: Call[Any]) -> bool:
    """True when sending the call twice has the effect of sending it once."""
    return call.method.upper() in IDEMPOTENT_METHODS or IDEMPOTENCY_HEADER in (call.headers or {})


def connection_failed(base_url: str, exc: httpx.HTTPError, attempts: int = 1) -> ConnectionFailed:
    """The SDK's error for a transport failure, saying how often it was tried."""
    tried = f" (gave up after {attempts} attempts)" if attempts > 1 else ""
    if isinstance(exc, httpx.TimeoutException):
        return ConnectionFailed(f"timed out talking to {base_url}: {exc!r}{tried}")
    return ConnectionFailed(f"cannot talk to {base_url}: {exc}{tried}")


@dataclass(frozen=True)
class RetryPolicy:
    """How many times a call is sent again, and the backoff between tries.

    Attributes:
        max_retries: Retries after the first attempt; 0 sends every call once.
        backoff_s: The first pause; it doubles with every retry up to ``max_backoff_s``,
            and each pause is drawn at random from its upper half (jitter).
        max_backoff_s: The longest pause of the backoff.
        max_retry_after_s: A longer ``Retry-After`` is not waited for.
    """

    max_retries: int = DEFAULT_MAX_RETRIES
    backoff_s: float = DEFAULT_BACKOFF_S
    max_backoff_s: float = MAX_BACKOFF_S
    max_retry_after_s: float = MAX_RETRY_AFTER_S

    def __post_init__(self) -> None:
        check_max_retries(self.max_retries, "max_retries")
        if not self.backoff_s >= 0:
            raise ValueError(f"the retry backoff must be 0 or more seconds, got {self.backoff_s}")

    def backoff(self, retry: int, rand: Callable[[], float] = random.random) -> float:
        """The pause before retry number ``retry`` (0 for the first) without Retry-After."""
        ceiling = min(self.backoff_s * 2.0**retry, self.max_backoff_s)
        return ceiling / 2 + ceiling / 2 * rand()

    def start(self, call: Call[Any], base_url: str) -> Attempts:
        """The bookkeeping for one logical call."""
        return Attempts(self, call, base_url)


class Attempts:
    """Decides, after each failed attempt of one call, whether and when to try again.

    Both methods return the seconds to wait before the next attempt, or raise the error
    the caller should see (:class:`ConnectionFailed`, or the :class:`APIError` of the answer).
    """

    def __init__(self, policy: RetryPolicy, call: Call[Any], base_url: str) -> None:
        self.policy = policy
        self.call = call
        self.base_url = base_url
        self.count = 1
        self._repeatable = repeatable(call)

    def after_error(self, exc: httpx.HTTPError) -> float:
        safe = isinstance(exc, _NOT_SENT) or (self._repeatable and isinstance(exc, _MAYBE_SENT))
        if not safe or self.count > self.policy.max_retries:
            raise connection_failed(self.base_url, exc, self.count) from exc
        return self._next(None, type(exc).__name__)

    def after_response(self, resp: httpx.Response) -> float:
        """For an error answer whose body was read."""
        status = resp.status_code
        safe = status in REFUSED_STATUSES or (
            status in RETRY_STATUSES and (self._repeatable or _error_type(resp) in REFUSED_TYPES)
        )
        retry_after = parse_retry_after(resp.headers.get("retry-after"))
        if (
            not safe
            or self.count > self.policy.max_retries
            or (retry_after is not None and retry_after > self.policy.max_retry_after_s)
        ):
            raise error_from_response(resp)
        kind = _error_type(resp)
        return self._next(retry_after, f"{status} {kind}" if kind else str(status))

    def _next(self, retry_after: float | None, why: str) -> float:
        retry = self.count - 1
        self.count += 1
        delay = retry_after if retry_after is not None else self.policy.backoff(retry)
        log.info(
            "%s %s: %s; retrying in %.1f s (retry %d of %d)",
            self.call.method,
            self.call.url,
            why,
            delay,
            retry + 1,
            self.policy.max_retries,
        )
        return delay


def _error_type(resp: httpx.Response) -> str | None:
    """The ``error.type`` of an error answer of the service (None if it is not one)."""
    try:
        kind = json.loads(resp.content)["error"]["type"]
    except (ValueError, KeyError, TypeError):
        return None
    return kind if isinstance(kind, str) else None
