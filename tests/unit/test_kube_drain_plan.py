"""Which pods a drain evicts, waits for, skips or refuses (`pitstop.kube.drain.plan_drain`)."""

from __future__ import annotations

from typing import Any

import pytest

from pitstop.kube.checkpoint import Workload, checkpoint_token, owning_job_key
from pitstop.kube.drain import NEVER_FORCE, DrainOptions, plan_drain

Obj = dict[str, Any]
RS = {"kind": "ReplicaSet", "name": "web-1", "uid": "u1", "controller": True}
DS = {"kind": "DaemonSet", "name": "dcgm", "uid": "u2", "controller": True}


def job_ref(name: str) -> Obj:
    return {"kind": "Job", "name": name, "uid": f"job-{name}", "controller": True}


def pod(
    name: str,
    *,
    ns: str = "serving",
    owner: Obj | None = RS,
    labels: dict[str, str] | None = None,
    notes: dict[str, str] | None = None,
    phase: str = "Running",
    terminating: bool = False,
    empty_dir: bool = False,
) -> Obj:
    meta: Obj = {"name": name, "namespace": ns, "labels": labels or {}, "annotations": notes or {}}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    if terminating:
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    spec: Obj = {"nodeName": "gpu-node-001"}
    if empty_dir:
        spec["volumes"] = [{"name": "cache", "emptyDir": {}}]
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def job(
    name: str,
    *,
    ns: str = "training",
    labels: dict[str, str] | None = None,
    notes: dict[str, str] | None = None,
) -> Obj:
    return {"metadata": {"name": name, "namespace": ns, "labels": labels or {}, "annotations": notes or {}}}


PROTOCOL = {"pitstop.dev/checkpoint-protocol": "annotation"}
GANG = {"pitstop.dev/gang": "llm"}


def keys(pods: list[Obj]) -> list[str]:
    return [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods]


def test_ordinary_pods_are_evicted_and_daemonset_mirror_and_finished_pods_skipped() -> None:
    pods = [
        pod("web-a"),
        pod("dcgm-x", ns="gpu-operator", owner=DS),
        pod("kube-proxy-node", ns="kube-system", owner=None, notes={"kubernetes.io/config.mirror": "abc"}),
        pod("done", owner=job_ref("batch"), phase="Succeeded"),
    ]
    plan = plan_drain(pods, {}, DrainOptions())
    assert keys(plan.evict) == ["serving/web-a"]
    assert plan.skipped == {
        "daemonset": ["gpu-operator/dcgm-x"],
        "mirror": ["kube-system/kube-proxy-node"],
        "finished": ["serving/done"],
    }
    assert plan.refused == {}
    assert not plan.done


def test_daemonset_pods_are_refused_when_not_ignored() -> None:
    plan = plan_drain([pod("dcgm-x", owner=DS)], {}, DrainOptions(ignore_daemonsets=False))
    assert plan.refused == {"daemonset": ["serving/dcgm-x"]}
    assert "ignore_daemonsets: true" in plan.refusal_message("gpu-node-001")


def test_terminating_pods_are_waited_for_never_evicted_again() -> None:
    plan = plan_drain([pod("web-a", terminating=True)], {}, DrainOptions())
    assert plan.evict == []
    assert keys(plan.terminating) == ["serving/web-a"]
    assert not plan.done
    assert plan_drain([], {}, DrainOptions()).done


def test_emptydir_and_unmanaged_pods_are_refused_with_their_names_unless_allowed() -> None:
    pods = [pod("cache-a", empty_dir=True), pod("bare", owner=None), pod("web-a")]
    plan = plan_drain(pods, {}, DrainOptions())
    assert plan.refused == {"emptydir": ["serving/cache-a"], "unmanaged": ["serving/bare"]}
    message = plan.refusal_message("gpu-node-001")
    assert message.startswith("drain of gpu-node-001 refused before evicting anything")
    assert "delete_emptydir_data: true): serving/cache-a" in message
    assert "evict_unmanaged: true): serving/bare" in message
    allowed = plan_drain(pods, {}, DrainOptions(delete_emptydir_data=True, evict_unmanaged=True))
    assert keys(allowed.evict) == ["serving/bare", "serving/cache-a", "serving/web-a"]


def test_pod_selector_limits_the_drain() -> None:
    pods = [pod("web-a", labels={"app": "web"}), pod("db-a", labels={"app": "db"}, empty_dir=True)]
    plan = plan_drain(pods, {}, DrainOptions(pod_selector="app=web"))
    assert keys(plan.evict) == ["serving/web-a"]
    assert plan.skipped == {"not selected": ["serving/db-a"]}
    assert plan.refused == {}


def test_gang_pod_without_protocol_is_refused_as_a_human_decision() -> None:
    trainer = pod("llm-0", ns="training", owner=job_ref("llm"), labels=GANG)
    plan = plan_drain([trainer], {}, DrainOptions(delete_emptydir_data=True, evict_unmanaged=True))
    assert plan.refused == {"training-no-protocol": ["training/llm-0"]}
    assert NEVER_FORCE in plan.refusal_message("gpu-node-001")


@pytest.mark.parametrize(
    ("notes", "reason"),
    [
        (PROTOCOL, "training-unacknowledged"),
        ({**PROTOCOL, "pitstop.dev/checkpoint-requested": "t1"}, "training-unacknowledged"),
        (
            {**PROTOCOL, "pitstop.dev/checkpoint-requested": "t2", "pitstop.dev/checkpoint-done": "t1"},
            "training-unacknowledged",
        ),
        ({**PROTOCOL, "pitstop.dev/checkpoint-requested": "t1", "pitstop.dev/checkpoint-done": "t1"}, None),
    ],
)
def test_gang_pod_with_protocol_is_evicted_only_once_its_checkpoint_is_acknowledged(
    notes: dict[str, str], reason: str | None
) -> None:
    trainer = pod("llm-0", ns="training", owner=job_ref("llm"), labels=GANG, notes=notes)
    plan = plan_drain([trainer], {}, DrainOptions())
    if reason is None:
        assert keys(plan.evict) == ["training/llm-0"]
        assert plan.refused == {}
    else:
        assert plan.refused == {reason: ["training/llm-0"]}
        assert "kube.wait_for_workloads" in plan.refusal_message("n")


def test_own_acknowledged_checkpoint_counts_while_another_node_of_the_gang_asks_again() -> None:
    # Two nodes of one gang drained at once: node 5's checkpoint was taken, then node 3 asked
    # again. Node 5 may go on (its checkpoint is safe); a drain that never asked may not.
    mine, other = checkpoint_token("run-1", "gpu-node-005"), checkpoint_token("run-1", "gpu-node-003")
    notes = {**PROTOCOL, "pitstop.dev/checkpoint-requested": other, "pitstop.dev/checkpoint-done": mine}
    trainer = pod("llm-0", ns="training", owner=job_ref("llm"), labels=GANG, notes=notes)
    assert keys(plan_drain([trainer], {}, DrainOptions(checkpoint_token=mine)).evict) == ["training/llm-0"]
    refused = plan_drain(
        [trainer], {}, DrainOptions(checkpoint_token=checkpoint_token("run-1", "gpu-node-004"))
    )
    assert refused.refused == {"training-unacknowledged": ["training/llm-0"]}
    assert plan_drain([trainer], {}, DrainOptions()).refused == {
        "training-unacknowledged": ["training/llm-0"]
    }


def test_training_is_recognised_from_the_owning_job_and_the_job_may_speak_the_protocol() -> None:
    trainer = pod("llm-0", ns="training", owner=job_ref("llm"))
    silent_job = job("llm", labels=GANG)
    assert plan_drain([trainer], {"training/llm": silent_job}, DrainOptions()).refused == {
        "training-no-protocol": ["training/llm-0"]
    }
    acked = job(
        "llm",
        labels=GANG,
        notes={**PROTOCOL, "pitstop.dev/checkpoint-requested": "x", "pitstop.dev/checkpoint-done": "x"},
    )
    assert keys(plan_drain([trainer], {"training/llm": acked}, DrainOptions()).evict) == ["training/llm-0"]


def test_training_annotation_marks_a_lone_training_pod() -> None:
    lone = pod("finetune", owner=RS, notes={"pitstop.dev/training": "true"})
    assert plan_drain([lone], {}, DrainOptions()).refused == {"training-no-protocol": ["serving/finetune"]}
    plain = pod("finetune", owner=RS, notes={"pitstop.dev/training": "false"})
    assert keys(plan_drain([plain], {}, DrainOptions()).evict) == ["serving/finetune"]


def test_workload_states_and_tokens() -> None:
    trainer = pod("llm-0", ns="training", owner=job_ref("llm"), labels=GANG, notes=PROTOCOL)
    work = Workload(trainer)
    assert (work.gang, work.holder, work.state()) == ("llm", "pod", "not-requested")
    token = checkpoint_token("run-7", "gpu-node-001")
    assert token == "run-7/gpu-node-001"
    asked = Workload(
        pod(
            "llm-0", ns="training", labels=GANG, notes={**PROTOCOL, "pitstop.dev/checkpoint-requested": token}
        )
    )
    assert asked.state() == "requested" and asked.requested(token) and not asked.answered(token)
    assert Workload(pod("web-a")).state() == "not-training"
    assert owning_job_key(trainer) == "training/llm"
    assert owning_job_key(pod("web-a")) is None
