"""The controllers' runtime: the system clock and the one keyed runner.

Why this package exists: the autoscaling loop and the provisioner's driver are two shells of the
same shape (one task per pool, woken by watch events, requeued, backed off). What they share lives
here, below both of them: it imports only the API layer (``gpucellpool.api.clock``) and the
standard library, never a controller, a client library or the composition root (an
import-linter contract says so).
"""
