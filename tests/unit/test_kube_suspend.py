"""The knowledge behind the checkpoint protocol `suspend` (pitstop.kube.suspend): which operator
objects can be suspended and through which field, the node's record, and which object of a pod
is its job (directly, or through a JobSet's child Job)."""

from __future__ import annotations

import pytest

from pitstop.kube.checkpoint import Workload, framework_ref
from pitstop.kube.suspend import (
    FrameworkRef,
    join_refs,
    kueue_managed,
    parse_refs,
    read_refs,
    speaks_annotation,
    suspend_field,
    suspend_patch,
    suspendable,
)


def owned(kind: str, api_version: str, name: str) -> dict[str, object]:
    return {
        "metadata": {
            "namespace": "training",
            "name": f"{name}-0",
            "ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": name, "controller": True}],
        }
    }


def test_the_suspend_field_is_where_each_operator_reads_it() -> None:
    pytorch = suspendable("kubeflow.org/v1", "PyTorchJob")
    jobset = suspendable("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert pytorch is not None and jobset is not None
    assert suspend_patch(pytorch, True) == {"spec": {"runPolicy": {"suspend": True}}}
    assert suspend_patch(jobset, False) == {"spec": {"suspend": False}}
    assert suspend_field({"spec": {"runPolicy": {"suspend": True}}}, pytorch)
    assert not suspend_field({"spec": {"suspend": True}}, pytorch)  # the wrong place is not suspended
    assert suspendable("batch.volcano.sh/v1alpha1", "Job") is None
    assert suspendable("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet") is None


def test_a_pods_job_is_its_controller_or_its_jobs_controller() -> None:
    pod = owned("PyTorchJob", "kubeflow.org/v1", "pretrain")
    assert framework_ref(pod, None) == FrameworkRef("kubeflow.org/v1", "PyTorchJob", "training", "pretrain")
    child = owned("Job", "batch/v1", "tpu-workers-0")
    job = owned("JobSet", "jobset.x-k8s.io/v1alpha2", "tpu")
    assert framework_ref(child, job) == FrameworkRef("jobset.x-k8s.io/v1alpha2", "JobSet", "training", "tpu")
    assert framework_ref(owned("ReplicaSet", "apps/v1", "web"), None) is None
    # Without the protocol on the object, the pod has no holder: a human decision.
    assert Workload(pod, None, {"metadata": {"annotations": {}}}).holder is None
    speaking = {"metadata": {"annotations": {"pitstop.dev/checkpoint-protocol": "suspend"}}}
    assert Workload(pod, None, speaking).holder == "framework"


def test_the_nodes_record_round_trips_and_refuses_what_is_not_ours() -> None:
    refs = [
        FrameworkRef("ray.io/v1", "RayCluster", "training", "rl"),
        FrameworkRef("kubeflow.org/v1", "PyTorchJob", "training", "pretrain"),
    ]
    text = join_refs(refs)
    assert text == "kubeflow.org/v1/PyTorchJob/training/pretrain,ray.io/v1/RayCluster/training/rl"
    assert parse_refs(text) == sorted(refs)
    assert join_refs([]) is None
    with pytest.raises(
        ValueError, match="not a suspendable framework object 'apps/v1/Deployment/serving/web'"
    ):
        parse_refs("apps/v1/Deployment/serving/web")
    with pytest.raises(ValueError, match="expected <group>/<version>/<Kind>/<namespace>/<name>"):
        parse_refs("ray.io/v1/RayCluster/rl")


def test_kueue_managed_objects_are_known_by_their_queue_label() -> None:
    assert kueue_managed({"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "team-a"}}})
    assert not kueue_managed({"metadata": {"labels": {"app": "x"}}})


@pytest.mark.parametrize(
    "entry",
    [
        "kubeflow.org/anything here/PyTorchJob/training/x",  # not a version
        "kubeflow.org/v1/PyTorchJob/Other-NS/x",  # not a namespace name
        "kubeflow.org/v1/PyTorchJob/training/x?y",  # not an object name
        "kubeflow.org/v1/PyTorchJob/training/../../secrets",  # extra parts
    ],
)
def test_a_crafted_record_entry_is_refused_and_read_leniently_beside_good_ones(entry: str) -> None:
    """The node annotation is writable by others: an entry must name a suspendable object the
    apiserver would accept, and one bad entry does not hide the good ones."""
    with pytest.raises(ValueError, match="not a suspendable framework object"):
        FrameworkRef.parse(entry)
    good = "ray.io/v1/RayCluster/training/rl"
    refs, bad = read_refs(f"{entry},{good}")
    assert refs == [FrameworkRef("ray.io/v1", "RayCluster", "training", "rl")] and bad == [entry]


def test_a_suspend_value_copied_onto_a_jobs_pods_is_not_the_annotation_protocol() -> None:
    """Trainer copies a TrainJob's annotations onto its Jobs and pods: `suspend` there must not
    make pitstop wait for a checkpoint-done those pods never write."""
    pod = owned("Job", "batch/v1", "train-node-0")
    pod["metadata"]["annotations"] = {"pitstop.dev/checkpoint-protocol": "suspend"}  # type: ignore[index]
    assert Workload(pod, None, None).holder is None
    assert not speaks_annotation(pod) and speaks_annotation(
        {"metadata": {"annotations": {"pitstop.dev/checkpoint-protocol": "annotation"}}}
    )
