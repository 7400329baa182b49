"""`kube.serving_check` against the rehearsal cluster: the platform scenario's serving
Deployments as seeded (no probes, no preStop, default grace, one replica of vllm-llama) are each
reported with what they lack; after kube.apply of the shipped vLLM manifests they are not; with
`fail_on: any` the task fails; nothing is written either way."""

from __future__ import annotations

from pathlib import Path

import pytest

from activities.kube.apply import apply
from activities.kube.serving import serving_check
from tests.integration.kube.conftest import ModuleRunner
from tests.integration.sim.conftest import StartSim

REPO = Path(__file__).resolve().parents[3]
SCENARIO = (REPO / "runbooks" / "scenarios" / "platform-upgrade.yaml").read_text()


def test_serving_deployments_are_reported_until_they_meet_the_practice(
    start_sim: StartSim, module_runner: ModuleRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    sim = start_sim(SCENARIO)
    before = sim.counters().requests
    seeded = module_runner(serving_check, sim, {"namespaces": ["serving"]}, host="localhost")
    assert not seeded.failed and not seeded.changed
    found = {f["deployment"]: f["problems"] for f in seeded.data["findings"]}
    assert "serving/vllm-llama" in found and "serving/inference" in found
    assert any(p.startswith("1 replica(s)") for p in found["serving/vllm-llama"])
    assert any(p.startswith("no readinessProbe on inference") for p in found["serving/inference"])
    # The seeded inference service has its PDB; vllm-llama has none.
    assert not any("PodDisruptionBudget" in p for p in found["serving/inference"])
    assert any("PodDisruptionBudget" in p for p in found["serving/vllm-llama"])
    assert seeded.msg.startswith(f"{len(found)} of {seeded.data['judged']} serving Deployment(s) would drop")
    # Read-only: only GETs went to the apiserver.
    writes = {
        k: v - before.get(k, 0)
        for k, v in sim.counters().requests.items()
        if not k.startswith(("get", "list", "watch"))
    }
    assert not any(writes.values()), writes

    refused = module_runner(
        serving_check, sim, {"namespaces": ["serving"], "fail_on": "any"}, host="localhost"
    )
    assert refused.failed

    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(REPO / "runbooks"))
    applied = module_runner(
        apply,
        sim,
        {"src": "manifests/platform/vllm/v0.6.6", "force_conflicts": True},
        host="localhost",
    )
    assert not applied.failed, applied.msg
    after = module_runner(serving_check, sim, {"namespaces": ["serving"]}, host="localhost")
    remaining = {f["deployment"] for f in after.data["findings"]}
    assert "serving/vllm-llama" not in remaining and "serving/inference" not in remaining
