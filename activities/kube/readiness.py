"""kube.readiness: does a MultiKueue worker cluster have what the manager's jobs expect? (read-only)

MultiKueue dispatches a job from the manager cluster to a worker cluster as it is: the job's
namespace and LocalQueue must exist there (Kueue's "Setup a MultiKueue environment"), and so must
what the job's pods name: the RuntimeClass (`nvidia`), the image pull Secrets, the StorageClass and
claim of the model cache. A worker that lacks one takes the job and leaves it pending or failing.

The expectation is a list of objects (`ExpectedItem`): read from the manager cluster through the
worker policy when this worker may reach it (`manager`), or given (`expected`, e.g. the
`data.expected` of `mode: export` run on the manager's own worker). Objects the expected ones
name are expected too: a ClusterQueue's ResourceFlavors, a LocalQueue's ClusterQueue, a claim's
StorageClass, every namespaced object's namespace. Each is looked up on the worker (the
inventory's cluster) and reported present, missing or different.

Secrets are never read: they are listed as the apiserver prints them (a meta.k8s.io Table with
`includeObject=None`: name, type, number of keys), narrowed to one name by a field selector.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from temporalio.exceptions import ApplicationError

from activities.kube.client import KUEUE_GROUP, ApiStatus, Kube, api_base, api_client, namespaced, segment
from activities.kube.common import beat, kube_for, kube_module
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail
from pitstop.kube.objects import Obj
from pitstop.module_args.kube_readiness import (
    KINDS,
    NAMESPACED,
    READINESS,
    ExpectedItem,
    Kind,
    ReadinessArgs,
)
from pitstop.policy.errors import VIOLATION
from pitstop.runbook.inventory import ClusterConfig

MAX_NAMED = 20


class Finding(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str
    namespace: str
    name: str
    state: Literal["present", "missing", "different"]
    required: bool
    differences: list[str] = Field(default_factory=list)
    used_by: list[str] = Field(default_factory=list)
    reason: str = ""

    @property
    def label(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


class Reader:
    """One cluster's objects of the kinds kube.readiness compares, reduced to what is compared."""

    def __init__(self, kube: Kube, args: ReadinessArgs) -> None:
        self.kube = kube
        self._kueue = api_base(args.kueue_api_version) if args.kueue_api_version else None
        self.monitoring = api_base(args.servicemonitor_api_version)
        self._served: dict[str, bool] = {}

    @property
    def kueue(self) -> str:
        """Kueue's API base: the version asked for, else the one this cluster prefers (its
        MultiKueueCluster moved `kubeConfig` under `clusterSource` in v1beta2)."""
        if self._kueue is None:
            group = self.kube.get_or_none(f"/apis/{KUEUE_GROUP}") or {}
            preferred = (group.get("preferredVersion") or {}).get("groupVersion")
            self._kueue = api_base(str(preferred or f"{KUEUE_GROUP}/v1beta1"))
        return self._kueue

    def serves(self, base: str) -> bool:
        if base not in self._served:
            try:
                self.kube.get(base)
                self._served[base] = True
            except ApiStatus as exc:
                if exc.status != 404:
                    raise
                self._served[base] = False
        return self._served[base]

    def collection(self, kind: Kind, namespace: str | None) -> str | None:
        """The collection path of `kind` (None when the cluster does not serve it)."""
        where: dict[str, tuple[str, str]] = {
            "Namespace": ("/api/v1", "namespaces"),
            "RuntimeClass": ("/apis/node.k8s.io/v1", "runtimeclasses"),
            "Secret": ("/api/v1", "secrets"),
            "StorageClass": ("/apis/storage.k8s.io/v1", "storageclasses"),
            "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims"),
            "DaemonSet": ("/apis/apps/v1", "daemonsets"),
            "ServiceMonitor": (self.monitoring, "servicemonitors"),
            "ResourceFlavor": (self.kueue, "resourceflavors"),
            "ClusterQueue": (self.kueue, "clusterqueues"),
            "LocalQueue": (self.kueue, "localqueues"),
        }
        base, plural = where[kind]
        if base.startswith("/apis/") and not self.serves(base):
            return None
        return namespaced(base, plural, namespace if kind in NAMESPACED else None)

    def item(self, kind: Kind, obj: Obj, used_by: list[str] | None = None) -> ExpectedItem:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        fields: dict[str, Any] = {}
        if kind == "RuntimeClass":
            fields["handler"] = obj.get("handler")
        elif kind == "Secret":
            fields["type"] = obj.get("type")
        elif kind == "StorageClass":
            fields["provisioner"] = obj.get("provisioner")
        elif kind == "PersistentVolumeClaim":
            fields["storage_class"] = spec.get("storageClassName")
        elif kind == "ResourceFlavor":
            fields["node_labels"] = dict(spec.get("nodeLabels") or {})
        elif kind == "ClusterQueue":
            fields["flavors"] = cluster_queue_flavors(obj)
        elif kind == "LocalQueue":
            fields["cluster_queue"] = spec.get("clusterQueue")
        return ExpectedItem(
            kind=kind,
            name=str(meta.get("name")),
            namespace=str(meta.get("namespace") or "") if kind in NAMESPACED else "",
            fields={k: v for k, v in fields.items() if v is not None},
            used_by=used_by or [],
        )

    def secrets(self, namespace: str, name: str | None, label_selector: str | None = None) -> list[Obj]:
        """Secrets as `{metadata: {name, namespace}, type}` from the server-printed table: the
        request never returns a Secret's data."""
        path = namespaced("/api/v1", "secrets", namespace or None)
        query: dict[str, str | int | None] = {"labelSelector": label_selector}
        if name:
            query["fieldSelector"] = f"metadata.name={name}"
        table = self.kube.table(path, **query)
        columns = [str(c.get("name") or "").lower() for c in table.get("columnDefinitions") or []]
        if "name" not in columns or "type" not in columns:
            fail(ErrorType.KUBE_API_ERROR, f"{path}: the server's table of Secrets has no Name/Type column")
        out: list[Obj] = []
        for row in table.get("rows") or []:
            cells = row.get("cells") or []
            if len(cells) < len(columns):
                continue
            out.append(
                {
                    "metadata": {"name": str(cells[columns.index("name")]), "namespace": namespace},
                    "type": str(cells[columns.index("type")]),
                }
            )
        return out

    def get(self, kind: Kind, namespace: str, name: str) -> tuple[Obj | None, str]:
        """The object (None when missing) and why it is missing when its kind is not served."""
        if kind == "Secret":
            found = self.secrets(namespace, name)
            return (found[0] if found else None), ""
        path = self.collection(kind, namespace)
        if path is None:
            group = self.monitoring if kind == "ServiceMonitor" else self.kueue
            return None, f"{group.removeprefix('/apis/')} is not served (its CRDs are not installed)"
        # The name comes from the manager's objects or the expectation: one checked path segment.
        return self.kube.get_or_none(f"{path}/{segment(name, kind, 'segment')}"), ""

    def listed(self, kind: Kind, label_selector: str, namespaces: set[str]) -> list[Obj]:
        if kind == "Secret":
            # Per namespace: a table of every namespace's Secrets would not say which namespace each
            # row is in without their metadata (whose annotations may hold a last-applied copy).
            return [s for ns in sorted(namespaces) for s in self.secrets(ns, None, label_selector)]
        path = self.collection(kind, None)
        return [] if path is None else self.kube.list(path, label_selector=label_selector)


def cluster_queue_flavors(obj: Obj) -> dict[str, list[str]]:
    """{flavor: sorted covered resources} of a ClusterQueue's resourceGroups."""
    out: dict[str, set[str]] = {}
    for group in (obj.get("spec") or {}).get("resourceGroups") or []:
        covered = [str(r) for r in group.get("coveredResources") or []]
        for flavor in group.get("flavors") or []:
            names = [str(r.get("name")) for r in flavor.get("resources") or [] if r.get("name")]
            out.setdefault(str(flavor.get("name")), set()).update(names or covered)
    return {flavor: sorted(resources) for flavor, resources in sorted(out.items())}


# --- the expectation ----------------------------------------------------------------------------


def _split(kind: Kind, ref: str) -> tuple[str, str]:
    if kind in NAMESPACED:
        namespace, _, name = ref.partition("/")
        if not name:
            fail(ErrorType.INVALID_ARGS, f"kube.readiness: {kind} {ref!r}: name it as namespace/name")
        return namespace, name
    return "", ref


def secret_namespaces(items: list[ExpectedItem]) -> set[str]:
    """Where image pull Secrets selected by label are looked for: a pod's pull Secrets are in its
    own namespace, so the namespaces with a LocalQueue (where the jobs run), else every namespace
    the other objects use."""
    queues = {i.namespace for i in items if i.kind == "LocalQueue"}
    if queues:
        return queues
    return {i.namespace for i in items if i.namespace} | {i.name for i in items if i.kind == "Namespace"}


def read_expectation(
    reader: Reader,
    names: dict[Kind, list[str]],
    label_selector: str | None,
    kinds: list[Kind],
    where: str,
) -> list[ExpectedItem]:
    """The objects named or selected on a cluster, as an expectation; a named one it lacks is an error."""
    items: list[ExpectedItem] = []
    absent: list[str] = []
    # Secrets last: those selected by label are looked for in the jobs' namespaces.
    for kind in sorted(KINDS, key=lambda k: k == "Secret"):
        for ref in names.get(kind, []):
            namespace, name = _split(kind, ref)
            obj, _ = reader.get(kind, namespace, name)
            if obj is None:
                absent.append(f"{kind} {ref}")
                continue
            items.append(reader.item(kind, obj))
        if label_selector and kind in kinds:
            for obj in reader.listed(kind, label_selector, secret_namespaces(items)):
                items.append(reader.item(kind, obj))
        beat(kind)
    if absent:
        fail(
            ErrorType.PRECONDITION_FAILED,
            f"kube.readiness: {where} has no {', '.join(absent)}: "
            "the expectation names objects that cluster lacks",
        )
    unique: dict[tuple[str, str, str], ExpectedItem] = {}
    for item in items:
        unique.setdefault(item.key, item)
    return with_referenced(reader, list(unique.values()))


def referenced(item: ExpectedItem) -> list[tuple[Kind, str]]:
    """The cluster-scoped objects `item` names: a LocalQueue's ClusterQueue, a ClusterQueue's
    flavors, a claim's StorageClass, a namespaced object's Namespace."""
    out: list[tuple[Kind, str]] = []
    if item.kind == "LocalQueue":
        out.append(("ClusterQueue", str(item.fields.get("cluster_queue") or "")))
    if item.kind == "ClusterQueue":
        out.extend(("ResourceFlavor", str(flavor)) for flavor in item.fields.get("flavors") or {})
    if item.kind == "PersistentVolumeClaim":
        out.append(("StorageClass", str(item.fields.get("storage_class") or "")))
    if item.namespace:
        out.append(("Namespace", item.namespace))
    return [(kind, name) for kind, name in out if name]


def with_referenced(reader: Reader, items: list[ExpectedItem]) -> list[ExpectedItem]:
    """`items` plus, as the same cluster has them, the objects they name (so that a LocalQueue
    named on the manager brings its ClusterQueue with the flavors it covers)."""
    out = {item.key: item for item in items}
    queue = list(items)
    while queue:
        for kind, name in referenced(queue.pop()):
            if (kind, "", name) in out:
                continue
            obj, _ = reader.get(kind, "", name)
            if obj is not None:
                found = reader.item(kind, obj)
                out[found.key] = found
                queue.append(found)
    return list(out.values())


def with_implied(items: list[ExpectedItem], source: str) -> list[ExpectedItem]:
    """`items` plus what they name (required as they are), each with who uses it."""
    out: dict[tuple[str, str, str], ExpectedItem] = {item.key: item.model_copy(deep=True) for item in items}
    queue = list(out.values())
    while queue:
        user = queue.pop()
        for kind, name in referenced(user):
            key = (kind, "", name)
            if key not in out:
                out[key] = ExpectedItem(kind=kind, name=name, used_by=[], required=user.required)
                queue.append(out[key])
            needed = out[key]
            who = f"{source}'s {user.label}"
            if who not in needed.used_by:
                needed.used_by.append(who)
            if user.required:
                needed.required = True
    order = {kind: i for i, kind in enumerate(KINDS)}
    return sorted(out.values(), key=lambda i: (order[i.kind], i.namespace, i.name))


# --- the comparison ------------------------------------------------------------------------------


def differences(item: ExpectedItem, actual: ExpectedItem) -> list[str]:
    out: list[str] = []
    for field, want in sorted(item.fields.items()):
        have = actual.fields.get(field)
        if field == "flavors" and isinstance(want, dict):
            have = have or {}
            for flavor, resources in sorted(want.items()):
                if flavor not in have:
                    out.append(f"flavor {flavor} not covered (covers {', '.join(have) or 'none'})")
                    continue
                lacking = sorted(set(resources or []) - set(have[flavor]))
                if lacking:
                    out.append(f"flavor {flavor} does not cover {', '.join(lacking)}")
        elif field == "node_labels" and isinstance(want, dict):
            have = have or {}
            for label, value in sorted(want.items()):
                if have.get(label) != value:
                    out.append(f"nodeLabels {label}: {have.get(label)!r} here, {value!r} expected")
        elif have != want:
            out.append(f"{field}: {have!r} here, {want!r} expected")
    return out


def compare(reader: Reader, expected: list[ExpectedItem]) -> list[Finding]:
    findings: list[Finding] = []
    for item in expected:
        obj, reason = reader.get(item.kind, item.namespace, item.name)
        base = dict(
            kind=item.kind,
            namespace=item.namespace,
            name=item.name,
            required=item.required,
            used_by=item.used_by,
        )
        if obj is None:
            findings.append(Finding(**base, state="missing", reason=reason))
            continue
        diff = differences(item, reader.item(item.kind, obj))
        findings.append(Finding(**base, state="different" if diff else "present", differences=diff))
        beat(item.label)
    return findings


# --- MultiKueue on the manager -------------------------------------------------------------------


def multikueue_check(reader: Reader, name: str) -> dict[str, Any]:
    """The manager's MultiKueueCluster for this worker: present, Active, and which kubeconfig Secret
    it names (spec.kubeConfig.location in v1beta1, spec.clusterSource.kubeConfig in v1beta2; the
    Secret itself is not read) or which ClusterProfile (v1beta2 clusterSource.clusterProfileRef)."""
    base = reader.kueue
    if not reader.serves(base):
        return {"name": name, "state": "missing", "active": False, "reason": "Kueue is not served"}
    obj = reader.kube.get_or_none(f"{base}/multikueueclusters/{name}")
    if obj is None:
        return {
            "name": name,
            "state": "missing",
            "active": False,
            "reason": "no MultiKueueCluster of that name",
        }
    spec = obj.get("spec") or {}
    source = spec.get("clusterSource") or {}
    kubeconfig = spec.get("kubeConfig") or source.get("kubeConfig") or {}
    profile = (source.get("clusterProfileRef") or {}).get("name")
    conditions = (obj.get("status") or {}).get("conditions") or []
    active = next((c for c in conditions if c.get("type") == "Active"), None)
    is_active = active is not None and str(active.get("status")) == "True"
    if active is None:
        reason = "no Active condition yet"
    elif is_active:
        reason = ""
    else:
        reason = (
            f"Active is {active.get('status')} ({active.get('reason') or ''}: {active.get('message') or ''})"
        )
    return {
        "name": name,
        "state": "present" if is_active else "different",
        "active": is_active,
        "kubeconfig_location_type": (kubeconfig.get("locationType") or "Secret") if kubeconfig else None,
        "kubeconfig_location": kubeconfig.get("location"),
        "cluster_profile": profile,
        "reason": reason,
    }


# --- the module ---------------------------------------------------------------------------------


def manager_kube(call: ModuleCall, args: ReadinessArgs) -> Kube | None:
    """The manager cluster as this worker's policy reaches it; None (source auto) when it does not."""
    assert args.manager is not None
    cluster = ClusterConfig(name=args.manager.cluster)
    try:
        api = api_client(cluster, "kube.readiness: manager")
    except ApplicationError as exc:
        if exc.type == VIOLATION and args.source == "auto" and args.expected:
            return None
        if exc.type == VIOLATION:
            raise ApplicationError(
                f"{exc.message}. Without access to the manager from this worker, run kube.readiness with "
                "mode: export on the manager's worker and give its data.expected as `expected`",
                type=exc.type,
                non_retryable=True,
            ) from None
        raise
    except Exception as exc:  # KubeConfigError
        fail(ErrorType.PRECONDITION_FAILED, f"kube.readiness: manager {args.manager.cluster}: {exc}")
    return Kube(api, args.manager.cluster)


def _message(findings: list[Finding], worker: str, manager: str | None) -> str:
    bad = [f for f in findings if f.state != "present"]
    if not bad:
        return f"worker cluster {worker} has all {len(findings)} expected object(s)"
    parts: list[str] = []
    for f in bad[:MAX_NAMED]:
        what = "missing" if f.state == "missing" else "different"
        text = f"{f.label} {what} on worker cluster {worker}"
        if f.differences:
            text += f" ({'; '.join(f.differences)})"
        if f.reason:
            text += f" ({f.reason})"
        if f.used_by:
            text += f" ({', '.join(f.used_by)} use{'s' if len(f.used_by) == 1 else ''} it)"
        if not f.required:
            text += " [not required]"
        parts.append(text)
    more = f"; and {len(bad) - MAX_NAMED} more" if len(bad) > MAX_NAMED else ""
    whose = f"manager cluster {manager}" if manager else "the manager"
    return (
        "; ".join(parts)
        + more
        + f". Jobs {whose} dispatches to {worker} stay pending or fail until these match"
    )


@kube_module(READINESS)
def readiness(call: ModuleCall, args: ReadinessArgs) -> ModuleResult:
    here = call.cluster.name if call.cluster else "default cluster"
    kube = kube_for(call)
    reader = Reader(kube, args)
    if args.mode == "export":
        expected = read_expectation(reader, args.select, args.label_selector, args.kinds, f"cluster {here}")
        data: dict[str, Any] = {
            "mode": "export",
            "cluster": here,
            "expected": [i.model_dump() for i in expected],
        }
        msg = f"{len(expected)} object(s) of cluster {here} exported as the expectation"
        if args.worker_cluster:
            exported = multikueue_check(reader, args.worker_cluster)
            data["multikueue_cluster"] = exported
            if not exported["active"]:
                return ModuleResult(
                    failed=True,
                    msg=f"MultiKueueCluster {exported['name']} on cluster {here} is {exported['state']}: "
                    f"{exported['reason']}",
                    data=data,
                )
        return ModuleResult(msg=msg, data=data)

    worker = args.worker_cluster or here
    manager_name = args.manager.cluster if args.manager else None
    expected = list(args.expected)
    source = "expected"
    mk: dict[str, Any] | None = None
    if args.manager is not None and args.source in ("auto", "manager"):
        mkube = manager_kube(call, args)
        if mkube is not None:
            mreader = Reader(mkube, args)
            expected = read_expectation(
                mreader,
                args.manager.names,
                args.manager.label_selector,
                args.manager.kinds,
                f"manager cluster {args.manager.cluster}",
            )
            source = "manager"
            mk = multikueue_check(mreader, args.manager.multikueue_cluster or worker)
    if not expected:
        fail(ErrorType.INVALID_ARGS, "kube.readiness: the expectation is empty: nothing would be compared")
    expected = with_implied(expected, f"manager cluster {manager_name}" if manager_name else "the manager")
    findings = compare(reader, expected)
    failing = [f for f in findings if f.required and f.state != "present"]
    msg = _message(findings, worker, manager_name)
    if mk is not None and not mk["active"]:
        msg = (
            f"MultiKueueCluster {mk['name']} on manager cluster {manager_name} is {mk['state']}: "
            f"{mk['reason']}; {msg}"
        )
    counts = {
        state: sum(1 for f in findings if f.state == state) for state in ("present", "missing", "different")
    }
    return ModuleResult(
        changed=False,
        failed=bool(failing) or (mk is not None and not mk["active"]),
        msg=msg,
        data={
            "mode": "check",
            "worker_cluster": worker,
            "manager_cluster": manager_name,
            "source": source,
            "counts": counts,
            "items": [f.model_dump() for f in findings],
            "multikueue_cluster": mk,
        },
    )
