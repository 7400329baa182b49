"""The GPU Operator's containerized driver: gpu.driver_management, gpu.operator_driver_hold,
gpu.operator_driver_node (the facts they rest on: `pitstop.gpu.operator`).

The driver pod is removed through the Eviction API, as every pod pitstop removes: the worker's
roles grant `pods/eviction`, never `delete pods` (tests/unit/test_kubernetes_manifests.py)."""

from __future__ import annotations

from typing import Any

from activities.kube.client import ApiStatus, Kube, node_path, pod_path, pods_path
from activities.kube.common import Deadline, kube_for, kube_module, node_name, pause
from activities.kube.nodes import read_node
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail
from pitstop.gpu.operator import (
    CLUSTER_POLICY_PATH,
    UPGRADE_IN_PROGRESS,
    UPGRADE_STATE_LABEL,
    DriverPolicy,
    driver_container_image,
    driver_policy,
    image_driver_version,
    is_driver_pod,
)
from pitstop.kube.objects import (
    Obj,
    is_terminating,
    labels_of,
    name_of,
    pod_is_active,
    pod_is_ready,
)
from pitstop.kube.selectors import object_selector_matches
from pitstop.module_args.gpu_driver import (
    DRIVER_MANAGEMENT,
    OPERATOR_DRIVER_HOLD,
    OPERATOR_DRIVER_NODE,
    DriverManagementArgs,
    OperatorDriverHoldArgs,
    OperatorDriverNodeArgs,
)

CONFLICT_ATTEMPTS = 5


# --- reading ----------------------------------------------------------------------------------


def find_policy(kube: Kube, name: str | None) -> Obj | None:
    """The named ClusterPolicy, else the only one; None when the cluster has none (or no CRD).
    Several and none named: refused, the operator itself reconciles only one."""
    try:
        if name is not None:
            return kube.get_or_none(f"{CLUSTER_POLICY_PATH}/{name}")
        policies = kube.list(CLUSTER_POLICY_PATH)
    except ApiStatus as exc:
        if exc.status == 404:  # the nvidia.com API is not served: no GPU Operator
            return None
        raise
    if len(policies) > 1:
        fail(
            ErrorType.INVALID_ARGS,
            f"{kube.name} has {len(policies)} ClusterPolicies ({', '.join(sorted(map(name_of, policies)))}); "
            "name one with cluster_policy",
        )
    return policies[0] if policies else None


def need_policy(kube: Kube, name: str | None, module: str) -> Obj:
    policy = find_policy(kube, name)
    if policy is None:
        which = f"ClusterPolicy {name!r}" if name else "no ClusterPolicy"
        fail(
            ErrorType.PRECONDITION_FAILED,
            f"{module}: {which} found in {kube.name} ({kube.server}); is the GPU Operator installed? "
            "Nothing was changed",
        )
    return policy


def driver_pods_on(kube: Kube, namespace: str, node: str) -> list[Obj]:
    """The operator's driver pods on `node`, terminating ones included."""
    pods = kube.list(pods_path(namespace), field_selector=f"spec.nodeName={node}")
    return [p for p in pods if is_driver_pod(p)]


def _readiness(pod: Obj) -> str:
    if is_terminating(pod):
        return "terminating"
    return "Ready" if pod_is_ready(pod) else "not Ready"


def _pod_facts(pod: Obj) -> dict[str, Any]:
    image = driver_container_image(pod)
    return {
        "pod": name_of(pod),
        "uid": (pod.get("metadata") or {}).get("uid"),
        "image": image,
        "version": image_driver_version(image),
        "ready": pod_is_ready(pod),
        "created": (pod.get("metadata") or {}).get("creationTimestamp"),
    }


# --- gpu.driver_management ---------------------------------------------------------------------


@kube_module(DRIVER_MANAGEMENT)
def driver_management(call: ModuleCall, args: DriverManagementArgs) -> ModuleResult:
    name = node_name(call, args.node)
    kube = kube_for(call)
    read_node(kube, name)
    raw = find_policy(kube, args.cluster_policy)
    policy = driver_policy(raw) if raw is not None else None
    pods = driver_pods_on(kube, args.namespace, name)
    running = [p for p in pods if pod_is_active(p)]
    data: dict[str, Any] = {"node": name, "cluster_policy": policy.name if policy else None}
    if policy is None or not policy.enabled:
        if running:
            why = (
                "there is no ClusterPolicy" if policy is None else f"ClusterPolicy {policy.name} disables it"
            )
            fail(
                ErrorType.PRECONDITION_FAILED,
                f"cannot tell how {name}'s driver is managed: driver pod {name_of(running[0])} runs in "
                f"{args.namespace} but {why}",
            )
        source = (
            "no ClusterPolicy" if policy is None else f"ClusterPolicy {policy.name} has driver.enabled false"
        )
        return ModuleResult(
            msg=f"{name}: host-managed driver ({source}, no driver pod)",
            data={**data, "management": "host"},
        )
    if len(running) != 1 or not pod_is_ready(running[0]):
        state = "no driver pod" if not pods else ", ".join(f"{name_of(p)} ({_readiness(p)})" for p in pods)
        fail(
            ErrorType.PRECONDITION_FAILED,
            f"cannot tell how {name}'s driver is managed: ClusterPolicy {policy.name} manages the driver "
            f"but {name} has no single Ready driver pod in {args.namespace} ({state}); look again when "
            "the driver pod is Ready",
        )
    management = "precompiled" if policy.precompiled else "operator"
    pod = _pod_facts(running[0])
    return ModuleResult(
        msg=(
            f"{name}: {management} driver {pod['version'] or pod['image']} (pod {pod['pod']}); "
            f"ClusterPolicy {policy.name} driver.version {policy.version}, autoUpgrade {policy.auto_upgrade}"
        ),
        data={
            **data,
            "management": management,
            "version": policy.version,
            "auto_upgrade": policy.auto_upgrade,
            "image": pod["image"],
            "running_version": pod["version"],
            "driver_pod": pod["pod"],
        },
    )


# --- gpu.operator_driver_hold ------------------------------------------------------------------


def _nodes_in_upgrade(kube: Kube) -> list[str]:
    nodes = kube.list("/api/v1/nodes", label_selector=UPGRADE_STATE_LABEL)
    return sorted(name_of(n) for n in nodes if labels_of(n).get(UPGRADE_STATE_LABEL) in UPGRADE_IN_PROGRESS)


@kube_module(OPERATOR_DRIVER_HOLD)
def operator_driver_hold(call: ModuleCall, args: OperatorDriverHoldArgs) -> ModuleResult:
    kube = kube_for(call)
    for _ in range(CONFLICT_ATTEMPTS):
        raw = need_policy(kube, args.cluster_policy, call.module)
        policy = driver_policy(raw)
        if not policy.enabled:
            fail(
                ErrorType.PRECONDITION_FAILED,
                f"ClusterPolicy {policy.name} has driver.enabled false: the GPU Operator does not manage "
                "the driver (host packages do); nothing was changed",
            )
        driver: Obj = {}
        changes: list[str] = []
        want = args.auto_upgrade
        if policy.auto_upgrade != want or "autoUpgrade" not in _upgrade_policy(raw):
            driver["upgradePolicy"] = {"autoUpgrade": want}
            changes.append(f"autoUpgrade {str(want).lower()}")
        if args.version is not None and args.version != policy.version:
            driver["version"] = args.version
            changes.append(f"driver.version {policy.version} -> {args.version}")
        data: dict[str, Any] = {
            "cluster_policy": policy.name,
            "version_before": policy.version,
            "auto_upgrade_before": policy.auto_upgrade,
            "version": args.version or policy.version,
            "auto_upgrade": want,
            # Nodes the operator is rolling right now finish on their own: a hold stops new ones.
            "nodes_in_upgrade": _nodes_in_upgrade(kube),
        }
        if not changes:
            holds = "gives the driver roll to the operator" if want else "already holds the driver"
            return ModuleResult(msg=f"ClusterPolicy {policy.name} {holds} ({policy.version})", data=data)
        what = f"ClusterPolicy {policy.name}: {', '.join(changes)}"
        if call.check_mode:
            return ModuleResult(changed=True, msg=f"would set {what}", data=data)
        patch = {"metadata": {"resourceVersion": policy.resource_version}, "spec": {"driver": driver}}
        try:
            kube.patch(f"{CLUSTER_POLICY_PATH}/{policy.name}", patch)
        except ApiStatus as exc:
            if exc.status != 409:
                raise
            continue
        return ModuleResult(changed=True, msg=f"set {what}", data=data)
    fail(
        ErrorType.KUBE_API_ERROR,
        f"the ClusterPolicy kept changing under us ({CONFLICT_ATTEMPTS} conflicts); will retry",
    )


def _upgrade_policy(raw: Obj) -> Obj:
    return ((raw.get("spec") or {}).get("driver") or {}).get("upgradePolicy") or {}


# --- gpu.operator_driver_node ------------------------------------------------------------------


def _driver_daemonset(kube: Kube, namespace: str, pod: Obj | None) -> Obj | None:
    """The DaemonSet owning `pod`, else the namespace's driver DaemonSet found by its pods' labels."""
    if pod is not None:
        owner = next(
            (o for o in (pod.get("metadata") or {}).get("ownerReferences") or [] if o.get("controller")), None
        )
        if owner is not None and owner.get("kind") == "DaemonSet":
            return kube.get_or_none(f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{owner['name']}")
    for ds in kube.list(f"/apis/apps/v1/namespaces/{namespace}/daemonsets"):
        template = (ds.get("spec") or {}).get("template") or {}
        if is_driver_pod(template):
            return ds
    return None


def _template_version(ds: Obj) -> str | None:
    template = (ds.get("spec") or {}).get("template") or {}
    return image_driver_version(driver_container_image(template))


def _events(kube: Kube, namespace: str, pod: Obj) -> str:
    uid = (pod.get("metadata") or {}).get("uid")
    try:
        events = kube.list(
            f"/api/v1/namespaces/{namespace}/events", field_selector=f"involvedObject.name={name_of(pod)}"
        )
    except ApiStatus:
        return ""
    lines = [
        f"{e.get('type')} {e.get('reason')}: {e.get('message')}"
        for e in events
        if not uid or (e.get("involvedObject") or {}).get("uid") in (None, uid)
    ]
    return "; ".join(lines[-5:])


def _pod_state(pod: Obj) -> str:
    status = pod.get("status") or {}
    waiting = [
        f"{c.get('name')} {(c.get('state') or {}).get('waiting', {}).get('reason')}"
        for c in status.get("containerStatuses") or []
        if (c.get("state") or {}).get("waiting")
    ]
    ready = "Ready" if pod_is_ready(pod) else "not Ready"
    return f"{name_of(pod)} {status.get('phase', 'Pending')}, {ready}" + (
        f" ({', '.join(waiting)})" if waiting else ""
    )


def _gpus_back(node: Obj, resource: str | None) -> bool:
    if resource is None:
        return True
    status = node.get("status") or {}
    capacity = (status.get("capacity") or {}).get(resource)
    return capacity is None or (status.get("allocatable") or {}).get(resource) == capacity


@kube_module(OPERATOR_DRIVER_NODE)
def operator_driver_node(call: ModuleCall, args: OperatorDriverNodeArgs) -> ModuleResult:
    name = node_name(call, args.node)
    kube = kube_for(call)
    deadline = Deadline(args.timeout_seconds)
    read_node(kube, name)
    policy: DriverPolicy = driver_policy(need_policy(kube, args.cluster_policy, call.module))
    if not policy.enabled:
        fail(
            ErrorType.PRECONDITION_FAILED,
            f"ClusterPolicy {policy.name} has driver.enabled false: {name}'s driver is not the operator's; "
            "nothing was changed",
        )
    if policy.auto_upgrade:
        fail(
            ErrorType.POLICY_VIOLATION,
            f"ClusterPolicy {policy.name} has driver.upgradePolicy.autoUpgrade true: the operator rolls "
            "driver pods itself and would race pitstop; run gpu.operator_driver_hold first. "
            "Nothing was changed",
        )
    version = args.version or policy.version
    if version is None:
        fail(ErrorType.INVALID_ARGS, f"ClusterPolicy {policy.name} names no driver.version; pass version")
    pods = driver_pods_on(kube, args.namespace, name)
    active = [p for p in pods if pod_is_active(p)]
    current = active[0] if active else None
    data: dict[str, Any] = {
        "node": name,
        "version": version,
        "before": _pod_facts(current) if current else None,
    }

    # The DaemonSet must carry the version before its pod is deleted, or the pod comes back old.
    while True:
        ds = _driver_daemonset(kube, args.namespace, current)
        if ds is None:
            fail(
                ErrorType.PRECONDITION_FAILED,
                f"no GPU Operator driver DaemonSet in {args.namespace}; nothing was changed",
            )
        template_version = _template_version(ds)
        if template_version == version:
            break
        state = f"DaemonSet {name_of(ds)} still has driver {template_version}, expected {version}"
        if call.check_mode:
            return ModuleResult(
                changed=True, msg=f"would wait: {state}, then recreate {name}'s driver pod", data=data
            )
        if deadline.passed():
            fail(
                ErrorType.TIMEOUT,
                f"{state} after {deadline.elapsed():.0f}s (has the operator reconciled the "
                "ClusterPolicy?); nothing was changed",
                non_retryable=True,
            )
        pause(min(args.poll_interval_seconds, max(deadline.remaining(), 0.0)), {"node": name, "state": state})

    outdated = [p for p in active if image_driver_version(driver_container_image(p)) != version]
    if call.check_mode:
        if outdated:
            return ModuleResult(
                changed=True,
                msg=f"would evict {name}'s driver pod {name_of(outdated[0])} "
                f"({_pod_facts(outdated[0])['version']} -> {version})",
                data=data,
            )
        return ModuleResult(msg=f"{name}'s driver pod already runs {version}", data=data)
    changed = False
    for pod in outdated:
        # Only this node's pod, and only the one read (a uid precondition): never another's.
        # Through the Eviction API like every pod pitstop removes (the worker may not delete
        # pods); no PDB covers a driver pod, so it is not refused for that.
        namespace, pod_name = args.namespace, name_of(pod)
        options = {"preconditions": {"uid": (pod.get("metadata") or {}).get("uid")}}
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod_name, "namespace": namespace},
            "deleteOptions": options,
        }
        try:
            kube.post(f"{pod_path(namespace, pod_name)}/eviction", eviction)
        except ApiStatus as exc:
            if exc.status == 429:
                fail(
                    ErrorType.POLICY_VIOLATION,
                    f"the eviction of {name}'s driver pod {pod_name} was refused by a PodDisruptionBudget "
                    f"({exc.message}); nothing else was changed",
                )
            if exc.status not in (404, 409):  # gone already, or replaced
                raise
        changed = True
    ds_selector = (ds.get("spec") or {}).get("selector")
    while True:
        node = kube.get_or_none(node_path(name)) or {}
        pods = [
            p
            for p in driver_pods_on(kube, args.namespace, name)
            if object_selector_matches(ds_selector, labels_of(p))
        ]
        fresh = [
            p for p in pods if pod_is_active(p) and image_driver_version(driver_container_image(p)) == version
        ]
        state = ""
        if not fresh:
            state = (
                "no driver pod with "
                + version
                + " yet"
                + (f" ({', '.join(_pod_state(p) for p in pods)})" if pods else "")
            )
        elif not pod_is_ready(fresh[0]):
            state = _pod_state(fresh[0])
        elif args.version_label and labels_of(node).get(args.version_label) != version:
            state = f"{args.version_label} is {labels_of(node).get(args.version_label)!r}"
        elif not _gpus_back(node, args.gpu_resource):
            state = f"{args.gpu_resource} not allocatable again yet"
        if not state:
            data["after"] = _pod_facts(fresh[0])
            verb = "recreated" if changed else "found"
            return ModuleResult(
                changed=changed,
                msg=f"{name}: {verb} driver pod {name_of(fresh[0])}, Ready with driver {version}",
                data={**data, "waited_s": round(deadline.elapsed(), 3)},
            )
        if deadline.passed():
            events = _events(kube, args.namespace, fresh[0]) if fresh else ""
            fail(
                ErrorType.TIMEOUT,
                f"{name}'s driver is not {version} after {deadline.elapsed():.0f}s: {state}"
                + (f"; events: {events}" if events else ""),
                non_retryable=True,
            )
        pause(min(args.poll_interval_seconds, max(deadline.remaining(), 0.0)), {"node": name, "state": state})


GPU_DRIVER_ACTIVITIES = [driver_management, operator_driver_hold, operator_driver_node]
