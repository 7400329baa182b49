"""`acceptance.check`: upgrade acceptance by layer (docs/upgrade-process.md "Acceptance by layer")
against the pre-upgrade baseline.

Every check of the catalogue (`pitstop.acceptance.probes`) has a probe here that reads the
cluster through the Kubernetes API, or (NCCL, DCGM diag, Xid, ECC, benchmarks) runs a Job pinned
to a node (`activities.acceptance_jobs`, `activities.acceptance_gpu_health`). A probe that cannot
measure its check here answers `n/a` with the reason; the judgement against the baseline is pure
(`pitstop.acceptance.judge`).

Resumable: each finished probe is heartbeated, so a retried attempt keeps what was measured
and re-runs only the rest (Jobs are found again by their deterministic names).

Check mode runs the read-only probes and reports the Job probes and scaling as n/a
("check mode: would run ..."): nothing is created.
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from activities import acceptance_gpu_health as gpu_health
from activities import acceptance_jobs as jobs_probes
from activities.acceptance_jobs import Jobs
from activities.kube.client import ApiStatus, Kube, Obj, namespaced, pod_path, pods_path
from activities.kube.common import Deadline, beat, first_details, kube_for, kube_module, pause
from activities.storage import check_s3_access, s3_client
from pitstop.acceptance.judge import Measurement, Policy, judge, not_measured
from pitstop.acceptance.probes import select
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail
from pitstop.kube.annotations import GPU_RESOURCE, MANAGED_BY_LABEL
from pitstop.kube.objects import (
    annotations_of,
    key_of,
    labels_of,
    meta,
    name_of,
    namespace_of,
    node_allocatable,
    node_condition,
    pod_is_finished,
    pod_is_ready,
    pod_node,
    pod_phase,
    resource_count,
)
from pitstop.module_args.acceptance import ACCEPTANCE_CHECK, AcceptanceArgs, Workload

# Not workload namespaces unless named: the platform's own components live here.
SYSTEM_NAMESPACES = frozenset(
    {"gpu-operator", "nvidia-network-operator", "network-operator", "kueue-system", "cert-manager"}
)
KNOWN_CNI = frozenset(
    {
        "calico-node",
        "cilium",
        "kube-flannel-ds",
        "canal",
        "weave-net",
        "antrea-agent",
        "aws-node",
        "kube-ovn-cni",
        "ovnkube-node",
        "kube-router",
    }
)
POLICY_ENGINES = ("gatekeeper", "kyverno", "kubewarden")
MIG_CONFIG_STATE = "nvidia.com/mig.config.state"
MIG_LABELS = ("nvidia.com/mig.config", "nvidia.com/mig.strategy")
SCALING_MARK = "pitstop.dev/acceptance-scaled-from"
MAX_LISTED = 5


def _listed(items: list[str]) -> str:
    shown = ", ".join(items[:MAX_LISTED])
    return shown + (f" and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else "")


class Cluster:
    """What the probes read, fetched once per call."""

    def __init__(self, kube: Kube, args: AcceptanceArgs) -> None:
        self.kube = kube
        self.args = args
        self._cache: dict[str, list[Obj]] = {}
        self.done: dict[str, Any] = {}  # measured so far, carried by every heartbeat

    def all(self, path: str) -> list[Obj]:
        if path not in self._cache:
            self._cache[path] = self.kube.list(path)
        return self._cache[path]

    @property
    def nodes(self) -> list[Obj]:
        return self.all("/api/v1/nodes")

    @property
    def pods(self) -> list[Obj]:
        return self.all(pods_path())

    @property
    def daemonsets(self) -> list[Obj]:
        return self.all("/apis/apps/v1/daemonsets")

    def workload_namespace(self, namespace: str) -> bool:
        if self.args.workload_namespaces:
            return namespace in self.args.workload_namespaces
        return not namespace.startswith("kube-") and namespace not in SYSTEM_NAMESPACES

    def workload_pods(self) -> list[Obj]:
        """Live pods of the workload namespaces; pitstop's own probe pods are not workloads."""
        return [
            p
            for p in self.pods
            if self.workload_namespace(namespace_of(p))
            and labels_of(p).get(MANAGED_BY_LABEL) != "pitstop"
            and pod_phase(p) not in ("Succeeded", "Failed")
        ]

    def gpus_of(self) -> dict[str, int]:
        return {name_of(n): node_allocatable(n, GPU_RESOURCE) for n in self.nodes}

    def free_gpus_of(self) -> dict[str, tuple[int, int, list[str]]]:
        """node -> (free GPUs, allocatable GPUs, the pods holding the rest). A probe asks only
        for the free ones: the kubelet rejects a pod asking for more (`OutOfnvidia.com/gpu`),
        and a canary still serving keeps its replica's GPUs."""
        held: dict[str, list[tuple[str, int]]] = {}
        for pod in self.pods:
            count = resource_count(pod, GPU_RESOURCE)
            if count and pod_node(pod) and not pod_is_finished(pod):
                held.setdefault(pod_node(pod), []).append((key_of(pod), count))
        out: dict[str, tuple[int, int, list[str]]] = {}
        for name, allocatable in self.gpus_of().items():
            holders = held.get(name, [])
            out[name] = (
                max(0, allocatable - sum(n for _, n in holders)),
                allocatable,
                [f"{pod} ({n})" for pod, n in sorted(holders)],
            )
        return out


# --- kubernetes ---------------------------------------------------------------------------------


def api(c: Cluster) -> Measurement:
    ready = c.kube.text("/readyz").strip()
    version = c.kube.get("/version").get("gitVersion", "?")
    return Measurement(ok=ready == "ok", detail=f"/readyz {ready!r}, version {version}")


def _age_seconds(obj: Obj, now: datetime) -> float:
    stamp = str(meta(obj).get("creationTimestamp") or "")
    try:
        created = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return (now - created).total_seconds()


def scheduling(c: Cluster) -> Measurement:
    now = datetime.now(UTC)
    limit = c.args.pending_limit_seconds
    stuck = [
        f"{namespace_of(p)}/{name_of(p)}"
        for p in c.workload_pods()
        if pod_phase(p) == "Pending" and _age_seconds(p, now) > limit
    ]
    if stuck:
        return Measurement(
            ok=False,
            value=len(stuck),
            detail=f"{len(stuck)} pods Pending longer than {limit:g}s: {_listed(stuck)}",
        )
    return Measurement(ok=True, value=0, detail=f"no workload pod Pending longer than {limit:g}s")


def _deployment_ready(c: Cluster, ref: Workload) -> Measurement:
    path = namespaced("/apis/apps/v1", "deployments", ref.namespace, ref.name)
    deployment = c.kube.get_or_none(path)
    if deployment is None:
        return Measurement(ok=False, detail=f"Deployment {ref.namespace}/{ref.name} not found")
    want = int((deployment.get("spec") or {}).get("replicas", 1))
    status = deployment.get("status") or {}
    ready = int(status.get("readyReplicas") or 0)
    updated = int(status.get("updatedReplicas") or 0)
    ok = ready >= want and updated >= want
    return Measurement(
        ok=ok, detail=f"{ref.namespace}/{ref.name}: {ready}/{want} ready, {updated} up to date"
    )


def dns(c: Cluster) -> Measurement:
    return _deployment_ready(c, c.args.dns)


def _daemonsets_ready(c: Cluster, refs: list[str], found: list[Obj], missing_reason: str) -> Measurement:
    by_ref = {f"{namespace_of(d)}/{name_of(d)}": d for d in c.daemonsets}
    chosen = [by_ref.get(r) for r in refs] if refs else found
    if not chosen:
        return not_measured(missing_reason)
    problems: list[str] = []
    summary: list[str] = []
    for ref, ds in zip(refs or [f"{namespace_of(d)}/{name_of(d)}" for d in found], chosen, strict=True):
        if ds is None:
            problems.append(f"DaemonSet {ref} not found")
            continue
        status = ds.get("status") or {}
        desired = int(status.get("desiredNumberScheduled") or 0)
        ready = int(status.get("numberReady") or 0)
        summary.append(f"{ref} {ready}/{desired}")
        if ready < desired:
            problems.append(f"DaemonSet {ref}: {ready}/{desired} pods ready")
    if problems:
        return Measurement(ok=False, detail="; ".join(problems))
    return Measurement(ok=True, detail="ready: " + ", ".join(summary))


def cni(c: Cluster) -> Measurement:
    found = [d for d in c.daemonsets if name_of(d) in KNOWN_CNI]
    return _daemonsets_ready(
        c, c.args.cni_daemonsets, found, "no known CNI DaemonSet found; name yours in cni_daemonsets"
    )


def csi(c: Cluster) -> Measurement:
    found = [d for d in c.daemonsets if "csi" in name_of(d)]
    return _daemonsets_ready(
        c, c.args.csi_daemonsets, found, "no CSI node DaemonSet found; name yours in csi_daemonsets"
    )


def logs(c: Cluster) -> Measurement:
    running = sorted(
        (p for p in c.pods if pod_phase(p) == "Running"),
        key=lambda p: (namespace_of(p) != "kube-system", namespace_of(p), name_of(p)),
    )
    if not running:
        return not_measured("no running pod whose log could be read")
    pod = running[0]
    where = f"{namespace_of(pod)}/{name_of(pod)}"
    c.kube.text(f"{pod_path(namespace_of(pod), name_of(pod))}/log", tailLines=5)
    return Measurement(ok=True, detail=f"read the log of {where}")


# --- gpu ----------------------------------------------------------------------------------------


def discovery(c: Cluster) -> Measurement:
    gpus = c.gpus_of()
    total = sum(gpus.values())
    nodes = {n: float(gpus.get(n, 0)) for n in c.args.nodes}
    if not total:
        return Measurement(ok=False, value=0, detail="no node advertises nvidia.com/gpu", nodes=nodes)
    with_gpus = sum(1 for v in gpus.values() if v)
    missing = [n for n in c.args.nodes if not gpus.get(n)]
    detail = f"{total} GPUs allocatable on {with_gpus} nodes"
    if missing:
        return Measurement(ok=False, value=total, detail=f"{detail}; none on {_listed(missing)}", nodes=nodes)
    return Measurement(ok=True, value=total, detail=detail, nodes=nodes)


def allocation(c: Cluster) -> Measurement:
    running = [p for p in c.pods if pod_phase(p) == "Running"]
    used = sum(resource_count(p, GPU_RESOURCE) for p in running)
    total = sum(c.gpus_of().values())
    detail = f"{used} of {total} GPUs requested by running pods"
    return Measurement(ok=used <= total, value=used, detail=detail)


def _served_version(c: Cluster, group: str) -> str | None:
    try:
        found = c.kube.get(f"/apis/{group}")
    except ApiStatus as exc:
        if exc.status == 404:
            return None
        raise
    preferred = (found.get("preferredVersion") or {}).get("groupVersion")
    return str(preferred) if preferred else None


def mig_dra(c: Cluster) -> Measurement:
    mig_nodes = [n for n in c.nodes if any(k in labels_of(n) for k in MIG_LABELS)]
    version = _served_version(c, "resource.k8s.io")
    slices = c.all(f"/apis/{version}/resourceslices") if version else []
    if not mig_nodes and not slices:
        return not_measured("no node carries MIG labels and no DRA driver publishes ResourceSlices")
    problems = [
        f"{name_of(n)} mig.config.state={labels_of(n).get(MIG_CONFIG_STATE, 'unset')}"
        for n in mig_nodes
        if labels_of(n).get(MIG_CONFIG_STATE) != "success"
    ]
    detail = f"{len(mig_nodes)} MIG nodes, {len(slices)} ResourceSlices"
    return Measurement(ok=not problems, detail=f"{detail}; " + "; ".join(problems) if problems else detail)


def dcgm(c: Cluster, jobs: Jobs | None) -> Measurement:
    refs = [c.args.dcgm_exporter] if c.args.dcgm_exporter else []
    found = [d for d in c.daemonsets if "dcgm-exporter" in name_of(d)]
    exporter = _daemonsets_ready(c, refs, found, "no DCGM exporter DaemonSet found; name it in dcgm_exporter")
    if c.args.dcgm_diag_level is None or exporter.ok is False:
        return exporter
    if jobs is None:
        return not_measured(
            f"check mode: would run dcgmi diag -r {c.args.dcgm_diag_level} on {len(c.args.nodes)} nodes"
        )
    problems = jobs_probes.dcgm_diag(jobs)
    diag = f"dcgmi diag -r {c.args.dcgm_diag_level} passed on {len(c.args.nodes)} nodes"
    if problems:
        return Measurement(ok=False, detail="; ".join(problems))
    if exporter.ok is None:  # the diagnostics measured the GPUs even without an exporter
        return Measurement(ok=True, detail=f"{diag}; {exporter.detail}")
    return Measurement(ok=True, detail=f"{exporter.detail}; {diag}")


def xid(c: Cluster, jobs: Jobs | None) -> Measurement:
    # An Xid event is one whose reason says so (node-problem-detector, DCGM: `XidError`) or
    # that quotes the kernel's `NVRM: Xid`; a mere mention (e.g. this probe's own Job named
    # "...-xid-...") is not one.
    events = [
        e
        for e in c.all("/api/v1/events")
        if "xid" in str(e.get("reason", "")).lower() or "nvrm: xid" in str(e.get("message", "")).lower()
    ]
    from_events = sum(int(e.get("count") or 1) for e in events)
    per_node: dict[str, int] = {}
    problems: list[str] = []
    raised: list[str] = []
    dcgm_source = c.args.xid_from == "dcgm"
    if jobs is not None and dcgm_source:
        # DCGM's last Xid per GPU, from the node's running hostengine: unprivileged.
        per_node, problems, raised = gpu_health.xid_from_dcgm(jobs)
    elif jobs is not None:
        per_node, problems = jobs_probes.xid_in_kernel_logs(jobs)
    total = from_events + sum(per_node.values())
    parts = [f"{from_events} in events"]
    if per_node:
        where = "none in DCGM" if dcgm_source else "none in kernel logs"
        parts.append(", ".join(f"{n} {v}" for n, v in sorted(per_node.items()) if v) or where)
    if raised:
        parts.append("DCGM's last Xid: " + ", ".join(raised))
    detail = f"{total} Xid events ({'; '.join(parts)})"
    if problems:
        return Measurement(ok=False, value=total, detail=f"{detail}; " + "; ".join(problems))
    return Measurement(
        ok=total == 0, value=total, detail=detail, nodes={n: float(v) for n, v in per_node.items()}
    )


# --- network ------------------------------------------------------------------------------------


def pod_network(c: Cluster) -> Measurement:
    down = [
        name_of(n) for n in c.nodes if (node_condition(n, "NetworkUnavailable") or {}).get("status") == "True"
    ]
    if down:
        return Measurement(ok=False, value=len(down), detail=f"NetworkUnavailable on {_listed(down)}")
    return Measurement(ok=True, value=0, detail=f"no NetworkUnavailable condition on {len(c.nodes)} nodes")


def rdma(c: Cluster) -> Measurement:
    ns = c.args.network_operator_namespace
    pods = [p for p in c.pods if namespace_of(p) == ns and pod_phase(p) not in ("Succeeded", "Failed")]
    if not pods:
        return not_measured(f"no Network Operator pods in namespace {ns} (network_operator_namespace)")
    unready = [name_of(p) for p in pods if not pod_is_ready(p)]
    if unready:
        return Measurement(
            ok=False, detail=f"{len(unready)} of {len(pods)} pods in {ns} not ready: {_listed(unready)}"
        )
    return Measurement(ok=True, detail=f"{len(pods)} pods in {ns} ready")


# --- storage ------------------------------------------------------------------------------------


def pvc(c: Cluster) -> Measurement:
    try:
        claims = [p for p in c.all("/api/v1/persistentvolumeclaims") if c.workload_namespace(namespace_of(p))]
    except ApiStatus as exc:
        if exc.status == 404:
            return not_measured("the API serves no PersistentVolumeClaims")
        raise
    if not claims:
        return not_measured("no PVC in the workload namespaces")
    unbound = [
        f"{namespace_of(p)}/{name_of(p)} ({(p.get('status') or {}).get('phase', 'unknown')})"
        for p in claims
        if (p.get("status") or {}).get("phase") != "Bound"
    ]
    if unbound:
        return Measurement(
            ok=False, value=len(unbound), detail=f"{len(unbound)} PVCs not Bound: {_listed(unbound)}"
        )
    return Measurement(ok=True, value=0, detail=f"{len(claims)} PVCs Bound")


def object_storage(c: Cluster) -> Measurement:
    store = c.args.object_storage
    if store is None:
        return not_measured("no object store configured (object_storage: bucket, endpoint_url)")
    client = s3_client(store, "acceptance.check: object_storage")
    started = time.monotonic()
    try:
        client.head_bucket(Bucket=store.bucket)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "?")
        return Measurement(ok=False, detail=f"HeadBucket {store.bucket}: {code} {exc}")
    except BotoCoreError as exc:
        return Measurement(ok=False, detail=f"HeadBucket {store.bucket}: {exc}")
    elapsed = round((time.monotonic() - started) * 1000, 1)
    where = store.endpoint_url or "the default endpoint"
    return Measurement(
        ok=True, value=elapsed, detail=f"bucket {store.bucket} at {where} answered in {elapsed:g} ms"
    )


# --- inference ----------------------------------------------------------------------------------


def scaling(c: Cluster, check_mode: bool) -> Measurement:
    ref = c.args.scaling
    if ref is None:
        return not_measured("scaling test not configured (scaling: namespace, name); it changes replicas")
    if check_mode:
        return not_measured(f"check mode: would scale {ref.namespace}/{ref.name} out by one and back")
    path = namespaced("/apis/apps/v1", "deployments", ref.namespace, ref.name)
    deployment = c.kube.get_or_none(path)
    if deployment is None:
        return Measurement(ok=False, detail=f"Deployment {ref.namespace}/{ref.name} not found")
    # A retried attempt may find the Deployment already scaled out: the mark says from what.
    mark = annotations_of(deployment).get(SCALING_MARK)
    original = (
        int(mark) if mark and mark.isdigit() else int((deployment.get("spec") or {}).get("replicas", 1))
    )
    target = original + 1
    c.kube.patch(
        path, {"metadata": {"annotations": {SCALING_MARK: str(original)}}, "spec": {"replicas": target}}
    )
    started = time.monotonic()
    deadline = Deadline(c.args.ready_timeout_seconds)
    ready = 0
    while True:
        status = c.kube.get(path).get("status") or {}
        ready = int(status.get("readyReplicas") or 0)
        if ready >= target or deadline.passed():
            break
        pause(min(c.args.poll_interval_seconds, 2.0), {"acceptance": dict(c.done), "scaling": ref.name})
    took = round(time.monotonic() - started, 1)
    c.kube.patch(path, {"metadata": {"annotations": {SCALING_MARK: None}}, "spec": {"replicas": original}})
    if ready < target:
        return Measurement(
            ok=False,
            detail=f"{ref.namespace}/{ref.name}: {ready}/{target} ready after {took:g}s (scaled back)",
        )
    return Measurement(
        ok=True,
        value=took,
        detail=f"{ref.namespace}/{ref.name} {original} -> {target} ready in {took:g}s, back to {original}",
    )


def canary(c: Cluster) -> Measurement:
    if c.args.canary is None:
        return not_measured("no canary inference Deployment configured (canary: namespace, name)")
    return _deployment_ready(c, c.args.canary)


# --- governance ---------------------------------------------------------------------------------


def kueue(c: Cluster) -> Measurement:
    version = _served_version(c, "kueue.x-k8s.io")
    if version is None:
        return not_measured("Kueue is not installed (the API serves no kueue.x-k8s.io)")
    queues = c.all(f"/apis/{version}/clusterqueues")
    if not queues:
        return not_measured("no Kueue ClusterQueue exists")
    held: list[str] = []
    for q in queues:
        policy = (q.get("spec") or {}).get("stopPolicy") or "None"
        conditions = {x.get("type"): x for x in (q.get("status") or {}).get("conditions") or []}
        active = conditions.get("Active")
        if policy != "None":
            held.append(f"{name_of(q)} (stopPolicy {policy})")
        elif active is not None and active.get("status") == "False":
            held.append(f"{name_of(q)} (inactive: {active.get('reason', '')})")
    ok_count = len(queues) - len(held)
    if held:
        return Measurement(
            ok=False, value=ok_count, detail=f"{len(held)} ClusterQueues not active: {_listed(held)}"
        )
    return Measurement(ok=True, value=ok_count, detail=f"{len(queues)} ClusterQueues active")


def rbac(c: Cluster) -> Measurement:
    version = _served_version(c, "rbac.authorization.k8s.io")
    if version is None:
        return not_measured("the API serves no rbac.authorization.k8s.io (RBAC is not enabled)")
    roles = {name_of(r) for r in c.all(f"/apis/{version}/clusterroles")}
    bindings = {name_of(b) for b in c.all(f"/apis/{version}/clusterrolebindings")}
    missing = [f"ClusterRole {r}" for r in c.args.cluster_roles if r not in roles]
    missing += [f"ClusterRoleBinding {b}" for b in c.args.cluster_role_bindings if b not in bindings]
    if missing:
        return Measurement(ok=False, detail=f"missing: {_listed(missing)}")
    return Measurement(
        ok=True, detail=f"{len(roles)} ClusterRoles, {len(bindings)} bindings; required ones present"
    )


def policy(c: Cluster) -> Measurement:
    group = "/apis/admissionregistration.k8s.io/v1"
    hooks = {
        name_of(h)
        for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")
        for h in c.all(f"{group}/{kind}")
    }
    if c.args.policy_webhooks:
        missing = [n for n in c.args.policy_webhooks if n not in hooks]
        if missing:
            return Measurement(ok=False, detail=f"webhook configurations missing: {_listed(missing)}")
        return Measurement(ok=True, detail=f"registered: {', '.join(c.args.policy_webhooks)}")
    engines = sorted(h for h in hooks if any(word in h for word in POLICY_ENGINES))
    # Built-in ValidatingAdmissionPolicies (GA in 1.30) are a policy engine too.
    try:
        native = [
            f"ValidatingAdmissionPolicy {name_of(p)}" for p in c.all(f"{group}/validatingadmissionpolicies")
        ]
    except ApiStatus as exc:
        if exc.status != 404:
            raise
        native = []
    if not engines and not native:
        return not_measured(
            "no policy engine found (Gatekeeper, Kyverno, Kubewarden webhooks or "
            "ValidatingAdmissionPolicies); name its webhooks in policy_webhooks"
        )
    return Measurement(ok=True, detail=f"registered: {_listed(engines + native)}")


def audit(c: Cluster) -> Measurement:
    if not c.args.audit:
        return not_measured("audit check not configured (audit: true reads the apiserver's flags)")
    servers = [
        p
        for p in c.pods
        if namespace_of(p) == "kube-system" and labels_of(p).get("component") == "kube-apiserver"
    ]
    if not servers:
        return not_measured("no kube-apiserver pod visible in kube-system (managed control plane?)")
    blind: list[str] = []
    for pod in servers:
        containers = (pod.get("spec") or {}).get("containers") or [{}]
        flags = " ".join(
            str(x) for x in (containers[0].get("command") or []) + (containers[0].get("args") or [])
        )
        if "--audit-log-path" not in flags and "--audit-webhook-config-file" not in flags:
            blind.append(name_of(pod))
    if blind:
        return Measurement(
            ok=False, detail=f"no --audit-log-path or --audit-webhook-config-file on {_listed(blind)}"
        )
    return Measurement(ok=True, detail=f"audit logging configured on {len(servers)} apiservers")


def cost_labels(c: Cluster) -> Measurement:
    required = c.args.cost_labels
    if not required:
        return not_measured("no cost labels required (cost_labels)")
    pods = c.workload_pods()
    missing = [
        f"{namespace_of(p)}/{name_of(p)}"
        for p in pods
        if any(label not in labels_of(p) for label in required)
    ]
    if missing:
        return Measurement(
            ok=False,
            value=len(missing),
            detail=f"{len(missing)} of {len(pods)} pods lack {', '.join(required)}: {_listed(missing)}",
        )
    return Measurement(ok=True, value=0, detail=f"{len(pods)} pods carry {', '.join(required)}")


# --- the module ---------------------------------------------------------------------------------

Probe = Callable[[Cluster, Jobs | None, bool], Measurement]


def _read_only(fn: Callable[[Cluster], Measurement]) -> Probe:
    return lambda c, _jobs, _check: fn(c)


def _with_jobs(fn: Callable[[Jobs], Measurement], what: str) -> Probe:
    def probe(c: Cluster, jobs: Jobs | None, _check: bool) -> Measurement:
        if jobs is None:
            return not_measured(f"check mode: would run {what}")
        return fn(jobs)

    return probe


def _bench(kind: str, *names: str, note: str = "") -> Probe:
    return _with_jobs(
        lambda jobs: jobs_probes.bench_metric(jobs, kind, *names, note=note), f"the {kind} benchmark Job"
    )


PROBES: dict[str, Probe] = {
    "kubernetes/api": _read_only(api),
    "kubernetes/scheduling": _read_only(scheduling),
    "kubernetes/dns": _read_only(dns),
    "kubernetes/cni": _read_only(cni),
    "kubernetes/csi": _read_only(csi),
    "kubernetes/logs": _read_only(logs),
    "gpu/discovery": _read_only(discovery),
    "gpu/allocation": _read_only(allocation),
    "gpu/mig_dra": _read_only(mig_dra),
    "gpu/dcgm": lambda c, jobs, _check: dcgm(c, jobs),
    "gpu/xid": lambda c, jobs, _check: xid(c, jobs),
    "gpu/ecc": _with_jobs(gpu_health.ecc, "nvidia-smi -q (ECC, remapped rows) on the nodes"),
    "network/pod_network": _read_only(pod_network),
    "network/rdma": _read_only(rdma),
    "network/nccl": _with_jobs(jobs_probes.nccl, "the NCCL test Jobs"),
    "network/cross_node": _with_jobs(jobs_probes.cross_node, "the multi-node NCCL Job"),
    "storage/pvc": _read_only(pvc),
    "storage/object_storage": _read_only(object_storage),
    "storage/model_download": _bench(
        "inference", "model_download_seconds", "model_load_seconds", note="load time includes the download"
    ),
    "storage/checkpoint": _bench(
        "training", "checkpoint_save_seconds", "checkpoint_restore_seconds", note="restore time"
    ),
    "training/start": _with_jobs(jobs_probes.training_start, "the training benchmark Job"),
    "training/throughput": _bench("training", "samples_per_second"),
    "training/convergence": _with_jobs(jobs_probes.convergence, "the training benchmark Job"),
    "training/recovery": _bench("training", "checkpoint_restore_seconds"),
    "inference/model_load": _bench("inference", "model_load_seconds"),
    "inference/ttft": _bench("inference", "ttft_ms_p50"),
    "inference/tpot": _bench("inference", "tpot_ms_p50"),
    "inference/scaling": lambda c, _jobs, check: scaling(c, check),
    "inference/canary": _read_only(canary),
    "governance/kueue": _read_only(kueue),
    "governance/rbac": _read_only(rbac),
    "governance/policy": _read_only(policy),
    "governance/audit": _read_only(audit),
    "governance/cost_labels": _read_only(cost_labels),
}


def _previous() -> dict[str, Measurement]:
    """Measurements a previous attempt heartbeated."""
    details = first_details()
    done = details.get("acceptance") if isinstance(details, dict) else None
    if not isinstance(done, dict):
        return {}
    return {key: Measurement.model_validate(m) for key, m in done.items()}


def _measure(probe: Probe, c: Cluster, jobs: Jobs | None, check_mode: bool) -> Measurement:
    try:
        return probe(c, jobs, check_mode)
    except ApiStatus as exc:
        # Probes ask whether an API is served before using it: a 404 here is something missing.
        if exc.status == 404:
            return Measurement(ok=False, detail=f"not found: {exc.message}")
        if exc.status in (401, 403):
            return Measurement(
                ok=False, detail=f"the API refused the probe (HTTP {exc.status}): {exc.message}"
            )
        raise


def _known_nodes(c: Cluster) -> None:
    """Job probes pinned to a node that does not exist would wait for their whole timeout."""
    names = sorted(name_of(n) for n in c.nodes)
    unknown = [n for n in c.args.nodes if n not in names]
    if not unknown:
        return
    hints = [
        f"{n} (did you mean {near[0]}?)" if (near := difflib.get_close_matches(n, names, n=1)) else n
        for n in unknown
    ]
    fail(
        ErrorType.PRECONDITION_FAILED,
        f"acceptance.check: nodes not in cluster {c.kube.name}: {', '.join(hints)} (it has {_listed(names)})",
    )


@kube_module(ACCEPTANCE_CHECK)
def acceptance_check(call: ModuleCall, args: AcceptanceArgs) -> ModuleResult:
    if args.object_storage is not None:  # refused up front, before any probe runs
        check_s3_access(args.object_storage, f"{call.module}: object_storage")
    specs = select(args.layers)
    kube = kube_for(call)
    cluster = Cluster(kube, args)
    _known_nodes(cluster)
    measurements = {} if call.check_mode else _previous()
    cluster.done.update({k: m.model_dump(mode="json") for k, m in measurements.items()})
    jobs = None if call.check_mode else Jobs(kube, call, args, cluster.free_gpus_of(), done=cluster.done)
    for spec in specs:
        if spec.key in measurements:
            continue
        measurements[spec.key] = _measure(PROBES[spec.key], cluster, jobs, call.check_mode)
        if not call.check_mode:
            cluster.done[spec.key] = measurements[spec.key].model_dump(mode="json")
            beat({"acceptance": dict(cluster.done)})
    policy = Policy(
        max_deviation_pct=args.max_deviation_pct,
        thresholds=args.thresholds,
        directions=args.directions,
        on_deviation=args.on_deviation,
        require=args.require,
    )
    verdict = judge(specs, measurements, args.baseline, policy)
    data: dict[str, Any] = verdict.model_dump(
        mode="json", include={"layers", "deviations", "passed", "measured"}
    )
    data["failures"] = verdict.failures
    data["counts"] = verdict.counts
    data["on_deviation"] = args.on_deviation
    data["baseline_used"] = bool(args.baseline)
    msg = verdict.summary()
    if call.check_mode:
        msg = f"check mode (read-only probes only): {msg}"
    return ModuleResult(changed=False, failed=verdict.failed, msg=msg, data=data)


ACCEPTANCE_ACTIVITIES = [acceptance_check]
