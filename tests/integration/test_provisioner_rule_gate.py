"""The provisioner re-checks a pool against the admission rules before it launches anything.

What this proves (issue 12, finding 4): a pool written straight to the real apiserver, with
no webhook in the way (as when it is disabled or ``failurePolicy: Ignore`` met an outage), and
carrying what the webhook refuses (``nodeName``, ``schedulerName``, a hostPath ``filesystems``
share) gets no SwiftGuest, no seed profile, no bootstrap Secret: the operator's only writes are
the pool's status (``Degraded=True`` naming each field) and one Warning Event. Once the pool is
fixed, the same reconciler proceeds to a Ready cell and clears ``Degraded``. The reconciler is
wired exactly as the operator wires it (``gpucellpool.operator.provisioner_wiring.pool_rules``
with the rule settings).
"""

from __future__ import annotations

from gpucellpool.operator.provisioner_wiring import pool_rules
from provisioner.events import EVENT
from provisioner.kube import KINDS, KubeApi
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import swiftguest_pool
from tests.integration.provisioner_support import (
    RecordingKubeApi,
    apis,  # noqa: F401  (fixture)
    cond,
    names,
    ready_with,
    running_pool,
)
from webhook.rules import RuleSettings

SMUGGLED = {
    "nodeName": "infra-node-1",
    "schedulerName": "tenant-scheduler",
    "filesystems": [{"name": "host", "source": {"hostPath": "/"}}],
}


async def test_a_pool_that_skipped_the_webhook_launches_nothing_until_fixed(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api, _ = apis
    pool = swiftguest_pool("gated", namespace, 1)
    pool["spec"]["cell"]["guestTemplate"].update(SMUGGLED)
    operator = RecordingKubeApi(infra_api)
    rules = pool_rules(RuleSettings())
    async with running_pool(apis, workload, pool, operator_api=operator, rules=rules) as run:
        await run.passes(3)
        stored = await infra_api.get(KINDS["GPUCellPool"], namespace, "gated")
        degraded = cond(stored, "Degraded")
        assert degraded["status"] == "True" and degraded["reason"] == "AdmissionRulesFailed"
        for field in SMUGGLED:
            assert f"spec.cell.guestTemplate.{field}" in degraded["message"]
        assert await names(infra_api, "SwiftGuest", namespace) == set()
        assert await names(infra_api, "SwiftSeedProfile", namespace) == set()
        secrets = await names(infra_api, "Secret", namespace)
        assert not any(s.startswith("gated-") for s in secrets), secrets
        kinds = {(c.kind, c.verb) for c in operator.calls}
        assert kinds <= {("GPUCellPool", "apply"), ("Event", "create")}, kinds
        assert "finalizers" not in (stored or {}).get("metadata", {}), "not even a finalizer"
        events = await infra_api.list(EVENT, namespace)
        refused = [e for e in events if e.get("reason") == "AdmissionRulesFailed"]
        assert len(refused) == 1, "announced once, not on every pass"
        assert refused[0]["type"] == "Warning" and "nodeName" in refused[0]["note"]

        template = stored["spec"]["cell"]["guestTemplate"]  # type: ignore[index]
        fixed = {k: v for k, v in template.items() if k not in SMUGGLED}
        await infra_api.patch(
            KINDS["GPUCellPool"],
            namespace,
            "gated",
            {"spec": {"cell": {"guestTemplate": {**fixed, **dict.fromkeys(SMUGGLED)}}}},
        )
        ready = await run.converge(ready_with(1), timeout_s=60)
    degraded = cond(ready, "Degraded")
    assert degraded["status"] == "False" and degraded["reason"] == "AdmissionRulesPass"
    guest = await infra_api.get(KINDS["SwiftGuest"], namespace, "gated-0")
    assert guest is not None
    assert not set(SMUGGLED) & set(guest["spec"]), "the launched guest carries none of it"
