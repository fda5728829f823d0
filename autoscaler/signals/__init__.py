"""Signals the autoscaler observes: pending HAMi demand and Prometheus utilisation.

Why this package exists: the control loop decides from observations, and each observation
comes from an outside system with its own failure modes. Each signal is split into a pure
part (names, query building, parsing, interpretation) and a thin async adapter behind a
``typing.Protocol``, so the policy and the simulator never touch a live client.

- ``promql``: Prometheus HTTP API response parsing and PromQL string escaping (pure).
- ``hami_metrics``: HAMi metric catalogue (current ``hami_*`` and legacy HAMi <= 2.8 names),
  query builders and interpretation into per-node, per-GPU allocation readings (pure).
- ``prometheus``: the async httpx adapter (``PrometheusSource``) behind ``MetricsSource``.
"""
