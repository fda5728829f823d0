"""The pinned external binaries the integration tests need, or a clear skip (a plain module).

Why this module exists: helm (chart tests), promtool (alert rules) and prometheus (live alert
test) come from the harness's binary cache the same way, and each test file used to repeat the
same find-or-skip, fail-under-CI block.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

from simulations.harness.binaries import BinaryError, ensure


def required_binary(name: str) -> Path:
    """``name`` from ``simulations.harness.binaries`` (found or fetched); without it the test is
    skipped, or fails when ``CI=true``."""
    try:
        return ensure([name])[name]
    except BinaryError as exc:
        unavailable(f"{name} unavailable: {exc}")


def unavailable(reason: str) -> NoReturn:
    """A part the test needs is missing: a failure under ``CI=true``, else a skip."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: a missing part is a failure)")
    pytest.skip(reason)
