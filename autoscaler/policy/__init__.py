"""The pure scaling policy: demand, pool fit, packing, ``decide``. No I/O, no clock, no logs."""
