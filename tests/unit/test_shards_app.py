"""The composition root with ``--shards 2``: one elector per shard Lease, and per-pool gates.

What these prove: ``App`` builds one elector per shard on ``<lease-name>-shard-k``, its own
shard preferred; a pool is decided at all only while its shard is held (unsharded, a standby
decides every pool); a pool's status metrics are recorded only while this process holds the pool's
shard; losing one shard forgets that shard's pools' series and keeps the other's; gaining it
back records its pools again as a first sight, and leaves the other shard's pools (their
published outcome, their status metrics) as they were. Unsharded, ``App`` keeps one elector
on today's Lease name.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from gpucellpool.kube.access import Access
from gpucellpool.kube.rest import RestClient
from gpucellpool.kube.transport import Connection
from gpucellpool.operator.app import App
from gpucellpool.operator.settings import Settings
from gpucellpool.runtime.shards import shard_of
from tests.unit.test_loop_fakes import pool_manifest
from tests.unit.test_status_metrics import row, status


def _app(registry: CollectorRegistry, **settings: Any) -> App:
    return App(
        Settings(identity="a", lease_namespace="ns", pool_namespace="ns", **settings),
        RestClient(Connection(Access("http://127.0.0.1:9"))),  # never contacted
        registry=registry,
    )


def _raw(name: str) -> dict[str, Any]:
    body = status(row("c-0", "Booting", 0)).model_dump(mode="json", by_alias=True)
    return {"metadata": {"namespace": "ns", "name": name}, "status": body}


def _held(reg: CollectorRegistry, pool: str) -> float | None:
    labels = {"namespace": "ns", "pool": pool, "state": "held"}
    return reg.get_sample_value("gpucell_physical_gpus", labels)


def _one_pool_per_shard() -> tuple[str, str]:
    names = [f"p{i}" for i in range(20)]
    return (
        next(n for n in names if shard_of("ns", n, 2) == 0),
        next(n for n in names if shard_of("ns", n, 2) == 1),
    )


async def test_unsharded_app_keeps_one_elector_on_todays_lease() -> None:
    app = _app(CollectorRegistry())
    try:
        assert [e.settings.name for e in app.election.electors] == ["gpucellpool-autoscaler"]
        assert app.elector is app.election.electors[0] and app.elector.settings.preferred
        assert app._decides(("ns", "any"))  # a standby decides too (warm), writing nothing
    finally:
        await app.autoscaler.close()
        await app.infra.close()


async def test_sharded_app_records_and_forgets_per_shard() -> None:
    reg = CollectorRegistry()
    app = _app(reg, shards=2, shard_index=1)
    mine, theirs = _one_pool_per_shard()  # shard 0, shard 1
    try:
        electors = app.election.electors
        assert [e.settings.name for e in electors] == [
            "gpucellpool-autoscaler-shard-0",
            "gpucellpool-autoscaler-shard-1",
        ]
        assert [e.settings.preferred for e in electors] == [False, True]
        assert app.elector is electors[1]
        electors[1].is_leader = True  # only shard 1 held
        for name in (mine, theirs):
            app.pool_caches[0].objects[f"ns/{name}"] = _raw(name)
            app._pool_changed("ADDED", _raw(name))
        assert (_held(reg, mine), _held(reg, theirs)) == (None, 0)
        assert app.gate.owns(("ns", theirs)) and not app.gate.owns(("ns", mine))
        assert app._decides(("ns", theirs)) and not app._decides(("ns", mine))

        electors[0].is_leader = True  # shard 0 taken over (its process died)
        app._leadership(True, shard=0)
        assert (_held(reg, mine), _held(reg, theirs)) == (0, 0)
        assert app._decides(("ns", mine))

        electors[0].is_leader = False  # handed back: only shard 0's series go
        app._leadership(False, shard=0)
        assert (_held(reg, mine), _held(reg, theirs)) == (None, 0)
    finally:
        await app.autoscaler.close()
        await app.infra.close()


async def test_a_shard_changing_hands_leaves_the_other_shards_pools_alone() -> None:
    app = _app(CollectorRegistry(), shards=2, shard_index=1)
    mine, theirs = _one_pool_per_shard()  # shard 0 (taken over below), shard 1 (held)
    try:
        electors = app.election.electors
        electors[1].is_leader = True
        for name in (mine, theirs):
            raw = {**pool_manifest(name), "status": _raw(name)["status"]}
            app.pool_caches[0].objects[f"ns/{name}"] = raw
            app._pool_changed("ADDED", raw)
        seen = app.status_metrics._seen[("ns", theirs)]
        states = [app.autoscaler.pools[("ns", name)] for name in (mine, theirs)]
        for state in states:
            state.event_reason = "ScaledUp"  # what was published in the term so far
        electors[0].is_leader = True
        app._leadership(True, shard=0)
        assert states[0].event_reason is None  # shard 0's new term: re-read, publish afresh
        assert states[1].event_reason == "ScaledUp"  # shard 1's term goes on untouched
        assert app.status_metrics._seen[("ns", theirs)] is seen  # not re-observed
        assert ("ns", mine) in app.status_metrics._seen  # a first sight in the new term
    finally:
        await app.autoscaler.close()
        await app.infra.close()
