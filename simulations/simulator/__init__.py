"""The simulator: the production policy replayed offline on a virtual clock.

Why this package exists: the discrete-event engine, the trace loaders, the peer baselines,
the reports and the command-line tools built on them (``simulate``, ``sweep``, ``trace
record``) form one program that needs no cluster. It imports only the pure cores of the
product, never a live client, the harness or the twin; the twin and the demo build on it.
"""
