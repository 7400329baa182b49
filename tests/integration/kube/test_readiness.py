"""kube.readiness against rehearsal clusters: a MultiKueue manager and its worker, each served by
pitstop_sim and registered with the worker policy under its own name.

A worker that has everything the manager selects passes (read from the manager, and from an
expectation exported on the manager); one without the model-cache StorageClass and team-a's
LocalQueue, whose image pull Secret has another type, fails naming each; the Secret's value
never appears in a result; an inactive MultiKueueCluster on the manager fails the check; a
manager this worker may not reach, or a worker cluster it does not know, is a clear error."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from activities.kube.readiness import readiness
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.runbook.inventory import ClusterConfig
from pitstop_sim import SimCluster
from tests.integration.kube.conftest import ModuleRunner, StartSim
from tests.integration.kube.readiness_setup import (
    SECRET_VALUE,
    SELECTOR,
    SIM,
    multikueue,
    platform,
    writes_of_read_kinds,
)

pytestmark = pytest.mark.integration


def named(sim: SimCluster, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    sim.register(name)
    return name


def call(
    runner: ModuleRunner, cluster: str, args: dict[str, Any], *, check_mode: bool = False
) -> ModuleResult:
    request = ModuleCall(
        module="kube.readiness",
        host="localhost",
        args=args,
        check_mode=check_mode,
        run_id="run-readiness",
        task_path="readiness/0",
        host_vars={"inventory_hostname": "localhost"},
        cluster=ClusterConfig(name=cluster),
    )
    result: ModuleResult = runner.env().run(readiness, request)
    return result


def by_label(result: ModuleResult) -> dict[str, dict[str, Any]]:
    out = {}
    for item in result.data["items"]:
        label = f"{item['kind']} {item['namespace']}/{item['name']}" if item["namespace"] else None
        out[label or f"{item['kind']} {item['name']}"] = item
    return out


@pytest.fixture
def clusters(start_sim: StartSim) -> tuple[SimCluster, str, SimCluster, str]:
    manager = start_sim(SIM)
    worker = start_sim(SIM)
    manager_name, worker_name = named(manager, "manager"), named(worker, "gpu-b")
    platform(manager)
    multikueue(manager, worker_name)
    return manager, manager_name, worker, worker_name


def test_a_worker_with_what_the_manager_selects_is_ready(
    clusters: tuple[SimCluster, str, SimCluster, str], module_runner: ModuleRunner
) -> None:
    manager, manager_name, worker, worker_name = clusters
    platform(worker)
    worker.reset_counters()
    manager.reset_counters()
    result = call(
        module_runner,
        worker_name,
        {"manager": {"cluster": manager_name, "label_selector": SELECTOR}},
        check_mode=True,
    )
    assert not result.failed, result.msg
    assert result.data["source"] == "manager"
    items = by_label(result)
    assert {i["state"] for i in items.values()} == {"present"}
    for label in (
        "Namespace team-a",
        "Namespace gpu-monitoring",
        "RuntimeClass nvidia",
        "Secret team-a/registry-pull",
        "StorageClass model-cache",
        "PersistentVolumeClaim team-a/model-cache",
        "DaemonSet gpu-monitoring/nvidia-dcgm-exporter",
        "ResourceFlavor h100",
        "ClusterQueue team-a-cq",
        "LocalQueue team-a/team-a",
    ):
        assert label in items, (label, sorted(items))
    # What the expected objects name is expected with who uses it.
    assert (
        f"manager cluster {manager_name}'s LocalQueue team-a/team-a"
        in items["ClusterQueue team-a-cq"]["used_by"]
    )
    mk = result.data["multikueue_cluster"]
    assert mk["active"] and mk["kubeconfig_location"] == f"{worker_name}-kubeconfig"
    assert f"worker cluster {worker_name} has all" in result.msg
    # Read-only on both clusters, check mode or not.
    assert writes_of_read_kinds(worker) == {} and writes_of_read_kinds(manager) == {}


def test_a_worker_missing_a_storage_class_and_a_local_queue_fails_naming_each_difference(
    clusters: tuple[SimCluster, str, SimCluster, str], module_runner: ModuleRunner
) -> None:
    _, manager_name, worker, worker_name = clusters
    platform(worker, storage_class=False, local_queue=False, secret_type="Opaque", gpu_covered=False)
    result = call(
        module_runner, worker_name, {"manager": {"cluster": manager_name, "label_selector": SELECTOR}}
    )
    assert result.failed
    items = by_label(result)
    assert items["StorageClass model-cache"]["state"] == "missing"
    assert items["LocalQueue team-a/team-a"]["state"] == "missing"
    secret = items["Secret team-a/registry-pull"]
    assert secret["state"] == "different"
    assert secret["differences"] == ["type: 'Opaque' here, 'kubernetes.io/dockerconfigjson' expected"]
    assert items["ClusterQueue team-a-cq"]["differences"] == ["flavor h100 does not cover nvidia.com/gpu"]
    assert items["RuntimeClass nvidia"]["state"] == "present"
    assert result.data["counts"] == {"present": 6, "missing": 2, "different": 2}
    msg = result.msg
    assert (
        f"StorageClass model-cache missing on worker cluster {worker_name} "
        f"(manager cluster {manager_name}'s PersistentVolumeClaim team-a/model-cache uses it)"
    ) in msg
    assert f"LocalQueue team-a/team-a missing on worker cluster {worker_name}" in msg
    assert "Secret team-a/registry-pull different" in msg and "'Opaque' here" in msg
    assert "ClusterQueue team-a-cq different" in msg
    # The Secret's value (and its base64) is in no part of the result.
    dumped = result.model_dump_json()
    assert SECRET_VALUE not in dumped
    assert "auths" not in dumped and 'dockerconfigjson":' not in dumped


def test_the_expectation_exported_on_the_manager_checks_a_worker_that_cannot_reach_it(
    clusters: tuple[SimCluster, str, SimCluster, str], module_runner: ModuleRunner
) -> None:
    _, manager_name, worker, worker_name = clusters
    platform(worker, local_queue=False)
    exported = call(
        module_runner,
        manager_name,
        {"mode": "export", "label_selector": SELECTOR, "worker_cluster": worker_name},
        check_mode=True,
    )
    assert not exported.failed, exported.msg
    assert exported.data["multikueue_cluster"]["active"] is True
    expected = exported.data["expected"]
    assert {"kind": "Secret", "namespace": "team-a", "name": "registry-pull"}.items() <= expected[
        [e["kind"] for e in expected].index("Secret")
    ].items()
    assert SECRET_VALUE not in json.dumps(exported.data)
    # The manager's name is one this worker does not know: the expectation is used instead.
    result = call(
        module_runner,
        worker_name,
        {"manager": {"cluster": f"unknown-{uuid.uuid4().hex[:6]}"}, "expected": expected},
    )
    assert result.failed and result.data["source"] == "expected"
    assert [i["name"] for i in result.data["items"] if i["state"] != "present"] == ["team-a"]
    assert f"LocalQueue team-a/team-a missing on worker cluster {worker_name}" in result.msg


def test_an_inactive_multikueue_cluster_on_the_manager_fails_the_check(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    manager, worker = start_sim(SIM), start_sim(SIM)
    manager_name, worker_name = named(manager, "manager"), named(worker, "gpu-b")
    platform(manager)
    platform(worker)
    multikueue(manager, worker_name, active=False)
    result = call(
        module_runner, worker_name, {"manager": {"cluster": manager_name, "label_selector": SELECTOR}}
    )
    assert result.failed
    assert result.msg.startswith(
        f"MultiKueueCluster {worker_name} on manager cluster {manager_name} is different: Active is False "
        "(ClientConnectionFailed: failed to connect to the worker)"
    ), result.msg
    assert {i["state"] for i in result.data["items"]} == {"present"}


def test_an_unknown_manager_or_worker_cluster_is_a_clear_error(
    clusters: tuple[SimCluster, str, SimCluster, str], module_runner: ModuleRunner
) -> None:
    _, _, worker, worker_name = clusters
    platform(worker)
    unknown = f"nowhere-{uuid.uuid4().hex[:6]}"
    with pytest.raises(ApplicationError) as refused:
        call(module_runner, worker_name, {"manager": {"cluster": unknown}, "source": "manager"})
    assert refused.value.type == "PolicyViolation"
    assert f"cluster {unknown!r} is not one this worker may act on" in refused.value.message
    assert "mode: export on the manager's worker" in refused.value.message
    with pytest.raises(ApplicationError) as no_worker:
        call(module_runner, unknown, {"expected": [{"kind": "RuntimeClass", "name": "nvidia"}]})
    assert no_worker.value.type == "PolicyViolation"
    assert f"cluster {unknown!r} is not one this worker may act on" in no_worker.value.message


def test_objects_named_on_the_manager_bring_what_they_use_and_a_name_it_lacks_is_an_error(
    clusters: tuple[SimCluster, str, SimCluster, str], module_runner: ModuleRunner
) -> None:
    _, manager_name, worker, worker_name = clusters
    platform(worker, gpu_covered=False)
    names = {"RuntimeClass": ["nvidia"], "LocalQueue": ["team-a/team-a"]}
    result = call(module_runner, worker_name, {"manager": {"cluster": manager_name, "names": names}})
    # The LocalQueue brings its ClusterQueue, which brings its flavor; both bring their namespace.
    assert sorted(by_label(result)) == [
        "ClusterQueue team-a-cq",
        "LocalQueue team-a/team-a",
        "Namespace team-a",
        "ResourceFlavor h100",
        "RuntimeClass nvidia",
    ]
    assert result.failed
    assert by_label(result)["ClusterQueue team-a-cq"]["differences"] == [
        "flavor h100 does not cover nvidia.com/gpu"
    ]
    with pytest.raises(ApplicationError) as absent:
        call(
            module_runner,
            worker_name,
            {"manager": {"cluster": manager_name, "names": {"StorageClass": ["fast"]}}},
        )
    assert absent.value.type == "PreconditionFailed"
    assert f"manager cluster {manager_name} has no StorageClass fast" in absent.value.message


def test_a_service_monitor_on_a_worker_without_its_crd_is_missing_with_the_reason(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    worker = start_sim(SIM)
    worker_name = named(worker, "gpu-b")
    expected = [
        {
            "kind": "ServiceMonitor",
            "namespace": "gpu-monitoring",
            "name": "dcgm-exporter",
            "used_by": ["alerts"],
        },
        {"kind": "ServiceMonitor", "namespace": "gpu-monitoring", "name": "optional", "required": False},
    ]
    result = call(module_runner, worker_name, {"expected": expected})
    items = by_label(result)
    monitor = items["ServiceMonitor gpu-monitoring/dcgm-exporter"]
    assert monitor["state"] == "missing"
    assert monitor["reason"] == "monitoring.coreos.com/v1 is not served (its CRDs are not installed)"
    assert items["Namespace gpu-monitoring"]["state"] == "missing"
    assert items["ServiceMonitor gpu-monitoring/optional"]["required"] is False
    assert result.failed
    assert "ServiceMonitor gpu-monitoring/optional missing" in result.msg and "[not required]" in result.msg


def test_an_expected_name_that_is_not_one_path_segment_is_refused_before_any_request(
    clusters: tuple[SimCluster, str, SimCluster, str], module_runner: ModuleRunner
) -> None:
    _, _, worker, worker_name = clusters
    platform(worker)
    before = worker.counters().requests.get("get storageclasses", 0)
    with pytest.raises(ApplicationError) as refused:
        call(module_runner, worker_name, {"expected": [{"kind": "StorageClass", "name": "../../secrets"}]})
    assert refused.value.type == "InvalidArgs", refused.value
    assert "../../secrets" in refused.value.message
    assert worker.counters().requests.get("get storageclasses", 0) == before
