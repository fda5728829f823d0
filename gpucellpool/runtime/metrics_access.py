"""Who may read ``/metrics``: bearer-token authentication and authorisation, with a short cache.

Why this module exists: ``/metrics`` names every pool, namespace and workload cluster the
operator serves and shows their demand, so in a production install it is served over TLS and
only to callers the cluster itself vouches for - a ``TokenReview`` authenticates the bearer
token and a ``SubjectAccessReview`` asks whether that identity may ``get`` the non-resource URL
``/metrics`` (the contract of controller-runtime's secure metrics and kube-rbac-proxy, so a
Prometheus already granted that ClusterRole rule needs nothing new). The rules that turn the
reviews into an HTTP answer are pure functions here; the reviews are behind the
``AccessReviewer`` Protocol (adapter: ``gpucellpool.kube.reviews``); ``MetricsGuard`` caches
answers for a minute so a 15 s scrape interval costs two API calls a minute, not eight.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

METRICS_PATH = "/metrics"


@dataclass(frozen=True, slots=True)
class Identity:
    """An authenticated caller as a TokenReview reports it."""

    user: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class AccessDecision:
    """The HTTP answer: 200 serve, 401 no/unknown token, 403 not allowed, 503 review failed."""

    status: int
    reason: str

    @property
    def allowed(self) -> bool:
        return self.status == 200


class ReviewUnavailable(RuntimeError):
    """The apiserver could not be asked (timeout, 5xx): answer 503 and do not cache."""


class TokenUnverified(RuntimeError):
    """The apiserver answered but could not check the token (TokenReview ``status.error``,
    e.g. its authentication webhook is down): answer 401 and do not cache, as kube-apiserver's
    own token cache keeps no answer that came with an error."""


class AccessReviewer(Protocol):
    async def authenticate(self, token: str) -> Identity | None:
        """The token's identity, or None when the apiserver does not accept it; raises
        ``TokenUnverified`` when it could not tell, ``ReviewUnavailable`` when not asked."""
        ...

    async def authorize(self, identity: Identity, verb: str, path: str) -> bool:
        """Whether ``identity`` may ``verb`` the non-resource URL ``path``."""
        ...


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header; None for anything else."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        return None
    return token


def decide(identity: Identity | None, authorized: bool) -> AccessDecision:
    """The answer once the reviews are in (reasons never quote the token)."""
    if identity is None:
        return AccessDecision(401, "the bearer token was not accepted by the apiserver")
    if not authorized:
        return AccessDecision(
            403, f"{identity.user} may not get {METRICS_PATH} (grant the nonResourceURLs rule)"
        )
    return AccessDecision(200, f"{identity.user} allowed")


def token_key(token: str) -> str:
    """The cache key: a digest, so the cache never holds a usable credential."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class MetricsGuard:
    """Review a request's token (cached ``ttl_s`` seconds per token digest)."""

    reviewer: AccessReviewer
    now: Callable[[], float]
    ttl_s: float = 60.0
    max_entries: int = 256
    _cache: dict[str, tuple[float, AccessDecision]] = field(default_factory=dict)

    async def check(self, authorization: str | None) -> AccessDecision:
        token = bearer_token(authorization)
        if token is None:
            return AccessDecision(401, "send an Authorization: Bearer <token> header")
        key, now = token_key(token), self.now()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        try:
            identity = await self.reviewer.authenticate(token)
            allowed = identity is not None and await self.reviewer.authorize(
                identity, "get", METRICS_PATH
            )
        except ReviewUnavailable as exc:
            return AccessDecision(503, f"cannot review the token now: {exc}")
        except TokenUnverified:
            return decide(None, False)  # not remembered: the next scrape asks again
        answer = decide(identity, allowed)
        self._remember(key, answer, now)
        return answer

    def _remember(self, key: str, answer: AccessDecision, now: float) -> None:
        if len(self._cache) >= self.max_entries:
            live = {k: v for k, v in self._cache.items() if v[0] > now}
            self._cache = live if len(live) < self.max_entries else {}
        self._cache[key] = (now + self.ttl_s, answer)
