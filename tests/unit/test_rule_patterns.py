"""Every pattern check in the admission rules is anchored to the whole string.

Why this test exists: Python's ``$`` also matches just before a final newline, so
``re.match(r"^[a-z]+$", "abc\\n")`` succeeds. The rules once checked label keys, interface
names, MACs and object names that way, and a trailing newline slipped into the join template
(cloud-init that no longer parsed). The static scan refuses ``match``/``search`` with a
``$``-anchored pattern in any rule module or API model; the behavioural test shows that each
module-level pattern, used the way the module uses it, refuses a trailing newline.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

import gpucellpool.api
import webhook.rules
from gpucellpool.api.conditions import Condition
from gpucellpool.api.durations import parse_duration

PACKAGES = (webhook.rules, gpucellpool.api)


def _modules() -> list[str]:
    names = []
    for package in PACKAGES:
        for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
            names.append(info.name)
    return sorted(names)


MODULES = _modules()


def _dollar_patterns(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = re.compile("...$")`` (also f-strings ending in ``$``)."""
    found: dict[str, str] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else None
        if not isinstance(target, ast.Name) or not isinstance(node, ast.Assign):
            continue
        call = node.value
        if isinstance(call, ast.Call) and ast.unparse(call.func) == "re.compile" and call.args:
            source = ast.unparse(call.args[0])
            if source.rstrip("'\"").endswith("$"):
                found[target.id] = source
    return found


def offences(source: str) -> list[str]:
    """``re.match``/``re.search`` (or ``P.match``/``P.search``) with a ``$``-anchored pattern."""
    tree = ast.parse(source)
    anchored = _dollar_patterns(tree)
    bad = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in ("match", "search"):
            continue
        owner = ast.unparse(node.func.value)
        if owner == "re" and node.args:
            if ast.unparse(node.args[0]).rstrip("'\"").endswith("$"):
                bad.append(f"line {node.lineno}: re.{node.func.attr} with a $-anchored pattern")
        elif owner in anchored:
            bad.append(f"line {node.lineno}: {owner}.{node.func.attr} ({anchored[owner]})")
    return bad


def test_the_scan_finds_the_old_mistake() -> None:
    old = 'import re\nNAME = re.compile(r"^[a-z]+$")\nok = NAME.match(x)\nre.search(r"a$", y)\n'
    assert len(offences(old)) == 2
    assert (
        offences(old.replace("NAME.match", "NAME.fullmatch").replace("re.search", "re.fullmatch"))
        == []
    )


def test_there_are_rule_modules_to_scan() -> None:
    assert len(MODULES) >= 15
    assert "webhook.rules.workload_rules" in MODULES and "gpucellpool.api.durations" in MODULES


@pytest.mark.parametrize("module", MODULES)
def test_no_dollar_anchored_match_or_search(module: str) -> None:
    path = Path(importlib.import_module(module).__file__ or "")
    assert offences(path.read_text(encoding="utf-8")) == []


def _anchored_module_patterns() -> list[tuple[str, re.Pattern[str]]]:
    found = []
    for module in MODULES:
        for name, value in vars(importlib.import_module(module)).items():
            if isinstance(value, re.Pattern) and str(value.pattern).endswith("$"):
                found.append((f"{module}.{name}", value))
    return found


ANCHORED = _anchored_module_patterns()


def test_the_behavioural_check_sees_the_rule_patterns() -> None:
    names = {name.rsplit(".", 1)[1] for name, _ in ANCHORED}
    assert {"QUALIFIED_NAME", "LABEL_VALUE", "MAC", "INTERFACE_NAME", "OBJECT_NAME"} <= names
    assert "DNS1123_SUBDOMAIN" in names


SAMPLE_VALUES = ("a", "a0", "ab", "02:00:00:00:00:01", "1", "5m", "0", "gpu", "x.y")


@pytest.mark.parametrize(("name", "pattern"), ANCHORED, ids=[n for n, _ in ANCHORED])
def test_fullmatch_refuses_a_trailing_newline(name: str, pattern: re.Pattern[str]) -> None:
    accepted = [v for v in SAMPLE_VALUES if pattern.fullmatch(v)]
    assert accepted, f"{name}: no sample value fits; add one"
    for value in accepted:
        assert pattern.match(value + "\n") is not None, "the trap this test guards against"
        assert pattern.fullmatch(value + "\n") is None


def test_the_api_models_refuse_a_trailing_newline_too() -> None:
    """Pydantic's ``Field(pattern=...)`` runs on the Rust regex engine, where ``$`` is the end
    of the text (as in the apiserver's Go engine for the CRD's patterns); the duration parser is
    Python's and anchors with ``fullmatch``."""
    at = "2026-12-01T00:00:00Z"
    assert Condition.model_validate({"type": "Ready", "status": "True", "reason": "Ok",
                                     "lastTransitionTime": at})  # fmt: skip
    with pytest.raises(ValidationError):
        Condition.model_validate(
            {"type": "Ready\n", "status": "True", "reason": "Ok", "lastTransitionTime": at}
        )
    assert parse_duration("5m") == 300.0
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration("5m\n")
