"""kube.get / kube.patch on any kind the cluster serves (built-in and custom)."""

from __future__ import annotations

import pytest
from temporalio.exceptions import ApplicationError

from activities.kube.generic import get, patch
from tests.integration.kube.conftest import ModuleRunner, StartSim

CLUSTER = """
cluster: {nodes: 2, domains: 2}
timing: {time_scale: 20}
workloads:
  deployments:
    - {name: web, namespace: serving, replicas: 2}
  cluster_queues:
    - {name: gpu-cq}
"""


def test_get_lists_by_selector_reads_one_object_and_runs_in_check_mode(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    listed = module_runner(
        get, sim, {"kind": "Node", "label_selector": "topology.kubernetes.io/zone=zone-b"}, check_mode=True
    )
    assert listed.changed is False
    assert [n["metadata"]["name"] for n in listed.data["resources"]] == ["gpu-node-002"]
    assert listed.msg == "1 Node objects"
    one = module_runner(
        get, sim, {"api_version": "apps/v1", "kind": "Deployment", "namespace": "serving", "name": "web"}
    )
    assert one.data["exists"] is True and one.data["resource"]["spec"]["replicas"] == 2
    queue = module_runner(
        get, sim, {"api_version": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "name": "gpu-cq"}
    )
    assert queue.data["resource"]["spec"]["stopPolicy"] == "None"
    missing = module_runner(get, sim, {"kind": "Node", "name": "gpu-node-404"})
    assert (missing.data["exists"], missing.data["resources"], missing.msg) == (
        False,
        [],
        "Node gpu-node-404 not found",
    )
    capped = module_runner(get, sim, {"kind": "Pod", "limit": 1})
    assert capped.data["truncated"] is True and capped.data["count"] == 1


def test_get_explains_unknown_kinds_and_missing_namespaces(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    with pytest.raises(ApplicationError) as unknown:
        module_runner(get, sim, {"api_version": "apps/v1", "kind": "Deploymnet"})
    assert unknown.value.type == "InvalidArgs"
    assert unknown.value.message.startswith("rehearsal serves no kind 'Deploymnet' in apps/v1 (kinds: ")
    assert "Deployment" in unknown.value.message
    with pytest.raises(ApplicationError) as no_ns:
        module_runner(get, sim, {"kind": "Pod", "name": "x"})
    assert no_ns.value.message == "kube.get: Pod is namespaced; give `namespace` with `name`"
    with pytest.raises(ApplicationError, match=r"does not serve apiVersion 'example\.com/v9'"):
        module_runner(get, sim, {"api_version": "example.com/v9", "kind": "Thing"})


def test_patch_shows_the_diff_in_check_mode_applies_once_and_is_then_unchanged(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    args = {
        "api_version": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "name": "gpu-cq",
        "patch": {"spec": {"stopPolicy": "Hold"}},
    }
    planned = module_runner(patch, sim, args, check_mode=True)
    assert (planned.changed, planned.msg) == (True, "would patch ClusterQueue gpu-cq")
    assert planned.diff is not None
    assert '-    "stopPolicy": "None"' in planned.diff and '+    "stopPolicy": "Hold"' in planned.diff
    assert (sim.get("kueue.x-k8s.io/clusterqueues", "gpu-cq") or {})["spec"]["stopPolicy"] == "None"
    applied = module_runner(patch, sim, args)
    assert (applied.changed, applied.msg) == (True, "patched ClusterQueue gpu-cq")
    assert (sim.get("kueue.x-k8s.io/clusterqueues", "gpu-cq") or {})["spec"]["stopPolicy"] == "Hold"
    again = module_runner(patch, sim, args)
    assert (again.changed, again.msg) == (False, "ClusterQueue gpu-cq already matches the patch")
    scaled = module_runner(
        patch,
        sim,
        {
            "api_version": "apps/v1",
            "kind": "Deployment",
            "namespace": "serving",
            "name": "web",
            "patch": [{"op": "replace", "path": "/spec/replicas", "value": 3}],
            "patch_type": "json",
        },
    )
    assert scaled.changed and scaled.data["resource"]["spec"]["replicas"] == 3


def test_patch_errors_name_the_problem(start_sim: StartSim, module_runner: ModuleRunner) -> None:
    sim = start_sim(CLUSTER)
    base = {"api_version": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "name": "gpu-cq"}
    with pytest.raises(ApplicationError) as strategic:
        module_runner(patch, sim, {**base, "patch": {"spec": {}}, "patch_type": "strategic"})
    assert strategic.value.type == "InvalidArgs" and "HTTP 415" in strategic.value.message
    with pytest.raises(ApplicationError) as shape:
        module_runner(patch, sim, {**base, "patch": {"spec": {}}, "patch_type": "json"})
    assert shape.value.message == "kube.patch: a JSON patch (patch_type: json) is a list of operations"
    with pytest.raises(ApplicationError) as missing:
        module_runner(patch, sim, {**base, "name": "nope", "patch": {"spec": {}}})
    assert (missing.value.type, missing.value.message) == (
        "PreconditionFailed",
        "ClusterQueue nope not found in rehearsal",
    )
