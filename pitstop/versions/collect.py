"""The version inventory (pure): from what the cluster API and the SSH facts show, one row per
component key with the five columns of docs/upgrade-process.md "Version inventory" (current,
target, support source, validation state, rollback method), plus the maps later steps consume
(`current`, `target`, `diff`, `skew`).

Mixed versions (nodes or workloads that disagree) are reported as such:
`550.90.07 (3 nodes), 570.86.15 (1 node)`, with `versions_by_node` in the row. The `current`
and `target` maps hold one version per component: when versions are mixed, the oldest (the one
furthest behind, which the skew rules and vendor matrices must accept too).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from pitstop.compat.matrix import Matrix, Support, parse_spec, support_for
from pitstop.compat.versions import try_parse_version
from pitstop.kube.objects import name_of
from pitstop.versions.components import (
    NODE_SOURCES,
    AnnotationSource,
    Component,
    ComponentTable,
    ControlPlaneSource,
    DriverCudaSource,
    PackageSource,
    SshFactSource,
)
from pitstop.versions.detect import (
    ClusterView,
    Found,
    detect_cluster,
    detect_nodes,
    images_of,
    split_image,
)

NOT_VALIDATED = "not validated"
_UNITS = {
    "node": ("node", "nodes"),
    "workload": ("workload", "workloads"),
    "release": ("release", "releases"),
}


class Row(BaseModel):
    row: str
    component: str
    current: str
    current_source: str
    target: str
    support_source: str
    supported: bool | None = None
    validation: str
    rollback: str
    versions_by_node: dict[str, str] | None = None
    versions_by_workload: dict[str, str] | None = None


class DiffEntry(BaseModel):
    component: str
    current: str
    target: str


class Skew(BaseModel):
    """What compat.check judges the Version Skew Policy on: a control-plane piece is one
    version, or the list of versions its instances run (HA mid-upgrade), oldest first."""

    apiserver: str | list[str] | None = None
    controller_manager: str | list[str] | None = None
    scheduler: str | list[str] | None = None
    kubelets: dict[str, str] = Field(default_factory=dict)
    kube_proxies: dict[str, str] = Field(default_factory=dict)
    kubectl: str | None = None


class Inventory(BaseModel):
    rows: list[Row]
    current: dict[str, str]
    target: dict[str, str]
    diff: list[DiffEntry]
    skew: Skew
    notes: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        """`30 components, 2 to change: kubernetes v1.30.6 → v1.31.2, ...; not supported: ...`."""
        changes = ", ".join(f"{d.component} {d.current} → {d.target}" for d in self.diff)
        text = f"{len(self.rows)} components, {len(self.diff)} to change"
        if changes:
            text += f": {changes}"
        unsupported = [r.component for r in self.rows if r.supported is False]
        if unsupported:
            text += f"; not supported by the vendor matrix: {', '.join(unsupported)}"
        return text


# --- versions ------------------------------------------------------------------------------


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", text.lower()) if w != "v"}


def same_version(a: str, b: str) -> bool:
    """`v1.30.6` == `1.30.6`, `containerd://1.7.20` == `1.7.20`; a different product is not."""
    if a.strip() == b.strip():
        return True
    va, vb = try_parse_version(a), try_parse_version(b)
    if va is None or vb is None or va != vb:
        return False
    wa, wb = _words(a), _words(b)
    return not wa or not wb or wa == wb


def _order_key(version: str) -> tuple[int, tuple[int, ...], str]:
    parsed = try_parse_version(version)
    return (0, parsed.parts, version) if parsed is not None else (1, (), version)


def oldest(versions: list[str]) -> str:
    """The version furthest behind (texts without a version sort last)."""
    return min(versions, key=_order_key)


def mixed(values: Mapping[str, str], unit: str) -> str:
    """`550.90.07 (3 nodes), 570.86.15 (1 node)`, most common first."""
    counts = Counter(values.values())
    one, many = _UNITS.get(unit, (unit, f"{unit}s"))

    def order(item: tuple[str, int]) -> tuple[int, str]:
        return (-item[1], item[0])

    return ", ".join(f"{v} ({n} {one if n == 1 else many})" for v, n in sorted(counts.items(), key=order))


def _declared(values: Mapping[str, str]) -> str:
    entries = {e.strip() for v in values.values() for e in v.split(",") if e.strip()}
    return ", ".join(sorted(entries))


# --- detection -----------------------------------------------------------------------------


def _describe(source: Any) -> str:
    kind = source.source
    if kind == "node_info":
        return f"node status.nodeInfo.{source.field}"
    if kind == "node_label":
        return f"node label {' / '.join(source.labels or source.join)}"
    if kind == "ssh_fact":
        return f"ssh facts ({source.fact})"
    if kind == "package":
        return f"ssh facts (dpkg {source.package})"
    if kind == "control_plane":
        return f"kube-system pods component={source.component}"
    if kind == "image":
        return "images " + ", ".join(r for p in source.images for r in p.repositories)
    if kind == "helm":
        return "helm releases of " + ", ".join(source.charts)
    if kind == "annotation":
        return f"workload annotation {source.key}"
    if kind == "driver_cuda":
        return f"the {source.matrix} matrix for the GPU driver"
    return "apiserver /version"


def cuda_levels(driver: Found | None, matrix: Matrix | None) -> Found | None:
    """Per node, the newest CUDA level whose minimum driver the node's driver meets."""
    if driver is None or driver.unit != "node" or matrix is None:
        return None
    found = Found("node")
    for node, version in driver.where.items():
        levels = [
            release
            for release in matrix.releases
            if any(parse_spec(spec).matches(version) for spec in release.supports.get("gpu-driver", []))
        ]
        if levels:
            newest = max(levels, key=lambda release: release.parsed)
            found.add(node, newest.version, f"newest CUDA level for the driver ({matrix.source})")
    return found if found.where else None


def detect(
    component: Component,
    view: ClusterView,
    found_by: Mapping[str, Found | None] | None = None,
    matrices: Mapping[str, Matrix] | None = None,
) -> Found | None:
    """The versions of a component: node sources fill node by node; otherwise the first
    cluster-level (or derived) source that finds anything."""
    if any(isinstance(s, NODE_SOURCES) for s in component.detect):
        names = sorted(name_of(n) for n in view.nodes)
        if component.nodes == "gpu":
            names = [n for n in names if n in view.gpu_nodes]
        found = Found("node")
        detect_nodes(component, view, found, names)
        if found.where:
            return found
    for source in component.detect:
        if isinstance(source, NODE_SOURCES):
            continue
        if isinstance(source, DriverCudaSource):
            hit = cuda_levels((found_by or {}).get("gpu-driver"), (matrices or {}).get(source.matrix))
        else:
            hit = detect_cluster(source, view)
        if hit is not None:
            if hit.unit == "cluster" and component.key != "kubernetes":
                # The apiserver standing in for a component it does not report itself.
                hit.sources = [f"{hit.sources[0]} (no kube-system pod: managed control plane?)"]
            return hit
    return None


def _current(component: Component, found: Found | None, view: ClusterView) -> tuple[str, str, str | None]:
    """(row text, source text, single version for the maps or None when absent)."""
    if found is None:
        searched = ", ".join(_describe(s) for s in component.detect)
        needs_facts = all(isinstance(s, SshFactSource | PackageSource) for s in component.detect)
        if needs_facts and not view.facts:
            return component.absent, f"needs ssh facts (the ssh_facts argument); looked in: {searched}", None
        return component.absent, f"not found in: {searched}", None
    source = ", ".join(found.sources)
    if any(isinstance(s, AnnotationSource) for s in component.detect):
        text = _declared(found.where)
        return text, source, text
    distinct = set(found.where.values())
    if len(distinct) == 1:
        value = next(iter(distinct))
        return value, source, value
    return mixed(found.where, found.unit), source, oldest(list(distinct))


# --- support -------------------------------------------------------------------------------


def _support_text(
    component: Component, support: Support | None, matrices: Mapping[str, Matrix]
) -> tuple[str, bool | None]:
    if support is None:  # nothing deployed and no target: nothing to judge
        matrix = matrices.get(component.key)
        if matrix is not None:
            return f"{matrix.source} (nothing deployed to check)", None
        return (component.policy or "no vendor matrix"), None
    if support.supported is True:
        return f"{support.source}: supported", True
    if support.supported is False:
        return f"{support.source}: not supported: {'; '.join(support.reasons)}", False
    if component.policy:
        return f"{component.policy} (version skew, checked by compat.check)", None
    return support.source, None


# --- the inventory -------------------------------------------------------------------------


def collect(
    table: ComponentTable,
    view: ClusterView,
    *,
    targets: Mapping[str, str] | None = None,
    validation: Mapping[str, str] | None = None,
    matrices: Mapping[str, Matrix] | None = None,
    notes: list[str] | None = None,
) -> Inventory:
    targets = dict(targets or {})
    validation = dict(validation or {})
    matrices = dict(matrices or {})
    found_by: dict[str, Found | None] = {}
    texts: dict[str, tuple[str, str, str | None]] = {}
    current: dict[str, str] = {}
    for component in table.components:
        found = detect(component, view, found_by, matrices)
        found_by[component.key] = found
        texts[component.key] = _current(component, found, view)
        if texts[component.key][2] is not None:
            current[component.key] = str(texts[component.key][2])
    target = {**current, **targets}

    rows: list[Row] = []
    diff: list[DiffEntry] = []
    for component in table.components:
        key = component.key
        found = found_by[key]
        now_text, source_text, now = texts[key]
        wanted = targets.get(key)
        declared = any(isinstance(s, AnnotationSource) for s in component.detect)
        if wanted is not None and not _unchanged(found, now, wanted, declared):
            diff.append(DiffEntry(component=key, current=now_text, target=wanted))
        judged = wanted or now
        support = None
        if judged is not None:
            moving = wanted is not None and now is not None and not same_version(now, wanted)
            upgrade_from = now if moving else None
            support = support_for(matrices, key, judged, target, upgrade_from=upgrade_from)
        support_text, supported = _support_text(component, support, matrices)
        by_node = by_workload = None
        if found is not None:
            is_mixed = len(set(found.where.values())) > 1
            if found.unit == "node" and is_mixed:
                by_node = dict(found.where)
            elif found.unit in ("workload", "release") and (is_mixed or declared):
                by_workload = dict(found.where)
        rows.append(
            Row(
                row=component.row,
                component=key,
                current=now_text,
                current_source=source_text,
                target=wanted if wanted is not None else now_text,
                support_source=support_text,
                supported=supported,
                validation=validation.get(key, NOT_VALIDATED),
                rollback=component.rollback,
                versions_by_node=by_node,
                versions_by_workload=by_workload,
            )
        )
    skew = _skew(found_by, current, view)
    return Inventory(rows=rows, current=current, target=target, diff=diff, skew=skew, notes=notes or [])


def _unchanged(found: Found | None, now: str | None, wanted: str, declared: bool) -> bool:
    """Whether every place the component runs already has the wanted version."""
    if found is None or now is None:
        return False
    if declared:
        return same_version(now, wanted)
    return all(same_version(v, wanted) for v in found.where.values())


def _versions_of(found: Found | None) -> str | list[str] | None:
    if found is None:
        return None
    ordered = sorted(set(found.where.values()), key=_order_key)
    return ordered[0] if len(ordered) == 1 else ordered


def _skew(found_by: Mapping[str, Found | None], current: Mapping[str, str], view: ClusterView) -> Skew:
    # Every apiserver instance counts (kubeadm mirror pods); /version answers for one of them.
    apiservers = detect_cluster(ControlPlaneSource(source="control_plane", component="kube-apiserver"), view)
    kubelets = found_by.get("kubelet")
    proxies = kube_proxy_versions(view)
    return Skew(
        apiserver=_versions_of(apiservers) or current.get("kubernetes"),
        controller_manager=_versions_of(found_by.get("kube-controller-manager")),
        scheduler=_versions_of(found_by.get("kube-scheduler")),
        kubelets=dict(kubelets.where) if kubelets is not None and kubelets.unit == "node" else {},
        kube_proxies=proxies,
        kubectl=current.get("kubectl"),
    )


# GKE's static pods run `gke.gcr.io/kube-proxy-amd64:v1.30.5-gke.1014001`.
_KUBE_PROXY_REPOSITORY = re.compile(r"(^|/)kube-proxy(-amd64|-arm64)?$")


def _kube_proxy_tag(obj: dict[str, Any]) -> str | None:
    for image in images_of(obj):
        repository, tag = split_image(image)
        if _KUBE_PROXY_REPOSITORY.search(repository) and tag:
            return tag
    return None


def kube_proxy_versions(view: ClusterView) -> dict[str, str]:
    """Each node's kube-proxy version, from the image its kube-proxy pod runs (kubeadm's
    DaemonSet pods, GKE's static pods), else from the kube-system/kube-proxy DaemonSet's image
    for every node when it runs on some (GKE keeps one that matches no node). Never from
    `nodeInfo.kubeProxyVersion`: the kubelet fills that with its own version, and from
    Kubernetes 1.33 leaves it empty (KEP-4004). No kube-proxy at all (a CNI that replaces it,
    such as Cilium's) gives no versions, so its skew is not judged."""
    by_pod = {
        str(pod.get("spec", {}).get("nodeName")): tag
        for pod in view.proxy_pods
        if pod.get("spec", {}).get("nodeName") and (tag := _kube_proxy_tag(pod))
    }
    if by_pod:
        return by_pod
    for workload in view.workloads:
        meta = workload.get("metadata") or {}
        # List items carry no kind; kube-system/kube-proxy is the DaemonSet by every installer.
        if (meta.get("namespace"), meta.get("name")) != ("kube-system", "kube-proxy"):
            continue
        scheduled = (workload.get("status") or {}).get("desiredNumberScheduled")
        tag = _kube_proxy_tag(workload)
        if tag and (scheduled is None or scheduled > 0):
            return {name_of(n): tag for n in view.nodes}
    return {}
