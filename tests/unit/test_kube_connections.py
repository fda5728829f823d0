"""One connection per workload cluster credential, shared by both controllers
(``gpucellpool.kube.connections``): handles, field managers, the last holder closes it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpucellpool.kube.access import Access
from gpucellpool.kube.connections import Connections, fingerprint
from gpucellpool.kube.rest import RestClient
from gpucellpool.kube.transport import Connection


class CountingClient(RestClient):
    """A RestClient whose connection records being closed (no request is sent)."""

    closed = 0

    async def close(self) -> None:
        if self._owns_client:
            CountingClient.closed += 1
        await super().close()


def kubeconfig(server: str, token: str = "t") -> dict[str, Any]:
    return {
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "current-context": "x",
    }


async def test_the_same_kubeconfig_is_one_connection_and_the_last_holder_closes_it() -> None:
    made: list[Mapping[str, Any]] = []

    async def connect(config: Mapping[str, Any], timeout_s: float) -> RestClient:
        made.append(config)
        return CountingClient(Connection(Access("http://x")), timeout_s)

    CountingClient.closed = 0
    connections = Connections(connect)
    autoscaler = await connections.acquire(kubeconfig("https://a"), "gpucellpool-autoscaler")
    provisioner = await connections.acquire(kubeconfig("https://a"), "gpucellpool")
    other = await connections.acquire(kubeconfig("https://b"), "gpucellpool")
    assert len(made) == 2 and connections.opened == 2
    assert (connections.open_count, connections.holders) == (2, 3)
    assert autoscaler.connection is provisioner.connection is not other.connection
    assert (autoscaler.field_manager, provisioner.field_manager) == (
        "gpucellpool-autoscaler",
        "gpucellpool",
    )
    await autoscaler.close()
    await autoscaler.close()  # a second close lets go only once
    assert CountingClient.closed == 0 and connections.holders == 2
    await provisioner.close()
    assert CountingClient.closed == 1 and connections.open_count == 1
    rotated = await connections.acquire(kubeconfig("https://a", token="new"), "gpucellpool")
    assert len(made) == 3  # a rotated credential is another connection
    await connections.close()
    assert CountingClient.closed == 3 and connections.open_count == 0
    await rotated.close()  # after shutdown: nothing left to close
    await other.close()
    assert CountingClient.closed == 3


def test_the_key_is_a_digest_of_the_content_never_the_credential() -> None:
    key = fingerprint(kubeconfig("https://a", token="s3cr3t"))
    assert "s3cr3t" not in key and len(key) == 64
    reordered = dict(reversed(list(kubeconfig("https://a", token="s3cr3t").items())))
    assert fingerprint(reordered) == key
    assert fingerprint(kubeconfig("https://a", token="other")) != key
