"""Table-driven admission tests: every corpus case, and every shipped sample, through the rules.

The corpus (tests/unit/webhook_corpus/*.yaml) is the executable statement of the webhook's
contract: each bad manifest names the field paths it must be refused at and a phrase each
message must contain; each good one must be admitted (with the listed warnings). Every
GPUCellPool in config/samples must be admitted, in default and in strict guestTemplate mode.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.webhook_corpus import Case, Expected, load_cases
from webhook.rules import (
    FieldError,
    RuleSettings,
    Verdict,
    validate_create,
    validate_scale,
    validate_update,
)

ROOT = Path(__file__).resolve().parents[2]
CASES = load_cases()


def run(case: Case) -> Verdict:
    if case.operation == "CREATE":
        return validate_create(case.object, case.settings)
    if case.operation == "UPDATE":
        return validate_update(case.old, case.object, case.settings)
    return validate_scale(case.old, case.object, case.settings)


def _matches(expected: Expected, found: tuple[FieldError, ...]) -> bool:
    return any(f.path == expected.path and expected.message in f.message for f in found)


def test_corpus_is_big_enough() -> None:
    bad = [c for c in CASES if not c.allowed]
    assert len(bad) >= 40
    assert {c.operation for c in bad} == {"CREATE", "UPDATE", "SCALE"}
    assert all(c.reasons for c in bad), "every bad case names at least one expected reason"
    assert all(c.name.startswith("bad-" if not c.allowed else "good-") for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_case(case: Case) -> None:
    verdict = run(case)
    assert verdict.allowed is case.allowed, verdict.message() or verdict.warning_messages()
    for expected in case.reasons:
        assert _matches(expected, verdict.reasons), (expected, verdict.reasons)
    for expected in case.warnings:
        assert _matches(expected, verdict.warnings), (expected, verdict.warnings)
    for item in verdict.reasons + verdict.warnings:
        assert item.path and item.message
        assert str(item).startswith(item.path + ": ")


def _samples() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted((ROOT / "config" / "samples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(doc, dict) and doc.get("kind") == "GPUCellPool":
                found.append((path.name, doc))
    return found


SAMPLES = _samples()


def test_there_are_samples() -> None:
    assert len(SAMPLES) >= 5


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
@pytest.mark.parametrize(("name", "sample"), SAMPLES, ids=[n for n, _ in SAMPLES])
def test_samples_are_admitted(name: str, sample: dict[str, Any], strict: bool) -> None:
    settings = RuleSettings(strict_guest_template=strict)
    verdict = validate_create(sample, settings)
    assert verdict.allowed, f"{name}: {verdict.message()}"
    assert verdict.warnings == (), verdict.warning_messages()
    assert validate_update(sample, sample, settings).allowed
    with_namespace = {**sample, "metadata": {**sample["metadata"], "namespace": "team-a"}}
    assert validate_create(with_namespace, settings).allowed
