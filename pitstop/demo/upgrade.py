"""The platform upgrade on the rehearsal cluster: what its end-to-end tests and
`pitstop demo --upgrade` share.

The cluster comes from `runbooks/scenarios/platform-upgrade.yaml` (Kubernetes v1.30, the GPU
stack and the AI controllers of docs/upgrade-process.md "Version inventory", a control-plane
node and GPU nodes each with an SSH endpoint); its objects are persisted to the embedded etcd
so that the preflight's backup is a real snapshot of them. The inventory names the groups the runbook uses:
`control_plane`, `gpu_fleet`, `gpu_canary`, and the site's settings on `localhost`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pitstop.demo.maintenance import cluster_block, dump_inventory
from pitstop_sim import SimCluster, SimConfig, load_scenario

REPO = Path(__file__).resolve().parents[2]
RUNBOOK = REPO / "runbooks" / "platform-upgrade.yaml"
SCENARIO = REPO / "runbooks" / "scenarios" / "platform-upgrade.yaml"
REGRESSION_SCENARIO = REPO / "runbooks" / "scenarios" / "platform-upgrade-regression.yaml"
CANARY_NODE = "gpu-node-001"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
# The rehearsal's single-replica engines have no PDB: a run on it accepts, by name, that they go
# down while their node is drained (without this, the drain of their node stops before it
# starts, naming them; kube.capacity_check).
ACCEPTED_UNPROTECTED = [
    "Deployment serving/vllm-llama",
    "Deployment serving/sglang-qwen",
    "Deployment serving/triton-ensemble",
]
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"


def start_cluster(
    workdir: Path, scenario: Path = SCENARIO, etcd_endpoint: str | None = None, etcd_prefix: str | None = None
) -> SimCluster:
    """The rehearsal cluster with SSH endpoints, serving from a background thread."""
    workdir.mkdir(parents=True, exist_ok=True)
    extra: dict[str, Any] = {}
    if etcd_endpoint:
        extra["etcd_endpoint"] = etcd_endpoint
        if etcd_prefix:
            extra["etcd_prefix"] = etcd_prefix
    sim = SimCluster(
        SimConfig(
            scenario=load_scenario(scenario),
            kubeconfig=workdir / "kubeconfig",
            ssh=True,
            ssh_dir=workdir,
            **extra,
        )
    )
    sim.start()
    return sim


def control_plane_nodes(sim: SimCluster) -> list[str]:
    nodes = sim.list("nodes")
    return sorted(
        n["metadata"]["name"] for n in nodes if CONTROL_PLANE_LABEL in (n["metadata"].get("labels") or {})
    )


def write_inventory(
    sim: SimCluster,
    path: Path,
    *,
    s3_endpoint: str,
    etcd_endpoint: str | None,
    canary: str | list[str] = CANARY_NODE,
    cluster_name: str = "rehearsal",
    ssh_key_secret: str = "sim-ssh-key",
) -> Path:
    """The rehearsal cluster's inventory: its nodes with their SSH ports, and the site's settings."""
    if sim.kubeconfig_path is None:
        raise ValueError("the rehearsal cluster was started without a kubeconfig")
    control = set(control_plane_nodes(sim))
    gpu: dict[str, Any] = {}
    cp: dict[str, Any] = {}
    system: dict[str, Any] = {}
    for node in sim.node_names():
        info = sim.ssh_info(node)
        hostvars: dict[str, Any] = {"ansible_host": info.host, "ansible_port": info.port, "node_name": node}
        labels = ((sim.get("nodes", node) or {}).get("metadata") or {}).get("labels") or {}
        if node in control:
            cp[node] = hostvars
        elif labels.get(GPU_PRESENT_LABEL) != "true":
            # A node without GPUs: the system/CPU pool, whose kubelets are upgraded too.
            hostvars["failure_domain"] = sim.node_profile(node).domain
            system[node] = hostvars
        else:
            hostvars["failure_domain"] = sim.node_profile(node).domain
            # What a dynamic inventory reads from the node's labels: GFD's GPU product (the
            # widen stage needs a canary of every product it changes).
            hostvars["gpu_product"] = labels.get(GPU_PRODUCT_LABEL, "")
            gpu[node] = hostvars
    site: dict[str, Any] = {
        "cluster_name": cluster_name,
        "s3_bucket": "pitstop-etcd-backups",
        "s3_endpoint_url": s3_endpoint,
        "s3_addressing_style": "path",
        "s3_create_bucket": True,
    }
    if etcd_endpoint:
        site["etcd_endpoints"] = etcd_endpoint
        # The rehearsal's etcd shares whatever disk this machine has (a busy CI disk's WAL fsync
        # p99 is well over etcd's 10 ms guideline): measured and reported, not judged.
        site["etcd_max_fsync_p99_ms"] = 60000
        # One member: the embedded stack's etcd, not one stacked on each simulated control-plane
        # node (the runbook expects one per control-plane node by default, as kubeadm stacks it).
        site["etcd_expected_members"] = 1
    doc = {
        "cluster": cluster_block(sim, cluster_name, ssh_key_secret),
        "all": {
            "vars": {"cluster_name": cluster_name},
            "children": {
                "control_plane": {"hosts": cp},
                "gpu_fleet": {"hosts": gpu},
                "system_pool": {"hosts": system},
                "gpu_canary": {"hosts": dict.fromkeys([canary] if isinstance(canary, str) else canary)},
                "site": {"hosts": {"localhost": site}},
            },
        },
    }
    return dump_inventory(doc, path, "Written for the platform-upgrade rehearsal")


def worker_environment(sim: SimCluster, workdir: Path) -> dict[str, str]:
    """What the worker needs: the nodes' SSH key, the runbook directory, S3 credentials."""
    return {
        "PITSTOP_SECRETS_DIR": str(sim.ssh_secrets_dir),
        "PITSTOP_BASELINE_DIR": str(workdir / "baselines"),
        "PITSTOP_RUNBOOK_DIR": str(REPO / "runbooks"),
        # moto accepts any credentials; a real site uses the worker's own.
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
