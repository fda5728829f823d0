"""The one error tree of every apiserver call, and the pure rules of when to retry one.

Why this module exists: the operator used to carry two error families (the autoscaler's
``ApiError``, the provisioner's ``KubeError``) and a 429 retry that slept a fixed backoff
whatever the server said. Every caller now catches the same classes, raised by the one door
(``gpucellpool.kube.rest``) and by the fakes that stand in for it. The classes, the mapping
from an HTTP status and the Retry-After rule are pure (no I/O, no clock) so they are tested
without a server.

Every error carries the HTTP ``status`` (0 = no answer at all) and a one-line message naming
the verb, the path, the status and the apiserver's own ``Status.message``. Request bodies are
never echoed and the client's credential is redacted from whatever the server said.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

HTTP_BAD_REQUEST = 400
HTTP_UNAUTHORIZED = 401
HTTP_FORBIDDEN = 403
HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409
HTTP_GONE = 410
HTTP_INVALID = 422
HTTP_TOO_MANY = 429
HTTP_UNAVAILABLE = 503
MESSAGE_LIMIT = 300
REDACTED = "<redacted>"


class KubeError(RuntimeError):
    """The apiserver answered with an error status (``status`` 0 = no HTTP answer)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class NotFound(KubeError):
    """404: the object (or its kind) does not exist."""


class Conflict(KubeError):
    """409: resourceVersion precondition failed or the object already exists."""


class Gone(KubeError):
    """410: the resourceVersion a watch or list started from is too old: relist."""

    def __init__(self, message: str, status: int = HTTP_GONE) -> None:
        super().__init__(status, message)


class Forbidden(KubeError):
    """401 or 403: the credential is not accepted, or RBAC denies the verb."""


class Invalid(KubeError):
    """400 or 422: the request or the object was rejected as malformed or invalid."""


class Throttled(KubeError):
    """429 (or a 503 with Retry-After) still refused after the retries, or an eviction
    refused by a PodDisruptionBudget (a 429 that is an answer, not throttling)."""


class Unreachable(KubeError):
    """No answer: connection refused, DNS, TLS or a timeout."""


_BY_STATUS: dict[int, type[KubeError]] = {
    HTTP_BAD_REQUEST: Invalid,
    HTTP_UNAUTHORIZED: Forbidden,
    HTTP_FORBIDDEN: Forbidden,
    HTTP_NOT_FOUND: NotFound,
    HTTP_CONFLICT: Conflict,
    HTTP_INVALID: Invalid,
    HTTP_TOO_MANY: Throttled,
}


def server_message(body: bytes, secret: str = "") -> str:
    """The apiserver's ``Status.message`` (else the body's text), one line, shortened, with
    ``secret`` (the client's own credential) redacted should the server echo it."""
    text = body.decode(errors="replace")
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("message"), str):
        text = parsed["message"]
    if secret:
        text = text.replace(secret, REDACTED)
    return " ".join(text.split())[:MESSAGE_LIMIT]


def error_for(status: int, method: str, path: str, detail: str) -> KubeError:
    """The tree's class for an HTTP error status, with a message naming verb, path, status."""
    message = f"{method} {path}: HTTP {status}: {detail}"
    if status == HTTP_GONE:
        return Gone(message)
    return _BY_STATUS.get(status, KubeError)(status, message)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How throttled requests are retried: at most ``attempts`` retries, each after the
    server's Retry-After (else ``backoff_s`` times the attempt number), never longer than
    ``cap_s`` per wait."""

    attempts: int = 3
    backoff_s: float = 0.5
    cap_s: float = 10.0


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """Whether to send the request again, after how long, and why."""

    retry: bool
    wait_s: float
    reason: str


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (the apiserver sends delta-seconds); None when absent or not a
    non-negative number (an HTTP-date is not sent by the apiserver and is not honoured)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 and math.isfinite(seconds) else None


def retry_decision(
    status: int, retry_after: str | None, attempt: int, policy: RetryPolicy
) -> RetryDecision:
    """Retry a 429, and a 503 that carries Retry-After (the apiserver's "try again"), while
    attempts remain, waiting what the server asked for, capped. ``attempt`` counts from 0."""
    asked = parse_retry_after(retry_after)
    if status != HTTP_TOO_MANY and not (status == HTTP_UNAVAILABLE and asked is not None):
        return RetryDecision(False, 0.0, f"HTTP {status} is not retried")
    if attempt >= policy.attempts:
        return RetryDecision(False, 0.0, f"HTTP {status}: {policy.attempts} retries spent")
    if asked is None:
        wait_s = policy.backoff_s * (attempt + 1)
        return RetryDecision(True, min(wait_s, policy.cap_s), f"HTTP {status}: backoff")
    if asked > policy.cap_s:
        return RetryDecision(True, policy.cap_s, f"HTTP {status}: Retry-After {asked:g}s capped")
    return RetryDecision(True, asked, f"HTTP {status}: Retry-After {asked:g}s")
