"""Zero-downtime serving as `kube.serving_check` judges it: the shipped vLLM manifests meet it,
and each way a Deployment can fall short is named (maxUnavailable as the apiserver rounds it)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from pitstop.kube.serving import effective_max_unavailable, problems_of, serving_findings

VLLM = Path(__file__).resolve().parents[2] / "runbooks" / "manifests" / "platform" / "vllm"


def shipped(version: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    docs = [d for d in yaml.safe_load_all((VLLM / version / "vllm.yaml").read_text()) if d]
    return [d for d in docs if d["kind"] == "Deployment"], [
        d for d in docs if d["kind"] == "PodDisruptionBudget"
    ]


@pytest.mark.parametrize("version", ["v0.6.3", "v0.6.6"])
def test_the_shipped_serving_manifests_roll_and_drain_without_dropping_requests(version: str) -> None:
    deployments, pdbs = shipped(version)
    judged, findings = serving_findings(deployments, pdbs)
    assert (judged, findings) == (2, [])


def test_each_shortfall_is_named() -> None:
    deployments, _ = shipped("v0.6.6")
    bare = copy.deepcopy(deployments[0])
    spec = bare["spec"]
    spec["replicas"] = 1
    spec["strategy"] = {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
    }
    container = spec["template"]["spec"]["containers"][0]
    del container["readinessProbe"], container["lifecycle"]
    del spec["template"]["spec"]["terminationGracePeriodSeconds"]
    problems = problems_of(bare, [])
    # 25%/25% of one replica: 0 unavailable and 1 surge (percentages round down and up).
    assert problems == [
        "1 replica(s): a drain or an eviction leaves none serving (want ≥2)",
        "no readinessProbe on vllm-llama: traffic before it can serve",
        "no preStop hook on vllm-llama: requests still routed when SIGTERM arrives",
        "terminationGracePeriodSeconds 30 is shorter than 60: requests in flight are cut",
        "no PodDisruptionBudget selects its pods: a drain may evict every replica at once",
    ]
    spec["replicas"] = 4
    assert problems_of(bare, [])[0].startswith("a rolling update may take 1 replica(s) away")
    spec["strategy"] = {"type": "Recreate"}
    assert problems_of(bare, [])[0] == "strategy Recreate stops every replica before starting new ones"


@pytest.mark.parametrize(
    ("replicas", "rolling", "unavailable"),
    [
        (4, {}, 1),  # the API's defaults: 25% / 25%
        (2, {"maxUnavailable": "25%", "maxSurge": "25%"}, 0),
        (2, {"maxUnavailable": 0, "maxSurge": 0}, 1),  # both 0: the controller takes 1
        (10, {"maxUnavailable": "10%", "maxSurge": 1}, 1),
        (3, {"maxUnavailable": 0, "maxSurge": 1}, 0),
    ],
)
def test_max_unavailable_is_what_the_deployment_controller_would_take(
    replicas: int, rolling: dict[str, Any], unavailable: int
) -> None:
    deployment = {
        "spec": {"replicas": replicas, "strategy": {"type": "RollingUpdate", "rollingUpdate": rolling}}
    }
    assert effective_max_unavailable(deployment) == unavailable


def test_cpu_deployments_and_other_namespaces_pdbs_do_not_count() -> None:
    deployments, pdbs = shipped("v0.6.6")
    cpu = copy.deepcopy(deployments[0])
    for container in cpu["spec"]["template"]["spec"]["containers"]:
        container["resources"] = {"requests": {"cpu": "1"}}
    assert serving_findings([cpu], []) == (0, [])
    elsewhere = [copy.deepcopy(p) for p in pdbs]
    for pdb in elsewhere:
        pdb["metadata"]["namespace"] = "other"
    _, findings = serving_findings(deployments, elsewhere)
    assert [f.problems[-1] for f in findings] == [
        "no PodDisruptionBudget selects its pods: a drain may evict every replica at once"
    ] * 2


def test_a_pdb_that_lets_every_replica_go_does_not_count_and_zero_replicas_are_not_judged() -> None:
    deployments, pdbs = shipped("v0.6.6")
    loose = copy.deepcopy(pdbs)
    for pdb, spec in zip(loose, [{"minAvailable": 0}, {"maxUnavailable": "100%"}], strict=True):
        pdb["spec"] = {"selector": pdb["spec"]["selector"], **spec}
    _, findings = serving_findings(deployments, loose)
    assert {f.deployment: f.problems for f in findings} == {
        "serving/vllm-llama": ["its PodDisruptionBudget (vllm-llama) lets every replica go at once"],
        "serving/inference": ["its PodDisruptionBudget (inference) lets every replica go at once"],
    }
    idle = copy.deepcopy(deployments[0])
    idle["spec"]["replicas"] = 0
    assert serving_findings([idle], []) == (0, [])
