"""HAMi's wire formats as the twin writes and reads them (hami-facts §2, §3.1-3.2)."""

from __future__ import annotations

import json

from simulations.twin.hami_codec import (
    Device,
    PlanEntry,
    emptied_plan,
    format_plan,
    gen_reason,
    monitor_device_type,
    natural_key,
    parse_plan,
    parse_register,
    unschedulable_message,
)


def test_register_json_reads_omitted_keys_as_zero_and_false() -> None:
    text = json.dumps(
        [
            {
                "id": "GPU-a",
                "count": 10,
                "devmem": 24576,
                "devcore": 100,
                "type": "T",
                "health": True,
            },
            {"id": "GPU-b", "index": 1, "count": 10, "devmem": 24576, "devcore": 100, "type": "T"},
        ]
    )
    devices = parse_register(text)
    assert devices == (
        Device("GPU-a", 0, 10, 24576, 100, "T", True),
        Device("GPU-b", 1, 10, 24576, 100, "T", False),
    )


def test_register_legacy_records_and_garbage() -> None:
    legacy = (
        "GPU-x,10,15360,100,NVIDIA-Tesla T4,0,true:"
        "GPU-y,10,15360,100,NVIDIA-Tesla T4,0,false,1,hami-core:"
    )
    assert parse_register(legacy) == (
        Device("GPU-x", 0, 10, 15360, 100, "NVIDIA-Tesla T4", True),
        Device("GPU-y", 1, 10, 15360, 100, "NVIDIA-Tesla T4", False),
    )
    assert parse_register(None) is None
    assert parse_register("[{") is None
    assert parse_register("GPU-x,10,oops:") is None


def test_plan_format_matches_the_protocol_example_and_round_trips() -> None:
    plan = format_plan([[("GPU-a", 3000, 0)], [("GPU-a", 5000, 0)]])
    assert plan == "GPU-a,NVIDIA,3000,0:;GPU-a,NVIDIA,5000,0:;"
    assert parse_plan(plan) == (PlanEntry(0, "GPU-a", 3000, 0), PlanEntry(1, "GPU-a", 5000, 0))
    two = format_plan([[], [("GPU-a", 1, 2), ("GPU-b", 1, 2)]])
    assert two == ";GPU-a,NVIDIA,1,2:GPU-b,NVIDIA,1,2:;"
    assert [e.container_index for e in parse_plan(two)] == [1, 1]
    assert parse_plan("GPU-a,NVIDIA,x,0:;,,,:;") == ()
    assert emptied_plan(2) == ";;"


def test_gen_reason_is_sorted_with_counts_over_the_node_gpus() -> None:
    reasons = {"CardTimeSlicingExhausted": 3, "CardInsufficientMemory": 1}
    assert gen_reason(reasons, 4) == "1/4 CardInsufficientMemory, 3/4 CardTimeSlicingExhausted"


def test_unschedulable_message_counts_identical_node_reasons() -> None:
    message = unschedulable_message(
        ["1/1 CardInsufficientMemory", "node unregistered", "1/1 CardInsufficientMemory"]
    )
    assert message == (
        "0/3 nodes are available: 1 node unregistered, 2 1/1 CardInsufficientMemory. "
        "preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
    )
    assert unschedulable_message([]) == "no nodes available to schedule pods"
    too_big = unschedulable_message(["NodeInsufficientDevice"], fits_empty_somewhere=False)
    assert too_big.startswith("0/1 nodes are available: 1 NodeInsufficientDevice. preemption: ")
    assert too_big.endswith(" The pod does not fit any of these nodes even when empty.")


def test_unschedulable_message_ends_with_kube_schedulers_preemption_verdict() -> None:
    """hami-facts 3.2: the post-filter text follows. Nodes HAMi (an extender) failed may take a
    pod after preemption, so they find no victims; nodes kube-scheduler's own filters ruled
    out (cordon, taints, selector) are ones preemption cannot help."""
    message = unschedulable_message(
        ["node(s) were unschedulable", "1/1 CardInsufficientMemory", "node unregistered"]
    )
    assert message.endswith(
        ". preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, "
        "2 No preemption victims found for incoming pod."
    )


def test_monitor_device_type_always_prefixes_the_nvml_name() -> None:
    assert monitor_device_type("NVIDIA-Tesla T4") == "NVIDIA-Tesla T4"
    assert monitor_device_type("NVIDIA A100-SXM4-80GB") == "NVIDIA-NVIDIA A100-SXM4-80GB"


def test_natural_key_orders_cell_indices_numerically() -> None:
    assert sorted(["pool-10", "pool-2", "pool-1"], key=natural_key) == [
        "pool-1",
        "pool-2",
        "pool-10",
    ]
