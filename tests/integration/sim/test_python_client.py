"""The official `kubernetes` client against the rehearsal cluster: the calls pitstop's
kube modules make, and the errors they must handle."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from pitstop.gpu.dcgm import parse_dcgm_diag
from pitstop_sim import ApiErrorFault, SimCluster
from tests.integration.sim.conftest import StartSim

ClientFor = Callable[[SimCluster], client.ApiClient]

CLUSTER = """
    cluster: {nodes: 4, domains: 2, gpus_per_node: 8}
    timing: {time_scale: 50, pod_start_seconds: 5, recreate_delay_seconds: 5}
    workloads:
      deployments:
        - name: web
          namespace: serving
          replicas: 2
          gpus: 1
          pdb: {min_available: 1}
          placement: [gpu-node-001, gpu-node-001]
    health:
      nodes:
        gpu-node-003: {dcgm_failures: [Memory]}
"""


def _eviction(name: str, namespace: str) -> client.V1Eviction:
    return client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))


def test_list_nodes_by_label_selector_returns_the_failure_domain(
    start_sim: StartSim, kube_client_for: ClientFor
) -> None:
    core = client.CoreV1Api(kube_client_for(start_sim(CLUSTER)))
    nodes = core.list_node(
        label_selector="topology.kubernetes.io/zone=zone-b,nvidia.com/gpu.present=true"
    ).items
    assert [n.metadata.name for n in nodes] == ["gpu-node-003", "gpu-node-004"]
    assert nodes[0].status.capacity["nvidia.com/gpu"] == "8"
    assert nodes[0].metadata.labels["pitstop.dev/firmware-version"] == "96.00.89.00.01"
    assert core.list_node(label_selector="topology.kubernetes.io/zone notin (zone-a, zone-b)").items == []


def test_list_pods_with_field_selector_on_node_name(start_sim: StartSim, kube_client_for: ClientFor) -> None:
    core = client.CoreV1Api(kube_client_for(start_sim(CLUSTER)))
    pods = core.list_pod_for_all_namespaces(
        field_selector="spec.nodeName=gpu-node-001,status.phase!=Succeeded"
    ).items
    names = sorted(p.metadata.name for p in pods)
    assert len(names) == 4  # two web replicas, the GPU Operator's device plugin and DCGM exporter
    assert sum(1 for n in names if n.startswith("web-")) == 2
    assert all(p.spec.node_name == "gpu-node-001" for p in pods)


def test_unsupported_field_selector_is_a_bad_request(start_sim: StartSim, kube_client_for: ClientFor) -> None:
    core = client.CoreV1Api(kube_client_for(start_sim(CLUSTER)))
    with pytest.raises(ApiException) as caught:
        core.list_pod_for_all_namespaces(field_selector="spec.gpu=8")
    assert caught.value.status == 400
    assert "field label not supported: spec.gpu" in json.loads(caught.value.body)["message"]


def test_patch_node_cordons_it_and_the_node_controller_taints_it(
    start_sim: StartSim, kube_client_for: ClientFor
) -> None:
    sim = start_sim(CLUSTER)
    core = client.CoreV1Api(kube_client_for(sim))
    patched = core.patch_node(
        "gpu-node-002",
        {"spec": {"unschedulable": True}, "metadata": {"annotations": {"pitstop.dev/cordoned-by": "run-1"}}},
    )
    assert patched.spec.unschedulable is True
    assert patched.metadata.annotations["pitstop.dev/cordoned-by"] == "run-1"
    sim.wait_for(
        lambda s: bool((s.get("nodes", "gpu-node-002") or {})["spec"].get("taints")), what="the cordon taint"
    )
    taints = core.read_node("gpu-node-002").spec.taints
    assert [(t.key, t.effect) for t in taints] == [("node.kubernetes.io/unschedulable", "NoSchedule")]
    # JSON patch with a test operation: the precondition fails, nothing changes.
    with pytest.raises(ApiException) as caught:
        core.patch_node(
            "gpu-node-002",
            [
                {"op": "test", "path": "/spec/unschedulable", "value": False},
                {"op": "replace", "path": "/spec/unschedulable", "value": False},
            ],
        )
    assert caught.value.status == 422
    assert core.read_node("gpu-node-002").spec.unschedulable is True


def test_eviction_is_refused_with_429_while_the_pdb_disallows_and_accepted_once_it_allows(
    start_sim: StartSim, kube_client_for: ClientFor
) -> None:
    sim = start_sim(CLUSTER)
    core = client.CoreV1Api(kube_client_for(sim))
    first, second = (
        p.metadata.name for p in core.list_namespaced_pod("serving", label_selector="app=web").items
    )
    core.create_namespaced_pod_eviction(first, "serving", _eviction(first, "serving"))
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod_eviction(second, "serving", _eviction(second, "serving"))
    assert caught.value.status == 429
    body = json.loads(caught.value.body)
    assert body["reason"] == "TooManyRequests"
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"
    # No assertion on disruptionsAllowed here: the replacement replica may already be ready.
    sim.wait_for(
        lambda s: (
            (s.get("policy/poddisruptionbudgets", "web", "serving") or {})["status"]["disruptionsAllowed"]
            == 1
        ),
        timeout=20,
        what="the replacement replica to be ready",
    )
    result = core.create_namespaced_pod_eviction(second, "serving", _eviction(second, "serving"))
    assert result.kind == "Status"
    counters = sim.counters()
    assert counters.evictions == {"gpu-node-001": 2}
    assert counters.eviction_refusals == {"gpu-node-001": 1}
    assert counters.pdb_violations == 0


def test_dry_run_eviction_changes_nothing(start_sim: StartSim, kube_client_for: ClientFor) -> None:
    sim = start_sim(CLUSTER)
    core = client.CoreV1Api(kube_client_for(sim))
    pod = core.list_namespaced_pod("serving").items[0].metadata.name
    core.create_namespaced_pod_eviction(pod, "serving", _eviction(pod, "serving"), dry_run="All")
    assert core.read_namespaced_pod(pod, "serving").metadata.deletion_timestamp is None
    assert sim.counters().evictions_total == 0


def test_validation_pod_log_reflects_the_node_health_profile(
    start_sim: StartSim, kube_client_for: ClientFor
) -> None:
    sim = start_sim(CLUSTER)
    core = client.CoreV1Api(kube_client_for(sim))
    for node in ("gpu-node-002", "gpu-node-003"):
        core.create_namespaced_pod(
            "default",
            client.V1Pod(
                metadata=client.V1ObjectMeta(name=f"dcgm-{node}", labels={"pitstop.dev/validation": "dcgm"}),
                spec=client.V1PodSpec(
                    node_name=node,
                    restart_policy="Never",
                    containers=[
                        client.V1Container(
                            name="dcgm",
                            image="nvcr.io/nvidia/cloud-native/dcgm:3.3.7",
                            command=["sh", "-c", "nv-hostengine && dcgmi diag -r 3 -j"],
                        )
                    ],
                ),
            ),
        )
    phases: dict[str, str] = {}
    stream = watch.Watch()
    for event in stream.stream(core.list_namespaced_pod, "default", timeout_seconds=30):
        pod = event["object"]
        if pod.status.phase in ("Succeeded", "Failed"):
            phases[pod.metadata.name] = pod.status.phase
        if len(phases) == 2:
            stream.stop()
    assert phases == {"dcgm-gpu-node-002": "Succeeded", "dcgm-gpu-node-003": "Failed"}
    healthy = core.read_namespaced_pod_log("dcgm-gpu-node-002", "default")
    broken = core.read_namespaced_pod_log("dcgm-gpu-node-003", "default")
    # `dcgmi diag -j` JSON, judged as gpu.dcgm_diag judges it.
    assert parse_dcgm_diag(healthy).passed
    assert [f.test for f in parse_dcgm_diag(broken).failures] == ["GPU Memory"]
    assert core.read_namespaced_pod_log("dcgm-gpu-node-003", "default", tail_lines=1).count("\n") == 1


def test_errors_carry_the_apiserver_reasons(start_sim: StartSim, kube_client_for: ClientFor) -> None:
    core = client.CoreV1Api(kube_client_for(start_sim(CLUSTER)))
    with pytest.raises(ApiException) as missing:
        core.read_node("gpu-node-999")
    assert missing.value.status == 404
    assert json.loads(missing.value.body)["message"] == 'nodes "gpu-node-999" not found'
    with pytest.raises(ApiException) as exists:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="serving")))
    assert exists.value.status == 409
    assert json.loads(exists.value.body)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as bad:
        core.create_namespaced_pod("default", {"metadata": {"name": "Bad_Name"}, "spec": {"containers": []}})
    body = json.loads(bad.value.body)
    assert bad.value.status == 422
    assert body["reason"] == "Invalid"
    assert {c["field"] for c in body["details"]["causes"]} == {"metadata.name", "spec.containers"}
    node = core.read_node("gpu-node-001")
    node.spec.unschedulable = True
    node.metadata.resource_version = "1"  # stale
    with pytest.raises(ApiException) as stale:
        core.replace_node("gpu-node-001", node)
    assert stale.value.status == 409
    assert "the object has been modified" in json.loads(stale.value.body)["message"]


def test_injected_server_error_reaches_the_client_then_the_call_succeeds(
    start_sim: StartSim, kube_client_for: ClientFor
) -> None:
    sim = start_sim(CLUSTER)
    core = client.CoreV1Api(kube_client_for(sim))
    sim.add_fault(
        ApiErrorFault(
            verb="patch", resource="nodes", status=500, count=1, message="etcdserver: request timed out"
        )
    )
    with pytest.raises(ApiException) as caught:
        core.patch_node("gpu-node-004", {"spec": {"unschedulable": True}})
    assert caught.value.status == 500
    assert json.loads(caught.value.body)["message"] == "etcdserver: request timed out"
    assert core.read_node("gpu-node-004").spec.unschedulable is None
    assert core.patch_node("gpu-node-004", {"spec": {"unschedulable": True}}).spec.unschedulable is True
    assert sum(sim.counters().faults_injected.values()) == 1


def test_a_wrong_token_is_unauthorized_and_the_right_one_is_served(start_sim: StartSim) -> None:
    sim = start_sim(CLUSTER, require_token=True)
    for token, expected in (("not-the-token", 401), (sim.token, 200)):
        configuration = client.Configuration(host=sim.url, api_key={"BearerToken": f"Bearer {token}"})
        with client.ApiClient(configuration) as api_client:
            try:
                client.CoreV1Api(api_client).list_node()
                status = 200
            except ApiException as exc:
                status = exc.status
        assert status == expected, token


def test_custom_resources_take_merge_patches_not_strategic_ones(
    start_sim: StartSim, kube_client_for: ClientFor
) -> None:
    sim = start_sim("workloads:\n  cluster_queues: [{name: research}]\n")
    custom = client.CustomObjectsApi(kube_client_for(sim))
    custom.patch_cluster_custom_object(
        "kueue.x-k8s.io", "v1beta1", "clusterqueues", "research", {"spec": {"stopPolicy": "Hold"}}
    )
    sim.wait_for(
        lambda s: (
            (s.get("kueue.x-k8s.io/clusterqueues", "research") or {})
            .get("status", {})
            .get("conditions", [{}])[0]
            .get("status")
            == "False"
        ),
        what="the ClusterQueue to report it is stopped",
    )
    queue = custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues", "research")
    assert queue["spec"]["stopPolicy"] == "Hold"
    assert queue["status"]["conditions"][0]["reason"] == "Stopped"
    with pytest.raises(ApiException) as caught:
        custom.patch_cluster_custom_object(
            "kueue.x-k8s.io", "v1beta1", "clusterqueues", "research", {"spec": {"stopPolicy": "Paused"}}
        )
    assert caught.value.status == 422
    assert 'Unsupported value: "Paused"' in json.loads(caught.value.body)["message"]


def test_a_not_ready_pod_can_be_evicted_while_the_rest_meet_the_budget(
    start_sim: StartSim, kube_client_for: ClientFor
) -> None:
    sim = start_sim("""
        cluster: {nodes: 2, domains: 1}
        timing: {time_scale: 1}
        workloads:
          deployments:
            - {name: api, replicas: 2, pdb: {min_available: 1}, placement: [gpu-node-001, gpu-node-002]}
    """)
    core = client.CoreV1Api(kube_client_for(sim))
    sim.reboot("gpu-node-001")  # its replica stops being ready; the budget now allows nothing
    sick = core.list_namespaced_pod(
        "default", field_selector="spec.nodeName=gpu-node-001", label_selector="app=api"
    )
    name = sick.items[0].metadata.name
    budget = client.PolicyV1Api(core.api_client)
    sim.wait_for(
        lambda s: (
            budget.read_namespaced_pod_disruption_budget("api", "default").status.disruptions_allowed == 0
        ),
        what="the PDB to see the not-ready replica",
    )
    core.create_namespaced_pod_eviction(name, "default", _eviction(name, "default"))
    assert sim.get("pods", name, "default") is None
    assert sim.counters().pdb_violations == 0
