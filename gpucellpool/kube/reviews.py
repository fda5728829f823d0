"""TokenReview and SubjectAccessReview calls: the adapter behind ``/metrics`` access control.

Why this module exists: ``gpucellpool.runtime.metrics_access`` decides who may scrape ``/metrics``
from two questions only the apiserver can answer - "whose token is this?" and "may they get
/metrics?". This module asks them over the operator's own client (which needs ``create`` on
``tokenreviews`` and ``subjectaccessreviews``, and nothing else, for this). A failed call is
``ReviewUnavailable``, never a silent allow or a cached deny, whatever the failure (HTTP error,
timeout, dropped connection, an answer that is not JSON). A TokenReview that reports an error
is ``TokenUnverified`` (denied, not cached). Tokens are sent in request bodies only; no error
message built here contains one.
"""

from __future__ import annotations

from typing import Any

from gpucellpool.kube.errors import KubeError
from gpucellpool.kube.rest import RestClient
from gpucellpool.runtime.metrics_access import Identity, ReviewUnavailable, TokenUnverified

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


def identity_from(review: dict[str, Any]) -> Identity | None:
    """The identity of an authenticated TokenReview, None otherwise; ``TokenUnverified`` when
    the review was not authenticated and reports an error (the apiserver could not tell)."""
    status = review.get("status") or {}
    user = status.get("user") or {}
    if not status.get("authenticated") and status.get("error"):
        raise TokenUnverified("the apiserver could not verify the token")
    if not status.get("authenticated") or not user.get("username"):
        return None
    extra = user.get("extra") or {}
    return Identity(
        user=str(user["username"]),
        uid=str(user.get("uid") or ""),
        groups=tuple(str(g) for g in user.get("groups") or ()),
        extra=tuple(sorted((str(k), tuple(str(x) for x in v)) for k, v in extra.items())),
    )


def access_review(identity: Identity, verb: str, path: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "user": identity.user,
        "groups": list(identity.groups),
        "nonResourceAttributes": {"path": path, "verb": verb},
    }
    if identity.uid:
        spec["uid"] = identity.uid
    if identity.extra:
        spec["extra"] = {k: list(v) for k, v in identity.extra}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


class KubeAccessReviewer:
    """``AccessReviewer`` over the operator's REST client."""

    def __init__(self, rest: RestClient) -> None:
        self._rest = rest

    async def _create(self, path: str, body: dict[str, Any], what: str) -> dict[str, Any]:
        try:
            # Not retried on throttling: a scrape has its own deadline (the chart's 10 s), far
            # below the door's Retry-After retries; a fast 503 and the next scrape retry it.
            return await self._rest.call("POST", path, None, body, retry_throttled=False)
        except (KubeError, TimeoutError, OSError, ValueError) as exc:
            status = getattr(exc, "status", "no response")
            raise ReviewUnavailable(f"{what} failed ({status})") from None

    async def authenticate(self, token: str) -> Identity | None:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        return identity_from(await self._create(TOKEN_REVIEWS, body, "TokenReview"))

    async def authorize(self, identity: Identity, verb: str, path: str) -> bool:
        review = access_review(identity, verb, path)
        answer = await self._create(ACCESS_REVIEWS, review, "SubjectAccessReview")
        return bool((answer.get("status") or {}).get("allowed"))
