"""The GPU Operator's containerized driver, for scenarios whose driver it manages
(`cluster.driver_management: operator`); see `pitstop_sim.gpu_operator` for the upstream facts.

- The driver DaemonSet's image follows ClusterPolicy `spec.driver.version`. Its updateStrategy
  is OnDelete (the DaemonSet controller leaves running pods alone): a driver pod that is deleted
  comes back with the current template.
- The node runs the driver of its Ready driver pod: when a pod becomes Ready, the node's
  profile (labels, `nvidia-smi` over SSH) reports the pod's version. While a node has no
  running driver pod the driver is unloaded: its nvidia.com/gpu allocatable is 0 until the
  new pod is Ready.
- `upgradePolicy.autoUpgrade: true`: the operator's upgrade controller rolls outdated driver
  pods itself, `maxParallelUpgrades` nodes at a time, through the node label
  `nvidia.com/gpu-driver-upgrade-state`: upgrade-required -> cordon-required (cordon) ->
  wait-for-jobs-required -> pod-deletion-required (GPU pods on the node are deleted, no
  checkpoint asked) -> pod-restart-required (the driver pod is deleted; wait until the new one
  is Ready) -> uncordon-required -> upgrade-done. Nodes labelled
  `nvidia.com/gpu-driver-upgrade.skip=true` are left out. Not modelled: maxUnavailable, the
  drain and validation steps, waitForCompletion's selector, upgrade-failed.
- `autoUpgrade: false`: the upgrade-state labels are removed and nothing is rolled.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from pitstop.kube.objects import (
    annotations_of,
    is_terminating,
    labels_of,
    meta,
    name_of,
    namespace_of,
    pod_is_active,
    pod_is_ready,
    pod_node,
)
from pitstop_sim.controllers.base import Controller
from pitstop_sim.controllers.workloads import REVISION_LABEL, template_hash
from pitstop_sim.gpu_operator import (
    CORDON_REQUIRED,
    DRAIN_REQUIRED,
    DRIVER_DAEMONSET,
    DRIVER_IMAGE_NAME,
    DRIVER_OS_SUFFIX,
    DRIVER_REPOSITORY,
    GPU_OPERATOR_NAMESPACE,
    INITIAL_UNSCHEDULABLE_ANNOTATION,
    POD_DELETION_REQUIRED,
    POD_RESTART_REQUIRED,
    UNCORDON_REQUIRED,
    UPGRADE_DONE,
    UPGRADE_REQUIRED,
    UPGRADE_SKIP_LABEL,
    UPGRADE_STATE_LABEL,
    VALIDATION_REQUIRED,
    WAIT_FOR_JOBS_REQUIRED,
    image_driver_version,
)
from pitstop_sim.models import ProfileUpdate
from pitstop_sim.objects import GPU, pod_requests
from pitstop_sim.store import ObjectMissing, WatchEvent, clone

Obj = dict[str, Any]
POLICIES = "nvidia.com/clusterpolicies"
POLICY = "cluster-policy"
IN_PROGRESS = (
    CORDON_REQUIRED,
    WAIT_FOR_JOBS_REQUIRED,
    POD_DELETION_REQUIRED,
    DRAIN_REQUIRED,
    POD_RESTART_REQUIRED,
    VALIDATION_REQUIRED,
    UNCORDON_REQUIRED,
)


def is_driver_pod(pod: Obj) -> bool:
    return namespace_of(pod) == GPU_OPERATOR_NAMESPACE and labels_of(pod).get("app") == DRIVER_DAEMONSET


class GpuDriverController(Controller):
    name = "gpu-driver"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        cluster = self.ctx.scenario.cluster
        self.enabled = cluster.gpu_operator and cluster.driver_management == "operator"
        self._dirty = False
        self._nodes: set[str] = set()  # nodes whose driver pod changed
        self._unloaded: set[str] = set()  # nodes whose GPUs this controller took out of allocatable

    def observe(self, event: WatchEvent) -> None:
        if not self.enabled:
            return
        ours = event.storage == "daemonsets" and name_of(event.obj) == DRIVER_DAEMONSET
        if event.storage == POLICIES or ours:
            self._dirty = True
        elif event.storage == "pods" and is_driver_pod(event.obj):
            node = pod_node(event.obj)
            if node:
                self._nodes.add(node)
            self._dirty = True

    def pending(self) -> bool:
        return self._dirty or bool(self._nodes)

    def resync(self) -> None:
        if self.enabled:
            self._dirty = True

    def sync(self) -> None:
        nodes, self._nodes = self._nodes, set()
        self._dirty = False
        for node in sorted(nodes):
            self._driver_on(node)
        policy = self.ctx.store.get(POLICIES, None, POLICY)
        ds = self.ctx.store.get("daemonsets", GPU_OPERATOR_NAMESPACE, DRIVER_DAEMONSET)
        if policy is None or ds is None or is_terminating(ds):
            return
        driver = (policy.get("spec") or {}).get("driver") or {}
        ds = self._follow_version(ds, driver)
        upgrade = driver.get("upgradePolicy") or {}
        if upgrade.get("autoUpgrade"):
            self._auto_upgrade(ds, int(upgrade.get("maxParallelUpgrades") or 0))
        else:
            self._forget_upgrade_states()

    # --- the DaemonSet follows the ClusterPolicy ------------------------------------------------

    def _follow_version(self, ds: Obj, driver: Obj) -> Obj:
        version = driver.get("version")
        if not version:
            return ds
        repository = driver.get("repository") or DRIVER_REPOSITORY
        image = f"{repository}/{driver.get('image') or DRIVER_IMAGE_NAME}:{version}-{DRIVER_OS_SUFFIX}"
        containers = ds["spec"]["template"]["spec"]["containers"]
        if containers[0].get("image") == image:
            return ds
        updated = clone(ds)
        updated["spec"]["template"]["spec"]["containers"][0]["image"] = image
        result: Obj = self.api.update(
            self.ctx.rt("apps", "daemonsets"), GPU_OPERATOR_NAMESPACE, DRIVER_DAEMONSET, updated
        )
        return result

    # --- what the node's driver is --------------------------------------------------------------

    def _driver_on(self, node_name: str) -> None:
        profile = self.ctx.profiles.get(node_name)
        if profile is None or profile.role != "gpu":
            return
        pods = [p for p in self.ctx.pods_on_node(node_name) if is_driver_pod(p) and pod_is_active(p)]
        if not pods:
            self._set_gpus(node_name, unloaded=True)
            return
        ready = [p for p in pods if pod_is_ready(p)]
        if not ready:
            return
        version = image_driver_version(str(ready[0]["spec"]["containers"][0].get("image") or ""))
        if version and version != profile.driver_version:
            self.manager.nodes.set_profile(node_name, ProfileUpdate(driver_version=version))
        self._set_gpus(node_name, unloaded=False)

    def _set_gpus(self, node_name: str, *, unloaded: bool) -> None:
        """No driver, no device-plugin GPUs: allocatable 0 while unloaded; capacity back after."""
        node = self.ctx.store.get("nodes", None, node_name)
        if node is None or unloaded == (node_name in self._unloaded):
            return
        status = node.get("status") or {}
        capacity = (status.get("capacity") or {}).get(GPU)
        if capacity in (None, "0"):
            return
        updated = clone(node)
        allocatable = dict(updated["status"].get("allocatable") or {})
        allocatable[GPU] = "0" if unloaded else capacity
        updated["status"]["allocatable"] = allocatable
        self.ctx.store.update("nodes", updated)
        if unloaded:
            self._unloaded.add(node_name)
        else:
            self._unloaded.discard(node_name)

    # --- the operator's upgrade controller ------------------------------------------------------

    def _forget_upgrade_states(self) -> None:
        for node in self.ctx.store.list("nodes").items:
            if UPGRADE_STATE_LABEL in labels_of(node):
                updated = clone(node)
                del updated["metadata"]["labels"][UPGRADE_STATE_LABEL]
                self.ctx.store.update("nodes", updated)

    def _auto_upgrade(self, ds: Obj, max_parallel: int) -> None:
        revision = template_hash(ds["spec"]["template"])
        pods: dict[str, Obj] = {}
        for pod in self.ctx.store.list("pods", GPU_OPERATOR_NAMESPACE).items:
            if is_driver_pod(pod) and pod_is_active(pod) and pod_node(pod):
                pods[pod_node(pod)] = pod
        nodes = [
            n for n in self.ctx.store.list("nodes").items if labels_of(n).get(UPGRADE_SKIP_LABEL) != "true"
        ]
        busy = sum(1 for n in nodes if labels_of(n).get(UPGRADE_STATE_LABEL) in IN_PROGRESS)
        for node in sorted(nodes, key=name_of):
            name = name_of(node)
            # Several steps can follow one another at once; a step that waits returns None.
            for _ in range(len(IN_PROGRESS) + 2):
                state = labels_of(node).get(UPGRADE_STATE_LABEL, "")
                may_start = max_parallel <= 0 or busy < max_parallel
                step = self._step(node, state, pods.get(name), revision, may_start)
                if step is None:
                    break
                node = step
                now = labels_of(node).get(UPGRADE_STATE_LABEL, "")
                busy += (now in IN_PROGRESS) - (state in IN_PROGRESS)

    def _step(self, node: Obj, state: str, pod: Obj | None, revision: str, may_start: bool) -> Obj | None:
        """One transition of the node's upgrade state; the node as written, or None to wait."""
        in_sync = pod is not None and labels_of(pod).get(REVISION_LABEL) == revision
        if state in ("", UPGRADE_DONE):
            if pod is None:
                return None
            return self._label(node, UPGRADE_DONE if in_sync else UPGRADE_REQUIRED)
        if state == UPGRADE_REQUIRED:
            if in_sync:
                return self._label(node, UPGRADE_DONE)
            return self._label(node, CORDON_REQUIRED) if may_start else None
        if state == CORDON_REQUIRED:
            notes = {INITIAL_UNSCHEDULABLE_ANNOTATION: "true"} if node["spec"].get("unschedulable") else {}
            return self._label(node, WAIT_FOR_JOBS_REQUIRED, unschedulable=True, notes=notes)
        if state == WAIT_FOR_JOBS_REQUIRED:
            return self._label(node, POD_DELETION_REQUIRED)
        if state == POD_DELETION_REQUIRED:
            for other in self.ctx.pods_on_node(name_of(node)):
                if pod_is_active(other) and pod_requests(other).get(GPU, Decimal(0)) > 0:
                    self.manager.kubelet.terminate(other)
            return self._label(node, POD_RESTART_REQUIRED)
        if state == POD_RESTART_REQUIRED:
            if pod is not None and not in_sync:
                self.manager.kubelet.terminate(pod)
                return None
            if pod is not None and pod_is_ready(pod):
                return self._label(node, UNCORDON_REQUIRED)
            return None
        if state == UNCORDON_REQUIRED:
            was = annotations_of(node).get(INITIAL_UNSCHEDULABLE_ANNOTATION) == "true"
            return self._label(
                node, UPGRADE_DONE, unschedulable=was, notes={INITIAL_UNSCHEDULABLE_ANNOTATION: None}
            )
        return None

    def _label(
        self,
        node: Obj,
        state: str,
        *,
        unschedulable: bool | None = None,
        notes: Mapping[str, str | None] | None = None,
    ) -> Obj | None:
        updated = clone(node)
        meta(updated).setdefault("labels", {})[UPGRADE_STATE_LABEL] = state
        if unschedulable is not None:
            updated["spec"]["unschedulable"] = unschedulable
        for key, value in (notes or {}).items():
            annotations = meta(updated).setdefault("annotations", {})
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
        if updated == node:
            return None
        try:
            stored: Obj = self.ctx.store.update("nodes", updated)
        except ObjectMissing:
            return None
        return stored
