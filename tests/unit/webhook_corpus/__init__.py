"""Loader for the admission corpus: one YAML file per case, reusable beyond the unit tests.

Why this module exists: the same cases must run through the pure rules (tests/unit) and, later,
through the real apiserver and our TLS webhook server (an integration test that posts
``object`` for CREATE, creates ``old`` then updates it to ``object`` for UPDATE, or writes
``object`` to the scale subresource of ``old`` for SCALE). Keeping the format in one loader
keeps both readers honest. See README.md in this folder for the format.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from webhook.rules import RuleSettings

HERE = Path(__file__).resolve().parent
OPERATIONS = ("CREATE", "UPDATE", "SCALE")


@dataclass(frozen=True)
class Expected:
    """One expected reason or warning: an exact path and a message substring."""

    path: str
    message: str


@dataclass(frozen=True)
class Case:
    """One corpus case as read from its file."""

    name: str
    description: str
    operation: str
    object: Any
    old: Any
    allowed: bool
    reasons: tuple[Expected, ...]
    warnings: tuple[Expected, ...]
    rejected_by: str | None
    settings: RuleSettings = field(default_factory=RuleSettings)


def settings_from(raw: dict[str, Any] | None) -> RuleSettings:
    """RuleSettings from the file's camelCase ``settings`` block."""
    raw = raw or {}
    return RuleSettings(
        strict_guest_template=bool(raw.get("strictGuestTemplate", False)),
        allowed_sriov_resources=frozenset(raw.get("allowedSriovResources", ())),
        allow_blank_data_disks=bool(raw.get("allowBlankDataDisks", False)),
        allowed_prometheus_hosts=frozenset(raw.get("allowedPrometheusHosts", ())),
        allowed_storage_classes=frozenset(raw.get("allowedStorageClasses", ())),
    )


def _expected(items: list[dict[str, str]] | None) -> tuple[Expected, ...]:
    return tuple(Expected(i["path"], i["message"]) for i in items or ())


def load_case(path: Path) -> Case:
    """Read one case file (raises on a malformed file: the corpus itself is under test)."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    if doc["operation"] not in OPERATIONS:
        raise ValueError(f"{path.name}: operation must be one of {OPERATIONS}")
    expect = doc["expect"]
    return Case(
        name=path.stem,
        description=doc["description"],
        operation=doc["operation"],
        object=doc["object"],
        old=doc.get("old"),
        allowed=bool(expect["allowed"]),
        reasons=_expected(expect.get("reasons")),
        warnings=_expected(expect.get("warnings")),
        rejected_by=doc.get("rejectedBy"),
        settings=settings_from(doc.get("settings")),
    )


def load_cases(folder: Path = HERE) -> list[Case]:
    """Every case in the folder, sorted by file name."""
    return [load_case(p) for p in sorted(folder.glob("*.yaml"))]
