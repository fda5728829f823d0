"""The simulator's event kinds, numbered in the order they run at one instant.

Why this module exists: the event loop (``engine.sim``) and the cells' handlers
(``engine.cell_lifecycle``) push onto one heap of (time, kind, sequence, payload), so the kind
is the tie-break at one instant: pod ends, boots, cells opening to pods (a boot's end plus
``bind_delay_seconds``), drains, drain timeouts, arrivals, ticks, reactions, timeline samples,
then a held decision's actions; ties by insertion order (the sequence). The numbers are that
order, so they are kept in one place.
"""

END, BOOT, OPEN, DRAIN, DRAIN_TIMEOUT, ARRIVAL, TICK, REACT, SAMPLE = range(9)
EXECUTE = 9  # a held decision's actions (engine.exec_lag), after the samples of its instant
