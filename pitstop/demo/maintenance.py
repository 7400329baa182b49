"""The main job on the rehearsal cluster: GPU node maintenance, canary then fleet.

`pitstop demo` (what `make demo` runs) starts the embedded stack, a simulated cluster of 12
GPU nodes in 3 failure domains (an inference Deployment behind a PDB, a gang training job
with the checkpoint protocol, one node with degraded NCCL bandwidth), each node with its own
SSH endpoint; then a worker and `runbooks/gpu-node-maintenance.yaml`. It checks the outcome
against what the runbook promises, from the simulator's own counters and timeline.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from pitstop.contracts import HostResult, RunReport
from pitstop_sim import SimCluster, SimConfig, load_scenario

REPO = Path(__file__).resolve().parents[2]
RUNBOOK = REPO / "runbooks" / "gpu-node-maintenance.yaml"
SCENARIO = REPO / "runbooks" / "scenarios" / "demo-maintenance.yaml"
DEGRADED_NODE = "gpu-node-008"
CANARY_NODE = "gpu-node-001"
FAILED_ANNOTATION = "pitstop.dev/maintenance-failed"
# The rehearsal cluster's clock runs fast: waits look again often, and each failure domain is
# watched for a few seconds (a real fleet watches 30m or more).
REHEARSAL_VARS: dict[str, Any] = {"poll_seconds": 0.5, "observe_window": "5s"}
# Where the run writes its own report as its last task (records.run_report), so that the run
# lists a "run report" artifact: a bucket of the embedded stack's S3, made on first use.
REPORT_BUCKET = "pitstop-run-reports"


def report_vars(s3_endpoint: str) -> dict[str, Any]:
    """The runbook's variables that send the run's report to the stack's S3 (moto)."""
    return {
        "report_bucket": REPORT_BUCKET,
        "s3_endpoint_url": s3_endpoint,
        "s3_addressing_style": "path",
        "s3_create_bucket": True,
    }


def start_cluster(workdir: Path, scenario: Path = SCENARIO) -> SimCluster:
    """The rehearsal cluster with SSH endpoints, serving from a background thread."""
    workdir.mkdir(parents=True, exist_ok=True)
    sim = SimCluster(
        SimConfig(
            scenario=load_scenario(scenario), kubeconfig=workdir / "kubeconfig", ssh=True, ssh_dir=workdir
        )
    )
    sim.start()
    return sim


def write_inventory(sim: SimCluster, path: Path, canary: str = CANARY_NODE) -> Path:
    """Groups `gpu_canary` and `gpu_fleet` over the simulator's nodes, with their SSH ports; the
    cluster registered with the worker as `rehearsal`."""
    if sim.kubeconfig_path is None:
        raise ValueError("the rehearsal cluster was started without a kubeconfig")
    hosts: dict[str, Any] = {}
    for node in sim.node_names():
        info = sim.ssh_info(node)
        profile = sim.node_profile(node)
        hosts[node] = {
            "ansible_host": info.host,
            "ansible_port": info.port,
            "failure_domain": profile.domain,
            "node_name": node,
            "gpu_count": profile.gpus,
        }
    doc = {
        "cluster": cluster_block(sim, "rehearsal"),
        "all": {
            "children": {
                "gpu_fleet": {"hosts": hosts},
                "gpu_canary": {"hosts": {canary: None}},
            }
        },
    }
    return dump_inventory(doc, path, "Written by pitstop demo for the rehearsal cluster")


def cluster_block(sim: SimCluster, name: str, ssh_key_secret: str = "sim-ssh-key") -> dict[str, Any]:
    """The inventory's `cluster:` for a rehearsal cluster: its name and its nodes' SSH user and
    key. The cluster is registered with the worker under that name (its kubeconfig and known_hosts
    in the worker's clusters directory), as an operator registers a real one: the inventory only
    names it."""
    sim.register(name)
    return {"name": name, "ssh": {"user": sim.config.ssh_user, "key": {"secret": ssh_key_secret}}}


def dump_inventory(doc: dict[str, Any], path: Path, why: str) -> Path:
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    with path.open("w", encoding="utf-8") as out:
        out.write(f"# {why} (ports change at every start).\n")
        yaml.dump(doc, out)
    return path


def worker_environment(sim: SimCluster, workdir: Path) -> dict[str, str]:
    """What the worker needs to reach the simulated nodes (their SSH key), where state goes, and
    S3 credentials for the run's report."""
    return {
        "PITSTOP_SECRETS_DIR": str(sim.ssh_secrets_dir),
        "PITSTOP_BASELINE_DIR": str(workdir / "baselines"),
        "PITSTOP_RUNBOOK_DIR": str(REPO / "runbooks"),
        # moto accepts any credentials; a real site uses the worker's own.
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }


def apply_environment(env: dict[str, str]) -> None:
    os.environ.update(env)


@dataclass
class NodeRow:
    node: str
    domain: str
    firmware_before: str
    firmware_after: str
    drain_seconds: float | None
    nccl_busbw_gbps: float | None
    dcgm: str
    outcome: str
    schedulable: bool
    reason: str = ""


@dataclass
class Verdict:
    rows: list[NodeRow]
    problems: list[str] = field(default_factory=list)
    counters: dict[str, Any] = field(default_factory=dict)
    max_unavailable_per_domain: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


def _task(host: HostResult, name_prefix: str) -> Any:
    return next((t for t in host.tasks if t.name.startswith(name_prefix)), None)


def judge(
    sim: SimCluster, report: RunReport, target: str, per_domain_limit: int, degraded: str = DEGRADED_NODE
) -> Verdict:
    """Did the run behave as the runbook says? From the report and the simulator's counters."""
    results = {h.host: h for stage in report.stages for h in stage.hosts}
    counters = sim.counters()
    rows: list[NodeRow] = []
    problems: list[str] = []
    for node in sim.node_names():
        profile = sim.node_profile(node)
        obj = sim.get("nodes", node) or {}
        unschedulable = bool((obj.get("spec") or {}).get("unschedulable"))
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        host = results.get(node)
        drain = _task(host, "Drain") if host else None
        nccl = _task(host, "NCCL") if host else None
        dcgm = _task(host, "DCGM") if host else None
        before = str((host.registered.get("node_facts") or {}).get("firmware", "?")) if host else "?"
        row = NodeRow(
            node=node,
            domain=profile.domain,
            firmware_before=before,
            firmware_after=profile.firmware_version,
            drain_seconds=(drain.ended_at - drain.started_at).total_seconds() if drain else None,
            nccl_busbw_gbps=(nccl.data or {}).get("avg_busbw_gbps") if nccl else None,
            dcgm=dcgm.status if dcgm else "-",
            outcome=host.status if host else "not run",
            schedulable=not unschedulable,
            reason=str(annotations.get(FAILED_ANNOTATION, "")),
        )
        rows.append(row)
        if node == degraded:
            if row.schedulable:
                problems.append(f"{node} (degraded) was returned to service")
            if not row.reason:
                problems.append(f"{node} (degraded) carries no {FAILED_ANNOTATION} reason")
        else:
            if row.firmware_after != target:
                problems.append(f"{node} has firmware {row.firmware_after}, not {target}")
            if not row.schedulable:
                problems.append(f"{node} was left cordoned")
    if report.status not in ("succeeded", "completed_with_failures"):
        problems.append(f"the run ended {report.status}: {report.msg}")
    if counters.pdb_violations:
        problems.append(f"{counters.pdb_violations} PodDisruptionBudget violations")
    if counters.training_evictions_without_protocol:
        problems.append(
            f"{counters.training_evictions_without_protocol} training pods evicted without a checkpoint"
        )
    twice = {n: c for n, c in counters.drains.items() if c > 1}
    if twice:
        problems.append(f"nodes drained more than once: {twice}")
    flashed = {n: c for n, c in counters.firmware_flashes.items() if c > 1}
    if flashed:
        problems.append(f"nodes flashed more than once: {flashed}")
    peaks: dict[str, int] = {}
    for domain in sim.unavailability():
        peaks[domain.domain] = domain.max_unavailable
        if domain.max_unavailable - domain.unavailable_at_start > per_domain_limit:
            problems.append(
                f"failure domain {domain.domain} had {domain.max_unavailable} nodes unavailable at once "
                f"(the runbook allows {per_domain_limit})"
            )
    return Verdict(
        rows=rows,
        problems=problems,
        counters={
            "evictions": counters.evictions_total,
            "pdb_violations": counters.pdb_violations,
            "training_evictions_without_protocol": counters.training_evictions_without_protocol,
            "checkpoint_acks": counters.checkpoint_acks,
        },
        max_unavailable_per_domain=peaks,
    )
