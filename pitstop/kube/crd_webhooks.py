"""Pre-upgrade checks of CRDs and webhooks (docs/upgrade-process.md "CRDs and webhooks"), pure:
the activity reads the cluster and the new manifests, probes the webhook backends, and hands the
facts to these functions.

- storage versions: every version in a CRD's `status.storedVersions` must stay served by its
  new definition, or the objects stored in it become unreadable (and the apiserver refuses a
  definition that drops a stored version from spec.versions altogether);
- conversion webhooks (`spec.conversion.strategy: Webhook`) and admission webhooks need a
  reachable backend: a down conversion webhook makes the CRD's objects unreadable, a down
  `failurePolicy: Fail` admission webhook rejects every matching write (drains included);
- CRDs shipped in a Helm chart's `crds/` directory are installed on `helm install` only and
  never upgraded, so the new chart's CRDs must be applied before `helm upgrade`;
- a CRD that still has custom resources but is missing from the new CRD set would take them
  with it if deleted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel

from pitstop.helm import HelmRelease

Obj = dict[str, Any]
Severity = Literal["block", "warn"]

# Helm: "There is no support at this time for upgrading or deleting CRDs using Helm"; the GPU
# Operator's upgrade guide applies the new chart's CRDs before `helm upgrade` for that reason.
HELM_CRDS_DOC = (
    "https://helm.sh/docs/chart_best_practices/custom_resource_definitions/ and, for the GPU Operator, "
    "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/upgrade.html"
)


class Finding(BaseModel):
    check: Literal["storage_version", "conversion_webhook", "admission_webhook", "helm_crds", "crd_cascade"]
    object: str
    severity: Severity
    message: str


class Backend(BaseModel):
    """Where the apiserver sends a webhook call: a Service, or a URL."""

    service_namespace: str | None = None
    service_name: str | None = None
    port: int = 443
    url: str | None = None

    @property
    def label(self) -> str:
        if self.url:
            return f"URL {self.url}"
        return f"service {self.service_namespace}/{self.service_name}:{self.port}"

    def host_port(self) -> tuple[str, int] | None:
        if not self.url:
            return None
        parts = urlsplit(self.url)
        if not parts.hostname:
            return None
        return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


class BackendStatus(BaseModel):
    ready: bool
    detail: str  # why not ready, or what answered


def backend_of(client_config: Mapping[str, Any] | None) -> Backend | None:
    """The backend of a webhook `clientConfig` (admission) or conversion `webhook.clientConfig`."""
    if not client_config:
        return None
    service = client_config.get("service")
    if isinstance(service, dict):
        return Backend(
            service_namespace=str(service.get("namespace") or "default"),
            service_name=str(service.get("name") or ""),
            port=int(service.get("port") or 443),
        )
    if client_config.get("url"):
        return Backend(url=str(client_config["url"]))
    return None


def conversion_backend(crd: Mapping[str, Any]) -> Backend | None:
    conversion = (crd.get("spec") or {}).get("conversion") or {}
    if conversion.get("strategy") != "Webhook":
        return None
    webhook = conversion.get("webhook") or {}
    return backend_of(webhook.get("clientConfig")) or backend_of(conversion.get("webhookClientConfig"))


def admission_webhooks(config: Mapping[str, Any]) -> list[tuple[str, str, Backend | None]]:
    """(webhook name, failurePolicy, backend) of a Validating/MutatingWebhookConfiguration;
    failurePolicy defaults to Fail in admissionregistration.k8s.io/v1."""
    out: list[tuple[str, str, Backend | None]] = []
    for hook in config.get("webhooks") or []:
        if isinstance(hook, dict):
            policy = str(hook.get("failurePolicy") or "Fail")
            out.append((str(hook.get("name") or ""), policy, backend_of(hook.get("clientConfig"))))
    return out


# --- (a) storage versions ---------------------------------------------------------------------


def stored_versions(crd: Mapping[str, Any]) -> list[str]:
    return [str(v) for v in (crd.get("status") or {}).get("storedVersions") or []]


def served_versions(crd: Mapping[str, Any]) -> list[str]:
    return [
        str(v.get("name"))
        for v in (crd.get("spec") or {}).get("versions") or []
        if isinstance(v, dict) and v.get("served", True)
    ]


def storage_findings(
    name: str, live: Mapping[str, Any], new: Mapping[str, Any], origin: str
) -> list[Finding]:
    stored = stored_versions(live)
    served = served_versions(new)
    declared = {
        str(v.get("name")) for v in (new.get("spec") or {}).get("versions") or [] if isinstance(v, dict)
    }
    lost = [v for v in stored if v not in served]
    if not lost:
        return []
    how = ", ".join(f"{v} ({'not served' if v in declared else 'removed from spec.versions'})" for v in lost)
    return [
        Finding(
            check="storage_version",
            object=f"CustomResourceDefinition {name}",
            severity="block",
            message=(
                f"CRD {name}: status.storedVersions {stored} includes {how} in the new definition "
                f"({origin}, serves {served or 'nothing'}); objects stored as {', '.join(lost)} become "
                "unreadable: migrate storage first (rewrite every object at the current storage "
                f"version, then remove {', '.join(lost)} from status.storedVersions)"
            ),
        )
    ]


# --- (b)/(c) webhooks -------------------------------------------------------------------------


def conversion_finding(name: str, backend: Backend, status: BackendStatus) -> Finding | None:
    if status.ready:
        return None
    return Finding(
        check="conversion_webhook",
        object=f"CustomResourceDefinition {name}",
        severity="block",
        message=(
            f"CRD {name}: conversion webhook {backend.label} is not ready ({status.detail}); "
            "objects of other versions cannot be read or written until it is"
        ),
    )


def admission_finding(
    kind: str, config: str, webhook: str, policy: str, backend: Backend | None, status: BackendStatus
) -> Finding | None:
    if status.ready:
        return None
    where = backend.label if backend else "no clientConfig"
    if policy == "Ignore":
        return Finding(
            check="admission_webhook",
            object=f"{kind} {config}",
            severity="warn",
            message=(
                f"{kind} {config}: webhook {webhook} ({where}) is not ready ({status.detail}); "
                "failurePolicy Ignore lets requests through without its checks or mutations"
            ),
        )
    return Finding(
        check="admission_webhook",
        object=f"{kind} {config}",
        severity="block",
        message=(
            f"{kind} {config}: webhook {webhook} ({where}) is not ready ({status.detail}) and has "
            "failurePolicy Fail: every matching create/update is rejected; fix the backend or "
            "remove the configuration first"
        ),
    )


# --- (d) CRDs shipped by Helm charts ----------------------------------------------------------


def spec_contained(new: Any, live: Any) -> bool:
    """Whether every field the new definition sets has that value in the live one (server
    defaults in the live object do not count as differences)."""
    if isinstance(new, dict):
        return isinstance(live, dict) and all(
            k in live and spec_contained(v, live[k]) for k, v in new.items()
        )
    if isinstance(new, list):
        return (
            isinstance(live, list)
            and len(new) == len(live)
            and all(spec_contained(a, b) for a, b in zip(new, live, strict=True))
        )
    return bool(new == live)


def helm_crd_findings(
    release: HelmRelease,
    chart_crds: Mapping[str, str],
    live: Mapping[str, Obj],
    new: Mapping[str, tuple[Obj, str]],
) -> list[Finding]:
    """One warning per CRD in the release's chart `crds/` (name -> chart file)."""
    out: list[Finding] = []
    label = (
        f"helm release {release.name} ({release.namespace}), "
        f"chart {release.chart_name} {release.chart_version}"
    )
    for name, file in sorted(chart_crds.items()):
        base = (
            f"CRD {name} comes from {file} of {label}: Helm installs CRDs in crds/ on install only and "
            "never upgrades them"
        )
        if name in new:
            definition, origin = new[name]
            current = live.get(name)
            if current is not None and spec_contained(definition.get("spec"), current.get("spec")):
                message = f"{base}; the new definition in {origin} already matches the cluster"
            else:
                message = (
                    f"{base}; the new definition in {origin} must be applied (kube.apply) before "
                    "`helm upgrade`"
                )
        else:
            message = (
                f"{base}; apply the new chart's CRDs before `helm upgrade` (no new definition given in "
                f"new_crds), see {HELM_CRDS_DOC}"
            )
        out.append(
            Finding(
                check="helm_crds", object=f"CustomResourceDefinition {name}", severity="warn", message=message
            )
        )
    return out


# --- (e) CRDs the new set omits -----------------------------------------------------------------


def cascade_finding(name: str, resources: int, more: bool) -> Finding:
    count = f"{resources}{'+' if more else ''}"
    return Finding(
        check="crd_cascade",
        object=f"CustomResourceDefinition {name}",
        severity="warn",
        message=(
            f"CRD {name} has {count} custom resources and is not in the new CRD manifests; deleting "
            "it (a cleanup, a prune, an uninstall) deletes all of them: keep it or migrate them first"
        ),
    )


def crd_group(crd: Mapping[str, Any]) -> str:
    return str((crd.get("spec") or {}).get("group") or "")


def summary(findings: list[Finding]) -> str:
    blocks = [f for f in findings if f.severity == "block"]
    warns = [f for f in findings if f.severity == "warn"]
    if not findings:
        return "CRDs and webhooks ready for the upgrade"
    head = f"{len(blocks)} blocking, {len(warns)} warnings"
    listed = blocks or warns
    return head + ": " + "; ".join(f.message for f in listed[:5]) + ("; ..." if len(listed) > 5 else "")
