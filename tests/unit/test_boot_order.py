"""A cancelled boot keeps its place among the twin's boots (simulations.demo.boot_order).

What these prove: the simulator is handed one boot per cell the twin created, in creation order;
a boot cancelled before its cell was Ready is estimated (at least how long it ran, at least the
slowest boot its wave measured) instead of being left out, which shifted every later cell onto
another cell's boot; the recorder records such a boot when it sees the cell leave.
"""

from __future__ import annotations

from simulations.demo.boot_order import BootSeen, boots_in_order
from simulations.demo.twin_measures import boots
from tests.unit.test_demo_exec_lag import guest, pool, recorder


def test_a_cancelled_boot_keeps_its_place_in_the_wave() -> None:
    wave = [
        BootSeen(10.0, 4, 17.0, censored=True),  # still booting when cancelled 17 s in
        BootSeen(10.0, 5, 16.0),
        BootSeen(10.0, 6, 16.5),
        BootSeen(30.0, 7, 15.0),  # the next wave
    ]
    assert boots_in_order(wave) == [17.0, 16.0, 16.5, 15.0]
    # cancelled early: at least the slowest boot its wave measured
    early = [BootSeen(10.0, 4, 3.0, censored=True), BootSeen(10.0, 5, 16.0)]
    assert boots_in_order(early) == [16.0, 16.0]
    # a wave with no measured boot: the median of all
    alone = [BootSeen(0.0, 0, 14.0), BootSeen(0.0, 1, 18.0), BootSeen(40.0, 2, 2.0, True)]
    assert boots_in_order(alone) == [14.0, 18.0, 16.0]


def test_the_recorder_keeps_a_boot_cancelled_before_its_cell_was_ready() -> None:
    rec, clock = recorder()
    rec._pool("MODIFIED", pool(3, {}))  # a wave of three at 0
    clock.t = 1.0
    for name in ("pool-0", "pool-1", "pool-2"):
        rec._guest("ADDED", guest(name))
    clock.t = 15.0
    rec._pool("MODIFIED", pool(3, {"pool-1": "Ready", "pool-2": "Ready"}))
    clock.t = 16.0
    rec._pool(
        "MODIFIED", pool(2, {"pool-1": "Ready", "pool-2": "Ready"})
    )  # cancel the spare pool-0
    clock.t = 16.5
    rec._pool("MODIFIED", pool(2, {"pool-0": "Deleting", "pool-1": "Ready", "pool-2": "Ready"}))
    # pool-0 stands first, as the simulator's lowest cell of the wave: it ran 16.5 s at least
    assert boots(rec) == [16.5, 15.0, 15.0]
    assert rec.cancelled_boots == [(0.0, 0.0, 16.5)]
