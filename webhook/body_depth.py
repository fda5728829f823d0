"""How deeply a JSON body nests, judged on the bytes before anything decodes them.

Why this module exists: Python's ``json`` decoder recurses once per nesting level, so a body of
a few kilobytes nested a thousand deep raises ``RecursionError`` inside the server (a 500 with
a traceback), and a rule that walks the decoded tree recurses again. A GPUCellPool review nests
about fifteen levels; refusing anything past ``MAX_DEPTH`` before decoding keeps every later
stage well inside the interpreter's recursion limit. The check is pure and runs at C speed:
string literals (where brackets are just text) are dropped with one regex pass, the brackets
left become +1/-1 steps (signed bytes), and the running sum's maximum is the depth. No numpy: the
operator process would import it (~15 MiB) for this one sum.
"""

from __future__ import annotations

import re
from array import array
from itertools import accumulate

MAX_DEPTH = 64
"""Deepest nesting read: a pool's AdmissionReview nests ~15 levels; rules recurse per level."""

_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
"""Openers to +1 and closers to -1, read as signed bytes."""


def nesting_depth(body: bytes) -> int:
    """The deepest ``[``/``{`` nesting outside string literals (0 for a scalar document)."""
    brackets = _STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    steps = array("b", brackets.translate(_STEPS))
    return max(0, max(accumulate(steps), default=0))


def depth_problem(body: bytes, limit: int = MAX_DEPTH) -> str | None:
    """A one-line reason to refuse ``body`` unread, or None when it nests within ``limit``."""
    depth = nesting_depth(body)
    if depth > limit:
        return f"body nests {depth} levels deep; at most {limit} are read (a pool needs ~15)"
    return None
