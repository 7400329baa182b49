"""Args of the `kube.*` modules a platform upgrade uses: the removed-API scan, the CRD and
webhook pre-upgrade check, and client-side apply of manifests.

Paths (`src`, `new_crds`) are on the worker: absolute, `~`-relative or relative to the runbook
directory (PITSTOP_RUNBOOK_DIR, default `runbooks`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from pitstop.compat.deprecations import TargetVersionError, kube_minor_of
from pitstop.kube.names import check_name, check_workload_refs
from pitstop.module_spec import ArgsT, ModuleArgs, ModuleSpec, RetryDefaults


def _as_list(value: object) -> object:
    return [value] if isinstance(value, str) else value


class DeprecationsArgs(ModuleArgs):
    """Find objects whose manifests use API versions the target Kubernetes version no longer
    serves (like kubent/pluto): the `kubectl.kubernetes.io/last-applied-configuration` of every
    listable object and the manifests of each Helm release's latest deployed revision.
    Read-only; runs in check mode too."""

    target_version: str = Field(description="Kubernetes version being upgraded to: v1.31, 1.31 or v1.31.2.")
    sources: list[Literal["last-applied", "helm"]] = Field(
        default=["last-applied", "helm"], min_length=1, description="Where to look for manifests."
    )
    fail_on: Literal["removed", "never"] = Field(
        default="removed", description="`removed`: fail when any finding is removed in the target version."
    )
    max_objects: int = Field(
        default=20000, ge=1, description="Stop reading objects after this many (the result says so)."
    )
    max_listed: int = Field(default=10, ge=1, le=100, description="Findings named in the message.")

    @field_validator("target_version")
    @classmethod
    def _version_parses(cls, value: str) -> str:
        try:
            kube_minor_of(value)
        except TargetVersionError as exc:
            raise ValueError(str(exc)) from None
        return value


class CrdWebhookCheckArgs(ModuleArgs):
    """Before changing operators or CRDs: (a) every version in a CRD's status.storedVersions
    stays served by its new definition; (b) conversion webhooks have a ready backend; (c)
    admission webhooks with failurePolicy Fail have a ready backend (Ignore: warning); (d) CRDs
    shipped in the `crds/` directory of the named Helm releases' charts (Helm never upgrades
    them) and (e) CRDs with custom resources that the new CRD set omits. `block` findings fail
    the task. Read-only; runs in check mode too."""

    crds: list[str] | None = Field(
        default=None, description="CRD names to check (default: all, or the new CRDs' API groups for (e))."
    )
    new_crds: list[str] = Field(
        default_factory=list, description="Files or directories with the CRD manifests about to be applied."
    )
    helm_releases: list[str] = Field(
        default_factory=list, description="Helm releases about to be upgraded: `name` or `namespace/name`."
    )
    connect_timeout_seconds: float = Field(
        default=3.0, gt=0, le=30, description="Timeout for reaching a webhook given by URL."
    )

    _lists = field_validator("crds", "new_crds", "helm_releases", mode="before")(_as_list)


class ApplyArgs(ModuleArgs):
    """Apply manifests. By default server-side apply, as `kubectl apply --server-side`, Argo CD
    and Flux do: the apiserver merges each object, records its fields as owned by the field
    manager `pitstop`, removes the fields pitstop applied before and no longer does, and refuses
    to change fields another manager owns (a person's `kubectl scale`, a controller) unless
    `force_conflicts: true`. Objects applied client-side before are adopted first, as kubectl
    does. `server_side: false` is client-side apply, byte for byte as `kubectl apply` (the
    `kubectl.kubernetes.io/last-applied-configuration` annotation and a three-way patch).
    Namespaces and CRDs go first. Check mode asks the server for a dry run and shows the diff."""

    src: list[str] | None = Field(
        default=None, description="Manifest file(s) or directories (multi-document YAML/JSON)."
    )
    definition: list[dict[str, Any]] | None = Field(default=None, description="Inline manifest(s).")
    namespace: str = Field(
        default="default", min_length=1, description="Namespace of namespaced objects that name none."
    )
    recursive: bool = Field(default=False, description="Read directories recursively (kubectl -R).")
    prune: Literal[False] = Field(
        default=False, description="Pruning objects absent from the manifests is not supported."
    )
    server_side: bool = Field(
        default=True, description="Server-side apply (false: client-side, as kubectl apply)."
    )
    force_conflicts: bool = Field(
        default=False,
        description="Take over fields another field manager owns instead of failing (--force-conflicts).",
    )
    field_manager: str = Field(
        default="pitstop",
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$",
        description="Field manager name that owns the applied fields (server-side apply).",
    )
    wait_established_seconds: float = Field(
        default=60, gt=0, description="How long to wait for an applied CRD's kinds to be served."
    )

    _src_list = field_validator("src", mode="before")(_as_list)

    @field_validator("definition", mode="before")
    @classmethod
    def _one_definition(cls, value: object) -> object:
        return [value] if isinstance(value, dict) else value

    @field_validator("definition")
    @classmethod
    def _no_inline_secret_values(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        # Module arguments are the activity's input, so they are in the run's history: a Secret
        # written inline would be stored there in the clear. From a file (`src`) only the path is.
        for doc in value or []:
            listed = doc.get("items")
            items: list[Any] = listed if isinstance(listed, list) else [doc]
            for item in items:
                if (
                    isinstance(item, dict)
                    and item.get("kind") == "Secret"
                    and (item.get("data") or item.get("stringData"))
                ):
                    raise ValueError(
                        "a Secret with data written inline would be stored in the run's history; "
                        "put it in a manifest file and give `src` (kube.apply never returns its values)"
                    )
        return value

    @model_validator(mode="after")
    def _one_source(self) -> ApplyArgs:
        if (self.src is None) == (self.definition is None):
            raise ValueError("give exactly one of `src` (files or directories) or `definition` (inline)")
        return self


class WaitRolloutArgs(ModuleArgs):
    """Wait until rollouts have finished as `kubectl rollout status` says: the Deployments,
    DaemonSets and StatefulSets in the manifests of `src` (what a kube.apply just applied) and
    those named in `objects`. Done means the controller observed the new spec and every replica
    is updated and available (a DaemonSet on every node it should run on), not that the spec was
    patched. A Deployment past its progress deadline fails at once."""

    src: list[str] | None = Field(
        default=None, description="Manifest file(s) or directories, as kube.apply's."
    )
    objects: list[str] = Field(
        default_factory=list,
        description="Workloads by name: `Deployment <namespace>/<name>`, `DaemonSet ...`, `StatefulSet ...`.",
    )
    namespace: str = Field(
        default="default", min_length=1, description="Namespace of namespaced objects that name none."
    )
    recursive: bool = Field(default=False, description="Read directories recursively (kubectl -R).")
    timeout_seconds: float = Field(default=900, gt=0, description="Give up after this long.")
    poll_interval_seconds: float = Field(default=5.0, gt=0, description="How often to look again.")

    _src_list = field_validator("src", mode="before")(_as_list)

    @field_validator("objects")
    @classmethod
    def _workloads(cls, value: list[str]) -> list[str]:
        return check_workload_refs(value, ("Deployment", "DaemonSet", "StatefulSet"))

    @model_validator(mode="after")
    def _something(self) -> WaitRolloutArgs:
        if not self.src and not self.objects:
            raise ValueError("give `src` (manifests) or `objects` (workloads by name)")
        return self


class ServingCheckArgs(ModuleArgs):
    """Report serving Deployments that a drain or an engine upgrade would interrupt: not a
    rolling update with maxUnavailable 0, fewer than `min_replicas`, a container without a
    readinessProbe or a preStop hook, a grace period under `min_grace_seconds`, or no
    PodDisruptionBudget. Read-only; runs in check mode too."""

    namespaces: list[str] = Field(default_factory=list, description="Namespaces to look in (default: all).")
    gpu_only: bool = Field(default=True, description="Only Deployments whose pods request nvidia.com/gpu.")
    min_replicas: int = Field(default=2, ge=1)
    min_grace_seconds: int = Field(default=60, ge=0)
    fail_on: Literal["never", "any"] = Field(
        default="never", description="`any`: fail when a serving Deployment falls short (default: report)."
    )
    max_listed: int = Field(default=10, ge=1, le=100, description="Deployments named in the message.")


class WaveReplicasArgs(ModuleArgs):
    """Fail when a wave would move more than `max_percent` of a serving Deployment's replicas
    to the new version at once: counts, per Deployment, its replicas on `nodes` (the wave's,
    e.g. `{{ stage.wave_hosts }}` in `waves.checks`). At least one replica may always move.
    Read-only; runs in check mode too."""

    nodes: list[str] = Field(min_length=1, description="The nodes about to change (node names).")
    max_percent: float = Field(
        default=50, gt=0, le=100, description="Share of a Deployment's replicas that may move at once."
    )
    namespaces: list[str] = Field(default_factory=list, description="Namespaces to look in (default: all).")
    gpu_only: bool = Field(default=True, description="Only Deployments whose pods request nvidia.com/gpu.")
    max_listed: int = Field(default=10, ge=1, le=100, description="Deployments named in the message.")

    @field_validator("nodes")
    @classmethod
    def _node_names(cls, value: list[str]) -> list[str]:
        return [check_name(name, "node name") for name in value]


def _spec(name: str, model: type[ArgsT], summary: str, minutes: int) -> ModuleSpec[ArgsT]:
    return ModuleSpec(
        name=name,
        args_model=model,
        summary=summary,
        supports_check_mode=True,
        start_to_close=timedelta(minutes=minutes),
        heartbeat_timeout=timedelta(seconds=60),
        retry=RetryDefaults(),
    )


DEPRECATIONS = _spec(
    "kube.deprecations",
    DeprecationsArgs,
    "Find manifests (last-applied, Helm releases) using API versions removed in the target version.",
    10,
)
CRD_WEBHOOK_CHECK = _spec(
    "kube.crd_webhook_check",
    CrdWebhookCheckArgs,
    "Check CRD storage versions, conversion/admission webhooks and Helm-shipped CRDs before an upgrade.",
    5,
)
APPLY = _spec(
    "kube.apply",
    ApplyArgs,
    "Apply manifests (server-side apply as field manager pitstop; or client-side, as kubectl apply).",
    10,
)
WAIT_ROLLOUT = _spec(
    "kube.wait_rollout",
    WaitRolloutArgs,
    "Wait until Deployments, DaemonSets and StatefulSets have rolled out, as kubectl rollout status.",
    60,
)

SERVING_CHECK = _spec(
    "kube.serving_check",
    ServingCheckArgs,
    "Report serving Deployments a drain or an upgrade would interrupt (surge, probes, preStop, PDB).",
    5,
)

WAVE_REPLICAS = _spec(
    "kube.wave_replicas",
    WaveReplicasArgs,
    "Refuse a wave that would move more than a share of a serving Deployment's replicas at once.",
    5,
)

# Every module of this file, listed once; `pitstop/module_catalog.py` joins the families.
SPECS: list[ModuleSpec[Any]] = [
    DEPRECATIONS,
    CRD_WEBHOOK_CHECK,
    APPLY,
    WAIT_ROLLOUT,
    SERVING_CHECK,
    WAVE_REPLICAS,
]
