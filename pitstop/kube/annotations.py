"""Labels, annotations and taints pitstop reads or writes on cluster objects.

Written by pitstop on nodes:
  pitstop.dev/cordoned-by: <run id>        set by kube.cordon, removed by kube.uncordon
  pitstop.dev/was-unschedulable: "true"|"false"
                                           the node's `spec.unschedulable` before kube.cordon;
                                           kube.uncordon restores it ("true" leaves it cordoned)
  pitstop.dev/cordon-reason: <text>        kube.cordon's `reason`
  pitstop.dev/maintenance-failed: <reason> set by a runbook (kube.annotate) on a node left
                                           cordoned; kube.uncordon leaves such a node cordoned
                                           unless `force: true`
  taint pitstop.dev/maintenance:NoSchedule kube.stop_admission where Kueue is absent
  pitstop.dev/suspended-workloads: <apiVersion>/<Kind>/<ns>/<name>,...
                                           the framework jobs this node's maintenance suspended
                                           (kube.wait_for_workloads, protocol suspend); written
                                           before suspending, emptied by kube.resume_workloads
Written by pitstop on Kueue ClusterQueues (kube.stop_admission / kube.resume_admission):
  pitstop.dev/admission-stopped-by: <run id>
  pitstop.dev/prior-stop-policy: None|Hold|HoldAndDrain
  pitstop.dev/admission-holds: <run id>/<host>,...   every node in flight holding the queue; the
                                           last one to resume restores the prior policy
Read on pods and Jobs (the checkpoint protocol, see kube.wait_for_workloads):
  pitstop.dev/gang=<job name> (label)      a member of a gang training job
  pitstop.dev/training: "true"             a training pod that is not part of a gang
  pitstop.dev/restartable: "true"          a GPU pod its owner says may be evicted like a
                                           serving replica (see pitstop.kube.training)
  pitstop.dev/checkpoint-protocol: annotation
                                           the workload answers checkpoint requests
  pitstop.dev/checkpoint-requested: <token> written by pitstop
  pitstop.dev/checkpoint-done: <token>     written by the workload once its checkpoint is safe
Read and written on training operators' objects (PyTorchJob, JobSet, RayCluster, ...):
  pitstop.dev/checkpoint-protocol: suspend the job may be suspended as a whole through its
                                           operator's `suspend` field (pitstop.kube.suspend)
  pitstop.dev/suspended-for: <run id>/<node>,...  every node in flight holding it suspended
Labels on Jobs made by kube.job:
  pitstop.dev/managed-by=pitstop, plus any labels the runbook passes
  (e.g. pitstop.dev/validation=<kind>)
"""

from __future__ import annotations

PREFIX = "pitstop.dev/"

CORDONED_BY = "pitstop.dev/cordoned-by"
WAS_UNSCHEDULABLE = "pitstop.dev/was-unschedulable"
CORDON_REASON = "pitstop.dev/cordon-reason"
MAINTENANCE_FAILED = "pitstop.dev/maintenance-failed"
MAINTENANCE_TAINT = "pitstop.dev/maintenance"
CORDON_ANNOTATIONS = (CORDONED_BY, WAS_UNSCHEDULABLE, CORDON_REASON)

ADMISSION_STOPPED_BY = "pitstop.dev/admission-stopped-by"
PRIOR_STOP_POLICY = "pitstop.dev/prior-stop-policy"
ADMISSION_HOLDS = "pitstop.dev/admission-holds"

GANG_LABEL = "pitstop.dev/gang"
TRAINING_ANNOTATION = "pitstop.dev/training"
RESTARTABLE_ANNOTATION = "pitstop.dev/restartable"
CHECKPOINT_PROTOCOL = "pitstop.dev/checkpoint-protocol"
CHECKPOINT_REQUESTED = "pitstop.dev/checkpoint-requested"
CHECKPOINT_DONE = "pitstop.dev/checkpoint-done"
SUSPENDED_FOR = "pitstop.dev/suspended-for"
SUSPENDED_WORKLOADS = "pitstop.dev/suspended-workloads"

MANAGED_BY_LABEL = "pitstop.dev/managed-by"
VALIDATION_LABEL = "pitstop.dev/validation"

# Kubernetes' own.
HOSTNAME_LABEL = "kubernetes.io/hostname"
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
GPU_RESOURCE = "nvidia.com/gpu"
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
