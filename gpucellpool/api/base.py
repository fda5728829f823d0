"""Shared model configuration and the small Kubernetes value types every part of the API uses.

Why this module exists: every object in the API speaks camelCase JSON, keeps the docstring of
each field as its schema description (so the CRD and docs/api.md are written by the models
themselves), and must read objects written by newer or older operators without failing, so
they all derive from ``KubeModel``. Object references, label selectors and taints are plain
Kubernetes shapes reused across the spec.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, PlainSerializer
from pydantic.alias_generators import to_camel


def _rfc3339(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


Timestamp = Annotated[AwareDatetime, PlainSerializer(_rfc3339, when_used="json-unless-none")]
"""A metav1.Time: timezone-aware, written as RFC 3339 in UTC with second precision."""


def cel(rule: str, message: str, field_path: str | None = None) -> dict[str, str]:
    """One ``x-kubernetes-validations`` entry; ``field_path`` points the error at a child."""
    entry = {"rule": rule, "message": message}
    if field_path:
        entry["fieldPath"] = field_path
    return entry


def validations(*rules: dict[str, str]) -> dict[str, Any]:
    """``json_schema_extra`` carrying CEL rules for a model (see ``cel``)."""
    return {"x-kubernetes-validations": list(rules)}


class KubeModel(BaseModel):
    """Base of every API object: camelCase aliases, docstring descriptions, tolerant reads.

    Unknown keys are ignored on read (the apiserver prunes them on write anyway), so an older
    operator can read an object a newer CRD version wrote.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        use_attribute_docstrings=True,
        extra="ignore",
        use_enum_values=False,
    )

    def to_api(self) -> dict[str, Any]:
        """JSON-ready dict with API names, omitting unset optional fields (None)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


NAME_MAX = 253


class LocalObjectReference(KubeModel):
    """A reference to an object in the pool's own namespace."""

    name: str = Field(min_length=1, max_length=NAME_MAX)
    """Name of the referenced object."""


class SecretKeyReference(KubeModel):
    """A key of a Secret in the pool's own namespace."""

    name: str = Field(min_length=1, max_length=NAME_MAX)
    """Name of the Secret."""
    key: str = Field(default="token", min_length=1, max_length=NAME_MAX)
    """Key inside the Secret."""


class LabelSelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class LabelSelectorRequirement(KubeModel):
    """One set-based requirement of a label selector."""

    key: str = Field(min_length=1, max_length=317)
    """The label key the requirement applies to."""
    operator: LabelSelectorOperator
    """How the key relates to the values."""
    values: list[str] | None = None
    """Values for In/NotIn; must be empty for Exists/DoesNotExist."""


class LabelSelector(KubeModel):
    """A metav1.LabelSelector: matchLabels and matchExpressions are ANDed."""

    match_labels: dict[str, str] | None = None
    """Labels that must all be present with these values."""
    match_expressions: list[LabelSelectorRequirement] | None = None
    """Set-based requirements that must all hold."""


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Taint(KubeModel):
    """A core/v1 Taint to put on every cell Node."""

    key: str = Field(min_length=1, max_length=317)
    """The taint key."""
    value: str | None = None
    """The taint value."""
    effect: TaintEffect
    """NoSchedule, PreferNoSchedule or NoExecute."""
    time_added: Timestamp | None = None
    """When a NoExecute taint was added (set by the system)."""
