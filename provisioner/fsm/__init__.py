"""The provisioner's pure core: cell state machine, membership, bootstrap, manifests, rollout,
drain and identity.

Why this package exists: every decision the provisioner takes about a cell is a pure function
of typed observations and ``now_s`` here, so it can be tested table-driven and replayed by the
simulator; the asyncio shell around it only observes, calls these functions and applies the
results. Nothing in this package does I/O, reads a clock or logs (import-linter enforces it).
"""
