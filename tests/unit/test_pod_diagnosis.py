"""What kube.job says about a pod that does not run: the states and messages the kubelet and
the scheduler write (shapes as `kubectl get pod -o json` shows them), which ones are terminal."""

from __future__ import annotations

from typing import Any

from pitstop.kube.pod_diagnosis import diagnose


def pod(status: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "probe-x7k2p"}, "status": status}


def waiting(reason: str, message: str = "") -> dict[str, Any]:
    state: dict[str, Any] = {"reason": reason}
    if message:
        state["message"] = message
    return {"phase": "Pending", "containerStatuses": [{"name": "main", "state": {"waiting": state}}]}


def test_a_missing_secret_is_terminal_and_quoted() -> None:
    found = diagnose(pod(waiting("CreateContainerConfigError", 'secret "hf-token" not found')))
    assert found.terminal_reason == "CreateContainerConfigError"
    assert str(found) == (
        "pod probe-x7k2p: Pending; container main waiting: CreateContainerConfigError: "
        'secret "hf-token" not found'
    )


def test_err_image_pull_is_retried_by_the_kubelet_so_not_yet_terminal() -> None:
    assert diagnose(pod(waiting("ErrImagePull", "rpc error: code = NotFound"))).terminal_reason is None
    assert diagnose(pod(waiting("ContainerCreating"))).terminal_reason is None
    assert diagnose(pod(waiting("ImagePullBackOff"))).terminal_reason == "ImagePullBackOff"


def test_an_oom_killed_container_and_the_kubelets_gpu_admission_refusal_are_reported() -> None:
    oom = pod(
        {
            "phase": "Failed",
            "containerStatuses": [
                {"name": "main", "state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}
            ],
        }
    )
    assert (
        str(diagnose(oom)) == "pod probe-x7k2p: Failed; container main terminated: OOMKilled (exit code 137)"
    )
    refused = pod(
        {
            "phase": "Failed",
            "reason": "OutOfnvidia.com/gpu",
            "message": (
                "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 8, used: 1, "
                "capacity: 8"
            ),
        }
    )
    assert str(diagnose(refused)).startswith(
        "pod probe-x7k2p: Failed (OutOfnvidia.com/gpu: Pod was rejected: Node didn't have enough resource: "
    )


def test_unschedulable_with_the_schedulers_words_and_the_latest_events_in_time_order() -> None:
    status = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
            }
        ],
    }
    events = [
        {"type": "Warning", "reason": f"E{i}", "message": f"m{i}", "lastTimestamp": f"2026-12-02T10:00:0{i}Z"}
        for i in (3, 1, 6, 2, 5, 4)
    ]
    found = diagnose(pod(status), events)
    assert found.unschedulable and found.terminal_reason is None
    text = str(found)
    assert "not scheduled: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu." in text
    assert text.endswith(
        "events: Warning E2: m2; Warning E3: m3; Warning E4: m4; Warning E5: m5; Warning E6: m6"
    )
    assert str(diagnose(None)) == "no pod was created (see the Job's events)"
