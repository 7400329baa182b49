"""Components of a platform scenario: upgrades by applying manifests roll DaemonSet and
Deployment pods to the new image, Helm releases are stored as Helm 3 stores them, CRDs keep
their stored versions, webhooks point at running services, and bench pods report METRIC lines."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from pitstop.helm import decode_release, latest_releases
from tests.integration.sim_platform.conftest import Platform

NEW_CALICO = "docker.io/calico/node:v3.29.1"


def pod_images(platform: Platform, namespace: str, selector: str) -> list[str]:
    pods = platform.kubectl_json("get", "pods", "-n", namespace, "-l", selector)["items"]
    return sorted(
        c["image"]
        for p in pods
        if not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") == "Running"
        for c in p["spec"]["containers"]
    )


def test_a_daemonset_image_change_rolls_every_pod_to_the_new_template(platform: Platform) -> None:
    before = platform.kubectl_json("get", "ds", "-n", "kube-system", "calico-node")
    desired = before["status"]["desiredNumberScheduled"]
    assert desired == 6  # five GPU nodes and the control plane
    platform.kubectl("set", "image", "-n", "kube-system", "ds/calico-node", f"calico-node={NEW_CALICO}")

    def ready_calico() -> list[str]:
        pods = platform.sim.list("pods", "kube-system", label_selector="app=calico-node")
        return [
            p["spec"]["containers"][0]["image"]
            for p in pods
            if not p["metadata"].get("deletionTimestamp")
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
        ]

    # RollingUpdate with the default maxUnavailable 1: one node's agent is replaced at a time.
    lowest, deadline = desired, time.monotonic() + 30
    while (ready := ready_calico()) != [NEW_CALICO] * desired:
        assert time.monotonic() < deadline, f"calico-node did not roll out: {ready}"
        lowest = min(lowest, len(ready))
        time.sleep(0.01)
    assert lowest >= desired - 1
    rollout = platform.kubectl("rollout", "status", "-n", "kube-system", "ds/calico-node", "--timeout=30s")
    assert "successfully rolled out" in rollout.stdout
    after = platform.kubectl_json("get", "ds", "-n", "kube-system", "calico-node")
    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1
    status = after["status"]
    assert status["observedGeneration"] == after["metadata"]["generation"]
    assert status["updatedNumberScheduled"] == status["numberReady"] == desired
    platform.wait(
        lambda: pod_images(platform, "kube-system", "app=calico-node") == [NEW_CALICO] * desired, "pods"
    )


def test_a_deployment_applied_with_a_new_image_replaces_its_pods(platform: Platform, tmp_path: Any) -> None:
    current = platform.kubectl_json("get", "deploy", "-n", "kueue-system", "kueue-controller-manager")
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "kueue-controller-manager", "namespace": "kueue-system"},
        "spec": {
            "replicas": 1,
            "selector": current["spec"]["selector"],
            "template": {
                "metadata": current["spec"]["template"]["metadata"],
                "spec": {
                    "containers": [
                        {"name": "kueue-controller-manager", "image": "registry.k8s.io/kueue/kueue:v0.10.0"}
                    ]
                },
            },
        },
    }
    path = tmp_path / "kueue.yaml"
    path.write_text(json.dumps(manifest))
    platform.kubectl("apply", "-f", str(path))
    platform.kubectl(
        "rollout", "status", "-n", "kueue-system", "deploy/kueue-controller-manager", "--timeout=30s"
    )
    platform.wait(
        lambda: (
            pod_images(platform, "kueue-system", "app=kueue-controller-manager")
            == ["registry.k8s.io/kueue/kueue:v0.10.0"]
        ),
        "kueue on v0.10.0",
    )
    status = platform.kubectl_json("get", "deploy", "-n", "kueue-system", "kueue-controller-manager")[
        "status"
    ]
    assert status["updatedReplicas"] == status["readyReplicas"] == 1


def test_helm_releases_are_stored_as_helm_3_secrets(platform: Platform) -> None:
    secrets = platform.kubectl_json("get", "secrets", "-A", "-l", "owner=helm")["items"]
    names = sorted(f"{s['metadata']['namespace']}/{s['metadata']['name']}" for s in secrets)
    assert names == [
        "gpu-operator/sh.helm.release.v1.gpu-operator.v1",
        "gpu-operator/sh.helm.release.v1.gpu-telemetry-legacy.v1",
        "nvidia-network-operator/sh.helm.release.v1.network-operator.v1",
    ]
    operator = next(s for s in secrets if s["metadata"]["name"] == "sh.helm.release.v1.gpu-operator.v1")
    assert operator["type"] == "helm.sh/release.v1"
    assert operator["metadata"]["labels"] == {
        "owner": "helm",
        "name": "gpu-operator",
        "status": "deployed",
        "version": "1",
    }
    release = decode_release(operator)
    assert (release.name, release.namespace, release.version, release.status) == (
        "gpu-operator",
        "gpu-operator",
        1,
        "deployed",
    )
    assert (release.chart_name, release.chart_version) == ("gpu-operator", "v24.6.2")
    assert "image: nvcr.io/nvidia/gpu-operator:v24.6.2" in release.manifest
    crd = release.crd_files()["crds/clusterpolicies.nvidia.com.yaml"]
    assert "name: clusterpolicies.nvidia.com" in crd
    legacy = {r.name: r for r in latest_releases(secrets)}["gpu-telemetry-legacy"]
    assert "apiVersion: flowcontrol.apiserver.k8s.io/v1beta3" in legacy.manifest


def test_crds_keep_stored_versions_and_refuse_dropping_one(platform: Platform, tmp_path: Any) -> None:
    ray = platform.kubectl_json("get", "crd", "rayclusters.ray.io")
    assert ray["status"]["storedVersions"] == ["v1alpha1", "v1"]
    ray["spec"]["versions"] = [v for v in ray["spec"]["versions"] if v["name"] == "v1"]
    for key in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"):
        ray["metadata"].pop(key, None)
    path = tmp_path / "ray-crd.json"
    path.write_text(json.dumps(ray))
    refused = platform.kubectl("replace", "-f", str(path), check=False)
    assert refused.returncode != 0
    assert (
        'status.storedVersions[0]: Invalid value: "v1alpha1": must appear in spec.versions' in refused.stderr
    )
    isvc = platform.kubectl_json("get", "crd", "inferenceservices.serving.kserve.io")
    assert isvc["spec"]["conversion"]["strategy"] == "Webhook"
    service = isvc["spec"]["conversion"]["webhook"]["clientConfig"]["service"]
    assert (service["namespace"], service["name"]) == ("kserve", "kserve-webhook-server-service")
    policy = platform.kubectl_json("get", "crd", "clusterpolicies.nvidia.com")
    assert policy["spec"]["conversion"] == {"strategy": "None"}


def test_webhooks_point_at_services_with_running_pods(platform: Platform) -> None:
    hooks = platform.kubectl_json("get", "validatingwebhookconfigurations")["items"]
    assert {h["metadata"]["name"] for h in hooks} == {
        "kueue-validating-webhook-configuration",
        "inferenceservice.serving.kserve.io",
        "kyverno-resource-validating-webhook-cfg",
    }
    for hook in hooks:
        webhook = hook["webhooks"][0]
        assert webhook["failurePolicy"] == "Fail"
        ref = webhook["clientConfig"]["service"]
        service = platform.kubectl_json("get", "svc", "-n", ref["namespace"], ref["name"])
        selector = ",".join(f"{k}={v}" for k, v in service["spec"]["selector"].items())
        pods = platform.kubectl_json("get", "pods", "-n", ref["namespace"], "-l", selector)["items"]
        assert any(p["status"].get("phase") == "Running" for p in pods), ref


def test_serving_components_carry_model_format_and_frameworks(platform: Platform) -> None:
    vllm = platform.kubectl_json("get", "deploy", "-n", "serving", "vllm-llama")
    notes = vllm["metadata"]["annotations"]
    assert notes["pitstop.dev/model-format"] == "safetensors"
    assert notes["pitstop.dev/frameworks"] == "torch==2.4.0,transformers==4.45.2"
    assert vllm["spec"]["template"]["metadata"]["annotations"] == notes
    assert vllm["spec"]["template"]["spec"]["containers"][0]["image"] == "vllm/vllm-openai:v0.6.3"


def test_bench_pods_report_metrics_from_node_health(platform: Platform) -> None:
    logs = {}
    for workload in ("training", "inference"):
        name = f"bench-{workload}-{uuid.uuid4().hex[:5]}"
        platform.sim.create(
            "pods",
            {
                "metadata": {"name": name, "labels": {"pitstop.dev/validation": "bench"}},
                "spec": {
                    "nodeName": "gpu-node-002",
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "bench",
                            "image": "pitstop/bench:1",
                            "env": [{"name": "PITSTOP_BENCH", "value": workload}],
                        }
                    ],
                },
            },
            "default",
        )
        platform.wait(
            lambda n=name: (
                (platform.sim.get("pods", n, "default") or {}).get("status", {}).get("phase") == "Succeeded"
            ),
            name,
        )
        logs[workload] = platform.kubectl("logs", name).stdout
    assert "METRIC samples_per_second=2400 samples/s\n" in logs["training"]
    assert (
        "METRIC loss_last=" in logs["training"] and "METRIC checkpoint_restore_seconds=" in logs["training"]
    )
    assert "METRIC ttft_ms_p50=180 ms\n" in logs["inference"]
    assert "METRIC tpot_ms_p50=22 ms\n" in logs["inference"]
