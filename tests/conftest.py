"""Harness fixtures: real kube-apiservers, started once per session and only on demand.

Importing the harness is cheap (stdlib + PyYAML); nothing starts (or builds) unless a test
asks for `harness`, `infra`, `workload` or `namespace`, so unit tests never do. Tests that
use these fixtures are marked `integration` automatically. With CI=true a missing binary is
a failure, never a skip.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterator

import pytest

from simulations.harness import ClusterEndpoint, Harness
from simulations.harness.binaries import BinaryError, ensure
from simulations.harness.versions import KUBE_BINARIES

HARNESS_FIXTURES = frozenset({"harness", "infra", "workload", "namespace"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that needs the apiservers as `integration`."""
    for item in items:
        if HARNESS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    """etcd + the infrastructure and workload apiservers, with CRDs installed."""
    try:
        paths = ensure(KUBE_BINARIES)  # finds, else builds (run `make bins` first)
    except BinaryError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"test binaries unavailable in CI: {exc}")
        pytest.skip(f"etcd/kube-apiserver/kubectl absent and cannot be built here: {exc}")
    # ServiceAccounts' requests are audited (few, cheap): tests count the 403s an identity got.
    started = Harness.start(
        tmp_path_factory.mktemp("harness"),
        binaries=paths,
        audit_user_groups=("system:serviceaccounts",),
    )
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="session")
def infra(harness: Harness) -> ClusterEndpoint:
    """The infrastructure cluster (GPUCellPools, SwiftGuests, Cluster API objects)."""
    return harness.infra


@pytest.fixture(scope="session")
def workload(harness: Harness) -> ClusterEndpoint:
    """The workload cluster (Nodes, HAMi pods)."""
    return harness.workload


@pytest.fixture
def namespace(request: pytest.FixtureRequest, harness: Harness) -> Iterator[str]:
    """A fresh namespace with the same unique name in both clusters; deletion is not awaited."""
    stem = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{stem}-{secrets.token_hex(3)}"
    for endpoint in harness.endpoints:
        endpoint.create_namespace(name, labels={"gpucellpool.test/namespace": "true"})
    try:
        yield name
    finally:
        for endpoint in harness.endpoints:
            endpoint.delete_namespace(name)
