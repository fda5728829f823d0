"""Which pools an infrastructure Node change wakes (``fsm.host_wake``, ``infra_nodes``), and where
the outer-node drain's host reads come from (the Node mirror once synced, GETs before)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from gpucellpool.kube.cache import JSON, Query
from gpucellpool.operator.infra_nodes import InfraNodes
from provisioner.fsm.drain_outer import HostNode
from provisioner.fsm.host_wake import route_host_change

A, B = ("ns", "a"), ("ns", "b")
HOSTS = {A: frozenset({"h1", "h2"}), B: frozenset({"h2"})}


def test_a_cordon_wakes_only_the_pools_with_a_cell_on_that_host() -> None:
    wake = route_host_change("h1", HostNode("h1"), HostNode("h1", unschedulable=True), HOSTS)
    assert wake.pools == {A}
    assert "h1: now draining" in wake.reason
    both = route_host_change("h2", HostNode("h2", True), HostNode("h2"), HOSTS)
    assert both.pools == {A, B} and "schedulable" in both.reason


def test_drain_taints_wake_other_taints_do_not() -> None:
    plain = HostNode("h1")
    karpenter = HostNode("h1", taint_keys=frozenset({"karpenter.sh/disrupted"}))
    other = HostNode("h1", taint_keys=frozenset({"example.com/maintenance"}))
    assert route_host_change("h1", plain, karpenter, HOSTS).pools == {A}
    assert route_host_change("h1", karpenter, plain, HOSTS).pools == {A}
    quiet = route_host_change("h1", plain, other, HOSTS)
    assert quiet.pools == frozenset() and "unchanged" in quiet.reason


def test_unchanged_node_and_unknown_host_wake_nobody() -> None:
    assert not route_host_change("h1", HostNode("h1"), HostNode("h1"), HOSTS).pools
    cordon = route_host_change("h9", HostNode("h9"), HostNode("h9", True), HOSTS)
    assert not cordon.pools and "no pool has a cell on it" in cordon.reason


def test_a_host_appearing_or_disappearing_wakes_its_pools() -> None:
    assert route_host_change("h2", None, HostNode("h2"), HOSTS).pools == {A, B}
    gone = route_host_change("h1", HostNode("h1", True), None, HOSTS)
    assert gone.pools == {A} and "gone" in gone.reason


# -- the shell: the mirror's events and reads ------------------------------------------------


def node(name: str, cordoned: bool = False, rv: str = "1", **status: Any) -> JSON:
    return {
        "metadata": {"name": name, "resourceVersion": rv},
        "spec": {"unschedulable": cordoned, "taints": []},
        "status": status,
    }


def pool(name: str, *hosts: str) -> JSON:
    rows = [{"name": f"{name}-{i}", "hostNode": h} for i, h in enumerate(hosts)]
    return {"metadata": {"namespace": "ns", "name": name}, "status": {"cells": rows}}


def guest(name: str, owner: str, host: str | None) -> JSON:
    ref = {"kind": "GPUCellPool", "name": owner}
    status = {"nodeName": host} if host else {}
    return {
        "metadata": {"namespace": "ns", "name": name, "ownerReferences": [ref]},
        "status": status,
    }


class NoApi:
    async def list(self, query: Query) -> tuple[list[JSON], str]:
        raise AssertionError("the mirror is fed by apply_event in these tests")

    def watch(self, query: Query, resource_version: str) -> AsyncIterator[JSON]:
        raise AssertionError("the mirror is fed by apply_event in these tests")


class Gets:
    def __init__(self) -> None:
        self.calls: list[set[str]] = []

    async def hosts(self, names: set[str]) -> dict[str, HostNode] | None:
        self.calls.append(set(names))
        return {n: HostNode(n, unschedulable=True) for n in names}


def mirror() -> tuple[InfraNodes, list[tuple[str, str]], Gets]:
    woken: list[tuple[str, str]] = []
    gets = Gets()
    return InfraNodes(NoApi(), gets, woken.append), woken, gets


def test_node_events_wake_the_pools_on_the_host_from_status_rows_and_guests() -> None:
    nodes, woken, _ = mirror()
    nodes.pool_changed("ADDED", pool("a", "h1"))
    nodes.pool_changed("ADDED", pool("b", "h2"))
    nodes.guest_changed("ADDED", guest("c-0", "c", "h2"))  # placed, not in status yet
    nodes.guest_changed("ADDED", guest("c-1", "c", None))  # not placed: no host
    for name in ("h1", "h2", "h3"):
        nodes.cache.apply_event({"type": "ADDED", "object": node(name)})
    assert sorted(woken) == [("ns", "a"), ("ns", "b"), ("ns", "c")]  # hosts appeared
    woken.clear()
    heartbeat = node("h2", rv="2", conditions=[{"type": "Ready", "status": "True"}])
    nodes.cache.apply_event({"type": "MODIFIED", "object": heartbeat})
    assert woken == []  # status updates wake nobody
    nodes.cache.apply_event({"type": "MODIFIED", "object": node("h2", cordoned=True, rv="3")})
    assert sorted(woken) == [("ns", "b"), ("ns", "c")]
    woken.clear()
    nodes.guest_changed("DELETED", guest("c-0", "c", "h2"))
    nodes.pool_changed("DELETED", pool("b", "h2"))
    nodes.cache.apply_event({"type": "MODIFIED", "object": node("h2", rv="4")})
    assert woken == []  # nobody is on h2 any more
    nodes.cache.apply_event({"type": "DELETED", "object": node("h1", rv="5")})
    assert woken == [("ns", "a")]


def test_a_malformed_node_event_is_skipped() -> None:
    nodes, woken, _ = mirror()
    nodes.pool_changed("ADDED", pool("a", "h1"))
    nodes._node_changed("ADDED", {"metadata": {}})
    assert woken == []


async def test_reads_come_from_the_mirror_once_synced_and_from_gets_before() -> None:
    nodes, _, gets = mirror()
    before = await nodes.hosts({"h1"})
    assert gets.calls == [{"h1"}] and nodes.fallback_reads == 1
    assert before == {"h1": HostNode("h1", unschedulable=True)}
    nodes.cache.apply_event({"type": "ADDED", "object": node("h1")})
    taints = [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]
    tainted = node("h2")
    tainted["spec"]["taints"] = taints
    nodes.cache.apply_event({"type": "ADDED", "object": tainted})
    nodes.cache.synced.set()
    read = await nodes.hosts({"h1", "h2", "missing"})
    assert gets.calls == [{"h1"}]  # no GET once synced
    assert read == {
        "h1": HostNode("h1"),
        "h2": HostNode("h2", taint_keys=frozenset({"karpenter.sh/disrupted"})),
    }
