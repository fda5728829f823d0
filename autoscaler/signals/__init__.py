"""Signals the autoscaler observes: pending HAMi demand and Prometheus utilisation.

Why this package exists: the control loop decides from observations, and each observation
comes from an outside system with its own failure modes. Each signal is split into a pure
part (names, query building, parsing, interpretation) and a thin async adapter behind a
``typing.Protocol``, so the policy and the simulator never touch a live client.

- ``promql``: Prometheus HTTP API response parsing and PromQL string escaping (pure).
- ``hami_metrics``: HAMi metric catalogue (current ``hami_*`` and legacy HAMi <= 2.8 names),
  query builders and the reading types (pure).
- ``hami_usage``: a query result -> per-node, per-GPU allocations + freshness verdict (pure).
- ``ports``: the ``MetricsSource`` Protocol, ``PrometheusUnavailable`` (no I/O; the clock is
  ``gpucellpool.api.clock.Clock``).
- ``prometheus``: the async httpx adapter (``PrometheusSource``) behind ``MetricsSource``.
- ``prometheus_config``: one adapter per pool from its spec and already-read Secret values.
"""
