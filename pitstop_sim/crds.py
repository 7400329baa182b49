"""CustomResourceDefinitions the rehearsal cluster installs: Kueue's API and the GPU
Operator's ClusterPolicy, with the printer columns their real CRDs declare."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def _crd(
    group: str,
    kind: str,
    plural: str,
    scope: str,
    *,
    short: list[str] | None = None,
    columns: list[Obj] | None = None,
    version: str = "v1beta1",
    categories: list[str] | None = None,
) -> Obj:
    names: Obj = {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"}
    if short:
        names["shortNames"] = short
    if categories:
        names["categories"] = categories
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": names,
            "scope": scope,
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns or [],
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }


# Kueue's CRDs (v1beta1, category "kueue"), with the printer columns its release declares.
_KUEUE: list[Obj] = [
    {
        "kind": "ClusterQueue",
        "plural": "clusterqueues",
        "scope": "Cluster",
        "short": ["cq"],
        "columns": [
            {
                "name": "Cohort",
                "type": "string",
                "jsonPath": ".spec.cohort",
                "description": "Cohort that this ClusterQueue belongs to",
            },
            {
                "name": "Strategy",
                "type": "string",
                "jsonPath": ".spec.queueingStrategy",
                "priority": 1,
                "description": "The queueing strategy used to prioritize workloads",
            },
            {
                "name": "Pending Workloads",
                "type": "integer",
                "jsonPath": ".status.pendingWorkloads",
                "description": "Number of pending workloads",
            },
            {
                "name": "Admitted Workloads",
                "type": "integer",
                "jsonPath": ".status.admittedWorkloads",
                "priority": 1,
                "description": "Number of admitted workloads that haven't finished yet",
            },
        ],
    },
    {
        "kind": "LocalQueue",
        "plural": "localqueues",
        "scope": "Namespaced",
        "short": ["queue", "queues", "lq"],
        "columns": [
            {
                "name": "ClusterQueue",
                "type": "string",
                "jsonPath": ".spec.clusterQueue",
                "description": "Backing ClusterQueue",
            },
            {
                "name": "Pending Workloads",
                "type": "integer",
                "jsonPath": ".status.pendingWorkloads",
                "description": "Number of pending workloads",
            },
            {
                "name": "Admitted Workloads",
                "type": "integer",
                "jsonPath": ".status.admittedWorkloads",
                "description": "Number of admitted workloads that haven't finished yet.",
            },
        ],
    },
    {
        "kind": "ResourceFlavor",
        "plural": "resourceflavors",
        "scope": "Cluster",
        "short": ["flavor", "flavors", "rf"],
    },
    # MultiKueue (a manager cluster dispatching to worker clusters): its AdmissionCheck
    # (spec.controllerName kueue.x-k8s.io/multikueue), MultiKueueConfig (spec.clusters) and one
    # MultiKueueCluster per worker (spec.kubeConfig.location: the Secret holding its kubeconfig;
    # condition Active).
    {
        "kind": "AdmissionCheck",
        "plural": "admissionchecks",
        "scope": "Cluster",
    },
    {
        "kind": "MultiKueueConfig",
        "plural": "multikueueconfigs",
        "scope": "Cluster",
    },
    {
        "kind": "MultiKueueCluster",
        "plural": "multikueueclusters",
        "scope": "Cluster",
    },
    {
        "kind": "Workload",
        "plural": "workloads",
        "scope": "Namespaced",
        "short": ["wl"],
        "columns": [
            {
                "name": "Queue",
                "type": "string",
                "jsonPath": ".spec.queueName",
                "description": "Name of the queue this workload was submitted to",
            },
            {
                "name": "Reserved in",
                "type": "string",
                "jsonPath": ".status.admission.clusterQueue",
                "description": "Name of the ClusterQueue where the workload is reserving quota",
            },
            {
                "name": "Age",
                "type": "date",
                "jsonPath": ".metadata.creationTimestamp",
                "description": "Time this workload was created",
            },
        ],
    },
]


def kueue_crds() -> list[Obj]:
    return [_crd("kueue.x-k8s.io", categories=["kueue"], **shape) for shape in _KUEUE]


def gpu_operator_crds() -> list[Obj]:
    return [
        _crd(
            "nvidia.com",
            "ClusterPolicy",
            "clusterpolicies",
            "Cluster",
            version="v1",
            columns=[
                {"name": "Status", "type": "string", "jsonPath": ".status.state"},
                {"name": "Age", "type": "string", "jsonPath": ".metadata.creationTimestamp"},
            ],
        ),
    ]


def training_operator_crds(kinds: set[str]) -> list[Obj]:
    """The CRDs of the training operators the scenario's jobs use: Kubeflow Training Operator
    v1 (PyTorchJob), JobSet (v1alpha2), KubeRay (RayCluster v1); printer columns as theirs."""
    age = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    shapes = {
        "PyTorchJob": dict(
            group="kubeflow.org",
            kind="PyTorchJob",
            plural="pytorchjobs",
            scope="Namespaced",
            version="v1",
            categories=["kubeflow"],
            columns=[age],
        ),
        "JobSet": dict(
            group="jobset.x-k8s.io",
            kind="JobSet",
            plural="jobsets",
            scope="Namespaced",
            version="v1alpha2",
            columns=[
                {"name": "TerminalState", "type": "string", "jsonPath": ".status.terminalState"},
                {"name": "Restarts", "type": "string", "jsonPath": ".status.restarts"},
                {"name": "Suspended", "type": "string", "jsonPath": ".spec.suspend"},
                age,
            ],
        ),
        "RayCluster": dict(
            group="ray.io",
            kind="RayCluster",
            plural="rayclusters",
            scope="Namespaced",
            version="v1",
            categories=["all"],
            columns=[
                {"name": "desired workers", "type": "integer", "jsonPath": ".status.desiredWorkerReplicas"},
                {
                    "name": "available workers",
                    "type": "integer",
                    "jsonPath": ".status.availableWorkerReplicas",
                },
                {"name": "gpus", "type": "string", "jsonPath": ".status.desiredGPU"},
                {"name": "status", "type": "string", "jsonPath": ".status.state"},
                {"name": "age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ],
        ),
    }
    return [_crd(**shape) for kind, shape in shapes.items() if kind in kinds]  # type: ignore[arg-type]


def volcano_crds() -> list[Obj]:
    """Volcano's Job (batch.volcano.sh/v1alpha1, short `vcjob`) and PodGroup
    (scheduling.volcano.sh/v1beta1, short `pg`)."""
    age = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    return [
        _crd(
            "batch.volcano.sh",
            "Job",
            "jobs",
            "Namespaced",
            short=["vcjob", "vj"],
            version="v1alpha1",
            columns=[{"name": "STATUS", "type": "string", "jsonPath": ".status.state.phase"}, age],
        ),
        _crd(
            "scheduling.volcano.sh",
            "PodGroup",
            "podgroups",
            "Namespaced",
            short=["pg", "podgroup-v1beta1"],
            columns=[
                {"name": "STATUS", "type": "string", "jsonPath": ".status.phase"},
                {"name": "MINMEMBER", "type": "integer", "jsonPath": ".spec.minMember"},
                {"name": "RUNNINGS", "type": "integer", "jsonPath": ".status.running"},
                age,
            ],
        ),
    ]
