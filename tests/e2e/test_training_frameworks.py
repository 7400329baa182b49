"""The shipped maintenance runbook on a rehearsal cluster whose canary runs real training
operators' pods (PyTorchJob, JobSet, Volcano, RayCluster) and a GPU pod nobody recognises, none
with pitstop's checkpoint protocol (runbooks/scenarios/training-frameworks.yaml). None of them
may be evicted: the canary stops for a human decision, naming every pod and why, and stays
cordoned with the reason. Read from the simulator's counters and objects."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from pitstop.demo import maintenance as dm
from tests.e2e.conftest import Rehearsal, run_to_end, start_rehearsal

pytestmark = pytest.mark.integration

SCENARIO = dm.REPO / "runbooks" / "scenarios" / "training-frameworks.yaml"
TRAINING = ("pretrain-", "tpu-style-", "batch-", "rl-", "notebook-")


@pytest.fixture
def rehearsal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rehearsal]:
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    with start_rehearsal(tmp_path / "frameworks", SCENARIO) as rehearsal:
        for key, value in dm.worker_environment(rehearsal.sim, rehearsal.workdir).items():
            monkeypatch.setenv(key, value)
        yield rehearsal


def training_pods(rehearsal: Rehearsal, node: str) -> list[str]:
    pods = rehearsal.sim.list("pods", field_selector=f"spec.nodeName={node}")
    return sorted(
        f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        for p in pods
        if p["metadata"]["name"].startswith(TRAINING)
    )


@pytest.mark.timeout(300)
async def test_maintenance_never_evicts_real_training_operators_pods_and_names_them(
    temporal_client: Client, task_queue: str, rehearsal: Rehearsal
) -> None:
    sim = rehearsal.sim
    before = training_pods(rehearsal, dm.CANARY_NODE)
    assert len(before) == 5
    report = await run_to_end(temporal_client, task_queue, rehearsal.request(), "e2e-frameworks", within=170)

    canary = next(h for stage in report.stages for h in stage.hosts if h.host == dm.CANARY_NODE)
    assert canary.status == "failed"
    refused = next(
        t for t in canary.tasks if t.name == "Checkpoint training jobs (every member of a gang on this node)"
    )
    assert refused.status == "rescued"  # the runbook's rescue leaves the node cordoned with the reason
    for pod in before:
        assert pod in refused.msg, (pod, refused.msg)
    for why in (
        "Kubeflow training job: label training.kubeflow.org/job-name=pretrain",
        "JobSet: label jobset.sigs.k8s.io/jobset-name=tpu-style",
        "Volcano job: label volcano.sh/job-name=batch",
        "Ray cluster: label ray.io/cluster=rl",
        "unrecognised GPU workload: asks for GPUs and is not restartable serving (Experiment notebook",
    ):
        assert why in refused.msg, (why, refused.msg)
    assert "human decision" in refused.msg
    # Nothing was evicted or deleted, the firmware was not touched, and the node waits for a
    # person: cordoned, with the reason on it.
    counters = sim.counters()
    assert counters.training_evictions_without_protocol == 0
    assert counters.evictions.get(dm.CANARY_NODE, 0) == 0 and counters.forced_deletions_total == 0
    assert training_pods(rehearsal, dm.CANARY_NODE) == before
    assert counters.firmware_flashes.get(dm.CANARY_NODE, 0) == 0
    node = sim.get("nodes", dm.CANARY_NODE)
    assert node["spec"].get("unschedulable") is True
    assert dm.FAILED_ANNOTATION in node["metadata"]["annotations"]
    # The canary failed, so the fleet was never started.
    assert report.status != "completed"
    assert all(h.status in ("skipped", "pending") for s in report.stages[1:] for h in s.hosts), [
        (h.host, h.status) for s in report.stages[1:] for h in s.hosts
    ]


SUSPEND_SCENARIO = dm.REPO / "runbooks" / "scenarios" / "training-suspend.yaml"
OPERATOR_OBJECTS = {
    "kubeflow.org/pytorchjobs": ("pretrain", "Suspended", "PyTorchJobResumed"),
    "jobset.x-k8s.io/jobsets": ("tpu-style", "Suspended", "ResumeJobs"),
    "ray.io/rayclusters": ("rl", "RayClusterSuspended", "RayClusterResumed"),
}


@pytest.mark.timeout(360)
async def test_maintenance_suspends_jobs_through_their_operators_and_gives_them_back(
    temporal_client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Jobs that speak protocol `suspend` are stopped whole by their operators before the drain
    and resumed after: the whole run succeeds, no training pod is evicted, and every job runs
    again at the end with its operator saying it was resumed."""
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    with start_rehearsal(tmp_path / "suspend", SUSPEND_SCENARIO) as rehearsal:
        for key, value in dm.worker_environment(rehearsal.sim, rehearsal.workdir).items():
            monkeypatch.setenv(key, value)
        sim = rehearsal.sim
        report = await run_to_end(temporal_client, task_queue, rehearsal.request(), "e2e-suspend", within=220)
        canary = next(h for stage in report.stages for h in stage.hosts if h.host == dm.CANARY_NODE)
        assert report.status == "succeeded", (
            report.msg,
            [(h.host, h.status, h.msg) for s in report.stages for h in s.hosts],
        )
        waited = next(t for t in canary.tasks if t.name.startswith("Checkpoint training jobs"))
        assert waited.status == "changed", waited
        resumed = next(t for t in canary.tasks if t.name.startswith("Give back the training jobs"))
        assert resumed.status == "changed" and resumed.msg.startswith("resumed "), resumed
        counters = sim.counters()
        assert counters.training_evictions_without_protocol == 0
        assert counters.training_evictions_unacknowledged == 0
        assert not [e for e in counters.eviction_log if e.training], counters.eviction_log
        for storage, (name, kind, reason) in OPERATOR_OBJECTS.items():
            obj = sim.get(storage, name, "training")
            assert obj is not None
            spec = obj["spec"]
            assert (spec.get("runPolicy") or spec).get("suspend") is False, (storage, spec)
            assert "pitstop.dev/suspended-for" not in (obj["metadata"].get("annotations") or {})
            states = {c["type"]: (c["status"], c["reason"]) for c in obj["status"]["conditions"]}
            assert states[kind] == ("False", reason), (storage, states)
        # The Kueue-admitted job was stopped through its Workload and requeued by Kueue.
        finetune = sim.get("kubeflow.org/pytorchjobs", "finetune", "training") or {}
        [workload] = [
            w
            for w in sim.list("kueue.x-k8s.io/workloads", "training")
            if w["metadata"]["labels"].get("kueue.x-k8s.io/job-uid") == finetune["metadata"]["uid"]
        ]
        states = {c["type"]: (c["status"], c["reason"]) for c in workload["status"]["conditions"]}
        assert workload["spec"]["active"] is True
        assert states["Requeued"] == ("True", "Reactivated") and states["Admitted"] == ("True", "Admitted")
        for node in sim.gpu_node_names():
            notes = (sim.get("nodes", node) or {})["metadata"].get("annotations") or {}
            assert "pitstop.dev/suspended-workloads" not in notes, node
        sim.wait_for(
            lambda s: (
                len([p for p in s.list("pods", "training") if p["status"].get("phase") == "Running"]) == 8
            ),
            what="every job running again",
        )
