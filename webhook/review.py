"""AdmissionReview in, AdmissionReview out: the pure half of the webhook server.

Why this module exists: the server's job is mostly translation, and translation is where
webhooks go wrong (a missing ``uid``, a 500 on odd input, a message that hides the field).
Here a request body is parsed into a small ``ReviewRequest`` (or a ``BadReview`` with a message
for a 400), routed to the right ``webhook.rules`` entry point, and the ``Verdict`` becomes a
response whose ``status.message`` names every reason with its field path, whose
``status.details.causes`` list them one by one (reason ``Invalid``, code 422: kubectl then
prints one "field: message" line per cause, like a schema error), and whose ``warnings``
pass through. No I/O:
the stored pool a scale request needs is fetched by the server and passed in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpucellpool.api import pool as api
from webhook.rules import RuleSettings, Verdict, validate_create, validate_scale, validate_update
from webhook.rules.verdict import FieldError

REVIEW_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
MAX_WARNING = 512
"""Longest single warning passed to the apiserver (it truncates the total anyway)."""


class BadReview(ValueError):
    """The body is not an AdmissionReview request; the message says what is wrong (HTTP 400)."""


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

    @property
    def is_scale(self) -> bool:
        """A write to the pool's scale subresource (the objects are autoscaling/v1 Scales)."""
        return self.sub_resource == "scale"


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


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
