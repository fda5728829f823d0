"""The README's first command as a newcomer runs it: ``make demo`` in a fresh clone.

Why this test exists: the unit and twin tests pass absolute temporary paths, so they could not
see that the default, RELATIVE ``demo-out`` broke the harness's kubeconfigs (kubectl resolves
certificate paths from the kubeconfig's own folder). Here the repository's committed HEAD is
cloned into a temporary folder, ``make demo`` creates the clone's own virtual environment
exactly as the Makefile does (pip may reuse its cache and the find-links wheels) and finds the
pinned binaries in the shared cache (they are ensured first, so ``make bins`` has nothing to
build), then replays one wall minute of trace with the default output directory. The report and
PNG must exist and the report's numbers must be sane.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.binary_support import required_binary

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
DEMO_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl", "helm",
                 "prometheus", "promtool")  # fmt: skip
DEMO_ARGS = "--minutes 1"  # the smallest run that still starts everything and replays pods


def _clone(into: Path) -> Path:
    clone = into / "gpucellpool"
    subprocess.run(
        ["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(clone)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return clone


def _env(home: Path) -> dict[str, str]:
    """The user's environment minus anything pointing into this checkout's venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    venv_bin = str(Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin")
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != venv_bin)
    env["TMPDIR"] = str(home)
    return env


def _policies(report: dict[str, object]) -> dict[str, dict[str, float]]:
    rows = report["policies"]
    assert isinstance(rows, list)
    return {str(row["policy"]): row for row in rows}


def test_make_demo_from_a_fresh_clone_with_the_default_relative_output(tmp_path: Path) -> None:
    for name in DEMO_BINARIES:
        required_binary(name)  # cached for the clone's `make bins`; skip/fail as everywhere
    make = shutil.which("make")
    assert make, "make is not installed"
    clone = _clone(tmp_path)
    started = time.monotonic()
    proc = subprocess.run(
        [make, "demo", f"DEMO_ARGS={DEMO_ARGS}"],
        cwd=clone,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=1700,
        check=False,
    )
    elapsed = time.monotonic() - started
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-25:])
    assert proc.returncode == 0, f"make demo failed after {elapsed:.0f} s:\n{tail}"
    assert "Traceback" not in proc.stderr, tail
    assert (clone / ".venv" / "bin" / "gpucellpool").exists(), "make did not create its venv"

    out = clone / "demo-out"  # the default, relative to where `make demo` ran
    report_md, report_json = out / "report.md", out / "report.json"
    png = out / "demand-vs-cells.png"
    for path in (report_md, report_json, png):
        assert path.is_file() and path.stat().st_size > 0, f"{path} missing:\n{tail}"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    report = json.loads(report_json.read_text())
    rows = _policies(report)
    twin = rows["gpucellpool on the twin"]
    oracle = next(row for name, row in rows.items() if name.startswith("oracle"))
    assert twin["pods"] > 0
    assert twin["cost_cell_hours"] > 0
    assert twin["cost_cell_hours"] >= oracle["cost_cell_hours"] * 0.99  # nobody beats the oracle
    assert 0 < twin["mean_utilisation"] <= 1, "the twin row's util must be measured"
    assert twin["scale_up_cells"] > 0
    for row in rows.values():
        for key in ("wait_p50_seconds", "wait_p95_seconds", "wait_max_seconds"):
            assert math.isfinite(row[key]) and row[key] >= 0, (row["policy"], key, row[key])
        assert row["wait_p50_seconds"] <= row["wait_p95_seconds"] <= row["wait_max_seconds"]
    assert "| gpucellpool on the twin |" in report_md.read_text()
    print(f"make demo from a fresh clone: {elapsed:.0f} s (venv, bins check, demo)")
