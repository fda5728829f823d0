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

import re
from collections import deque
from collections.abc import Mapping
from typing import Any

from webhook.rules.paths import join
from webhook.rules.verdict import Findings

_CONTROL = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")
"""C0 controls (newline, carriage return, tab, NUL ...), DEL, NEL and the Unicode line and
paragraph separators."""
FREE_TEXT_VALUES = frozenset({"spec.workloadCluster.node.annotations"})
"""Maps whose values (not keys) may be free text."""
MESSAGE = (
    "must not contain control characters (a newline, carriage return, tab or NUL would be "
    "carried into object names and the join template); remove them"
)


def check_control_chars(spec: Any, found: Findings, base: str = "spec") -> None:
    """Refuse every key or string value under ``spec`` that holds a control character."""
    queue: deque[tuple[str, Any]] = deque([(base, spec)])
    while queue:
        path, node = queue.popleft()
        if isinstance(node, Mapping):
            free_values = path in FREE_TEXT_VALUES
            for key, value in node.items():
                child = join(path, str(key))
                if isinstance(key, str) and _CONTROL.search(key):
                    _report(child, found)
                if not (free_values and isinstance(value, str)):
                    queue.append((child, value))
        elif isinstance(node, list):
            queue.extend((join(path, i), item) for i, item in enumerate(node))
        elif isinstance(node, str) and _CONTROL.search(node):
            _report(path, found)


def _report(path: str, found: Findings) -> None:
    if not found.covers(path):
        found.error(path, MESSAGE)
