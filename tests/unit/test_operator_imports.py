"""The operator process does not import numpy (~15 MiB of RSS per process, issue 13's memory
targets): the forecast imports it only when a pool pre-warms, the webhook's depth check never."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import gpucellpool.operator.app, gpucellpool.operator.run, autoscaler.loop, webhook.server
from autoscaler.policy.forecast import forecast_demand
from webhook.body_depth import nesting_depth
assert nesting_depth(b'{"a": [1, {"b": "]]"}]}') == 3
print("numpy" in sys.modules)
print(forecast_demand([(0.0, 1.0), (60.0, 2.0), (120.0, 3.0)], 120.0, 60.0))
print("numpy" in sys.modules)
"""


def test_the_operator_imports_numpy_only_for_a_forecast() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    assert out[0] == "False", "an operator module imports numpy at import time"
    assert abs(float(out[1]) - 4.0) < 1e-9  # the Theil-Sen line through the samples, 60 s on
    assert out[2] == "True"
