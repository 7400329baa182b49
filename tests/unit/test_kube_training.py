"""Training recognised from real operators' marks (pitstop.kube.training), failing closed for
accelerator pods that are not serving replicas."""

from __future__ import annotations

from typing import Any

from pitstop.kube.training import recognise


def pod(
    labels: dict[str, str] | None = None, owner: dict[str, Any] | None = None, **resources: str
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c"}
    if resources:
        container["resources"] = {
            "limits": {k.replace("__", "/").replace("_", "."): v for k, v in resources.items()}
        }
    meta: dict[str, Any] = {"name": "p", "namespace": "ns", "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"controller": True, "name": "o", "uid": "u", **owner}]
    return {"metadata": meta, "spec": {"containers": [container]}}


def test_a_kueue_queue_groups_nothing_but_a_jobset_groups_its_pods() -> None:
    queued = recognise(
        pod({"kueue.x-k8s.io/queue-name": "team-a"}, {"kind": "Job", "apiVersion": "batch/v1"})
    )
    assert queued is not None and queued.what == "Kueue workload" and queued.selector is None
    jobset = recognise(pod({"jobset.sigs.k8s.io/jobset-name": "llm"}))
    assert jobset is not None and jobset.selector == "jobset.sigs.k8s.io/jobset-name=llm"
    # A Kueue-admitted Deployment is serving: restartable.
    served = pod({"kueue.x-k8s.io/queue-name": "team-a"}, {"kind": "ReplicaSet", "apiVersion": "apps/v1"})
    assert recognise(served) is None


def test_every_accelerator_fails_closed_unless_it_is_a_serving_replica_or_said_restartable() -> None:
    for resource in (
        "nvidia.com/gpu",
        "nvidia.com/mig-1g.10gb",
        "habana.ai/gaudi",
        "aws.amazon.com/neuroncore",
    ):
        bare = pod(owner={"kind": "Notebook", "apiVersion": "kubeflow.org/v1"})
        bare["spec"]["containers"][0]["resources"] = {"limits": {resource: "1"}}
        found = recognise(bare)
        assert found is not None and found.what == "unrecognised GPU workload", resource
        bare["metadata"]["annotations"] = {"pitstop.dev/restartable": "true"}
        assert recognise(bare) is None, resource
    replica = pod(owner={"kind": "ReplicaSet", "apiVersion": "apps/v1"})
    replica["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    assert recognise(replica) is None
    cpu_only = pod(owner={"kind": "Job", "apiVersion": "batch/v1"})
    assert recognise(cpu_only) is None
    # An owner kind is enough when the marks were stripped.
    owned = recognise(pod(owner={"kind": "PyTorchJob", "apiVersion": "kubeflow.org/v1"}))
    assert owned is not None and owned.what == "PyTorchJob" and owned.mark == "owned by PyTorchJob o"
