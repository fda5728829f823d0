"""The error value manifest readers return instead of raising.

Why this module exists: the loop reads untrusted pod manifests; a malformed one must be logged
and skipped, never crash the loop. Readers return an ``AskError`` naming the field instead.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AskError:
    """Why a manifest could not be read. ``field`` is a JSON-path-like name of the culprit."""

    field: str
    message: str
