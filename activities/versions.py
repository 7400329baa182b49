"""inventory.versions: read what runs on the cluster (the apiserver's /version, nodes, the
control-plane pods, workloads, Helm releases) and the SSH facts it is given, and report the
version inventory (`pitstop.versions.collect`). Read-only: it runs the same in check mode."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from activities.kube.client import ApiStatus, Kube
from activities.kube.common import kube_for, kube_module
from pitstop.compat.matrix import MatrixError, load_matrices
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail
from pitstop.helm import SECRET_TYPE, HelmRelease, HelmReleaseError, decode_release
from pitstop.kube import selectors
from pitstop.kube.objects import Obj, labels_of, name_of
from pitstop.module_args.inventory import VERSIONS, VersionsArgs
from pitstop.versions.collect import Inventory, collect
from pitstop.versions.components import ComponentTableError, load_components
from pitstop.versions.detect import ClusterView
from pitstop.versions.facts import FactsError, facts_by_node
from pitstop.versions.validation import validation_states

CONTROL_PLANE_SELECTOR = "component in (kube-apiserver,kube-controller-manager,kube-scheduler)"
# kubeadm's (and most distributions') DaemonSet label, and GKE's static pods' (`component`).
KUBE_PROXY_SELECTORS = ("k8s-app=kube-proxy", "component=kube-proxy")
WORKLOAD_PATHS = ("/apis/apps/v1/deployments", "/apis/apps/v1/daemonsets", "/apis/apps/v1/statefulsets")
HELM_DEPLOYED = "owner=helm,status=deployed"
HELM_TYPE = f"type={SECRET_TYPE}"


def _optional(kube: Kube, what: str, notes: list[str], read: Callable[[], list[Obj]]) -> list[Obj]:
    """A read the inventory can do without (its components fall back to other sources): a
    refusal by RBAC becomes a note instead of a failure."""
    try:
        return read()
    except ApiStatus as exc:
        if exc.status in (401, 403, 404):
            notes.append(f"{what} not read from {kube.name}: HTTP {exc.status} {exc.message}")
            return []
        raise


def helm_releases(secrets: list[Obj], notes: list[str]) -> list[HelmRelease]:
    """The newest revision of each release among the Secrets (listed with status=deployed);
    unreadable records are noted, not fatal."""
    best: dict[tuple[str, str], HelmRelease] = {}
    for secret in secrets:
        try:
            release = decode_release(secret)
        except HelmReleaseError as exc:
            notes.append(str(exc))
            continue
        key = (release.namespace, release.name)
        if key not in best or release.version > best[key].version:
            best[key] = release
    return [best[k] for k in sorted(best)]


def read_cluster(kube: Kube, args: VersionsArgs, ssh_facts: Any, notes: list[str]) -> ClusterView:
    version = kube.get("/version")
    nodes = kube.list("/api/v1/nodes")
    names = {name_of(n) for n in nodes}
    try:
        facts = facts_by_node(ssh_facts, names)
    except FactsError as exc:
        fail(ErrorType.INVALID_ARGS, f"inventory.versions: {exc}")
    notes.extend(facts.notes)
    pods = _optional(
        kube,
        "kube-system control-plane pods",
        notes,
        lambda: kube.list("/api/v1/namespaces/kube-system/pods", label_selector=CONTROL_PLANE_SELECTOR),
    )
    proxy_pods: list[Obj] = []
    for selector in KUBE_PROXY_SELECTORS:
        proxy_pods += _optional(
            kube,
            f"kube-system pods {selector}",
            notes,
            functools.partial(kube.list, "/api/v1/namespaces/kube-system/pods", label_selector=selector),
        )
    workloads: list[Obj] = []
    for path in WORKLOAD_PATHS:
        workloads += _optional(kube, path.rsplit("/", 1)[-1], notes, functools.partial(kube.list, path))
    secrets = _optional(
        kube,
        "Helm release secrets",
        notes,
        lambda: kube.list(
            "/api/v1/secrets", label_selector=HELM_DEPLOYED, field_selector=f"type={SECRET_TYPE}"
        ),
    )
    gpu_nodes = frozenset(name_of(n) for n in nodes if selectors.matches(args.nodes_selector, labels_of(n)))
    return ClusterView(
        version=version,
        nodes=nodes,
        gpu_nodes=gpu_nodes,
        control_plane_pods=pods,
        proxy_pods=proxy_pods,
        workloads=workloads,
        helm_releases=helm_releases(secrets, notes),
        facts=facts.by_node,
    )


def _data(inventory: Inventory) -> dict[str, Any]:
    rows = [{**row.model_dump(exclude_none=True), "supported": row.supported} for row in inventory.rows]
    return {
        "rows": rows,
        "current": inventory.current,
        "target": inventory.target,
        "diff": [d.model_dump() for d in inventory.diff],
        "skew": inventory.skew.model_dump(exclude_none=True),
        "notes": inventory.notes,
    }


@kube_module(VERSIONS)
def versions(call: ModuleCall, args: VersionsArgs) -> ModuleResult:
    try:
        table = load_components()
        matrices = load_matrices()
    except (ComponentTableError, MatrixError) as exc:
        fail(ErrorType.PRECONDITION_FAILED, f"inventory.versions: {exc}")
    notes: list[str] = []
    view = read_cluster(kube_for(call), args, args.ssh_facts, notes)
    validation = {**validation_states(table, args.acceptance, args.acceptance_label), **args.validation}
    inventory = collect(
        table, view, targets=args.targets, validation=validation, matrices=matrices, notes=notes
    )
    return ModuleResult(msg=inventory.summary(), data=_data(inventory))


VERSIONS_ACTIVITIES: list[Callable[..., Any]] = [versions]
