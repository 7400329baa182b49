"""`dr.gitops_source`: is the cluster's desired state in a Git source, at the revision deployed?

Read from the GitOps controller's own status, whichever the cluster serves:
  Flux     Kustomization (kustomize.toolkit.fluxcd.io/v1): Ready, status.lastAppliedRevision;
           its sourceRef GitRepository (source.toolkit.fluxcd.io/v1): spec.url, status.artifact.revision.
           Verified when Ready and the applied revision is the source's current artifact.
  Argo CD  Application (argoproj.io/v1alpha1): spec.source(s).repoURL, status.sync.status and
           .revision, status.health.status. Verified when Synced and Healthy.
No controller's kinds served: `found: false`, "no GitOps controller found" (not a failure: the
report lists the item as unverified with that reason).
"""

from __future__ import annotations

from typing import Any

from activities.kube.client import Kube
from activities.kube.common import kube_for, kube_module
from activities.kube.discovery import Discovery
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.module_args.dr import GITOPS_SOURCE, GitopsSourceArgs

FLUX_SOURCE = ("source.toolkit.fluxcd.io/v1", "GitRepository")
FLUX_KUSTOMIZATION = ("kustomize.toolkit.fluxcd.io/v1", "Kustomization")
ARGO_APPLICATION = ("argoproj.io/v1alpha1", "Application")


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return {}


def _name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def flux_rows(kube: Kube, discovery: Discovery, namespace: str | None) -> list[dict[str, Any]]:
    kustomizations = discovery.find(*FLUX_KUSTOMIZATION)
    sources = discovery.find(*FLUX_SOURCE)
    if kustomizations is None:
        return []
    repos = {_name(r): r for r in kube.list(sources.path(namespace))} if sources else {}
    rows = []
    for k in kube.list(kustomizations.path(namespace)):
        ref = (k.get("spec") or {}).get("sourceRef") or {}
        ns = ref.get("namespace") or (k.get("metadata") or {}).get("namespace", "")
        repo = repos.get(f"{ns}/{ref.get('name', '')}") if ref.get("kind") == "GitRepository" else None
        ready = _condition(k, "Ready")
        applied = (k.get("status") or {}).get("lastAppliedRevision")
        current = ((repo or {}).get("status") or {}).get("artifact", {}).get("revision")
        verified = ready.get("status") == "True" and bool(applied) and applied == current
        if repo is None:
            why = f"its source {ref.get('kind')} {ns}/{ref.get('name')} is not a GitRepository found here"
        elif ready.get("status") != "True":
            why = (
                f"not Ready: {ready.get('reason', 'no Ready condition')}: {ready.get('message', '')}".rstrip(
                    ": "
                )
            )
        elif applied != current:
            why = f"applied {applied}, but the source is at {current}"
        else:
            why = ""
        rows.append(
            {
                "controller": "flux",
                "object": f"Kustomization {_name(k)}",
                "url": ((repo or {}).get("spec") or {}).get("url"),
                "revision": applied,
                "source_revision": current,
                "verified": verified,
                "why": why,
            }
        )
    return rows


def argo_rows(kube: Kube, discovery: Discovery, namespace: str | None) -> list[dict[str, Any]]:
    applications = discovery.find(*ARGO_APPLICATION)
    if applications is None:
        return []
    rows = []
    for app in kube.list(applications.path(namespace)):
        spec, status = app.get("spec") or {}, app.get("status") or {}
        sources = [spec["source"]] if spec.get("source") else list(spec.get("sources") or [])
        sync, health = status.get("sync") or {}, status.get("health") or {}
        verified = sync.get("status") == "Synced" and health.get("status") == "Healthy"
        rows.append(
            {
                "controller": "argocd",
                "object": f"Application {_name(app)}",
                "url": ", ".join(str(s.get("repoURL")) for s in sources) or None,
                "revision": sync.get("revision") or ", ".join(sync.get("revisions") or []) or None,
                "verified": verified,
                "why": ""
                if verified
                else f"sync {sync.get('status', 'unknown')}, health {health.get('status', 'unknown')}",
            }
        )
    return rows


@kube_module(GITOPS_SOURCE)
def gitops_source(call: ModuleCall, args: GitopsSourceArgs) -> ModuleResult:
    kube = kube_for(call)
    discovery = Discovery(kube)
    served = [
        f"{kind} ({version})"
        for version, kind in (FLUX_KUSTOMIZATION, FLUX_SOURCE, ARGO_APPLICATION)
        if discovery.find(version, kind) is not None
    ]
    if not served:
        return ModuleResult(
            msg="no GitOps controller found (the cluster serves neither Flux's Kustomization/GitRepository "
            "nor Argo CD's Application)",
            data={"found": False, "verified": False, "sources": [], "why": "no GitOps controller found"},
        )
    rows = flux_rows(kube, discovery, args.namespace) + argo_rows(kube, discovery, args.namespace)
    if not rows:
        why = f"{', '.join(served)} served, but no object declares a source"
        return ModuleResult(msg=why, data={"found": True, "verified": False, "sources": [], "why": why})
    bad = [r for r in rows if not r["verified"]]
    why = "; ".join(f"{r['object']}: {r['why']}" for r in bad)
    summary = ", ".join(f"{r['object']} at {r['revision']}" for r in rows)
    return ModuleResult(
        msg=(f"every source deployed at its revision: {summary}" if not bad else f"not verified: {why}"),
        data={"found": True, "verified": not bad, "sources": rows, "why": why},
    )
