"""docs/quickstart.md, executed: every marked block runs against real apiservers and the twin.

What this proves: a newcomer who types the quickstart's commands gets what it promises.
Section 2 (Helm on a cluster) runs against the session's infrastructure cluster: the real
``helm install``, Secrets, the pool in Shadow mode, watching it decide, ``describe``,
uninstalling - with the test playing the Deployment's pod (no kubelet here): the operator runs
with the chart's arguments and ServiceAccount token. Section 3 (a laptop) runs as written:
``python -m simulations.harness up`` starts its own clusters, ``gpucellpool run``, the pending
HAMi pod, the scale-up, and - the twin playing KubeSwift and the kubelet - a Ready cell. The
only rewrites are a free port for 8081 and a temporary directory for the harness state.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from gpucellpool.runtime.clock import SystemClock
from simulations.harness import ApiError, ClusterEndpoint
from simulations.twin.scenario import Twin, api_for
from tests.integration import chart_support
from tests.integration.binary_support import required_binary
from tests.integration.chart_identity_support import (
    free_port,
    operator,
    release_of,
    route_webhook_to_loopback,
    token_kubeconfig,
    wait,
)
from tests.integration.chart_support import ROOT
from tests.integration.quickstart_support import Runner, Step, StepFailed, steps

helm = chart_support.helm  # the fixture
DOC = ROOT / "docs" / "quickstart.md"
RELEASE, RELEASE_NS, POOL_NS = "gpucellpool", "gpucellpool-system", "gpu-pools"


def section(number: str) -> list[Step]:
    found = [s for s in steps(DOC.read_text()) if s.section == number]
    assert found, f"docs/quickstart.md section {number} has no marked steps"
    return found


def tool_path(*binaries: Path) -> str:
    """PATH with the harness's kubectl/helm and this venv's python/gpucellpool first."""
    dirs = [str(b.parent) for b in binaries] + [str(Path(sys.executable).parent)]
    return os.pathsep.join([*dict.fromkeys(dirs), os.environ["PATH"]])


def workdir(tmp: Path) -> Path:
    """The reader's checkout: ``charts/`` and ``simulations/`` as in the repository."""
    tmp.mkdir(parents=True, exist_ok=True)
    for name in ("charts", "simulations"):
        (tmp / name).symlink_to(ROOT / name)
    return tmp


def test_every_block_of_sections_2_and_3_is_a_step() -> None:
    """No command a reader types can escape the test: every fence there is marked."""
    text = DOC.read_text()
    body = text[text.index("## 2.") : text.index("## 4.")]
    fences = body.count("\n```") // 2
    marked = [s for s in steps(text) if s.section in ("2", "3")]
    assert len(marked) == fences, f"{fences - len(marked)} unmarked code block(s)"
    assert len({s.id for s in marked}) == len(marked), "step ids must be unique"


def test_steps_share_exports_and_a_failing_step_is_named(tmp_path: Path) -> None:
    runner = Runner(tmp_path, {"PATH": os.environ["PATH"]})
    runner.run(Step("set", "sh", "export GREETING=hello\n", "9"))
    assert runner.run(Step("use", "sh", 'echo "$GREETING"\n', "9")).strip() == "hello"
    with pytest.raises(StepFailed, match=r"step 'broken' \(section 9\) exit 1(.|\n)*said this"):
        runner.run(Step("broken", "sh", "echo said this\nfalse\necho never\n", "9"))
    with pytest.raises(StepFailed, match=r"step 'short' \(section 9\) ended \(exit 0\) before"):
        runner.run(Step("short", "sh", "echo one line\n", "9", until="^two"))


@contextlib.contextmanager
def cleanup_section_2(helm: Path, infra: ClusterEndpoint) -> Iterator[None]:
    """Whatever a failed run left: the release and both namespaces (idempotent)."""
    try:
        yield
    finally:
        chart_support.run_helm(helm, "uninstall", RELEASE, "-n", RELEASE_NS, "--kubeconfig",
                               str(infra.kubeconfig_path), check=False)  # fmt: skip
        for ns in (POOL_NS, RELEASE_NS):
            infra.delete_namespace(ns)


async def test_quickstart_helm_section(
    helm: Path, infra: ClusterEndpoint, workload: ClusterEndpoint, tmp_path: Path
) -> None:
    started = time.monotonic()
    cwd = workdir(tmp_path)
    (cwd / "workload.kubeconfig").write_text(workload.kubeconfig_path.read_text())
    env = {"KUBECONFIG": str(infra.kubeconfig_path), "HELM_CACHE_HOME": str(tmp_path / "helm"),
           "PATH": tool_path(infra.kubectl_path, helm)}  # fmt: skip
    runner = Runner(cwd, env)
    process: contextlib.ExitStack = contextlib.ExitStack()
    with cleanup_section_2(helm, infra), process:
        for step in section("2"):
            await asyncio.to_thread(runner.run, step)
            if step.id == "install":  # the Deployment's pod, played by the test
                await play_the_pod(helm, infra, tmp_path, process)
        pool = f"/apis/cells.kubeswift.io/v1alpha1/namespaces/{POOL_NS}/gpucellpools/inference"
        with pytest.raises(ApiError) as gone:
            infra.request("GET", pool)
        assert gone.value.status == 404, "the uninstall step left the pool behind"
    print(f"\n  quickstart section 2: {time.monotonic() - started:.1f}s")


async def play_the_pod(
    helm: Path, infra: ClusterEndpoint, tmp: Path, stack: contextlib.ExitStack
) -> None:
    release = await asyncio.to_thread(release_of, helm, infra, RELEASE, RELEASE_NS, tmp)
    kubeconfig = token_kubeconfig(infra, release, tmp / "chart-sa.kubeconfig")
    log = tmp / "operator.log"
    proc = stack.enter_context(operator(release, kubeconfig, log))
    await asyncio.to_thread(wait, proc.ready, 60, "the chart's operator /readyz", log)
    await asyncio.to_thread(route_webhook_to_loopback, infra, release, proc.webhook_port)


@contextlib.asynccontextmanager
async def twin_for(state: Path, namespace: str) -> AsyncIterator[None]:
    """The simulated KubeSwift and kubelet against the doc's own harness."""
    infra = await api_for(state / "infrastructure" / "kubeconfig")
    workload = await api_for(state / "workload" / "kubeconfig")
    try:
        async with Twin(infra, workload, SystemClock(), namespace):
            yield
    finally:
        await infra.close()
        await workload.close()


@pytest.mark.integration
async def test_quickstart_laptop_section(tmp_path: Path) -> None:
    started = time.monotonic()
    for name in ("etcd", "kube-apiserver", "kube-controller-manager"):  # `harness up` needs them
        required_binary(name)
    kubectl = required_binary("kubectl")
    cwd, state = workdir(tmp_path / "work"), tmp_path / "harness"
    port = free_port()
    subs = {"/tmp/gpucellpool-harness": str(state), "8081": str(port)}
    runner = Runner(cwd, {"PATH": tool_path(kubectl)}, subs)
    for step in section("2"):
        if step.file:  # join.yaml and pool.yaml, as the reader already has them
            runner.run(step)
    twin: contextlib.AsyncExitStack = contextlib.AsyncExitStack()
    try:
        async with twin:
            for step in section("3"):
                await asyncio.to_thread(runner.run, step)
                if step.id == "kubeconfigs":
                    await twin.enter_async_context(twin_for(state, POOL_NS))
    finally:
        await asyncio.to_thread(runner.stop_all)
    print(f"\n  quickstart section 3 (own harness): {time.monotonic() - started:.1f}s")
