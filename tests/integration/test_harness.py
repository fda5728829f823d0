"""The live harness itself: two independent apiservers, the stand-in CRDs, clean teardown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes_asyncio import client, config

from simulations.harness import ApiError, ClusterEndpoint, Harness, HarnessError, binaries, versions
from simulations.harness.binaries import REPO_ROOT, ensure, go_output_name
from simulations.harness.procs import pid_alive, port_is_free, wait_for

# (group, version, plural, kind, namespaced, has status subresource)
THIRD_PARTY = [
    ("swift.kubeswift.io", "v1alpha1", "swiftguests", "SwiftGuest", True, True),
    ("swift.kubeswift.io", "v1alpha1", "swiftguestclasses", "SwiftGuestClass", False, False),
    ("image.kubeswift.io", "v1alpha1", "swiftimages", "SwiftImage", True, True),
    ("seed.kubeswift.io", "v1alpha1", "swiftseedprofiles", "SwiftSeedProfile", True, False),
    ("gpu.kubeswift.io", "v1alpha1", "swiftgpunodes", "SwiftGPUNode", False, True),
    ("gpu.kubeswift.io", "v1alpha1", "swiftgpuprofiles", "SwiftGPUProfile", True, False),
    ("cluster.x-k8s.io", "v1beta2", "clusters", "Cluster", True, True),
    ("cluster.x-k8s.io", "v1beta2", "machines", "Machine", True, True),
    (
        "infrastructure.cluster.x-k8s.io",
        "v1alpha1",
        "kubeswiftmachines",
        "KubeSwiftMachine",
        True,
        True,
    ),
    ("bootstrap.cluster.x-k8s.io", "v1beta2", "kubeadmconfigs", "KubeadmConfig", True, True),
    (
        "bootstrap.cluster.x-k8s.io",
        "v1beta2",
        "kubeadmconfigtemplates",
        "KubeadmConfigTemplate",
        True,
        False,
    ),
]


def _configmap(name: str, namespace: str) -> dict[str, object]:
    meta = {"name": name, "namespace": namespace}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


def _processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line mentions `text` (e.g. a harness's temporary directory)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes() and pid_alive(int(cmdline.parent.name)):
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def test_both_apiservers_ready_and_report_the_pinned_version(harness: Harness) -> None:
    assert harness.infra.url != harness.workload.url
    for endpoint in harness.endpoints:
        assert endpoint.ready()
        assert endpoint.request("GET", "/version")["gitVersion"] == versions.KUBERNETES_VERSION
    assert {harness.infra.etcd_prefix, harness.workload.etcd_prefix} == {
        "/infrastructure",
        "/workload",
    }


def test_clusters_are_independent(infra: ClusterEndpoint, workload: ClusterEndpoint) -> None:
    name = "only-in-one-cluster"
    infra.request("POST", "/api/v1/namespaces/default/configmaps", _configmap(name, "default"))
    try:
        with pytest.raises(ApiError) as missing:
            workload.request("GET", f"/api/v1/namespaces/default/configmaps/{name}")
        assert missing.value.status == 404
        # CRDs went to the infrastructure cluster only.
        crds = workload.request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
        assert crds["items"] == []
    finally:
        infra.request("DELETE", f"/api/v1/namespaces/default/configmaps/{name}")


def test_namespace_fixture_creates_the_namespace_in_both(
    namespace: str, infra: ClusterEndpoint, workload: ClusterEndpoint
) -> None:
    for endpoint in (infra, workload):
        got = endpoint.request("GET", f"/api/v1/namespaces/{namespace}")
        assert got["status"]["phase"] == "Active"


def test_kubeconfig_and_token_are_admin_and_rbac_is_enforced(
    infra: ClusterEndpoint, namespace: str
) -> None:
    out = infra.kubectl("auth", "can-i", "*", "*", "--all-namespaces").stdout
    assert out.strip() == "yes"
    denied = infra.kubectl("get", "pods", "-n", namespace, "--as=nobody", check=False)
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower()
    token_args = ["--kubeconfig=/dev/null", f"--server={infra.url}", f"--token={infra.token}"]
    ca = f"--certificate-authority={infra.ca_path}"
    whoami = infra.kubectl("auth", "whoami", "-o", "json", *token_args, ca)
    assert "system:masters" in json.loads(whoami.stdout)["status"]["userInfo"]["groups"]


@pytest.mark.parametrize(
    ("group", "version", "plural", "kind", "namespaced", "status"), THIRD_PARTY
)
def test_third_party_crd_is_served(
    infra: ClusterEndpoint,
    group: str,
    version: str,
    plural: str,
    kind: str,
    namespaced: bool,
    status: bool,
) -> None:
    resources = infra.request("GET", f"/apis/{group}/{version}")["resources"]
    by_name = {r["name"]: r for r in resources}
    assert by_name[plural]["kind"] == kind
    assert by_name[plural]["namespaced"] is namespaced
    assert (f"{plural}/status" in by_name) is status


def test_swiftguest_status_is_a_subresource(infra: ClusterEndpoint, namespace: str) -> None:
    base = f"/apis/swift.kubeswift.io/v1alpha1/namespaces/{namespace}/swiftguests"
    guest = {
        "apiVersion": "swift.kubeswift.io/v1alpha1",
        "kind": "SwiftGuest",
        "metadata": {"name": "cell-0", "namespace": namespace},
        "spec": {"guestClassRef": {"name": "gpu-small"}, "imageRef": {"name": "ubuntu"}},
        "status": {"phase": "Running"},
    }
    created = infra.request("POST", base, guest)
    assert "status" not in created or "phase" not in created["status"]  # ignored on create
    created["status"] = {"phase": "Running", "network": {"primaryIP": "10.0.0.7"}}
    updated = infra.request("PUT", f"{base}/cell-0/status", created)
    assert updated["status"]["network"]["primaryIP"] == "10.0.0.7"
    with pytest.raises(ApiError) as bad:
        updated["status"]["phase"] = "Booting"  # not in the enum
        infra.request("PUT", f"{base}/cell-0/status", updated)
    assert bad.value.status == 422


def test_machine_requires_the_v1beta2_fields(infra: ClusterEndpoint, namespace: str) -> None:
    base = f"/apis/cluster.x-k8s.io/v1beta2/namespaces/{namespace}/machines"
    meta = {"name": "cell-0", "namespace": namespace}
    machine = {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "metadata": meta}
    with pytest.raises(ApiError) as bad:
        infra.request("POST", base, {**machine, "spec": {"clusterName": "c"}})
    assert bad.value.status == 422
    ref = {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KubeSwiftMachine", "name": "x"}
    spec = {"clusterName": "c", "bootstrap": {"dataSecretName": "s"}, "infrastructureRef": ref}
    assert infra.request("POST", base, {**machine, "spec": spec})["spec"]["clusterName"] == "c"


def test_kubeswiftmachine_defaults_the_backend_type(infra: ClusterEndpoint, namespace: str) -> None:
    obj = {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "KubeSwiftMachine",
        "metadata": {"name": "cell-0", "namespace": namespace},
        "spec": {"backend": {"swiftGuest": {"imageRef": "img", "guestClassRef": "cls"}}},
    }
    path = (
        f"/apis/infrastructure.cluster.x-k8s.io/v1alpha1/namespaces/{namespace}/kubeswiftmachines"
    )
    assert infra.request("POST", path, obj)["spec"]["backend"]["type"] == "SwiftGuest"


def test_apply_file_and_kubectl_against_the_workload_cluster(
    workload: ClusterEndpoint, namespace: str, tmp_path: Path
) -> None:
    manifest = tmp_path / "cm.json"
    manifest.write_text(json.dumps(_configmap("applied", namespace)))
    workload.apply_file(manifest)
    got = workload.kubectl("get", "configmap", "applied", "-n", namespace, "-o", "json")
    assert json.loads(got.stdout)["data"] == {"k": "v"}


async def test_kubeconfig_works_with_kubernetes_asyncio(
    workload: ClusterEndpoint, namespace: str
) -> None:
    api = await config.new_client_from_config(str(workload.kubeconfig_path), persist_config=False)
    async with api:
        got = await client.CoreV1Api(api).read_namespace(namespace)
    assert got.metadata.name == namespace


def test_stop_leaves_no_process_or_port_behind(tmp_path: Path) -> None:
    second = Harness.start(
        tmp_path / "second", binaries=ensure(versions.KUBE_BINARIES), crd_dirs=[]
    )
    pids, ports = second.pids, second.ports
    assert len(pids) == 3
    assert all(pid_alive(pid) for pid in pids)
    assert not any(port_is_free(port) for port in ports)
    second.stop()
    second.stop()  # idempotent
    assert not second.alive
    assert not any(pid_alive(pid) for pid in pids)
    wait_for(lambda: all(port_is_free(p) for p in ports), timeout=10, what="ports released")
    assert _processes_mentioning(str(tmp_path)) == []


def test_failed_start_cleans_up(tmp_path: Path) -> None:
    paths = {**ensure(versions.KUBE_BINARIES), "kube-apiserver": Path("/bin/false")}
    with pytest.raises(HarnessError, match="exited during start"):
        Harness.start(tmp_path / "broken", binaries=paths, crd_dirs=[], timeout=30)
    assert _processes_mentioning(str(tmp_path)) == []


# --- binary lookup (no servers needed) ---------------------------------------------------


def test_go_tools_modules_pin_the_versions_in_versions_py() -> None:
    k8s = (REPO_ROOT / "tools" / "k8s" / "go.mod").read_text()
    assert f"k8s.io/kubernetes {versions.KUBERNETES_VERSION}\n" in k8s
    assert f"go.etcd.io/etcd/server/v3 {versions.ETCD_VERSION}\n" in k8s
    staging = versions.KUBERNETES_VERSION.replace("v1.", "v0.", 1)
    replaces = [line for line in k8s.splitlines() if "=>" in line]
    assert replaces
    assert all(line.rstrip().endswith(staging) for line in replaces)
    helm = (REPO_ROOT / "tools" / "helm" / "go.mod").read_text()
    assert f"helm.sh/helm/v3 {versions.HELM_VERSION}\n" in helm


def test_go_output_names() -> None:
    assert go_output_name("go.etcd.io/etcd/server/v3") == "server"
    assert go_output_name("k8s.io/kubernetes/cmd/kube-apiserver") == "kube-apiserver"
    assert go_output_name("helm.sh/helm/v3/cmd/helm") == "helm"


def _fake_binary(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_kubebuilder_assets_come_first_then_a_versioned_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assets, cache = tmp_path / "assets", tmp_path / "cache"
    monkeypatch.setenv("GPUCELLPOOL_CACHE", str(cache))
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    assert binaries.find("etcd") is None
    cached = _fake_binary(cache / "etcd")
    assert binaries.find("etcd") is None  # no versions.json entry: not trusted
    (cache / "versions.json").write_text(json.dumps({"etcd": {"version": "v0.0.1"}}))
    assert binaries.find("etcd") is None  # wrong version: rebuilt by ensure()
    binaries.adopt("etcd", cached, "test")
    assert binaries.find("etcd") == cache / "etcd"
    assert binaries.find("etcd") == binaries.ensure(["etcd"])["etcd"]
    envtest = _fake_binary(assets / "etcd")
    assert binaries.find("etcd") == envtest
    with pytest.raises(binaries.BinaryError):
        binaries.find("kube-scheduler")


def test_a_hanging_server_times_out_and_its_whole_process_group_is_killed(tmp_path: Path) -> None:
    child_pid = tmp_path / "child.pid"
    hang = tmp_path / "fake-apiserver"
    hang.write_text(f"#!/bin/sh\nsleep 600 &\necho $! > {child_pid}\nwait\n")
    hang.chmod(0o755)
    paths = {**ensure(versions.KUBE_BINARIES), "kube-apiserver": hang}
    with pytest.raises(HarnessError, match=r"did not answer /readyz within 2s"):
        Harness.start(tmp_path / "hung", binaries=paths, crd_dirs=[], timeout=2)
    assert _processes_mentioning(str(tmp_path)) == []
    pid = int(child_pid.read_text())
    assert not pid_alive(pid)  # the sleep child died with its process group
