"""Node lifecycle: the taints the node controller keeps in step with cordon and readiness,
reboots (NotReady, then Ready with a new boot id and any staged versions), eviction of pods
from nodes that stay NotReady, and node leases."""

from __future__ import annotations

import contextlib
from typing import Any

from pitstop.kube.annotations import NOT_READY_TAINT, UNREACHABLE_TAINT, UNSCHEDULABLE_TAINT
from pitstop.kube.objects import is_terminating, name_of, node_is_ready, node_is_unschedulable
from pitstop_sim.annotations import (
    DRIVER_VERSION_LABEL,
    FIRMWARE_VERSION_LABEL,
    GPU_PRODUCT_LABEL,
)
from pitstop_sim.clock import rfc3339, rfc3339_micro
from pitstop_sim.controllers.base import Controller
from pitstop_sim.events import EventRecorder
from pitstop_sim.models import NodeProfile, ProfileUpdate, node_info_kube_proxy_version
from pitstop_sim.objects import GPU, new_uid, set_condition, untolerated
from pitstop_sim.store import ObjectMissing, WatchEvent, clone

Obj = dict[str, Any]

_MANAGED = (UNSCHEDULABLE_TAINT, NOT_READY_TAINT, UNREACHABLE_TAINT)


class NodeError(Exception):
    pass


def wanted_taints(node: Obj) -> list[Obj]:
    """The node controller's taints for the node's current state."""
    out: list[Obj] = []
    if node_is_unschedulable(node):
        out.append({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"})
    ready = next(
        (c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None
    )
    if ready is not None and ready.get("status") != "True":
        key = UNREACHABLE_TAINT if ready.get("status") == "Unknown" else NOT_READY_TAINT
        out.append({"key": key, "effect": "NoSchedule"})
        out.append({"key": key, "effect": "NoExecute"})
    return out


def apply_profile_to_node(node: Obj, profile: NodeProfile) -> Obj:
    updated: Obj = clone(node)
    labels = updated["metadata"].setdefault("labels", {})
    if profile.role == "gpu":  # control-plane nodes carry no GPU labels
        labels[DRIVER_VERSION_LABEL] = profile.driver_version
        labels[FIRMWARE_VERSION_LABEL] = profile.firmware_version
        labels[GPU_PRODUCT_LABEL] = profile.gpu_product
    info = updated.setdefault("status", {}).setdefault("nodeInfo", {})
    info.update(
        {
            "kernelVersion": profile.kernel_version,
            "osImage": profile.os_image,
            "kubeletVersion": profile.kubelet_version,
            "kubeProxyVersion": node_info_kube_proxy_version(profile.kubelet_version),
            "containerRuntimeVersion": profile.container_runtime,
            "bootID": profile.boot_id,
        }
    )
    return updated


class NodeLifecycle(Controller):
    name = "node-lifecycle"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._dirty: set[str] = set()
        self._rebooting: set[str] = set()
        self.events = EventRecorder(self.ctx.store)

    def observe(self, event: WatchEvent) -> None:
        if event.storage == "nodes" and event.type != "DELETED":
            self._dirty.add(name_of(event.obj))

    def pending(self) -> bool:
        return bool(self._dirty)

    def resync(self) -> None:
        self._dirty.update(name_of(n) for n in self.ctx.store.list("nodes").items)

    def sync(self) -> None:
        dirty, self._dirty = self._dirty, set()
        for name in sorted(dirty):
            node = self.ctx.store.get("nodes", None, name)
            if node is not None:
                self._sync_taints(node)

    def _sync_taints(self, node: Obj) -> None:
        taints = list((node.get("spec") or {}).get("taints") or [])
        others = [t for t in taints if t.get("key") not in _MANAGED]
        current = {(t.get("key"), t.get("effect")): t for t in taints if t.get("key") in _MANAGED}
        wanted = wanted_taints(node)
        merged: list[Obj] = []
        for taint in wanted:
            existing = current.get((taint["key"], taint["effect"]))
            merged.append(existing or {**taint, "timeAdded": rfc3339()})
        if {(t["key"], t["effect"]) for t in merged} == set(current):
            return
        updated = clone(node)
        new_taints = others + merged
        if new_taints:
            updated["spec"]["taints"] = new_taints
        else:
            updated["spec"].pop("taints", None)
        self.ctx.store.update("nodes", updated)
        added_no_execute = [
            t for t in merged if t["effect"] == "NoExecute" and (t["key"], t["effect"]) not in current
        ]
        if added_no_execute:
            self._arm_taint_eviction(name_of(node))

    def _arm_taint_eviction(self, node_name: str) -> None:
        """Pods that do not tolerate a NoExecute taint leave after their toleration time (default 300s)."""
        delay = self.ctx.scenario.timing.not_ready_eviction_seconds

        def evict() -> None:
            node = self.ctx.store.get("nodes", None, node_name)
            if node is None or node_is_ready(node):
                return
            taints = [
                t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") == "NoExecute"
            ]
            for pod in self.ctx.pods_on_node(node_name):
                if is_terminating(pod):
                    continue
                tolerations = (pod.get("spec") or {}).get("tolerations") or []
                forever = [
                    t
                    for t in tolerations
                    if t.get("effect") in ("NoExecute", "", None) and "tolerationSeconds" not in t
                ]
                if untolerated(forever, taints, ("NoExecute",)):
                    self.manager.kubelet.terminate(pod)
                    self.events.record(
                        pod,
                        "Normal",
                        "TaintManagerEviction",
                        "Marking for deletion Pod",
                        "taint-eviction-controller",
                    )

        self.later(delay, evict)

    # --- reboots --------------------------------------------------------------------------------

    def reboot(self, node_name: str) -> None:
        node = self.ctx.store.get("nodes", None, node_name)
        if node is None:
            raise NodeError(f"node {node_name!r} not found")
        profile = self.ctx.profiles[node_name]
        if node_name in self._rebooting:
            return
        self._rebooting.add(node_name)
        self.ctx.recorder.reboot(node_name)
        self.ctx.recorder.note_reboot(node_name, node)
        down = clone(node)
        down["status"]["conditions"] = set_condition(
            down["status"].get("conditions") or [],
            "Ready",
            "Unknown",
            "NodeStatusUnknown",
            "Kubelet stopped posting node status.",
        )
        stored = self.ctx.store.update("nodes", down)
        self.events.record(
            stored,
            "Warning",
            "Rebooted",
            f"Node {node_name} has been rebooted, boot id: {profile.boot_id}",
            "kubelet",
            node_name,
        )
        self.manager.kubelet.node_down(node_name)
        self._renew_lease(node_name, holder=False)
        if profile.health.never_returns_after_reboot:
            return
        self.later(self.ctx.scenario.timing.reboot_seconds, lambda: self._back(node_name))

    def _back(self, node_name: str) -> None:
        self._rebooting.discard(node_name)
        node = self.ctx.store.get("nodes", None, node_name)
        profile = self.ctx.profiles.get(node_name)
        if node is None or profile is None:
            return
        profile.boot_id = new_uid()
        profile.reboots += 1
        if profile.pending is not None:
            apply_update(profile, profile.pending)
            profile.pending = None
        up = apply_profile_to_node(node, profile)
        up["status"]["conditions"] = set_condition(
            up["status"].get("conditions") or [],
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
        )
        for cond in up["status"]["conditions"]:
            cond["lastHeartbeatTime"] = rfc3339()
        # The kubelet is back before the device plugin: GPUs count in capacity, not yet in
        # allocatable, until the plugin registers them again.
        gpus = (up["status"].get("allocatable") or {}).get(GPU)
        plugin_delay = self.ctx.scenario.timing.device_plugin_seconds
        if gpus not in (None, "0") and plugin_delay > 0:
            up["status"]["allocatable"] = {**up["status"]["allocatable"], GPU: "0"}
        stored = self.ctx.store.update("nodes", up)
        self.events.record(
            stored, "Normal", "NodeReady", f"Node {node_name} status is now: NodeReady", "kubelet", node_name
        )
        self._renew_lease(node_name, holder=True)
        if gpus not in (None, "0") and plugin_delay > 0:
            boot = profile.boot_id

            def registered() -> None:
                current = self.ctx.store.get("nodes", None, node_name)
                if current is None or self.ctx.profiles[node_name].boot_id != boot:
                    return
                back = clone(current)
                back["status"]["allocatable"] = {**back["status"].get("allocatable", {}), GPU: gpus}
                self.ctx.store.update("nodes", back)

            self.later(plugin_delay, registered)

    def is_rebooting(self, node_name: str) -> bool:
        return node_name in self._rebooting

    def set_profile(self, node_name: str, update: ProfileUpdate) -> NodeProfile:
        profile = self.ctx.profiles.get(node_name)
        node = self.ctx.store.get("nodes", None, node_name)
        if profile is None or node is None:
            raise NodeError(f"node {node_name!r} not found")
        if update.apply == "reboot":
            if profile.pending is None:
                profile.pending = update
            else:
                merged = {
                    **profile.pending.model_dump(exclude_none=True),
                    **update.model_dump(exclude_none=True),
                }
                profile.pending = ProfileUpdate.model_validate(merged)
            return profile
        apply_update(profile, update)
        self.ctx.store.update("nodes", apply_profile_to_node(node, profile))
        return profile

    def _renew_lease(self, node_name: str, *, holder: bool) -> None:
        lease = self.ctx.store.get("leases", "kube-node-lease", node_name)
        if lease is None or not holder:
            return
        renewed = clone(lease)
        renewed["spec"]["renewTime"] = rfc3339_micro()
        with contextlib.suppress(ObjectMissing):
            self.ctx.store.update("leases", renewed)


def apply_update(profile: NodeProfile, update: ProfileUpdate) -> None:
    for field in (
        "driver_version",
        "firmware_version",
        "kernel_version",
        "os_image",
        "kubelet_version",
        "container_runtime",
        "nic_driver",
        "gpu_product",
    ):
        value = getattr(update, field)
        if value is not None:
            setattr(profile, field, value)
    if update.health is not None:
        profile.health = update.health.model_copy(deep=True)
