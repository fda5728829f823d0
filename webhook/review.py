"""AdmissionReview in, AdmissionReview out: the pure half of the webhook server.

Why this module exists: the server's job is mostly translation, and translation is where
webhooks go wrong (a missing ``uid``, a 500 on odd input, a message that hides the field).
Here a request body is parsed into a small ``ReviewRequest`` (or a ``BadReview`` with a message
for a 400), routed to the right ``webhook.rules`` entry point, and the ``Verdict`` becomes a
response whose ``status.message`` names every reason with its field path, whose
``status.details.causes`` list them one by one (reason ``Invalid``, code 422: kubectl then
prints one "field: message" line per cause, like a schema error), and whose ``warnings``
pass through. No I/O:
the stored pool a scale request needs is fetched by the server and passed in, and so are the
answers to the Secret access reviews: ``secret_checks`` lists the Secrets the requesting user
must be allowed to ``get`` (``access_review`` is the SubjectAccessReview to ask), and
``with_secret_access`` turns refusals and failed reviews into denials naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpucellpool.api import pool as api
from webhook.rules import RuleSettings, Verdict, validate_create, validate_scale, validate_update
from webhook.rules.references import new_secret_references, referenced_secrets
from webhook.rules.verdict import FieldError

REVIEW_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
MAX_WARNING = 512
"""Longest single warning passed to the apiserver (it truncates the total anyway)."""


class BadReview(ValueError):
    """The body is not an AdmissionReview request; the message says what is wrong (HTTP 400)."""


@dataclass(frozen=True)
class UserInfo:
    """Who sent the request, as the apiserver authenticated them (``request.userInfo``)."""

    username: str = ""
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class ReviewRequest:
    """The parts of an AdmissionReview request the rules need."""

    api_version: str
    uid: str
    operation: str
    kind: str
    sub_resource: str
    namespace: str
    name: str
    object: Any
    old_object: Any
    user: UserInfo = field(default_factory=UserInfo)

    @property
    def is_scale(self) -> bool:
        """A write to the pool's scale subresource (the objects are autoscaling/v1 Scales)."""
        return self.sub_resource == "scale"


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _user(raw: Any) -> UserInfo:
    if not isinstance(raw, Mapping):
        return UserInfo()
    groups = raw.get("groups")
    extra = raw.get("extra")
    return UserInfo(
        username=_str(raw.get("username")),
        uid=_str(raw.get("uid")),
        groups=tuple(g for g in groups if isinstance(g, str)) if isinstance(groups, list) else (),
        extra=tuple(
            sorted(
                (str(k), tuple(str(x) for x in v)) for k, v in extra.items() if isinstance(v, list)
            )
        )
        if isinstance(extra, Mapping)
        else (),
    )


def parse_review(body: bytes) -> ReviewRequest:
    """Decode a request body; raises ``BadReview`` (never anything else) when it is not one."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadReview(f"body is not JSON: {exc}") from None
    if not isinstance(doc, Mapping):
        raise BadReview("body must be a JSON object (an AdmissionReview)")
    version = doc.get("apiVersion")
    if doc.get("kind") != "AdmissionReview" or version not in REVIEW_VERSIONS:
        raise BadReview(f"expected kind AdmissionReview, apiVersion one of {REVIEW_VERSIONS}")
    request = doc.get("request")
    if not isinstance(request, Mapping):
        raise BadReview("AdmissionReview.request is missing or not an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("AdmissionReview.request.uid is missing")
    kind = request.get("kind")
    return ReviewRequest(
        api_version=str(version),
        uid=uid,
        operation=_str(request.get("operation")),
        kind=_str(kind.get("kind")) if isinstance(kind, Mapping) else "",
        sub_resource=_str(request.get("subResource")),
        namespace=_str(request.get("namespace")),
        name=_str(request.get("name")),
        object=request.get("object"),
        old_object=request.get("oldObject"),
        user=_user(request.get("userInfo")),
    )


def needs_stored_pool(req: ReviewRequest) -> bool:
    """True for scale writes: the Scale alone cannot be judged without the pool's spec."""
    return req.is_scale and req.operation in ("CREATE", "UPDATE")


def decide(req: ReviewRequest, settings: RuleSettings, stored_pool: Any = None) -> Verdict:
    """Route one request to the rules; operations and resources we do not judge are allowed."""
    if req.operation not in ("CREATE", "UPDATE"):
        return Verdict(allowed=True)  # DELETE and CONNECT are always allowed
    if req.is_scale:
        return _decide_scale(req, settings, stored_pool)
    if req.sub_resource:
        return Verdict(allowed=True)  # e.g. status: written by the operator, not judged here
    if req.kind != api.KIND:
        unexpected = FieldError("(root)", f"kind {req.kind!r} is not judged by this webhook")
        return Verdict(allowed=True, warnings=(unexpected,))
    if req.operation == "CREATE":
        return validate_create(req.object, settings)
    return validate_update(req.old_object, req.object, settings)


def secret_checks(req: ReviewRequest) -> tuple[tuple[str, str], ...]:
    """(field path, Secret name) the requesting user must be allowed to ``get``.

    Every Secret a pool CREATE references, and each one an UPDATE newly references (a name
    the stored pool already had was checked when it was added). Scale and status writes
    cannot change a reference. There is no exemption: the operator's own writes to a pool
    (finalizers, status) never add one, so they never need a review.
    """
    if req.kind != api.KIND or req.sub_resource:
        return ()
    if req.operation == "CREATE":
        return referenced_secrets(req.object)
    if req.operation == "UPDATE":
        return new_secret_references(req.old_object, req.object)
    return ()


def access_review(user: UserInfo, namespace: str, secret: str) -> dict[str, Any]:
    """The SubjectAccessReview asking whether ``user`` may get Secret ``namespace/secret``."""
    spec: dict[str, Any] = {
        "user": user.username,
        "groups": list(user.groups),
        "resourceAttributes": {
            "namespace": namespace,
            "verb": "get",
            "group": "",
            "version": "v1",
            "resource": "secrets",
            "name": secret,
        },
    }
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {key: list(values) for key, values in user.extra}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def with_secret_access(
    verdict: Verdict,
    refused: Sequence[tuple[str, str]],
    unchecked: Sequence[tuple[str, str]] = (),
) -> Verdict:
    """``verdict`` with a denial for each reference the user may not read or that was not checked.

    ``refused``: the apiserver said the user may not ``get`` the Secret. ``unchecked``: the
    review failed (error, timeout), so the answer is unknown and the request is denied (fail
    closed). Messages name the field and the Secret, never anything read from it.
    """
    reasons = [
        FieldError(
            path,
            f"names Secret {name!r}, which you may not get; the operator would read it for "
            "you. Reference a Secret you can read, or ask for get access to this one",
        )
        for path, name in refused
    ]
    reasons += [
        FieldError(
            path,
            f"names Secret {name!r}, and the webhook could not check that you may get it "
            "(the access review failed); retry in a moment",
        )
        for path, name in unchecked
    ]
    if not reasons:
        return verdict
    return Verdict(allowed=False, reasons=(*verdict.reasons, *reasons), warnings=verdict.warnings)


def scale_as_sent(scale: Any) -> Any:
    """The Scale with Go's ``omitempty`` undone: autoscaling/v1 drops ``spec.replicas: 0``.

    ``kubectl scale --replicas=0`` reaches the webhook as ``spec: {}``; read literally, the
    rules would refuse it as "not an integer". Only an absent field is filled in, so a Scale
    that really carries a wrong value (a string, a negative number) is still judged as sent.
    """
    if not isinstance(scale, Mapping):
        return scale
    spec = scale.get("spec")
    if spec is None:
        spec = {}
    if isinstance(spec, Mapping) and "replicas" not in spec:
        return {**scale, "spec": {**spec, "replicas": 0}}
    return scale


def _decide_scale(req: ReviewRequest, settings: RuleSettings, stored_pool: Any) -> Verdict:
    if isinstance(stored_pool, Mapping):
        return validate_scale(stored_pool, scale_as_sent(req.object), settings)
    why = "the webhook could not read the pool to check this scale request; retry in a moment"
    return Verdict(allowed=False, reasons=(FieldError("spec.replicas", why),))


def _describe(req: ReviewRequest) -> str:
    what = f"{api.KIND} {req.namespace}/{req.name}" if req.name else f"new {api.KIND}"
    if req.is_scale:
        what = f"scale of {what}"
    return what


def denial_message(req: ReviewRequest, verdict: Verdict) -> str:
    """One line naming every reason with its field path."""
    count = len(verdict.reasons)
    noun = "problem" if count == 1 else "problems"
    return f"{_describe(req)} is invalid ({count} {noun}): {verdict.message()}"


def response(req: ReviewRequest, verdict: Verdict) -> dict[str, Any]:
    """The AdmissionReview to send back for ``verdict``."""
    body: dict[str, Any] = {"uid": req.uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        body["status"] = {
            "code": 422,
            "reason": "Invalid",
            "message": denial_message(req, verdict),
            "details": {
                "name": req.name,
                "kind": api.PLURAL,
                "group": api.GROUP,
                "causes": [
                    {"field": r.path, "message": r.message, "reason": "FieldValueInvalid"}
                    for r in verdict.reasons
                ],
            },
        }
    warnings = [w[:MAX_WARNING] for w in verdict.warning_messages()]
    if warnings:
        body["warnings"] = warnings
    return {"apiVersion": req.api_version, "kind": "AdmissionReview", "response": body}


def internal_error(req: ReviewRequest, what: str) -> dict[str, Any]:
    """A well-formed denial for a request the server failed to judge (bug or outage)."""
    body = {
        "uid": req.uid,
        "allowed": False,
        "status": {"code": 500, "reason": "InternalError", "message": what},
    }
    return {"apiVersion": req.api_version, "kind": "AdmissionReview", "response": body}
