"""Real kubectl against the rehearsal cluster: the commands an operator types during maintenance."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from pitstop_sim import SimCluster
from tests.integration.sim.conftest import Kubectl, StartSim

CLUSTER = """
    name: kubectl
    cluster: {nodes: 3, domains: 1, gpus_per_node: 8}
    timing: {time_scale: 20, pod_start_seconds: 2, recreate_delay_seconds: 1}
    workloads:
      deployments:
        - name: web
          namespace: serving
          replicas: 3
          gpus: 1
          empty_dir: true
          pdb: {min_available: 2}
          placement: [gpu-node-001, gpu-node-001, gpu-node-002]
"""


def _rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


def test_get_nodes_wide_shows_status_version_and_node_info(
    start_sim: StartSim, kubectl_for: Callable[[SimCluster], Kubectl]
) -> None:
    sim = start_sim(CLUSTER)
    sim.patch("nodes", "gpu-node-003", {"spec": {"unschedulable": True}})
    rows = _rows(kubectl_for(sim)("get", "nodes", "-o", "wide"))
    assert rows[0] == [
        "NAME",
        "STATUS",
        "ROLES",
        "AGE",
        "VERSION",
        "INTERNAL-IP",
        "EXTERNAL-IP",
        "OS-IMAGE",
        "KERNEL-VERSION",
        "CONTAINER-RUNTIME",
    ]
    by_name = {row[0]: row for row in rows[1:]}
    assert sorted(by_name) == ["gpu-node-001", "gpu-node-002", "gpu-node-003"]
    assert by_name["gpu-node-001"][1] == "Ready"
    assert by_name["gpu-node-003"][1] == "Ready,SchedulingDisabled"
    assert by_name["gpu-node-001"][4] == "v1.32.4"
    assert by_name["gpu-node-001"][-1] == "containerd://1.7.20"
    assert "5.15.0-105-generic" in by_name["gpu-node-001"]


def test_describe_node_shows_gpu_capacity_labels_and_its_pods(
    start_sim: StartSim, kubectl_for: Callable[[SimCluster], Kubectl]
) -> None:
    sim = start_sim(CLUSTER)
    text = kubectl_for(sim)("describe", "node", "gpu-node-001")
    assert "Name:               gpu-node-001" in text
    assert "topology.kubernetes.io/zone=zone-a" in text
    assert "pitstop.dev/driver-version=550.90.07" in text
    assert "nvidia.com/gpu:     8" in text
    assert "Kubelet Version:            v1.32.4" in text
    # 2 web replicas + the GPU Operator's device plugin and DCGM exporter (host-managed driver: no driver pod)
    assert "Non-terminated Pods:          (4 in total)" in text
    assert re.search(r"nvidia\.com/gpu\s+2\s+2\n", text), text  # allocated: the two web replicas


def test_cordon_and_uncordon_change_the_node_spec(
    start_sim: StartSim, kubectl_for: Callable[[SimCluster], Kubectl]
) -> None:
    sim = start_sim(CLUSTER)
    kubectl = kubectl_for(sim)
    assert "node/gpu-node-002 cordoned" in kubectl("cordon", "gpu-node-002")
    node = sim.get("nodes", "gpu-node-002")
    assert node is not None and node["spec"]["unschedulable"] is True
    sim.wait_for(
        lambda s: any(
            t["key"] == "node.kubernetes.io/unschedulable"
            for t in (s.get("nodes", "gpu-node-002") or {})["spec"].get("taints", [])
        ),
        timeout=10,
        what="the unschedulable taint",
    )
    assert "node/gpu-node-002 uncordoned" in kubectl("uncordon", "gpu-node-002")
    node = sim.get("nodes", "gpu-node-002")
    assert node is not None and not node["spec"].get("unschedulable")
    counters = sim.counters()
    assert counters.cordons == {"gpu-node-002": 1}
    assert counters.uncordons == {"gpu-node-002": 1}


def test_get_pdb_shows_allowed_disruptions(
    start_sim: StartSim, kubectl_for: Callable[[SimCluster], Kubectl]
) -> None:
    sim = start_sim(CLUSTER)
    rows = _rows(kubectl_for(sim)("get", "pdb", "-n", "serving"))
    assert rows[0] == ["NAME", "MIN", "AVAILABLE", "MAX", "UNAVAILABLE", "ALLOWED", "DISRUPTIONS", "AGE"]
    assert rows[1][:4] == ["web", "2", "N/A", "1"]


def test_drain_waits_while_pdb_disallows_eviction_and_completes_when_it_allows(
    start_sim: StartSim, kubectl_for: Callable[[SimCluster], Kubectl]
) -> None:
    sim = start_sim(CLUSTER.replace("min_available: 2", "min_available: 1"))
    kubectl = kubectl_for(sim)
    sim.block_pdb("serving", "web")  # no disruption allowed until unblocked
    drain = kubectl.start(
        "drain", "gpu-node-001", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=120s"
    )
    try:
        sim.wait_for(
            lambda s: s.counters().eviction_refusals.get("gpu-node-001", 0) >= 2,
            timeout=30,
            what="kubectl to be refused by the PDB",
        )
        assert drain.poll() is None, "drain must keep waiting while the PDB allows nothing"
        assert sim.counters().evictions_total == 0
        sim.block_pdb("serving", "web", blocked=False)
        out, err = drain.communicate(timeout=60)
    finally:
        if drain.poll() is None:
            drain.kill()
    assert drain.returncode == 0, err
    assert "node/gpu-node-001 drained" in out
    assert "Cannot evict pod as it would violate the pod's disruption budget." in err
    counters = sim.counters()
    assert counters.evictions == {"gpu-node-001": 2}
    assert counters.drains == {"gpu-node-001": 1}
    assert counters.pdb_violations == 0
    assert counters.deletions_total == 0
    assert all(count == 1 for count in counters.evictions_per_pod.values())
    # The GPU Operator pods stayed; the web replicas now run elsewhere.
    left = {p["metadata"]["name"] for p in sim.list("pods", field_selector="spec.nodeName=gpu-node-001")}
    assert left and all(name.startswith("nvidia-") for name in left)
    sim.wait_for(
        lambda s: len([p for p in s.list("pods", "serving") if p["status"]["phase"] == "Running"]) == 3,
        timeout=30,
        what="three web replicas running again",
    )


def test_drain_evicts_one_replica_at_a_time_as_replacements_become_ready(
    start_sim: StartSim, kubectl_for: Callable[[SimCluster], Kubectl]
) -> None:
    sim = start_sim(CLUSTER)
    started = time.monotonic()
    result = kubectl_for(sim).run(
        "drain", "gpu-node-001", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=120s"
    )
    assert "node/gpu-node-001 drained" in result.stdout
    counters = sim.counters()
    # Two replicas on the node, one disruption allowed: the second waited for the first's replacement.
    assert counters.eviction_refusals.get("gpu-node-001", 0) >= 1
    assert counters.evictions == {"gpu-node-001": 2}
    assert counters.pdb_violations == 0
    assert time.monotonic() > started


def test_drain_without_ignore_daemonsets_refuses_like_a_real_cluster(
    start_sim: StartSim, kubectl_for: Callable[[SimCluster], Kubectl]
) -> None:
    sim = start_sim(CLUSTER)
    result = kubectl_for(sim).run("drain", "gpu-node-002", "--delete-emptydir-data", check=False)
    assert result.returncode != 0
    assert "cannot delete DaemonSet-managed Pods" in result.stderr
    assert sim.counters().evictions_total == 0


def test_apply_a_validation_job_then_wait_and_read_its_logs(
    start_sim: StartSim, kubectl_for: Callable[[SimCluster], Kubectl], tmp_path: object
) -> None:
    sim = start_sim(CLUSTER + "    health:\n      nodes:\n        gpu-node-002: {nccl_busbw_gbps: 123.5}\n")
    kubectl = kubectl_for(sim)
    manifest = kubectl.kubeconfig.parent / "job.yaml"
    manifest.write_text(
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: nccl-check, namespace: default}\n"
        "spec:\n  backoffLimit: 0\n  template:\n    metadata: {labels: {pitstop.dev/validation: nccl}}\n"
        "    spec:\n      nodeName: gpu-node-002\n      restartPolicy: Never\n"
        "      containers: [{name: nccl, image: nvcr.io/nvidia/nccl-tests:2.13}]\n"
    )
    assert "job.batch/nccl-check created" in kubectl("apply", "-f", str(manifest))
    kubectl("wait", "--for=condition=complete", "job/nccl-check", "--timeout=60s")
    logs = kubectl("logs", "job/nccl-check")
    assert "# Avg bus bandwidth    : 123.5 \n" in logs  # %g, as nccl-tests prints it


TRAINING_OPERATORS = """
    name: operators
    cluster: {nodes: 3, domains: 1, gpus_per_node: 8}
    timing: {time_scale: 20, pod_start_seconds: 2, recreate_delay_seconds: 1}
    workloads:
      training_jobs:
        - {name: pretrain, framework: pytorchjob, pods: 2, gpus_per_pod: 1}
        - {name: tpu-style, framework: jobset, pods: 2, gpus_per_pod: 1}
        - {name: rl, framework: raycluster, pods: 2, gpus_per_pod: 1}
        - {name: batch, framework: volcano, pods: 2, gpus_per_pod: 1}
"""


def test_kubectl_sees_the_training_operators_objects_and_suspends_a_jobset_as_its_operator_would(
    start_sim: StartSim, kubectl_for: Callable[[SimCluster], Kubectl]
) -> None:
    """The operators' objects are served under their own CRDs and short names, with the status
    columns their CRDs print; `kubectl patch` of a JobSet's suspend stops its child Job's pods
    and the JobSet reports `Suspended` as jobset's controller does."""
    sim = start_sim(TRAINING_OPERATORS)
    kubectl = kubectl_for(sim)
    rows = _rows(kubectl("get", "podgroups", "-n", "training"))
    assert rows[0] == ["NAME", "STATUS", "MINMEMBER", "RUNNINGS", "AGE"]
    assert rows[1][0].startswith("batch-") and rows[1][1:4] == ["Running", "2", "2"]
    assert _rows(kubectl("get", "vcjob", "-n", "training"))[1][:2] == ["batch", "Running"]
    rays = _rows(kubectl("get", "rayclusters", "-n", "training"))
    assert rays[1][0] == "rl" and rays[1][1:3] == ["1", "1"] and "ready" in rays[1]
    kubectl(
        "patch", "jobset", "tpu-style", "-n", "training", "--type=merge", "-p", '{"spec":{"suspend":true}}'
    )
    sim.wait_for(
        lambda s: (
            not [p for p in s.list("pods", "training") if p["metadata"]["name"].startswith("tpu-style-")]
        ),
        what="the JobSet's pods to stop",
    )
    reason = kubectl(
        "get", "jobset", "tpu-style", "-n", "training",
        "-o", "jsonpath={.status.conditions[?(@.type=='Suspended')].reason}",
    )  # fmt: skip
    assert reason == "SuspendedJobs"
    child = kubectl(
        "get", "jobs.batch", "tpu-style-workers-0", "-n", "training", "-o", "jsonpath={.spec.suspend}"
    )
    assert child == "true"


MULTIKUEUE_WORKER = """
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: nvidia}
handler: nvidia
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: model-cache}
provisioner: nfs.csi.k8s.io
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: model-cache, namespace: serving}
spec:
  storageClassName: model-cache
  accessModes: [ReadOnlyMany]
  resources: {requests: {storage: 500Gi}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: MultiKueueCluster
metadata: {name: gpu-b}
spec:
  kubeConfig: {locationType: Secret, location: gpu-b-kubeconfig}
---
apiVersion: v1
kind: Secret
metadata: {name: registry-pull, namespace: serving}
type: kubernetes.io/dockerconfigjson
data: {.dockerconfigjson: e30=}
"""


def test_kubectl_applies_and_reads_what_a_multikueue_worker_readiness_check_reads(
    start_sim: StartSim, kubectl_for: Callable[[SimCluster], Kubectl], tmp_path: Path
) -> None:
    """RuntimeClass, StorageClass (short name `sc`), PersistentVolumeClaim (`pvc`) and Kueue's
    MultiKueueCluster, as kubectl discovers, applies and prints them."""
    kubectl = kubectl_for(start_sim(CLUSTER))
    manifest = tmp_path / "worker.yaml"
    manifest.write_text(MULTIKUEUE_WORKER)
    applied = kubectl("apply", "-f", str(manifest))
    assert "runtimeclass.node.k8s.io/nvidia created" in applied
    assert "multikueuecluster.kueue.x-k8s.io/gpu-b created" in applied
    assert kubectl("get", "runtimeclass", "nvidia", "-o", "jsonpath={.handler}") == "nvidia"
    assert _rows(kubectl("get", "sc", "-o", "name")) == [["storageclass.storage.k8s.io/model-cache"]]
    claim = "jsonpath={.spec.storageClassName}"
    assert kubectl("get", "pvc", "model-cache", "-n", "serving", "-o", claim) == "model-cache"
    location = "jsonpath={.spec.kubeConfig.location}"
    assert kubectl("get", "multikueueclusters", "gpu-b", "-o", location) == "gpu-b-kubeconfig"
    rows = _rows(kubectl("get", "secrets", "-n", "serving"))
    assert rows[0][:3] == ["NAME", "TYPE", "DATA"]
    assert ["registry-pull", "kubernetes.io/dockerconfigjson", "1"] in [r[:3] for r in rows[1:]]
