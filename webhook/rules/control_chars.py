"""No control characters in a pool's spec: every name, key and value is one line of text.

Why this module exists: Python's ``$`` once let a trailing newline through the rules' patterns
(now all ``fullmatch``), but most spec strings have no pattern at all: Secret, image, guest
class, claim template and cluster names, keys, versions. They end up in API paths, in the
SwiftGuest or Machine, in labels, or rendered into the join template that runs as root in the
guest, where a newline, carriage return, tab or NUL changes what the text means to the next
reader. So every key and string value under ``spec`` is refused if it holds one, whatever
field it is in. The one exception is Node annotation values, which Kubernetes lets be free
text and which are only patched onto Nodes. Values are never echoed (the path says where).
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Mapping
from typing import Any

from webhook.rules.paths import join
from webhook.rules.verdict import Findings

_CONTROL = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")
"""C0 controls (newline, carriage return, tab, NUL ...), DEL, NEL and the Unicode line and
paragraph separators."""
_ESCAPED = re.compile(r"\\[nrtbf]|\\u00[01][0-9a-fA-F]|[\x7f\x85\u2028\u2029]")
"""The same characters as JSON writes them (C0 controls escaped, the rest literal): a fast
pre-check on the encoded spec; a hit (or a false one, from an escaped backslash) means the
walk that finds the paths runs."""
FREE_TEXT_VALUES = frozenset({"spec.workloadCluster.node.annotations"})
"""Maps whose values (not keys) may be free text."""
MESSAGE = (
    "must not contain control characters (a newline, carriage return, tab or NUL would be "
    "carried into object names and the join template); remove them"
)


Steps = tuple[Any, ...]
"""A path as a linked tuple ``(parent_steps, key)``: cheap to build, joined only to report."""


def check_control_chars(spec: Any, found: Findings, base: str = "spec") -> None:
    """Refuse every key or string value under ``spec`` that holds a control character."""
    if not _may_hold_controls(spec):
        return
    queue: deque[tuple[Steps, Any]] = deque([((), spec)])
    while queue:
        steps, node = queue.popleft()
        if isinstance(node, str):
            if _CONTROL.search(node) and not _free_text(base, steps):
                _report(_path(base, steps), found)
        elif isinstance(node, Mapping):
            for key, value in node.items():
                child = (steps, str(key))
                if _CONTROL.search(str(key)):
                    _report(_path(base, child), found)
                queue.append((child, value))
        elif isinstance(node, list):
            queue.extend(((steps, i), item) for i, item in enumerate(node))


def _may_hold_controls(spec: Any) -> bool:
    try:
        encoded = json.dumps(spec, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):  # not plain JSON (a YAML date) or nested
        return True  # deeper than the encoder recurses: the walk below is iterative
    return _ESCAPED.search(encoded) is not None


def _free_text(base: str, steps: Steps) -> bool:
    return bool(steps) and _path(base, steps[0]) in FREE_TEXT_VALUES


def _path(base: str, steps: Steps) -> str:
    keys: list[str | int] = []
    while steps:
        steps, key = steps
        keys.append(key)
    path = base
    for key in reversed(keys):
        path = join(path, key)
    return path


def _report(path: str, found: Findings) -> None:
    if not found.covers(path):
        found.error(path, MESSAGE)
