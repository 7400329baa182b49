"""Args of the `kube.*` modules (Kubernetes API).

Every module talks to the cluster of the inventory's `cluster:` block (kubeconfig + context,
or in-cluster) with the official `kubernetes` client. The node a module acts on is its `node`
argument, else the host's `node_name` var, else the host's inventory name. Annotations and
labels pitstop writes are listed in `pitstop.kube.annotations`.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, Literal

from pydantic import Field, field_validator

from pitstop.kube.names import check_api_version, check_name, check_workload_refs
from pitstop.kube.selectors import check_selector
from pitstop.module_spec import ArgsT, ModuleArgs, ModuleSpec, RetryDefaults

LONG_WAIT_HEARTBEAT = timedelta(seconds=60)


class NodeArgs(ModuleArgs):
    node: str | None = Field(
        default=None, description="Node name; defaults to the host's `node_name` var or its inventory name."
    )

    @field_validator("node")
    @classmethod
    def _node_name(cls, value: str | None) -> str | None:
        # Names go into API paths: only what the apiserver accepts (a DNS-1123 subdomain).
        return None if value is None else check_name(value, "node name")


class _PodSelector(ModuleArgs):
    pod_selector: str | None = Field(
        default=None, description="Label selector (`app=web,tier in (a,b)`) limiting the pods acted on."
    )

    @field_validator("pod_selector")
    @classmethod
    def _selector_parses(cls, value: str | None) -> str | None:
        return check_selector(value)


class _Wait(ModuleArgs):
    timeout_seconds: float = Field(
        default=3600, gt=0, description="Give up after this long (the task's `timeout` also bounds it)."
    )
    poll_interval_seconds: float = Field(default=5.0, gt=0, description="How often to look again.")


# --- node state -------------------------------------------------------------------------------


class CordonArgs(NodeArgs):
    """Mark the node unschedulable. Before changing it, records on the node who cordoned it
    (`pitstop.dev/cordoned-by: <run id>`) and whether it was already unschedulable
    (`pitstop.dev/was-unschedulable: "true"|"false"`), so `kube.uncordon` restores exactly that."""

    reason: str | None = Field(
        default=None, description="Why; recorded as the `pitstop.dev/cordon-reason` annotation."
    )


class UncordonArgs(NodeArgs):
    """Restore the schedulability recorded by `kube.cordon` and remove pitstop's annotations.
    A node that was unschedulable before pitstop cordoned it, that pitstop never cordoned, or
    that is annotated `pitstop.dev/maintenance-failed` stays cordoned (reported, not failed)."""

    force: bool = Field(
        default=False,
        description="Make the node schedulable whatever was recorded (a human decided).",
    )


TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class TaintArgs(NodeArgs):
    """Add (or update the value of) a taint. NoSchedule by default: it keeps new pods away and
    leaves running ones alone; NoExecute evicts running pods (training jobs included) without
    PDBs or checkpoints, so it is refused unless `allow_noexecute: true`."""

    key: str = Field(description="Taint key, e.g. `pitstop.dev/maintenance`.", min_length=1)
    value: str | None = Field(default=None, description="Taint value.")
    effect: TaintEffect = Field(
        default="NoSchedule", description="NoSchedule, PreferNoSchedule or NoExecute."
    )
    allow_noexecute: bool = Field(
        default=False, description="Allow effect NoExecute, which evicts running pods at once."
    )


class UntaintArgs(NodeArgs):
    key: str = Field(description="Taint key to remove.", min_length=1)
    effect: TaintEffect | None = Field(default=None, description="Only this effect (default: any).")


class AnnotateArgs(NodeArgs):
    """Set or remove node annotations, e.g. `pitstop.dev/maintenance-failed: <reason>` on a node
    left cordoned after a failed maintenance."""

    annotations: dict[str, str | None] = Field(
        min_length=1, description="Annotations to set; a null value removes the annotation."
    )


class WaitNodeReadyArgs(NodeArgs, _Wait):
    timeout_seconds: float = Field(default=900, gt=0, description="Give up after this long.")
    allow_not_ready_taints: bool = Field(
        default=False,
        description="Accept Ready=True while the not-ready/unreachable taints are still on the node.",
    )
    gpu_resource: str | None = Field(
        default="nvidia.com/gpu",
        description="Also wait until this resource's allocatable equals its capacity again (the device "
        "plugin re-registered every GPU after a reboot); null: do not wait for it. A node without the "
        "resource in its capacity is not waited for.",
    )
    validator: str | None = Field(
        default="gpu-operator/nvidia-operator-validator",
        description="`<namespace>/<DaemonSet>` whose pod on the node must be Ready (the GPU Operator's "
        "validator: driver, toolkit, CUDA and plugin validated); skipped when the DaemonSet does not "
        "exist; null: never.",
    )

    @field_validator("validator")
    @classmethod
    def _namespace_and_name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[a-z0-9][-a-z0-9]*/[a-z0-9][-a-z0-9.]*", value):
            raise ValueError(f"{value!r} is not `<namespace>/<DaemonSet name>`")
        return value


# --- drain and workloads ----------------------------------------------------------------------


class DrainArgs(NodeArgs, _PodSelector):
    """Evict the node's pods through the Eviction API (policy/v1), as `kubectl drain` does.

    The node must be cordoned first (`kube.cordon`). A 429 from a PodDisruptionBudget is
    waited out (backoff from `retry_interval_seconds` up to `max_retry_interval_seconds`)
    until the task's timeout. Evicted pods are waited for until they are gone. Refused before
    evicting anything: training pods without an acknowledged checkpoint (see
    `kube.wait_for_workloads`), DaemonSet pods unless ignored, pods without a controller and
    pods with emptyDir data unless allowed. Mirror (static) pods are skipped.
    """

    grace_period_seconds: int | None = Field(
        default=None, ge=0, description="Pod termination grace (default: each pod's own)."
    )
    delete_emptydir_data: bool = Field(default=False, description="Evict pods that use emptyDir.")
    ignore_daemonsets: bool = Field(default=True, description="DaemonSet pods stay, as kubectl drain.")
    evict_unmanaged: bool = Field(
        default=False, description="Evict pods without a controller (nothing recreates them)."
    )
    disable_eviction: bool = Field(
        default=False,
        strict=True,
        description=(
            "DELETE pods instead of evicting them: PodDisruptionBudgets are NOT honoured. Only as the "
            "literal `true` written in the runbook (never a template, so never from -e, vars or the "
            "inventory), in a stage whose `gate` has `before: true`; `pitstop validate` and the "
            "plan show every stage that uses it."
        ),
    )
    retry_interval_seconds: float = Field(default=5.0, gt=0, description="Wait after a 429 from a PDB.")
    max_retry_interval_seconds: float = Field(
        default=30.0, gt=0, description="Longest wait between eviction rounds while PDBs refuse."
    )


class WaitForWorkloadsArgs(NodeArgs, _PodSelector, _Wait):
    """The checkpoint protocol: ask the training workloads on the node to checkpoint, and wait.

    Workloads: the node's training pods — members of a gang (label `pitstop.dev/gang=<job>`
    on the pod or its Job) or pods annotated `pitstop.dev/training: "true"` — or, with
    `pod_selector`, the node's pods matching it. A gang spanning several nodes is affected as a
    whole, so every member pod of the gang is asked, wherever it runs.

    Protocol: a workload that can checkpoint carries `pitstop.dev/checkpoint-protocol:
    "annotation"` (on the pod, or on its Job). pitstop writes
    `pitstop.dev/checkpoint-requested: <token>` (token: `<run id>/<node>`) on that object and
    waits until it answers `pitstop.dev/checkpoint-done: <token>`, or until the pod finishes.
    `kube.drain` evicts a training pod only once done == requested.

    Protocol `suspend`, on the training operator's object (PyTorchJob and the other Kubeflow
    jobs, TrainJob, JobSet, RayCluster, RayJob): pitstop sets the operator's own `suspend`
    field, which stops the whole job gracefully, and waits until its pods are gone;
    `kube.resume_workloads` gives it back after the node's maintenance. A job Kueue admits is
    stopped through its Workload instead (`spec.active: false`; Kueue owns its suspend field).

    Pods without the protocol fail the task with a PolicyViolation naming them (a long
    training job without a checkpoint protocol becomes a human decision), unless
    `on_no_protocol: wait_for_completion`, which waits for them to finish within the timeout.
    """

    on_no_protocol: Literal["fail", "wait_for_completion"] = Field(
        default="fail", description="What to do with workloads that do not speak the protocol."
    )
    token: str | None = Field(default=None, description="Checkpoint token (default: `<run id>/<node>`).")


class ResumeWorkloadsArgs(NodeArgs):
    """Give back the training jobs this node's maintenance suspended (protocol `suspend` of
    `kube.wait_for_workloads`): the node's `pitstop.dev/suspended-workloads` record says which;
    each job drops this node's hold and is resumed (its operator's `suspend` set false) when no
    other node in flight still holds it. A job its owner had suspended stays suspended."""

    token: str | None = Field(default=None, description="Hold token (default: `<run id>/<node>`).")


# --- admission --------------------------------------------------------------------------------


class StopAdmissionArgs(NodeArgs):
    """Stop new work from starting. With `cluster_queues`: Kueue ClusterQueues get
    `spec.stopPolicy: Hold` (JSON merge patch), the prior policy recorded in the
    `pitstop.dev/prior-stop-policy` annotation. Without (or where Kueue is absent and none is
    named): the node gets the taint `pitstop.dev/maintenance:NoSchedule`."""

    cluster_queues: list[str] = Field(default_factory=list, description="Kueue ClusterQueue names.")

    @field_validator("cluster_queues")
    @classmethod
    def _queue_names(cls, value: list[str]) -> list[str]:
        return [check_name(name, "ClusterQueue name") for name in value]

    stop_policy: Literal["Hold", "HoldAndDrain"] = Field(
        default="Hold", description="Hold: admit nothing new. HoldAndDrain also evicts admitted workloads."
    )


class ResumeAdmissionArgs(NodeArgs):
    """Undo `kube.stop_admission`: restore each ClusterQueue's recorded stopPolicy, or remove
    the node's `pitstop.dev/maintenance` taint."""

    cluster_queues: list[str] = Field(default_factory=list, description="Kueue ClusterQueue names.")

    @field_validator("cluster_queues")
    @classmethod
    def _queue_names(cls, value: list[str]) -> list[str]:
        return [check_name(name, "ClusterQueue name") for name in value]

    force: bool = Field(
        default=False, description="Set stopPolicy None even where pitstop did not record stopping it."
    )


# --- capacity ---------------------------------------------------------------------------------


class CapacityCheckArgs(ModuleArgs):
    """Would the cluster cope if these nodes left? Fails (PreconditionFailed, with the numbers)
    when the pods on them would not fit in the spare GPUs of the schedulable Ready nodes that
    stay, or when evicting them would exceed a PodDisruptionBudget's `disruptionsAllowed`."""

    nodes: list[str] = Field(
        default_factory=list, description="Nodes that would leave (default: this host's node)."
    )
    gpu_resource: str = Field(default="nvidia.com/gpu", description="Extended resource counted as GPUs.")
    min_spare_gpus: int = Field(default=0, ge=0, description="GPUs that must stay spare after moving pods.")
    node_selector: str | None = Field(
        default=None, description="Only nodes matching this label selector may take the moved pods."
    )
    check_gpus: bool = Field(default=True, description="Check spare GPUs.")
    check_pdbs: bool = Field(default=True, description="Check PodDisruptionBudget headroom.")

    @field_validator("nodes")
    @classmethod
    def _node_names(cls, value: list[str]) -> list[str]:
        return [check_name(name, "node name") for name in value]

    pdb_headroom: Literal["now", "sequential"] = Field(
        default="now",
        description="now: the evictions must fit in what each PDB allows at this moment; sequential: "
        "the drain evicts one at a time and waits for replacements, so only a PDB that never allows a "
        "disruption (minAvailable = replicas, maxUnavailable 0) fails the check.",
    )
    acknowledge_unprotected: list[str] = Field(
        default_factory=list,
        description="Serving workloads (`Deployment <ns>/<name>`, `StatefulSet <ns>/<name>`) the runbook "
        "accepts to go down while their pods move: GPU serving with no PDB, or a single replica. Any other "
        "such workload on the leaving nodes fails the check, named.",
    )

    @field_validator("acknowledge_unprotected")
    @classmethod
    def _workload_names(cls, value: list[str]) -> list[str]:
        return check_workload_refs(value, ("Deployment", "StatefulSet", "ReplicaSet"))

    wait_seconds: float = Field(
        default=0,
        ge=0,
        description="Look again every `poll_interval_seconds` for up to this long before failing: another "
        "node in flight may be mid-drain, and its evicted pods need a moment to become Ready elsewhere "
        "before the PDBs allow more. 0 answers at once.",
    )
    poll_interval_seconds: float = Field(default=5.0, gt=0, description="How often to look again.")

    @field_validator("node_selector")
    @classmethod
    def _selector_parses(cls, value: str | None) -> str | None:
        return check_selector(value)


# --- jobs -------------------------------------------------------------------------------------


class ConfigMapMount(ModuleArgs):
    """A ConfigMap of the Job's namespace mounted read-only into its container: each key a file
    under `mount_path` (a volume `configMap`, as kubectl would write it). The ConfigMap must
    exist: the kubelet keeps the pod in ContainerCreating (event FailedMount) until it does."""

    name: str = Field(min_length=1, description="The ConfigMap (in the Job's namespace).")
    mount_path: str = Field(min_length=1, description="Absolute directory of its keys, e.g. /opt/pitstop.")

    @field_validator("name")
    @classmethod
    def _config_map_name(cls, value: str) -> str:
        return check_name(value, "ConfigMap name")

    @field_validator("mount_path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        parts = value.split("/")
        if not value.startswith("/") or value == "/" or ".." in parts or ":" in value:
            raise ValueError(f"mount_path {value!r} must be an absolute directory other than / (no '..')")
        return value.rstrip("/")


def distinct_mounts(mounts: list[ConfigMapMount]) -> list[ConfigMapMount]:
    paths = [m.mount_path for m in mounts]
    for path in paths:
        if paths.count(path) > 1:
            raise ValueError(f"two ConfigMaps mounted at {path}")
    return mounts


class JobArgs(NodeArgs):
    """Run a Job on the node, wait for it, return its logs. Its name is deterministic (prefix +
    hash of run id, task and node), so a retried task finds the Job it started. Tolerates the
    cordon and maintenance taints. Deleted afterwards unless `keep: true`. A pod that cannot run
    (ImagePullBackOff, CreateContainerConfigError, CrashLoopBackOff, ...) fails the task at the
    next poll, with its container states and latest events; so does one the scheduler refuses for
    `unschedulable_seconds`, or a timeout."""

    image: str = Field(min_length=1, description="Container image.")
    command: list[str] | None = Field(default=None, description="Container command (entrypoint).")
    args: list[str] | None = Field(default=None, description="Container arguments.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment variables.")
    config_maps: list[ConfigMapMount] = Field(
        default_factory=list,
        description="ConfigMaps of the Job's namespace mounted read-only (scripts the command runs).",
    )

    @field_validator("config_maps")
    @classmethod
    def _mounts(cls, value: list[ConfigMapMount]) -> list[ConfigMapMount]:
        return distinct_mounts(value)

    name: str = Field(default="pitstop-job", min_length=1, description="Name prefix of the Job.")
    namespace: str = Field(default="default", min_length=1, description="Namespace of the Job.")

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        return check_name(value, "namespace", "label")

    labels: dict[str, str] = Field(
        default_factory=dict, description="Labels of the Job and its pod (e.g. pitstop.dev/validation: dcgm)."
    )
    annotations: dict[str, str] = Field(default_factory=dict, description="Annotations of the pod.")
    gpus: int = Field(default=0, ge=0, description="nvidia.com/gpu the container asks for.")
    privileged: bool = Field(
        default=False,
        description="Run the container privileged (securityContext.privileged), for probes that read the "
        "host (the kernel log); its namespace must then allow privileged pods (Pod Security).",
    )
    pin: Literal["node_name", "node_selector"] = Field(
        default="node_name",
        description="node_name: bypass the scheduler; node_selector: `kubernetes.io/hostname` + tolerations.",
    )
    tolerations: list[dict[str, Any]] = Field(default_factory=list, description="Extra tolerations.")
    service_account: str | None = Field(default=None, description="Service account of the pod.")
    backoff_limit: int = Field(default=0, ge=0, description="Retries of the pod before the Job fails.")
    timeout_seconds: float = Field(default=1800, gt=0, description="Give up (and delete the Job) after this.")
    poll_interval_seconds: float = Field(default=5.0, gt=0, description="How often to look at the Job.")
    unschedulable_seconds: float = Field(
        default=300,
        gt=0,
        description="Fail once the scheduler has refused the pod (Unschedulable) for this long.",
    )
    keep: bool = Field(default=False, description="Keep the Job (and its pods) afterwards.")
    log_lines: int = Field(
        default=2000, ge=1, description="Last lines of the pod's log returned (at most 48 KiB)."
    )


# --- generic ----------------------------------------------------------------------------------


class _ObjectRef(ModuleArgs):
    api_version: str = Field(default="v1", description="e.g. v1, apps/v1, kueue.x-k8s.io/v1beta1.")
    kind: str = Field(min_length=1, description="e.g. Node, Pod, Deployment, ClusterQueue.")
    namespace: str | None = Field(default=None, description="Namespace (namespaced kinds).")

    @field_validator("api_version")
    @classmethod
    def _api_version(cls, value: str) -> str:
        return check_api_version(value)

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str | None) -> str | None:
        return None if value is None else check_name(value, "namespace", "label")

    @field_validator("name", check_fields=False)
    @classmethod
    def _object_name(cls, value: str | None) -> str | None:
        # The apiserver checks each kind's own rule; a path segment is what every kind shares.
        return None if value is None else check_name(value, "object name", "segment")


class GetArgs(_ObjectRef):
    """Read objects (read-only; runs in check mode too). Returns `resources` (a list) and,
    with `name`, `resource` and `exists`.

    Secrets come back with their keys but not their values: every value of `data` and
    `stringData` (and the last-applied annotation that repeats them) reads
    `<redacted: N bytes>`, and Helm release records (Secrets of type `helm.sh/release.v1`,
    ConfigMaps labelled `owner=helm`) likewise. `when: s.resource.data.token is defined` works;
    reading the value does not, in check mode or not: whatever a module returns is written to
    the run's history. A task that needs a Secret's value names the Secret where the value is
    used (a pod's `secretKeyRef`, a module argument `{secret: NAME}`) instead of reading it."""

    name: str | None = Field(default=None, description="One object by name.")
    label_selector: str | None = Field(default=None, description="Label selector for a list.")
    field_selector: str | None = Field(default=None, description="Field selector for a list.")
    limit: int = Field(default=500, ge=1, le=5000, description="At most this many objects are returned.")


class PatchArgs(_ObjectRef):
    """Patch one object. Check mode asks the server for a dry run and shows the diff; no
    difference means no write (changed: false). Secret values (and Helm release payloads) are
    redacted in the result and the diff, as in `kube.get`: a changed value shows as
    `<redacted: N bytes, changed>`."""

    name: str = Field(min_length=1, description="Object name.")
    patch: dict[str, Any] | list[dict[str, Any]] = Field(description="The patch document.")
    patch_type: Literal["merge", "strategic", "json"] = Field(
        default="merge", description="JSON merge patch, strategic merge patch (built-in kinds) or JSON patch."
    )


# --- registry ---------------------------------------------------------------------------------

_SHORT = timedelta(minutes=1)


def _spec(
    name: str,
    model: type[ArgsT],
    summary: str,
    *,
    start_to_close: timedelta = _SHORT,
    heartbeat: timedelta | None = None,
    disruptive: bool = False,
    retry: RetryDefaults | None = None,
) -> ModuleSpec[ArgsT]:
    return ModuleSpec(
        name=name,
        args_model=model,
        summary=summary,
        supports_check_mode=True,
        disruptive=disruptive,
        start_to_close=start_to_close,
        heartbeat_timeout=heartbeat,
        retry=retry or RetryDefaults(),
    )


CORDON = _spec("kube.cordon", CordonArgs, "Mark a node unschedulable, recording whether it already was.")
UNCORDON = _spec(
    "kube.uncordon", UncordonArgs, "Restore the schedulability recorded before pitstop cordoned the node."
)
TAINT = _spec("kube.taint", TaintArgs, "Add a taint to a node (NoSchedule unless stated).")
UNTAINT = _spec("kube.untaint", UntaintArgs, "Remove a taint from a node.")
ANNOTATE = _spec("kube.annotate", AnnotateArgs, "Set or remove annotations on a node.")
DRAIN = _spec(
    "kube.drain",
    DrainArgs,
    "Evict a node's pods through the Eviction API, waiting on PDBs, never forcing.",
    start_to_close=timedelta(hours=2),
    heartbeat=LONG_WAIT_HEARTBEAT,
    disruptive=True,
    # Unlimited attempts: every attempt resumes from the cluster's state, and the module
    # itself stops at the task's timeout.
    retry=RetryDefaults(maximum_attempts=0, maximum_interval=timedelta(seconds=30)),
)
WAIT_FOR_WORKLOADS = _spec(
    "kube.wait_for_workloads",
    WaitForWorkloadsArgs,
    "Ask training workloads on a node to checkpoint (annotation protocol) and wait for them.",
    start_to_close=timedelta(hours=2),
    heartbeat=LONG_WAIT_HEARTBEAT,
)
RESUME_WORKLOADS = _spec(
    "kube.resume_workloads",
    ResumeWorkloadsArgs,
    "Resume the training jobs a node's maintenance suspended (checkpoint protocol suspend).",
)
STOP_ADMISSION = _spec(
    "kube.stop_admission",
    StopAdmissionArgs,
    "Hold Kueue ClusterQueues (stopPolicy), or taint the node where Kueue is absent.",
)
RESUME_ADMISSION = _spec(
    "kube.resume_admission", ResumeAdmissionArgs, "Undo kube.stop_admission: restore the recorded state."
)
WAIT_NODE_READY = _spec(
    "kube.wait_node_ready",
    WaitNodeReadyArgs,
    "Wait until a node is Ready (and its not-ready taints are gone).",
    start_to_close=timedelta(minutes=30),
    heartbeat=LONG_WAIT_HEARTBEAT,
)
CAPACITY_CHECK = _spec(
    "kube.capacity_check",
    CapacityCheckArgs,
    "Fail unless spare GPUs and PDB headroom allow these nodes to leave (waiting up to wait_seconds).",
    start_to_close=timedelta(hours=1),
    heartbeat=LONG_WAIT_HEARTBEAT,
)
JOB = _spec(
    "kube.job",
    JobArgs,
    "Run a Job pinned to a node, wait for it, return its logs.",
    start_to_close=timedelta(hours=2),
    heartbeat=LONG_WAIT_HEARTBEAT,
)
GET = _spec(
    "kube.get",
    GetArgs,
    "Read Kubernetes objects (read-only); Secret values and Helm payloads come back redacted.",
)
PATCH = _spec("kube.patch", PatchArgs, "Patch a Kubernetes object; check mode shows the (redacted) diff.")

# Every module of this file, listed once; `pitstop/module_catalog.py` joins the families.
SPECS: list[ModuleSpec[Any]] = [
    CORDON,
    UNCORDON,
    TAINT,
    UNTAINT,
    ANNOTATE,
    DRAIN,
    WAIT_FOR_WORKLOADS,
    RESUME_WORKLOADS,
    STOP_ADMISSION,
    RESUME_ADMISSION,
    WAIT_NODE_READY,
    CAPACITY_CHECK,
    JOB,
    GET,
    PATCH,
]
