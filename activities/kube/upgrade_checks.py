"""Read-only pre-upgrade checks: kube.deprecations (manifests using API versions the target
Kubernetes version removed) and kube.crd_webhook_check (CRD storage versions, conversion and
admission webhook backends, CRDs Helm will not upgrade, CRDs the new set omits)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

from activities.kube.client import ApiStatus, Kube, api_base, namespaced, segment
from activities.kube.common import Deadline, beat, kube_for, kube_module
from activities.kube.discovery import Discovery
from activities.kube.local_files import allowed_manifest_files
from pitstop.compat.deprecations import DeprecationDataError, RemovedApis, load_removed_apis
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail
from pitstop.helm import HelmRelease, HelmReleaseError, decode_release, is_release_secret
from pitstop.kube.apply import LAST_APPLIED
from pitstop.kube.crd_webhooks import (
    Backend,
    BackendStatus,
    Finding,
    admission_finding,
    admission_webhooks,
    cascade_finding,
    conversion_backend,
    conversion_finding,
    crd_group,
    helm_crd_findings,
    storage_findings,
    summary,
)
from pitstop.kube.manifests import Manifest, ManifestError, load_manifests, parse_documents
from pitstop.kube.names import InvalidName
from pitstop.kube.objects import Obj, annotations_of, name_of, namespace_of, pod_is_ready
from pitstop.module_args.kube_upgrade import (
    CRD_WEBHOOK_CHECK,
    DEPRECATIONS,
    CrdWebhookCheckArgs,
    DeprecationsArgs,
)

# Listing these reads a lot and they never carry applied manifests.
SKIPPED_RESOURCES = frozenset({"events", "events.events.k8s.io"})
# Kinds of the removed-API table that are cluster-scoped: a Helm manifest's object of these
# kinds is not in the release's namespace.
CLUSTER_SCOPED_KINDS = frozenset(
    {
        "APIService",
        "CertificateSigningRequest",
        "ClusterRole",
        "ClusterRoleBinding",
        "CSIDriver",
        "CSINode",
        "CustomResourceDefinition",
        "FlowSchema",
        "IngressClass",
        "MutatingWebhookConfiguration",
        "PodSecurityPolicy",
        "PriorityClass",
        "PriorityLevelConfiguration",
        "RuntimeClass",
        "SelfSubjectAccessReview",
        "SelfSubjectRulesReview",
        "StorageClass",
        "SubjectAccessReview",
        "TokenReview",
        "ValidatingWebhookConfiguration",
        "VolumeAttachment",
    }
)
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
HELM_SELECTOR = "owner=helm"


def helm_releases(kube: Kube) -> tuple[list[HelmRelease], list[str]]:
    """Every release's newest revision (deployed first) and the records that could not be read."""
    releases: dict[tuple[str, str], HelmRelease] = {}
    unreadable: list[str] = []
    for secret in kube.iterate("/api/v1/secrets", label_selector=HELM_SELECTOR):
        if not is_release_secret(secret):
            continue
        try:
            release = decode_release(secret)
        except HelmReleaseError as exc:
            unreadable.append(str(exc))
            continue
        key = (release.namespace, release.name)
        best = releases.get(key)
        if best is None or (release.status == "deployed", release.version) > (
            best.status == "deployed",
            best.version,
        ):
            releases[key] = release
    return [releases[k] for k in sorted(releases)], unreadable


# --- kube.deprecations ------------------------------------------------------------------------


class Scan:
    def __init__(self, table: RemovedApis, target: str, budget: int) -> None:
        self.table = table
        self.target = target
        self.budget = budget
        self.deadline = Deadline()
        self.stopped = ""
        self.objects = 0
        self.truncated = False
        self.findings: list[Obj] = []
        self.skipped: list[str] = []
        self._seen: set[tuple[str, str, str, str]] = set()

    def check(self, origin: str, manifest: Obj, default_namespace: str = "") -> None:
        api_version = str(manifest.get("apiVersion") or "")
        kind = str(manifest.get("kind") or "")
        row = self.table.removed_by(api_version, kind, self.target)
        if row is None:
            return
        namespace = namespace_of(manifest) or ("" if kind in CLUSTER_SCOPED_KINDS else default_namespace)
        key = (origin, kind, namespace, name_of(manifest))
        if key in self._seen:
            return
        self._seen.add(key)
        self.findings.append(
            {
                "origin": origin,
                "namespace": namespace,
                "name": name_of(manifest),
                "kind": kind,
                "apiVersion": api_version,
                "removed_in": f"v{row.removed_in}",
                "replacement": row.replacement,
                "advice": row.advice(),
                "source": row.source,
            }
        )

    def count(self) -> bool:
        """Count one object read; False once the object budget or the task's time is spent."""
        if self.objects >= self.budget:
            self.stopped = f"stopped after max_objects={self.budget}"
        elif self.deadline.passed():
            self.stopped = f"stopped at the task's timeout after {self.deadline.elapsed():.0f}s"
        if self.stopped:
            self.truncated = True
            return False
        self.objects += 1
        return True


def _listable(discovery: Discovery, kinds: frozenset[str]) -> Iterator[str]:
    """Resources whose objects could use a removed API: the kinds the table names. Reading
    nothing else keeps the scan short and its RBAC small (no Secrets, no custom resources)."""
    for version in discovery.preferred_versions():
        for res in (discovery.kinds(version) or {}).values():
            if "list" in res.verbs and res.kind in kinds and res.group_resource not in SKIPPED_RESOURCES:
                yield res.path()


def scan_last_applied(kube: Kube, scan: Scan) -> int:
    discovery = Discovery(kube)
    resources = 0
    for path in _listable(discovery, scan.table.kinds()):
        resources += 1
        beat({"resource": path, "objects": scan.objects})
        try:
            for obj in kube.iterate(path):
                if not scan.count():
                    return resources
                if scan.objects % 500 == 0:
                    beat({"resource": path, "objects": scan.objects})
                # Server-side appliers leave no annotation: each Apply entry of managedFields
                # records the apiVersion its manifests were written in.
                for entry in (obj.get("metadata") or {}).get("managedFields") or []:
                    if (
                        isinstance(entry, dict)
                        and entry.get("operation") == "Apply"
                        and entry.get("apiVersion")
                    ):
                        written = {
                            "apiVersion": entry["apiVersion"],
                            "kind": obj.get("kind"),
                            "metadata": {"name": name_of(obj), "namespace": namespace_of(obj)},
                        }
                        scan.check(f"server-side apply by {entry.get('manager')}", written, namespace_of(obj))
                text = annotations_of(obj).get(LAST_APPLIED)
                if not text:
                    continue
                try:
                    applied = json.loads(text)
                except ValueError:
                    scan.skipped.append(
                        f"{path}: {namespace_of(obj)}/{name_of(obj)}: last-applied annotation is not JSON"
                    )
                    continue
                if isinstance(applied, dict):
                    scan.check("last-applied configuration", applied, namespace_of(obj))
        except ApiStatus as exc:
            if exc.status in (401, 403, 404, 405):
                scan.skipped.append(f"{path}: cannot list ({exc.status} {exc.reason})")
                continue
            raise
    return resources


def scan_helm(kube: Kube, scan: Scan) -> int:
    releases, unreadable = helm_releases(kube)
    scan.skipped.extend(unreadable)
    deployed = [r for r in releases if r.status == "deployed"]
    for release in deployed:
        origin = f"helm release {release.name} ({release.namespace})"
        try:
            docs = parse_documents(release.manifest, f"{origin} manifest")
        except ManifestError as exc:
            scan.skipped.append(str(exc))
            continue
        for doc in docs:
            scan.check(origin, doc.obj, release.namespace)
    return len(deployed)


def _finding_line(finding: Obj) -> str:
    where = f"{finding['namespace']}/{finding['name']}" if finding["namespace"] else finding["name"]
    return (
        f"{finding['origin']}: {finding['apiVersion']} {finding['kind']} {where} removed in "
        f"{finding['removed_in']}, {finding['advice']}"
    )


@kube_module(DEPRECATIONS)
def deprecations(call: ModuleCall, args: DeprecationsArgs) -> ModuleResult:
    try:
        table = load_removed_apis()
    except DeprecationDataError as exc:
        fail(ErrorType.PRECONDITION_FAILED, f"kube.deprecations: {exc}")
    kube = kube_for(call)
    scan = Scan(table, args.target_version, args.max_objects)
    resources = scan_last_applied(kube, scan) if "last-applied" in args.sources else 0
    releases = scan_helm(kube, scan) if "helm" in args.sources else 0
    checked = f"{scan.objects} objects in {resources} resource types, {releases} Helm releases"
    if scan.truncated:
        checked += f"; {scan.stopped}"
    data: Obj = {
        "findings": scan.findings,
        "target_version": args.target_version,
        "checked": {"objects": scan.objects, "resources": resources, "helm_releases": releases},
        "truncated": scan.truncated,
        "skipped": scan.skipped[:50],
        "source": table.source,
    }
    if not scan.findings:
        return ModuleResult(
            msg=f"no manifests use API versions removed by {args.target_version} ({checked})", data=data
        )
    lines = [_finding_line(f) for f in scan.findings[: args.max_listed]]
    more = len(scan.findings) - len(lines)
    listing = "; ".join(lines) + (f"; and {more} more" if more > 0 else "")
    return ModuleResult(
        failed=args.fail_on == "removed",
        msg=(
            f"{len(scan.findings)} manifests use API versions removed by {args.target_version}: "
            f"{listing} ({checked})"
        ),
        data=data,
    )


# --- kube.crd_webhook_check -------------------------------------------------------------------


class Probe:
    """Readiness of webhook backends, each probed once per call."""

    def __init__(self, kube: Kube, timeout: float) -> None:
        self.kube = kube
        self.timeout = timeout
        self._cache: dict[str, BackendStatus] = {}

    def status(self, backend: Backend | None) -> BackendStatus:
        if backend is None:
            return BackendStatus(ready=False, detail="the webhook has neither a service nor a URL")
        if backend.label not in self._cache:
            self._cache[backend.label] = self._url(backend) if backend.url else self._service(backend)
        return self._cache[backend.label]

    def _service(self, backend: Backend) -> BackendStatus:
        ns, name = backend.service_namespace or "default", backend.service_name or ""
        try:
            service_path = namespaced("/api/v1", "services", ns, name)
        except InvalidName as exc:
            return BackendStatus(ready=False, detail=f"service {ns}/{name}: {exc}")
        service = self.kube.get_or_none(service_path)
        if service is None:
            return BackendStatus(ready=False, detail=f"service {ns}/{name} does not exist")
        selector = (service.get("spec") or {}).get("selector") or {}
        if not selector:
            endpoints = self._endpoints(ns, name)
            if endpoints:
                return BackendStatus(ready=True, detail=f"{endpoints} endpoint addresses")
            return BackendStatus(
                ready=False, detail=f"service {ns}/{name} has no selector and no ready endpoints"
            )
        text = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        pods = self.kube.list(namespaced("/api/v1", "pods", ns), label_selector=text)
        ready = [p for p in pods if pod_is_ready(p)]
        if ready:
            return BackendStatus(ready=True, detail=f"{len(ready)} ready pods behind service {ns}/{name}")
        return BackendStatus(
            ready=False,
            detail=f"service {ns}/{name} selects {len(pods)} pods ({text}), none of them Ready",
        )

    def _endpoints(self, ns: str, name: str) -> int:
        try:
            endpoints = self.kube.get_or_none(namespaced("/api/v1", "endpoints", ns, name))
        except ApiStatus:
            return 0
        subsets = (endpoints or {}).get("subsets") or []
        return sum(len(s.get("addresses") or []) for s in subsets if isinstance(s, dict))

    def _url(self, backend: Backend) -> BackendStatus:
        target = backend.host_port()
        if target is None:
            return BackendStatus(ready=False, detail=f"URL {backend.url!r} names no host")
        host, port = target
        try:
            with socket.create_connection((host, port), timeout=self.timeout):
                return BackendStatus(ready=True, detail=f"{host}:{port} accepts connections")
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
            return BackendStatus(ready=False, detail=f"cannot connect to {host}:{port}: {reason}")


def load_new_crds(paths: list[str], call: ModuleCall) -> dict[str, tuple[Obj, str]]:
    if not paths:
        return {}
    try:
        manifests = load_manifests(allowed_manifest_files(call, paths, "new_crds", recursive=True))
    except ManifestError as exc:
        fail(ErrorType.INVALID_ARGS, f"kube.crd_webhook_check: new_crds: {exc}")
    crds = {m.name: (m.obj, m.where) for m in manifests if m.kind == "CustomResourceDefinition"}
    if not crds:
        fail(
            ErrorType.INVALID_ARGS,
            f"kube.crd_webhook_check: new_crds {paths} hold no CustomResourceDefinition",
        )
    return crds


def _chart_crds(release: HelmRelease) -> dict[str, str]:
    out: dict[str, str] = {}
    for file, text in release.crd_files().items():
        try:
            docs: list[Manifest] = parse_documents(text, f"{release.name} chart {file}")
        except ManifestError:
            continue
        out.update({d.name: file for d in docs if d.kind == "CustomResourceDefinition"})
    return out


def _named_releases(kube: Kube, names: list[str]) -> list[HelmRelease]:
    if not names:
        return []
    releases, _ = helm_releases(kube)
    chosen: list[HelmRelease] = []
    for wanted in names:
        ns, _, name = wanted.rpartition("/")
        found = [r for r in releases if r.name == name and (not ns or r.namespace == ns)]
        if not found:
            known = ", ".join(f"{r.name} ({r.namespace})" for r in releases) or "none"
            fail(
                ErrorType.PRECONDITION_FAILED,
                f"kube.crd_webhook_check: helm release {wanted!r} not found (releases: {known})",
            )
        chosen.extend(found)
    return chosen


def _resource_count(kube: Kube, crd: Obj) -> tuple[int, bool]:
    spec = crd.get("spec") or {}
    versions = [v for v in spec.get("versions") or [] if v.get("served", True)]
    if not versions:
        return 0, False
    version = next((v for v in versions if v.get("storage")), versions[0])
    try:
        base = api_base(f"{spec.get('group')}/{version.get('name')}")
        path = f"{base}/{segment(str((spec.get('names') or {}).get('plural')), 'resource', 'segment')}"
    except InvalidName:
        return 0, False  # not a CRD the apiserver would have accepted: nothing served
    try:
        items = kube.list(path, limit=101)
    except ApiStatus as exc:
        if exc.status == 404:
            return 0, False
        raise
    return min(len(items), 100), len(items) > 100


def _webhook_findings(kube: Kube, probe: Probe) -> tuple[list[Finding], int]:
    findings: list[Finding] = []
    count = 0
    for kind, plural in (
        ("ValidatingWebhookConfiguration", "validatingwebhookconfigurations"),
        ("MutatingWebhookConfiguration", "mutatingwebhookconfigurations"),
    ):
        for config in kube.list(f"/apis/admissionregistration.k8s.io/v1/{plural}"):
            for webhook, policy, backend in admission_webhooks(config):
                count += 1
                found = admission_finding(
                    kind, name_of(config), webhook, policy, backend, probe.status(backend)
                )
                if found is not None:
                    findings.append(found)
    return findings, count


@kube_module(CRD_WEBHOOK_CHECK)
def crd_webhook_check(call: ModuleCall, args: CrdWebhookCheckArgs) -> ModuleResult:
    new = load_new_crds(args.new_crds, call)
    kube = kube_for(call)
    live = {name_of(c): c for c in kube.list(CRD_PATH)}
    if args.crds is not None:
        missing = [n for n in args.crds if n not in live and n not in new]
        if missing:
            fail(
                ErrorType.PRECONDITION_FAILED,
                f"kube.crd_webhook_check: CRDs {missing} are neither in the cluster nor in new_crds "
                f"(cluster CRDs: {', '.join(sorted(live)) or 'none'})",
            )
    scope = sorted(args.crds if args.crds is not None else set(live) | set(new))
    probe = Probe(kube, args.connect_timeout_seconds)
    findings: list[Finding] = []
    for name in scope:
        beat({"crd": name})
        if name in live and name in new:
            findings.extend(storage_findings(name, live[name], new[name][0], new[name][1]))
        effective = new[name][0] if name in new else live[name]
        backend = conversion_backend(effective)
        if backend is not None:
            found = conversion_finding(name, backend, probe.status(backend))
            if found is not None:
                findings.append(found)
    webhook_findings, webhooks = _webhook_findings(kube, probe)
    findings.extend(webhook_findings)
    releases = _named_releases(kube, args.helm_releases)
    chart_crd_names: set[str] = set()
    for release in releases:
        chart_crds = _chart_crds(release)
        chart_crd_names.update(chart_crds)
        findings.extend(helm_crd_findings(release, chart_crds, live, new))
    if new:
        groups = {crd_group(obj) for obj, _ in new.values()}
        candidates = (
            set(args.crds)
            if args.crds is not None
            else {n for n, c in live.items() if crd_group(c) in groups}
        )
        for name in sorted((candidates | chart_crd_names) - set(new)):
            if name in live:
                resources, more = _resource_count(kube, live[name])
                if resources:
                    findings.append(cascade_finding(name, resources, more))
    blocked = any(f.severity == "block" for f in findings)
    return ModuleResult(
        failed=blocked,
        msg=summary(findings),
        data={
            "findings": [f.model_dump() for f in findings],
            "checked": {
                "crds": scope,
                "webhooks": webhooks,
                "helm_releases": [f"{r.namespace}/{r.name}" for r in releases],
                "new_crds": sorted(new),
            },
        },
    )
