"""The simulated HAMi binds no pod to a Node deleted or cordoned during its pass.

What this proves, on a real apiserver: one pass places a burst of pods against the Nodes it
listed at its start, a write per pod; a Node cordoned and then deleted meanwhile (a cancelled
boot drained as it turned Ready) gets none of them bound, and the next pass places them on a
Node that is still there. kube-scheduler filters each pod against its cache as that pod's cycle
starts, so it never binds to a Node gone well before; the apiserver accepts a Binding to any
node name, and the twin's kubelet played pods bound to such a Node as running (a quiet 2 h
fidelity run, session 23: two pods on two deleted cells, 29.9 % within one cell).
"""

from __future__ import annotations

from collections.abc import Sequence

from provisioner.kube import JSON, KINDS, KubeApi
from simulations.twin.hami import SimulatedHAMi
from tests.integration.twin_support import (
    api,  # noqa: F401  (fixture)
    get_pod,
    hami_pod,
    new_hami,
    register_node,
)


class NodeGoesDuringThePass(SimulatedHAMi):
    """Cordons, then deletes, ``doomed`` after the pass placed its pods, before it binds."""

    doomed: str = ""

    async def _still_placeable(self, binds: Sequence[tuple[JSON, str]]) -> list[tuple[JSON, str]]:
        if self.doomed:
            cordon = {"spec": {"unschedulable": True}}
            await self.workload.patch(KINDS["Node"], None, self.doomed, cordon)
            await self.workload.delete(KINDS["Node"], None, self.doomed)
            self.doomed = ""
        return await super()._still_placeable(binds)


async def test_a_node_gone_during_a_pass_gets_no_pod_bound(
    api: KubeApi,  # noqa: F811
    namespace: str,
) -> None:
    first = await register_node(api, namespace, "a")  # binpack fills the lower name first
    await api.create(hami_pod(namespace, "p0"))
    base = new_hami(api, namespace)
    hami = NodeGoesDuringThePass(
        base.workload, base.clock, base.namespace, node_label_selector=base.node_label_selector
    )
    hami.doomed = first
    await hami.step()
    pod = await get_pod(api, namespace, "p0")
    assert not (pod.get("spec") or {}).get("nodeName")  # not bound to the deleted Node
    assert pod["metadata"]["annotations"]["hami.io/vgpu-node"] == first  # placed, then held
    other = await register_node(api, namespace, "b")
    await hami.step()  # the next pass places it again, on a Node that is there
    pod = await get_pod(api, namespace, "p0")
    assert (pod.get("spec") or {}).get("nodeName") == other
