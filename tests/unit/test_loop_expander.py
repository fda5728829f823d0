"""The loop's share of pending pods between pools of one workload cluster (in-memory ports).

What these prove: two Active pools matching one pending pod publish one scale-up between them
(the higher priority), and both explain it in lastDecision.message; a priority change on one
pool re-shares at once (the other pool is woken); a Shadow pool never takes a pod from an
Active one, yet shows in its own decision what it would take; pools of another workload
cluster are not rivals; pools reaching one cluster through two Secrets (two namespaces) are
rivals once the cluster's identity is known, each Secret its own cluster until then, and the
identity wake re-shares at once.
"""

from __future__ import annotations

from tests.unit import test_loop
from tests.unit.test_loop_fakes import pending_pod, pool_manifest

world = test_loop.world  # the loop's fixture: an Autoscaler on fakes and a virtual clock
last = test_loop.last_decision


async def test_one_pod_two_pools_one_scale_up_explained_on_both(world) -> None:  # type: ignore[no-untyped-def]
    scaler, workload, writer, clock = world
    scaler.pool_event("ADDED", pool_manifest("low"))
    scaler.pool_event("ADDED", pool_manifest("high", priority=10))
    await clock.advance(0.2)
    workload.pods["p"] = pending_pod("p")
    scaler.cluster_event("wl")
    await clock.advance(0.2)
    high, low = last(writer, "high"), last(writer, "low")
    assert (high["reason"], high["desiredReplicas"]) == ("ScaledUp", 1)
    assert (low["reason"], low["desiredReplicas"], low["pendingAsks"]) == ("Idle", 0, 0)
    assert "1 pending pod matched this pool but went to ns/high (priority)" in str(low["message"])
    assert (
        "took 1 pending pod that was also matched by ns/low (priority)"
        in str(high["message"]).lower()
    )


async def test_a_priority_change_moves_the_pod_at_once(world) -> None:  # type: ignore[no-untyped-def]
    scaler, workload, writer, clock = world
    scaler.pool_event("ADDED", pool_manifest("a", maxReplicas=20))
    scaler.pool_event("ADDED", pool_manifest("b"))
    workload.pods["p"] = pending_pod("p")
    await clock.advance(0.2)
    assert last(writer, "a")["reason"] == "ScaledUp"  # a tie: the name that sorts first
    assert "went to ns/a (name)" in str(last(writer, "b")["message"])
    raised = pool_manifest("b", priority=1)
    raised["metadata"]["generation"] = 2
    scaler.pool_event("MODIFIED", raised)
    await clock.advance(0.2)  # far less than the 10 s tick: the event re-shared both pools
    assert last(writer, "b")["reason"] == "ScaledUp"
    assert "went to ns/b (priority)" in str(last(writer, "a")["message"])


async def test_a_shadow_pool_never_takes_from_an_active_one(world) -> None:  # type: ignore[no-untyped-def]
    scaler, workload, writer, clock = world
    scaler.pool_event("ADDED", pool_manifest("active"))
    scaler.pool_event("ADDED", pool_manifest("shadow", mode="Shadow", priority=10))
    workload.pods["p"] = pending_pod("p")
    await clock.advance(0.2)
    active, shadow = last(writer, "active"), last(writer, "shadow")
    assert (active["reason"], active["act"]) == ("ScaledUp", True)
    assert "took 1 pending pod" not in str(active["message"]).lower()
    assert (shadow["reason"], shadow["act"]) == ("ScaledUp", False)  # what it would do
    assert "also matched by ns/active (priority)" in str(shadow["message"])


async def test_pools_of_another_workload_cluster_are_not_rivals(world) -> None:  # type: ignore[no-untyped-def]
    scaler, workload, writer, clock = world
    scaler.pool_event("ADDED", pool_manifest("here"))
    scaler.pool_event("ADDED", pool_manifest("there", secret="other", priority=10))
    workload.pods["p"] = pending_pod("p")
    await clock.advance(0.2)
    here = last(writer, "here")
    assert here["reason"] == "ScaledUp" and "matched" not in str(here["message"])


async def test_pools_on_two_secrets_to_one_cluster_share_its_pods(world) -> None:  # type: ignore[no-untyped-def]
    scaler, workload, writer, clock = world
    workload.same_cluster = {"wl-a": "uid-1", "wl-b": "uid-1"}  # both kube-system UIDs known
    scaler.pool_event("ADDED", pool_manifest("here", ns="team-a", secret="wl-a"))
    scaler.pool_event("ADDED", pool_manifest("there", ns="team-b", secret="wl-b", priority=10))
    workload.pods["p"] = pending_pod("p")
    await clock.advance(0.2)
    here, there = last(writer, "here"), last(writer, "there")
    assert (there["reason"], there["desiredReplicas"]) == ("ScaledUp", 1)
    assert (here["reason"], here["desiredReplicas"], here["pendingAsks"]) == ("Idle", 0, 0)
    assert "went to team-b/there (priority)" in str(here["message"])


async def test_until_the_identity_is_known_each_secret_is_its_own_cluster(world) -> None:  # type: ignore[no-untyped-def]
    scaler, workload, writer, clock = world
    scaler.pool_event("ADDED", pool_manifest("here", ns="team-a", secret="wl-a"))
    scaler.pool_event("ADDED", pool_manifest("there", ns="team-b", secret="wl-b", priority=10))
    workload.pods["p"] = pending_pod("p")
    await clock.advance(0.2)
    assert last(writer, "here")["reason"] == "ScaledUp"  # the documented fallback: per Secret
    assert "matched" not in str(last(writer, "here")["message"])
    workload.same_cluster = {"wl-a": "uid-1", "wl-b": "uid-1"}
    scaler.cluster_event("uid-1")  # what the app does on an IDENTITY wake
    await clock.advance(0.2)  # far less than the tick: the wake re-shared both pools
    assert "went to team-b/there (priority)" in str(last(writer, "here")["message"])
