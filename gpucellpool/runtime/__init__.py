"""The controllers' runtime: clock, keyed runner, leader election, shards.

It also holds the leaf helpers the client door (``gpucellpool.kube``) needs below the
controllers: ``errors`` (``UserError``, a mistake the user can fix) and ``metrics_access`` (who
may read ``/metrics``: pure rules, reviewed through the door).

Why this package exists: the autoscaling loop and the provisioner's driver are two shells of the
same shape (one task per pool, woken by watch events, requeued, backed off). What they share lives
here, below both of them: it imports only the API layer (``gpucellpool.api.clock``) and the
standard library, never a controller, a client library or the composition root (an
import-linter contract says so).
"""
