"""Startup check: does the CRD the apiserver serves match the one this build generates?

Why this module exists: ``helm upgrade`` does not upgrade CRDs, and an apiserver serving an
older GPUCellPool schema silently *prunes* fields it does not know (a new spec field is
dropped on write), keeps rejecting enum values this build relies on, or applies other
defaults. The original operator only listed missing fields; here the pure ``compare`` walks
each version's OpenAPI schema and returns typed findings for missing versions and fields, enum
values narrowed or widened, default changes and validation changes (type, bounds, pattern,
format, required, pruning, CEL rules). ``run_check`` is the shell: read the served CRD through
the ``CrdReader`` port, log one line with every finding and the exact fix command, record an
Event on the CRD, set the ``gpucellpool_crd_drift_findings`` gauge. It is never fatal: an
absent or unreadable CRD is reported as "not compared" and the operator carries on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from prometheus_client import REGISTRY, CollectorRegistry, Gauge

from gpucellpool.api import crdgen
from gpucellpool.api import pool as api

CRD_NAME = f"{api.PLURAL}.{api.GROUP}"
FIX_COMMAND = f"kubectl apply --server-side --force-conflicts -f crds/{crdgen.CRD_FILE}"
VALIDATION_KEYS = (
    "type",
    "format",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "nullable",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
)
READ_TIMEOUT = 10.0
MAX_LOGGED = 20


class FindingKind(Enum):
    """What kind of difference: the metric's ``kind`` label."""

    VERSION_MISSING = "VersionMissing"
    FIELD_MISSING = "FieldMissing"
    ENUM_NARROWED = "EnumNarrowed"
    ENUM_WIDENED = "EnumWidened"
    DEFAULT_DIFFERS = "DefaultDiffers"
    VALIDATION_DIFFERS = "ValidationDiffers"
    SUBRESOURCE_MISSING = "SubresourceMissing"


@dataclass(frozen=True)
class Finding:
    """One difference at one schema path of one version (``served`` vs this build)."""

    kind: FindingKind
    version: str
    path: str
    detail: str
    served: Any = field(default=None, compare=False)
    expected: Any = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"{self.version} {self.path or '(root)'}: {self.kind.value}: {self.detail}"


def _versions(crd: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    versions = (crd.get("spec") or {}).get("versions") or []
    return {v["name"]: v for v in versions if isinstance(v, Mapping) and v.get("served", True)}


def _schema(version: Mapping[str, Any]) -> Mapping[str, Any]:
    schema = (version.get("schema") or {}).get("openAPIV3Schema")
    return schema if isinstance(schema, Mapping) else {}


def compare(served: Mapping[str, Any], expected: Mapping[str, Any]) -> list[Finding]:
    """Every difference that matters between a served CRD and the expected one (pure)."""
    findings: list[Finding] = []
    have = _versions(served)
    for name, want in _versions(expected).items():
        if name not in have:
            findings.append(Finding(FindingKind.VERSION_MISSING, name, "", "version not served"))
            continue
        findings += _walk(name, "", _schema(have[name]), _schema(want))
        for sub in (want.get("subresources") or {}).keys() - (have[name].get("subresources") or {}):
            findings.append(
                Finding(FindingKind.SUBRESOURCE_MISSING, name, "", f"subresource {sub} missing")
            )
    return findings


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _walk(
    version: str, path: str, have: Mapping[str, Any], want: Mapping[str, Any]
) -> list[Finding]:
    found = list(_node(version, path, have, want))
    have_props, want_props = have.get("properties") or {}, want.get("properties") or {}
    for name, sub in want_props.items():
        child = f"{path}.{name}" if path else name
        if name not in have_props:
            found.append(Finding(FindingKind.FIELD_MISSING, version, child, "field not served"))
        else:
            found += _walk(version, child, have_props[name], sub)
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        if isinstance(want.get(key), Mapping) and isinstance(have.get(key), Mapping):
            found += _walk(version, path + suffix, have[key], want[key])
    return found


def _node(
    version: str, path: str, have: Mapping[str, Any], want: Mapping[str, Any]
) -> Iterator[Finding]:
    yield from _enum(version, path, have, want)
    before, after = have.get("default"), want.get("default")
    if ("default" in have or "default" in want) and _key(before) != _key(after):
        detail = f"default is {before!r}, this build expects {after!r}"
        yield Finding(FindingKind.DEFAULT_DIFFERS, version, path, detail, before, after)
    for key in VALIDATION_KEYS:
        if _key(have.get(key)) != _key(want.get(key)):
            yield Finding(FindingKind.VALIDATION_DIFFERS, version, path,
                          f"{key} is {have.get(key)!r}, this build expects {want.get(key)!r}",
                          have.get(key), want.get(key))  # fmt: skip
    for what, missing in _set_diffs(have.get("required"), want.get("required")):
        yield Finding(FindingKind.VALIDATION_DIFFERS, version, path,
                      f"required {what}: {', '.join(missing)}")  # fmt: skip
    have_rules = [r.get("rule") for r in have.get("x-kubernetes-validations") or []]
    want_rules = [r.get("rule") for r in want.get("x-kubernetes-validations") or []]
    for what, rules in _set_diffs(have_rules, want_rules):
        label = "CEL rule missing" if what == "missing" else "CEL rule not in this build"
        for rule in rules:
            yield Finding(FindingKind.VALIDATION_DIFFERS, version, path, f"{label}: {rule}")


def _set_diffs(have: Any, want: Any) -> Iterator[tuple[str, list[str]]]:
    have_set, want_set = {str(x) for x in have or ()}, {str(x) for x in want or ()}
    if want_set - have_set:
        yield "missing", sorted(want_set - have_set)
    if have_set - want_set:
        yield "extra", sorted(have_set - want_set)


def _enum(
    version: str, path: str, have: Mapping[str, Any], want: Mapping[str, Any]
) -> Iterator[Finding]:
    if "enum" not in have and "enum" not in want:
        return
    if "enum" not in have or "enum" not in want:
        kind = FindingKind.ENUM_WIDENED if "enum" not in have else FindingKind.ENUM_NARROWED
        yield Finding(kind, version, path, "enum present on one side only",
                      have.get("enum"), want.get("enum"))  # fmt: skip
        return
    have_vals = {_key(v): v for v in have["enum"]}
    want_vals = {_key(v): v for v in want["enum"]}
    missing = [want_vals[k] for k in sorted(want_vals.keys() - have_vals.keys())]
    extra = [have_vals[k] for k in sorted(have_vals.keys() - want_vals.keys())]
    if missing:
        yield Finding(FindingKind.ENUM_NARROWED, version, path,
                      f"served enum lacks {missing} (the apiserver rejects them)",
                      have["enum"], want["enum"])  # fmt: skip
    if extra:
        yield Finding(FindingKind.ENUM_WIDENED, version, path,
                      f"served enum also allows {extra} (this build does not know them)",
                      have["enum"], want["enum"])  # fmt: skip


# --- the shell -------------------------------------------------------------------------------


class CrdReader(Protocol):
    """Reads a CRD as raw JSON; None when absent; may raise (e.g. PermissionError)."""

    async def get_crd(self, name: str) -> Mapping[str, Any] | None:
        """The served CustomResourceDefinition."""
        ...


class EventSink(Protocol):
    """Records a Kubernetes Event about an object."""

    async def emit(self, involved: Mapping[str, str], kind: str, reason: str, message: str) -> None:
        """One Event (``kind``: Normal or Warning)."""
        ...


class Outcome(Enum):
    """How the check ended."""

    MATCHES = "matches"
    DRIFT = "drift"
    NOT_COMPARED = "not-compared"


@dataclass(frozen=True)
class Report:
    """The result of ``run_check``."""

    outcome: Outcome
    findings: tuple[Finding, ...] = ()
    detail: str = ""

    def message(self) -> str:
        """The one line that is logged (and, shortened, put in the Event)."""
        if self.outcome is Outcome.MATCHES:
            return f"CRD {CRD_NAME} matches this build"
        if self.outcome is Outcome.NOT_COMPARED:
            return f"CRD {CRD_NAME} NOT compared with this build: {self.detail}"
        shown = "; ".join(str(f) for f in self.findings[:MAX_LOGGED])
        more = len(self.findings) - MAX_LOGGED
        tail = f"; and {more} more" if more > 0 else ""
        return (
            f"CRD {CRD_NAME} served by the apiserver is older or different than this build "
            f"({len(self.findings)} findings; fields may be dropped or refused): {shown}{tail}. "
            f"Fix: {FIX_COMMAND} (from the release matching this operator), "
            f"or re-apply the chart's crds/ folder the same way after `helm upgrade`"
        )


_GAUGES: dict[int, tuple[weakref.ref[CollectorRegistry], Gauge]] = {}


def drift_gauge(registry: CollectorRegistry = REGISTRY) -> Gauge:
    """The ``gpucellpool_crd_drift_findings{kind}`` gauge (one per registry).

    Cached by ``id(registry)`` with a weak reference to the registry itself, so a new registry
    that reuses a collected one's id gets its own gauge, not a stale one.
    """
    cached = _GAUGES.get(id(registry))
    if cached is not None and cached[0]() is registry:
        return cached[1]
    gauge = Gauge(
        "gpucellpool_crd_drift_findings",
        "Differences between the served GPUCellPool CRD and this build's, by kind",
        ["kind"],
        registry=registry,
    )
    _GAUGES[id(registry)] = (weakref.ref(registry), gauge)
    return gauge


def _involved() -> dict[str, str]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "name": CRD_NAME,
    }


async def run_check(
    reader: CrdReader,
    events: EventSink | None = None,
    gauge: Gauge | None = None,
    expected: Callable[[], Mapping[str, Any]] = crdgen.crd,
    log: logging.Logger | None = None,
) -> Report:
    """Compare, then log, record an Event and set the gauge; never raises."""
    logger = log or logging.getLogger(__name__)
    try:
        served = await asyncio.wait_for(reader.get_crd(CRD_NAME), READ_TIMEOUT)
        if served is None:
            report = Report(Outcome.NOT_COMPARED, detail="the CRD is not installed")
        else:
            findings = tuple(compare(served, expected()))
            report = Report(Outcome.DRIFT if findings else Outcome.MATCHES, findings)
    except Exception as exc:  # never fatal: say why and carry on
        report = Report(Outcome.NOT_COMPARED, detail=f"{type(exc).__name__}: {exc}")
    level = logging.INFO if report.outcome is Outcome.MATCHES else logging.ERROR
    if report.outcome is Outcome.NOT_COMPARED:
        level = logging.WARNING
    logger.log(level, report.message())
    if report.outcome is not Outcome.NOT_COMPARED:
        counts = Counter(f.kind for f in report.findings)
        target = gauge if gauge is not None else drift_gauge()
        for kind in FindingKind:
            target.labels(kind=kind.value).set(counts.get(kind, 0))
    if events is not None and report.outcome is Outcome.DRIFT:
        try:
            await events.emit(_involved(), "Warning", "CRDDrift", report.message())
        except Exception as exc:
            logger.warning("could not record the CRD drift Event: %s", exc)
    return report
