"""Readiness waits for a workload cluster until its kubeconfig Secret has been read.

What these prove: a cluster whose Secret has not been listed yet is syncing, not broken, so
``/readyz`` stays false (before, its initial "not read yet" error counted as a known-broken
credential and the operator reported ready with empty workload caches: the scale benchmark saw
ready at 127 MiB RSS, before 10,000 pods were listed); a Secret read with an unusable kubeconfig,
listed as absent, or refused by RBAC (a pool in a namespace the operator does not serve) is a
verdict (reported in status) and no longer holds readiness.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from gpucellpool.kube.access import Access
from gpucellpool.kube.cache import Query
from gpucellpool.kube.errors import Forbidden
from gpucellpool.kube.rest import RestClient, client_from_kubeconfig
from gpucellpool.kube.transport import Connection
from gpucellpool.kube.workload import ClusterKey, WorkloadCluster
from gpucellpool.operator.app import App
from gpucellpool.operator.settings import Settings

JSON = dict[str, Any]
KEY = ClusterKey("ns", "wl")


class Secrets:
    """The infrastructure cluster's Secret list: held until ``release``, then ``items``."""

    def __init__(self, items: list[JSON]) -> None:
        self.items, self.release = items, asyncio.Event()

    async def list(self, query: Query) -> tuple[list[JSON], str]:
        await self.release.wait()
        return self.items, "1"

    async def watch(self, query: Query, resource_version: str) -> AsyncIterator[JSON]:
        await asyncio.Event().wait()  # park forever
        yield {}


async def no_client(config: Mapping[str, Any]) -> Any:
    raise ValueError("unusable")


def unusable_secret() -> JSON:
    raw = base64.b64encode(yaml.safe_dump({"not": "a kubeconfig"}).encode()).decode()
    return {
        "metadata": {"namespace": "ns", "name": "wl", "resourceVersion": "1"},
        "data": {"value": raw},
    }


async def until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 5.0
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def app_with(cluster: WorkloadCluster) -> App:
    app = App(
        Settings(identity="a", lease_namespace="ns", pool_namespace="ns"),
        RestClient(Connection(Access("http://127.0.0.1:9"))),  # never contacted
        registry=CollectorRegistry(),
    )
    app.pool_caches[0].synced.set()
    for elector in app.election.electors:
        elector.known = True
    app.clusters.clusters[KEY] = cluster
    return app


async def test_a_cluster_is_syncing_until_its_secret_is_read_then_an_error_is_a_verdict() -> None:
    infra = Secrets([unusable_secret()])
    cluster = WorkloadCluster(KEY, infra, no_client, lambda *a: None)
    app = app_with(cluster)
    try:
        cluster.start()
        await asyncio.sleep(0.05)  # the Secret list is held: nothing read yet
        assert not cluster.settled() and cluster.error  # "not read yet" is not a verdict
        ready, why = app.ready()
        assert not ready and "ns/wl" in why
        infra.release.set()
        await until(cluster.settled)
        assert cluster.error == "kubeconfig unusable: ValueError"
        assert app.ready()[0]  # a broken credential is told in status, not by readiness
    finally:
        await cluster.stop()
        await app.autoscaler.close()
        await app.infra.close()


async def test_a_secret_listed_as_absent_is_a_verdict() -> None:
    infra = Secrets([])
    infra.release.set()
    cluster = WorkloadCluster(KEY, infra, no_client, lambda *a: None)
    cluster.start()
    try:
        await until(cluster.settled)
        assert not cluster.synced()
    finally:
        await cluster.stop()


async def test_a_missing_kubeconfig_secret_is_reported_not_found_by_name() -> None:
    """Before, a Secret listed as absent left the error at "kubeconfig Secret not read yet"
    (misleading: it was read, and is missing); a Secret deleted later said its key was missing."""
    infra = Secrets([])
    infra.release.set()
    cluster = WorkloadCluster(KEY, infra, no_client, lambda *a: None)
    cluster.start()
    try:
        await until(cluster.settled)
        assert cluster.error == "kubeconfig Secret ns/wl not found"
        secret = unusable_secret()
        cluster.secret.apply_event({"type": "ADDED", "object": secret})
        await until(lambda: cluster.error == "kubeconfig unusable: ValueError")
        cluster.secret.apply_event({"type": "DELETED", "object": secret})
        await until(lambda: cluster.error == "kubeconfig Secret ns/wl not found")
        assert secret["data"]["value"] not in cluster.error  # never the credential
    finally:
        await cluster.stop()


class RefusedSecrets:
    """The infrastructure cluster refuses the Secret list (403), as RBAC does in a namespace
    the operator does not serve; ``allowed`` lets it through from then on."""

    def __init__(self) -> None:
        self.allowed = False

    async def list(self, query: Query) -> tuple[list[JSON], str]:
        if not self.allowed:
            raise Forbidden(403, 'secrets "wl" is forbidden')
        return [unusable_secret()], "1"

    async def watch(self, query: Query, resource_version: str) -> AsyncIterator[JSON]:
        await asyncio.Event().wait()  # park forever
        yield {}


async def test_a_secret_rbac_refuses_is_a_verdict_that_does_not_hold_readiness() -> None:
    infra = RefusedSecrets()
    cluster = WorkloadCluster(KEY, infra, no_client, lambda *a: None)
    app = app_with(cluster)
    try:
        cluster.start()
        await until(cluster.settled)
        assert "ns/wl not readable: forbidden" in cluster.error
        assert app.ready()[0]  # before: "workload caches syncing: ns/wl" for ever
        infra.allowed = True  # RBAC granted later: the Secret is read and applied
        await until(lambda: cluster.error == "kubeconfig unusable: ValueError")
    finally:
        await cluster.stop()
        await app.autoscaler.close()
        await app.infra.close()


async def test_a_kubeconfig_with_a_bad_field_is_told_by_the_field_never_its_value() -> None:
    """The door's own reader names the entry and field (before: only the exception's type)."""
    secret = unusable_secret()
    key = base64.b64encode(b"KEY-MATERIAL").decode()
    doc = {"current-context": "x", "contexts": [{"name": "x", "context": {"cluster": "c",
           "user": "u"}}], "clusters": [{"name": "c", "cluster": {"server": "https://h"}}],
           "users": [{"name": "u", "user": {"client-key-data": key}}]}  # fmt: skip
    secret["data"]["value"] = base64.b64encode(yaml.safe_dump(doc).encode()).decode()
    infra = Secrets([secret])
    infra.release.set()
    cluster = WorkloadCluster(KEY, infra, client_from_kubeconfig, lambda *a: None)
    cluster.start()
    try:
        await until(cluster.settled)
        assert cluster.error == (
            "kubeconfig unusable: kubeconfig: user 'u': client-certificate: missing (a client "
            "certificate needs both)"
        )
        assert key not in cluster.error
    finally:
        await cluster.stop()
