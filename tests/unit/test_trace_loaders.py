"""Trace loaders: openb rows (fractional, multi-GPU, CPU-only), the generic format, bad rows."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest

from autoscaler.policy.types import GPUAsk
from simulations.simulator.traces import (
    LoadResult,
    load_bundled,
    load_generic,
    load_openb,
    openb_ask,
    write_generic,
)
from simulations.simulator.traces.generic import parse_generic
from simulations.simulator.traces.openb import CPU_ONLY, parse_openb

HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)


def test_openb_maps_fraction_multi_gpu_and_skips_cpu_only() -> None:
    text = HEADER + (
        "p-a,6000,12288,1,460,,LS,Running,100,700,130\n"  # fraction; scheduled 30 s late
        "p-b,12000,24576,8,1000,,LS,Running,50,1050,\n"  # 8 whole GPUs, never scheduled
        "p-c,4000,8000,0,0,,BE,Running,10,20,10\n"  # CPU-only
        "p-d,1000,1000,1,1000,,BE,Failed,5,5,5\n"  # whole GPU, zero duration -> 1 s
    )
    result = parse_openb(io.StringIO(text))
    assert [p.key for p in result.pods] == ["openb/p-d", "openb/p-b", "openb/p-a"]
    by_key = {p.key: p for p in result.pods}
    assert by_key["openb/p-a"].ask == GPUAsk(gpu_count=1, memory_percent=46, cores_percent=46)
    assert by_key["openb/p-a"].duration_seconds == 570.0  # deletion - scheduled
    assert by_key["openb/p-b"].ask == GPUAsk(gpu_count=8, memory_percent=100, cores_percent=100)
    assert by_key["openb/p-b"].duration_seconds == 1000.0  # deletion - creation
    assert by_key["openb/p-d"].duration_seconds == 1.0
    assert result.skipped == ((CPU_ONLY, 1),)
    assert result.malformed == ()


def test_openb_malformed_rows_are_counted_with_line_numbers() -> None:
    text = HEADER + (
        "ok,1,1,1,500,,LS,Running,0,10,0\n"
        "bad-num,1,1,one,500,,LS,Running,0,10,0\n"  # line 3
        "bad-time,1,1,1,500,,LS,Running,50,10,50\n"  # line 4: deleted before created
        "bad-empty,1,1,1,500,,LS,Running,,10,\n"  # line 5
        "bad-zero,1,1,1,0,,LS,Running,0,10,0\n"  # line 6
    )
    result = parse_openb(io.StringIO(text))
    assert len(result.pods) == 1
    assert [m.line for m in result.malformed] == [3, 4, 5, 6]
    assert "num_gpu" in result.malformed[0].reason
    assert "4 malformed" in result.summary()


def test_openb_header_without_columns_is_one_malformed_row() -> None:
    result = parse_openb(io.StringIO("a,b\n1,2\n"))
    assert result.pods == () and result.malformed[0].line == 1


def test_openb_ask_rounds_up_and_clamps() -> None:
    assert openb_ask(1, 1) == GPUAsk(1, memory_percent=1, cores_percent=1)
    assert openb_ask(1, 995) == GPUAsk(1, memory_percent=100, cores_percent=100)
    assert openb_ask(2, 1000) == GPUAsk(2, memory_percent=100, cores_percent=100)


def test_openb_reads_gzip(tmp_path: Path) -> None:
    path = tmp_path / "t.csv.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(HEADER + "x,1,1,1,300,,LS,Running,0,10,0\n")
    assert len(load_openb(path).pods) == 1


@pytest.fixture(scope="module")
def bundled() -> LoadResult:
    return load_bundled()


def test_bundled_trace_loads_whole(bundled: LoadResult) -> None:
    result = bundled
    assert len(result.pods) == 7064 and result.malformed == ()
    assert dict(result.skipped)[CPU_ONLY] == 1088
    assert {p.ask.gpu_count for p in result.pods} == {1, 2, 4, 8}


def test_generic_csv_full_and_defaults() -> None:
    text = (
        "key,arrival_seconds,duration_seconds,gpu_count,memory_mib,memory_percent,"
        "cores_percent,node_selector,labels\n"
        "a,10,60,2,4096,,30,gpu=a100;zone=x,team=ml\n"
        ",5,30,,,50,,,\n"
    )
    result = parse_generic(io.StringIO(text), jsonl=False)
    assert result.malformed == ()
    first, second = result.pods
    assert second.key == "a" and first.key == "line-3"
    assert second.ask == GPUAsk(gpu_count=2, memory_mib=4096, cores_percent=30)
    assert second.node_selector == (("gpu", "a100"), ("zone", "x"))
    assert second.constraints().node_selector == {"gpu": "a100", "zone": "x"}
    assert first.ask == GPUAsk(gpu_count=1, memory_percent=50, cores_percent=0)


def test_generic_jsonl_and_malformed() -> None:
    lines = [
        '{"arrival_seconds": 1, "duration_seconds": 2, "node_selector": {"k": "v"}}',
        "",
        "not json",
        '{"arrival_seconds": 1}',
        '{"arrival_seconds": -1, "duration_seconds": 2}',
        '{"arrival_seconds": 1, "duration_seconds": 2, "gpu_count": 0}',
        "[1, 2]",
        '{"arrival_seconds": "NaN", "duration_seconds": 2}',
    ]
    result = parse_generic(lines, jsonl=True)
    assert len(result.pods) == 1 and result.pods[0].node_selector == (("k", "v"),)
    assert [m.line for m in result.malformed] == [3, 4, 5, 6, 7, 8]


def test_generic_csv_extra_fields_and_bad_selector() -> None:
    text = "arrival_seconds,duration_seconds,node_selector\n1,2,novalue\n1,2,a=b,extra\n3,4,\n"
    result = parse_generic(io.StringIO(text), jsonl=False)
    assert len(result.pods) == 1
    assert [m.line for m in result.malformed] == [2, 3]


def test_generic_round_trip(tmp_path: Path, bundled: LoadResult) -> None:
    pods = bundled.pods[:50]
    path = tmp_path / "out.csv"
    assert write_generic(pods, path) == 50
    again = load_generic(path)
    assert again.malformed == ()
    assert {(p.key, p.ask, p.arrival_seconds) for p in again.pods} == {
        (p.key, p.ask, p.arrival_seconds) for p in pods
    }
