"""Field paths, raw-dict lookups and the translation of pydantic errors into field errors.

Why this module exists: an AdmissionReview carries the object as a raw dict, and a wrong type
anywhere must come back as a clean ``spec.cell.gpu.count: ...`` message, never an exception.
Pydantic reports a location tuple and an English sentence; this module turns the tuple into the
path Kubernetes users know (``spec.workloadCluster.node.taints[0].effect``,
``metadata.labels[app.kubernetes.io/name]``) and the sentence into one that says what to do.
Input values are never echoed for strings (they might be credentials pasted in the wrong place).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from webhook.rules.verdict import Findings

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# pydantic inserts schema tags into locations for unions and validator functions.
_SCHEMA_TAG = re.compile(r"^(function-|lax-|json-or-python|is-instance|literal\[)|\[")

M = TypeVar("M", bound=BaseModel)


def join(base: str, key: str | int) -> str:
    """``base.key`` for identifiers, ``base[key]`` for list indices and odd map keys.

    A key with a control or other unprintable character is JSON-quoted (``labels["a\\n"]``),
    so a path never carries a raw newline into a message, an Event or a log line.
    """
    if isinstance(key, int):
        return f"{base}[{key}]"
    if not key.isprintable():
        return f"{base}[{json.dumps(key)}]"
    if _IDENT.fullmatch(key):
        return f"{base}.{key}" if base else key
    return f"{base}[{key}]"


def loc_to_path(base: str, loc: Sequence[str | int]) -> str:
    """A pydantic location as a field path under ``base`` (schema tags dropped)."""
    path = base
    for part in loc:
        if isinstance(part, str) and _SCHEMA_TAG.search(part) and part != "[key]":
            continue
        if part == "[key]":
            path = f"{path} (key)"
            continue
        path = join(path, part)
    return path or "(root)"


def get(obj: Any, *keys: str) -> Any:
    """``obj[k1][k2]...`` through dicts, or None when any step is missing or not a dict."""
    node = obj
    for key in keys:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


_JSON_TYPES: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "boolean"),
    ((int, float), "number"),
    (str, "string"),
    (Mapping, "object"),
    ((list, tuple), "array"),
)


def type_name(value: Any) -> str:
    """The JSON type name of a value (for messages)."""
    if value is None:
        return "null"
    for kind, name in _JSON_TYPES:
        if isinstance(value, kind):
            return name
    return type(value).__name__


_HINTS: dict[str, tuple[str, str]] = {
    "missing": ("is required", "set it"),
    "int_type": ("must be an integer", "write a whole number"),
    "int_parsing": ("must be an integer", "write a whole number"),
    "int_from_float": ("must be a whole number", "drop the fraction"),
    "bool_type": ("must be true or false", "write it unquoted"),
    "bool_parsing": ("must be true or false", "write it unquoted"),
    "string_type": ("must be a string", "quote the value"),
    "dict_type": ("must be an object", "write it as a mapping (key: value)"),
    "list_type": ("must be a list", "write it as a sequence (- item)"),
    "model_type": ("must be an object", "write it as a mapping (key: value)"),
    "model_attributes_type": ("must be an object", "write it as a mapping (key: value)"),
    "json_invalid": ("is not valid JSON", "fix the document"),
    "json_type": ("is not valid JSON", "fix the document"),
}


def _bounded(kind: str, ctx: Mapping[str, Any]) -> str | None:
    bounds = {
        "greater_than": ("must be greater than", "gt"),
        "greater_than_equal": ("must be at least", "ge"),
        "less_than": ("must be less than", "lt"),
        "less_than_equal": ("must be at most", "le"),
        "string_too_short": ("must have at least this many characters:", "min_length"),
        "string_too_long": ("must have at most this many characters:", "max_length"),
        "too_short": ("must have at least this many items:", "min_length"),
        "too_long": ("must have at most this many items:", "max_length"),
    }
    if kind not in bounds:
        return None
    text, key = bounds[kind]
    if kind == "string_too_short" and ctx.get(key) == 1:
        return "must not be empty; set a value"
    return f"{text} {ctx.get(key)}; change the value"


def describe(error: Mapping[str, Any]) -> str:
    """A pydantic error dict as a message that says what to do (no string inputs echoed)."""
    kind = str(error.get("type", ""))
    ctx: Mapping[str, Any] = error.get("ctx") or {}
    if kind in _HINTS:
        what, todo = _HINTS[kind]
        got = f" (got {type_name(error.get('input'))})" if kind.endswith("_type") else ""
        return f"{what}{got}; {todo}"
    bounded = _bounded(kind, ctx)
    if bounded:
        return bounded
    if kind in {"literal_error", "enum"}:
        return f"must be one of {ctx.get('expected')}; use one of them"
    if kind == "string_pattern_mismatch":
        return f"must match the pattern {ctx.get('pattern')}; fix the value"
    if kind == "value_error":
        text = str(error.get("msg", "")).removeprefix("Value error, ")
        given = error.get("input")
        if isinstance(given, str):  # never echo a string input (it may be a credential)
            text = text.replace(f" {given!r}", "").replace(repr(given), "the value")
        return text
    return f"{error.get('msg', 'invalid value')}; fix the value"


def parse(model: type[M], raw: Any, base: str, found: Findings) -> M | None:
    """Validate ``raw`` as ``model`` the way the apiserver reads JSON (strict types).

    On failure every pydantic error becomes a field error under ``base`` and None is returned.
    """
    try:
        text = json.dumps(raw, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        found.error(base or "(root)", f"is not a JSON document ({type(exc).__name__}); fix it")
        return None
    try:
        return model.model_validate_json(text, strict=True)
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            found.error(loc_to_path(base, err.get("loc", ())), describe(err))
        return None
    except RecursionError:
        found.error(base or "(root)", "is nested too deeply; flatten it")
        return None
