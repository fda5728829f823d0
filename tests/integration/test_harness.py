"""The live harness itself: two independent apiservers, the stand-in CRDs, a real
kube-controller-manager per cluster (PDB status, garbage collection, namespace deletion), clean
teardown."""

from __future__ import annotations

import json
import re
import secrets
import subprocess
from functools import partial
from pathlib import Path

import pytest
from kubernetes_asyncio import client, config

from simulations.harness import ApiError, ClusterEndpoint, Harness, HarnessError, binaries, versions
from simulations.harness.binaries import REPO_ROOT, ensure, go_output_name
from simulations.harness.flags import CONTROLLERS
from simulations.harness.procs import HarnessTimeout, pid_alive, port_is_free, wait_for

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


def _configmap(name: str, namespace: str, **meta_extra: object) -> dict[str, object]:
    meta = {"name": name, "namespace": namespace, **meta_extra}
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
        # The workload cluster got only the ProvisioningRequest CRD (where Kueue's gangs are).
        crds = workload.request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
        names = [c["metadata"]["name"] for c in crds["items"]]
        assert names == ["provisioningrequests.autoscaling.x-k8s.io"]
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


def test_apply_objects_keeps_number_like_strings_strings(
    workload: ClusterEndpoint, namespace: str
) -> None:
    # YAML 1.2 (kubectl) reads 252e03 and 1e5 as numbers; a random hex token once did that
    values = {"a": "252e03", "b": "1e5", "c": "0x1f", "d": "123456", "e": "true"}
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "number-like", "namespace": namespace, "labels": values},
        "data": values,
    }
    workload.apply_objects(config_map)
    stored = workload.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/number-like")
    assert stored["data"] == values
    assert {k: stored["metadata"]["labels"][k] for k in values} == values


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
    assert len(pids) == 5  # etcd, two apiservers, two controller-managers
    assert len(ports) == 6
    assert all(pid_alive(pid) for pid in pids)
    assert not any(port_is_free(port) for port in ports)
    second.stop()
    second.stop()  # idempotent
    assert not second.alive
    assert not any(pid_alive(pid) for pid in pids)
    wait_for(lambda: all(port_is_free(p) for p in ports), timeout=10, what="ports released")
    assert _processes_mentioning(str(tmp_path)) == []


def test_a_controller_manager_that_exits_fails_the_start_and_everything_is_stopped(
    tmp_path: Path,
) -> None:
    paths = {**ensure(versions.KUBE_BINARIES), "kube-controller-manager": Path("/bin/false")}
    with pytest.raises(HarnessError, match=r"kube-controller-manager\[\w+\] exited during start"):
        Harness.start(tmp_path / "no-kcm", binaries=paths, crd_dirs=[], timeout=60)
    assert _processes_mentioning(str(tmp_path)) == []


def test_failed_start_cleans_up(tmp_path: Path) -> None:
    paths = {**ensure(versions.KUBE_BINARIES), "kube-apiserver": Path("/bin/false")}
    with pytest.raises(HarnessError, match="exited during start"):
        Harness.start(tmp_path / "broken", binaries=paths, crd_dirs=[], timeout=60)
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
    # envtest assets have no controller-manager: one placed there is not used, the cache is.
    _fake_binary(assets / "kube-controller-manager")
    assert binaries.find("kube-controller-manager") is None
    kcm = binaries.adopt("kube-controller-manager", cached, "test")
    assert binaries.find("kube-controller-manager") == kcm == cache / "kube-controller-manager"
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


# --- kube-controller-manager: disruption, garbage collector, namespace -----------------------

PDB_PATH = "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
CONTROLLER_SETTLE_S = 30.0  # generous for a loaded 2-core machine; normally well under 2 s


def test_controller_names_are_those_of_the_pinned_controller_manager() -> None:
    help_text = subprocess.run(
        [str(ensure(["kube-controller-manager"])["kube-controller-manager"]), "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    flag = help_text[help_text.index("--controllers strings") :].split("\n      --", 1)[0]
    known = set(re.findall(r"[a-z][a-z0-9-]*-controller\b", flag))
    assert set(CONTROLLERS) <= known


def test_each_cluster_runs_a_healthy_controller_manager(harness: Harness) -> None:
    kcm = [p for p in harness.processes if p.name.startswith("kube-controller-manager")]
    assert sorted(p.name for p in kcm) == [
        "kube-controller-manager[infrastructure]",
        "kube-controller-manager[workload]",
    ]
    assert all(p.running() for p in kcm)
    for proc in kcm:
        controllers = next(a for a in proc.argv if a.startswith("--controllers="))
        assert controllers == "--controllers=" + ",".join(CONTROLLERS)


def _pod(namespace: str, name: str) -> dict[str, object]:
    meta = {"name": name, "namespace": namespace, "labels": {"app": "kcm-probe"}}
    spec = {"containers": [{"name": "c", "image": "busybox"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _make_ready(endpoint: ClusterEndpoint, namespace: str, name: str) -> None:
    """Play the kubelet: the pod is Running and Ready (what the disruption controller counts)."""
    path = f"/api/v1/namespaces/{namespace}/pods/{name}/status"
    pod = endpoint.request("GET", path)
    pod["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    endpoint.request("PUT", path, pod)


def _pdb_status(endpoint: ClusterEndpoint, namespace: str) -> dict[str, object]:
    pdb = endpoint.request("GET", PDB_PATH.format(ns=namespace) + "/probe")
    status: dict[str, object] = pdb.get("status") or {}
    if status.get("observedGeneration") != pdb["metadata"]["generation"]:
        return {}
    return status


def test_disruption_controller_computes_pdb_status(
    workload: ClusterEndpoint, namespace: str
) -> None:
    pods = f"/api/v1/namespaces/{namespace}/pods"
    for name in ("a", "b", "c"):
        workload.request("POST", pods, _pod(namespace, name))
        _make_ready(workload, namespace, name)
    spec = {"minAvailable": 2, "selector": {"matchLabels": {"app": "kcm-probe"}}}
    meta = {"name": "probe", "namespace": namespace}
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta}
    workload.request("POST", PDB_PATH.format(ns=namespace), {**pdb, "spec": spec})

    def counted(healthy: int, allowed: int) -> dict[str, object] | None:
        st = _pdb_status(workload, namespace)
        got = (st.get("currentHealthy"), st.get("desiredHealthy"), st.get("disruptionsAllowed"))
        return st if got == (healthy, 2, allowed) else None

    st = wait_for(lambda: counted(3, 1), timeout=CONTROLLER_SETTLE_S, what="PDB status 3/2/1")
    assert st["expectedPods"] == 3
    workload.request("DELETE", f"{pods}/a?gracePeriodSeconds=0")
    wait_for(lambda: counted(2, 0), timeout=CONTROLLER_SETTLE_S, what="PDB status 2/2/0")
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "b"}}
    with pytest.raises(ApiError) as refused:
        workload.request("POST", f"{pods}/b/eviction", eviction)
    assert refused.value.status == 429  # the apiserver enforces the status the controller wrote


def _exists(endpoint: ClusterEndpoint, path: str) -> bool:
    try:
        endpoint.request("GET", path)
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    return True


def _gone(endpoint: ClusterEndpoint, path: str) -> bool:
    return not _exists(endpoint, path)


def test_garbage_collector_deletes_dependents_of_a_deleted_custom_resource(
    infra: ClusterEndpoint, namespace: str
) -> None:
    guests = f"/apis/swift.kubeswift.io/v1alpha1/namespaces/{namespace}/swiftguests"
    spec = {"guestClassRef": {"name": "gpu-small"}}
    for name in ("owner", "survivor"):
        guest = {
            "apiVersion": "swift.kubeswift.io/v1alpha1",
            "kind": "SwiftGuest",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
        infra.request("POST", guests, guest)
    configmaps = f"/api/v1/namespaces/{namespace}/configmaps"
    for owner in ("owner", "survivor"):
        uid = infra.request("GET", f"{guests}/{owner}")["metadata"]["uid"]
        ref = {"apiVersion": "swift.kubeswift.io/v1alpha1", "kind": "SwiftGuest"}
        refs = [{**ref, "name": owner, "uid": uid}]
        infra.request(
            "POST", configmaps, _configmap(f"of-{owner}", namespace, ownerReferences=refs)
        )
    infra.request("DELETE", f"{guests}/owner")
    wait_for(
        partial(_gone, infra, f"{configmaps}/of-owner"),
        timeout=CONTROLLER_SETTLE_S,
        what="the garbage collector to delete the dependent of a deleted SwiftGuest",
    )
    assert _exists(infra, f"{configmaps}/of-survivor")  # its owner is alive: untouched


def test_garbage_collector_takes_a_lease_whose_node_is_deleted(workload: ClusterEndpoint) -> None:
    """What a kubelet's Lease relies on: the Node is its owner (the twin's Nodes are too)."""
    name = f"kcm-gc-{secrets.token_hex(3)}"
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    uid = workload.request("POST", "/api/v1/nodes", node)["metadata"]["uid"]
    leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
    owner = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease", "ownerReferences": [owner]},
        "spec": {"holderIdentity": name},
    }
    workload.request("POST", leases, lease)
    workload.request("DELETE", f"/api/v1/nodes/{name}")
    wait_for(
        partial(_gone, workload, f"{leases}/{name}"),
        timeout=CONTROLLER_SETTLE_S,
        what="the garbage collector to delete the Lease of a deleted Node",
    )


def test_a_deleted_namespace_is_emptied_and_goes_away(harness: Harness) -> None:
    names = {endpoint.name: f"kcm-ns-{secrets.token_hex(3)}" for endpoint in harness.endpoints}
    for endpoint in harness.endpoints:
        name = names[endpoint.name]
        endpoint.create_namespace(name)
        endpoint.request("POST", f"/api/v1/namespaces/{name}/configmaps", _configmap("x", name))
        endpoint.delete_namespace(name)
    for endpoint in harness.endpoints:
        path = f"/api/v1/namespaces/{names[endpoint.name]}"
        try:
            wait_for(
                partial(_gone, endpoint, path),
                timeout=CONTROLLER_SETTLE_S,
                what=f"namespace {path} to finish deleting in {endpoint.name}",
            )
        except HarnessTimeout:
            pytest.fail(f"namespace still there: {endpoint.request('GET', path).get('status')}")
