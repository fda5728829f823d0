"""The throughput benchmark's parallel runs give what one-after-another runs give.

Why this file exists: issue 14's wall-time targets are met by running the oracle and the
policies in local processes at once (tests/bench/throughput.py); that must change no number
of the benchmark, only when each run happens.
"""

from __future__ import annotations

from autoscaler.policy.types import CellShape
from simulations.simulator.traces import synthetic
from tests.bench.throughput import LONGEST_FIRST, ORACLE, run_all


def test_parallel_runs_equal_serial_runs_in_the_same_order() -> None:
    pods = synthetic(400, days=1.0, seed=3)
    shape = CellShape(gpus=4)
    serial = run_all(pods, shape, workers=1)
    parallel = run_all(pods, shape, workers=2)
    assert [r.name for r in parallel.runs] == list(LONGEST_FIRST)
    assert [r.result for r in parallel.runs] == [r.result for r in serial.runs]
    assert [r.decide_calls for r in parallel.runs] == [r.decide_calls for r in serial.runs]
    assert parallel.run(ORACLE).decide_calls == 0
    assert all(r.result.pods == 400 and r.result.unplaced == 0 for r in parallel.runs)
    assert all(r.cpu_seconds > 0 and r.wall_seconds > 0 for r in parallel.runs)
    assert parallel.workers == 2
    assert parallel.cpu_seconds == sum(r.cpu_seconds for r in parallel.runs)
