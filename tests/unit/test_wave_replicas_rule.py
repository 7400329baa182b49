"""The wave-share rule (`pitstop/kube/wave_replicas.py`): replicas are counted through their
controller references, ended or terminating pods do not count, and at least one replica may
always move."""

from __future__ import annotations

from typing import Any

from pitstop.kube.wave_replicas import allowed_replicas, wave_shares


def _deployment(name: str, uid: str, replicas: int, gpus: int = 1) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    return {
        "metadata": {"name": name, "namespace": "serving", "uid": uid},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [container]}}},
    }


def _owned(kind: str, uid: str) -> list[dict[str, Any]]:
    return [{"kind": kind, "uid": uid, "controller": True}]


def _rs(uid: str, deployment_uid: str) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "ownerReferences": _owned("Deployment", deployment_uid)}}


def _pod(node: str, rs_uid: str, phase: str = "Running", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"ownerReferences": _owned("ReplicaSet", rs_uid)}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-03T10:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase}}


def test_allowed_rounds_down_and_never_below_one() -> None:
    assert [allowed_replicas(n, 50) for n in (1, 2, 3, 4, 5)] == [1, 1, 1, 2, 2]
    assert allowed_replicas(3, 100) == 3 and allowed_replicas(10, 33) == 3


def test_counts_only_live_pods_of_serving_deployments_on_the_nodes() -> None:
    deployments = [_deployment("llm", "d1", 4), _deployment("web", "d2", 2, gpus=0)]
    replica_sets = [_rs("r1", "d1"), _rs("r2", "d2"), _rs("orphan", "gone")]
    pods = [
        _pod("n1", "r1"),
        _pod("n2", "r1"),
        _pod("n2", "r1", deleting=True),  # on its way out: not moving anywhere
        _pod("n1", "r1", phase="Succeeded"),
        _pod("n9", "r1"),  # outside the wave
        _pod("n1", "r2"),  # not serving on GPUs
        _pod("n1", "orphan"),  # its Deployment is gone
    ]
    (llm,) = wave_shares(deployments, replica_sets, pods, ["n1", "n2"], max_percent=50)
    assert (llm.deployment, llm.replicas, llm.on_wave, llm.allowed, llm.over) == (
        "serving/llm",
        4,
        2,
        2,
        False,
    )
    (llm,) = wave_shares(deployments, replica_sets, [*pods, _pod("n2", "r1")], ["n1", "n2"], max_percent=50)
    assert (llm.on_wave, llm.over) == (3, True)
    shares = wave_shares(deployments, replica_sets, pods, ["n1"], max_percent=50, gpu_only=False)
    assert {s.deployment: s.on_wave for s in shares} == {"serving/llm": 1, "serving/web": 1}


def test_a_surge_beyond_the_spec_is_judged_against_what_is_running() -> None:
    # During a rollout a Deployment may run more pods than spec.replicas (maxSurge).
    (llm,) = wave_shares(
        [_deployment("llm", "d1", 2)], [_rs("r1", "d1")], [_pod("n1", "r1")] * 3, ["n1"], max_percent=50
    )
    assert (llm.replicas, llm.on_wave, llm.allowed, llm.over) == (2, 3, 1, True)
