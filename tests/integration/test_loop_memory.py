"""The policy memory on a real apiserver: stored in ``status.policyMemory``, read after a restart.

What this proves: the CRD keeps the field (an unknown status field would be pruned silently);
the scale-up's status write carries the memory, so no annotation is written on the pool; a new
operator process resumes from that memory (its first decision starts from the stored
``last_scale_up_at``, so it does not scale down just after the scale-up).
"""

from __future__ import annotations

from autoscaler.policy_memory import MEMORY_ANNOTATION, MEMORY_FIELD, decode_memory
from simulations.harness import ClusterEndpoint
from tests.integration.test_loop_helpers import (
    autoscaled_pool,
    client_for,
    create_pending,
    create_pool,
    decision,
    shut_down,
    start_app,
    until,
    watch_pool,
)

POOLS = "/apis/cells.kubeswift.io/v1alpha1/namespaces/{}/gpucellpools/{}"


async def test_memory_is_stored_in_status_and_resumed_by_the_next_process(
    infra: ClusterEndpoint, workload: ClusterEndpoint, namespace: str
) -> None:
    infra_api, workload_api = await client_for(infra), await client_for(workload)
    running = await start_app(infra, namespace, "first")
    watch, task = await watch_pool(infra_api, namespace, "mem")
    try:
        await create_pool(infra_api, workload, autoscaled_pool("mem", namespace, "mem"))
        await create_pending(workload_api, namespace, "mem-0", "mem")
        _, status = await watch.until(
            lambda s: decision(s).get("reason") == "ScaledUp" and MEMORY_FIELD in s, 60
        )
        stored = decode_memory(status[MEMORY_FIELD])
        assert stored.last_scale_up_at is not None
        pool = await infra_api.get(POOLS.format(namespace, "mem"))
        assert pool is not None
        assert MEMORY_ANNOTATION not in (pool["metadata"].get("annotations") or {})
        await running.stop()

        running = second = await start_app(infra, namespace, "second")
        key = (namespace, "mem")

        def resumed() -> bool:
            # A pool event seen before this process leads drops its memory (to reload what the
            # leader persisted), so "decided once" alone can catch the memory between reloads.
            state = second.autoscaler.pools.get(key)
            return state is not None and state.decisions > 0 and state.memory is not None

        await until(resumed, 60, "the second process decides")
        memory = second.autoscaler.pools[key].memory
        assert memory is not None
        assert memory.last_scale_up_at == stored.last_scale_up_at
    finally:
        await shut_down(running, [task], (infra_api, workload_api))
