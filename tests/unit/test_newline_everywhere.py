"""A newline (or another control character) anywhere in a shipped sample's spec is refused.

Why this test exists: finding 3 of issue 12 was a trailing newline slipping through patterns
checked with ``re.match`` and ``$``; fields without a pattern (Secret, image and cluster names)
let it through too. This takes every GPUCellPool in config/samples, appends a control
character to each string value and each map key in turn (metadata.name included), and asserts
the rules refuse every one, at that field's path or a parent's. Node annotation values are
the documented exception (free text, only patched onto Nodes).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.rules import RuleSettings, validate_create
from webhook.rules.control_chars import _CONTROL, FREE_TEXT_VALUES, check_control_chars
from webhook.rules.verdict import Findings

ROOT = Path(__file__).resolve().parents[2]
Step = str | int


def _samples() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted((ROOT / "config" / "samples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(doc, dict) and doc.get("kind") == "GPUCellPool":
                found.append((f"{path.stem}/{doc['metadata']['name']}", doc))
    return found


def _places(node: Any, path: tuple[Step, ...] = ()) -> Iterator[tuple[tuple[Step, ...], bool]]:
    """(path, is_key) for every string value and every map key under ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*path, key), True
            yield from _places(value, (*path, key))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _places(item, (*path, i))
    elif isinstance(node, str):
        yield path, False


def _smuggled(doc: dict[str, Any], path: tuple[Step, ...], is_key: bool, char: str) -> Any:
    copied = copy.deepcopy(doc)
    parent: Any = copied
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if is_key:
        parent[f"{last}{char}"] = parent.pop(last)
    else:
        parent[last] = f"{parent[last]}{char}"
    return copied


def _cases() -> list[tuple[str, dict[str, Any], tuple[Step, ...], bool]]:
    cases = []
    for name, doc in _samples():
        for path, is_key in _places({"metadata": {"name": doc["metadata"]["name"]}}):
            if not is_key:
                cases.append((name, doc, path, False))
        for path, is_key in _places(doc["spec"], ("spec",)):
            parent = ".".join(str(p) for p in path[:-1])
            if not is_key and parent in FREE_TEXT_VALUES:
                continue
            cases.append((name, doc, path, is_key))
    return cases


CASES = _cases()


def test_the_samples_have_many_strings() -> None:
    assert len(CASES) >= 100


def test_node_annotation_values_may_be_free_text_but_not_their_keys() -> None:
    _, sample = _samples()[0]
    pool = copy.deepcopy(sample)
    node = pool["spec"]["workloadCluster"].setdefault("node", {})
    node["annotations"] = {"example.com/notes": "line one\nline two"}
    assert validate_create(pool, RuleSettings()).allowed
    node["annotations"] = {"example.com/notes\n": "x"}
    assert not validate_create(pool, RuleSettings()).allowed


@pytest.mark.parametrize("char", ["\n", "\r", "\t", "\x00", "\u2028"], ids=repr)
def test_a_control_character_anywhere_is_refused(char: str) -> None:
    admitted = []
    for name, doc, path, is_key in CASES:
        verdict = validate_create(_smuggled(doc, path, is_key, char), RuleSettings())
        if verdict.allowed:
            admitted.append(f"{name}: {'key ' if is_key else ''}{'.'.join(map(str, path))}")
    assert admitted == []


_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=5)
_SPEC = st.recursive(
    st.none() | st.integers() | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=20,
)


def _holds_control(node: Any) -> bool:
    if isinstance(node, dict):
        return any(_CONTROL.search(k) or _holds_control(v) for k, v in node.items())
    if isinstance(node, list):
        return any(_holds_control(v) for v in node)
    return isinstance(node, str) and _CONTROL.search(node) is not None


@settings(max_examples=400, deadline=None)
@given(spec=st.dictionaries(_TEXT, _SPEC, max_size=4))
def test_the_fast_precheck_never_hides_a_control_character(spec: dict[str, Any]) -> None:
    found = Findings()
    check_control_chars(spec, found)
    assert bool(found.errors) == _holds_control(spec)
