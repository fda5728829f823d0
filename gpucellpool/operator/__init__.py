"""The operator: the composition root, above the controllers.

Why this package exists: it is the one place that knows every part. It builds the process
(``run``: settings, flags, logging, preflight), owns the shared cluster state and the runners
(``app``, ``provisioner_wiring``, ``provisioning``, ``infra_nodes``), implements the
autoscaler's ports over the one client door (``adapters``) and serves the health and metrics
endpoints. The controllers (autoscaler, provisioner, webhook) never import it; it imports them.
"""
