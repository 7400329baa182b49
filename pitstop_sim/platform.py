"""What upgrade commands do to the rehearsal cluster: `kubeadm upgrade apply` changes the control
plane's version (/version, the static pods' images, kube-proxy and CoreDNS), package installs
change a node's dpkg view (a driver or kernel package takes effect at the next reboot), and
restarting the kubelet or containerd makes the node report the installed version.

Runs on the simulator's loop (`SimControl.platform`); the SSH node tools reach it through
`ClusterBackend`.
"""

from __future__ import annotations

import contextlib
import re
from typing import TYPE_CHECKING, Any

from pitstop_sim.admission import prepare_create
from pitstop_sim.clock import rfc3339
from pitstop_sim.controllers.kubelet import pod_ip, running_status
from pitstop_sim.models import NodeProfile, ProfileUpdate
from pitstop_sim.platform_objects import (
    STATIC_COMPONENTS,
    coredns_image,
    mirror_pod,
    static_image,
    upstream,
)
from pitstop_sim.ssh.pki import KUBEADM_CONFIGMAP
from pitstop_sim.store import ObjectMissing, clone

if TYPE_CHECKING:
    from pitstop_sim.api import KubeApi
    from pitstop_sim.context import SimContext
    from pitstop_sim.controllers.manager import ControllerManager

Obj = dict[str, Any]
SERVICES = ("kubelet", "containerd")


class PlatformError(Exception):
    pass


class PlatformOps:
    def __init__(self, ctx: SimContext, api: KubeApi, manager: ControllerManager) -> None:
        self.ctx = ctx
        self.api = api
        self.manager = manager

    def _profile(self, node: str) -> NodeProfile:
        profile = self.ctx.profiles.get(node)
        if profile is None:
            raise PlatformError(f"node {node!r} not found")
        return profile

    # --- control plane --------------------------------------------------------------------------
    def kubernetes_version(self) -> str:
        return self.ctx.kubernetes_version

    def upgrade_control_plane(self, version: str) -> None:
        """What a successful `kubeadm upgrade apply VERSION` leaves behind."""
        self.ctx.kubernetes_version = version
        for name, profile in self.ctx.profiles.items():
            if profile.role == "control-plane":
                self._restart_static_pods(name, version)
        self._set_image("daemonsets", "kube-system", "kube-proxy", f"registry.k8s.io/kube-proxy:{version}")
        self._set_image("deployments", "kube-system", "coredns", coredns_image(version))
        self._set_kubeadm_version(version)

    def _set_kubeadm_version(self, version: str) -> None:
        """kubeadm records the new version in the ClusterConfiguration it keeps in kube-system."""
        obj = self.ctx.store.get("configmaps", "kube-system", KUBEADM_CONFIGMAP)
        if obj is None:
            return
        updated = clone(obj)
        text = str((updated.get("data") or {}).get("ClusterConfiguration", ""))
        updated["data"]["ClusterConfiguration"] = re.sub(
            r"(?m)^kubernetesVersion: .*$", f"kubernetesVersion: {version}", text
        )
        self.api.update(self.ctx.rt("", "configmaps"), "kube-system", KUBEADM_CONFIGMAP, updated)

    def _restart_static_pods(self, node_name: str, version: str) -> None:
        """The kubelet restarts each static pod from its new manifest; its mirror pod is new too."""
        node = self.ctx.store.get("nodes", None, node_name)
        if node is None:
            return
        kubelet = self.manager.kubelet
        for component in STATIC_COMPONENTS:
            old = self.ctx.store.get("pods", "kube-system", f"{component}-{node_name}")
            image = static_image(component, version)
            if old is not None and old["spec"]["containers"][0].get("image") == image:
                continue
            if old is not None:
                with contextlib.suppress(ObjectMissing):
                    self.ctx.store.delete("pods", "kube-system", old["metadata"]["name"])
            pod = prepare_create(
                self.ctx.rt("", "pods"), mirror_pod(component, node, version), "kube-system", self.ctx.rng
            )
            ip = pod_ip(kubelet.node_index(node_name), pod["metadata"]["name"])
            pod["status"] = running_status(pod, kubelet.host_ip(node_name), ip)
            stored = self.ctx.store.create("pods", pod)
            self.ctx.logs[stored["metadata"]["uid"]] = f"{rfc3339()} starting {component} {version}\n"

    def _set_image(self, plural: str, namespace: str, name: str, image: str) -> None:
        """Change the first container's image through the API (a rollout follows)."""
        obj = self.ctx.store.get(plural, namespace, name)
        if obj is None:
            return
        containers = obj["spec"]["template"]["spec"]["containers"]
        if containers[0].get("image") == image:
            return
        updated = clone(obj)
        updated["spec"]["template"]["spec"]["containers"][0]["image"] = image
        self.api.update(self.ctx.rt("apps", plural), namespace, name, updated)

    # --- packages and services ------------------------------------------------------------------
    def install_packages(self, node: str, packages: dict[str, str]) -> NodeProfile:
        """Install `packages` (name -> version) on `node`. A driver or kernel takes effect at the
        next reboot; other binaries when their service restarts."""
        profile = self._profile(node)
        for name, version in packages.items():
            if name.startswith("nvidia-driver-"):
                # One driver branch at a time: the new branch's package replaces the old one.
                for other in [p for p in profile.packages if p.startswith("nvidia-driver-") and p != name]:
                    del profile.packages[other]
                profile.packages[name] = version
                self.manager.nodes.set_profile(
                    node, ProfileUpdate(driver_version=upstream(version), apply="reboot")
                )
            elif name.startswith("nvidia-fabricmanager-"):
                # One Fabric Manager branch at a time, like the driver; its daemon checks the
                # driver when it starts (`pitstop_sim.node_stack`).
                for other in [
                    p for p in profile.packages if p.startswith("nvidia-fabricmanager-") and p != name
                ]:
                    del profile.packages[other]
                profile.packages[name] = version
            elif name.startswith("linux-image-"):
                profile.packages[name] = version
                kernel = name.removeprefix("linux-image-")
                self.manager.nodes.set_profile(node, ProfileUpdate(kernel_version=kernel, apply="reboot"))
            else:
                profile.packages[name] = version
        return profile

    def remove_packages(self, node: str, names: list[str]) -> NodeProfile:
        """`apt-get remove`: gone from the dpkg view; a removed driver or kernel keeps running
        until the next boot, which chooses again (`boot_kernel`)."""
        profile = self._profile(node)
        for name in names:
            profile.packages.pop(name, None)
            if name in profile.held:
                profile.held.remove(name)
        return profile

    def boot_kernel(self, node: str, release: str) -> NodeProfile:
        return self.manager.nodes.set_profile(node, ProfileUpdate(kernel_version=release, apply="reboot"))

    def set_held(self, node: str, names: list[str], held: bool) -> NodeProfile:
        profile = self._profile(node)
        for name in names:
            if held and name not in profile.held:
                profile.held.append(name)
            elif not held and name in profile.held:
                profile.held.remove(name)
        return profile

    def restart_service(self, node: str, service: str) -> NodeProfile:
        """The restarted daemon runs the installed package's version; the node stays Ready."""
        profile = self._profile(node)
        if service == "kubelet" and "kubelet" in profile.packages:
            version = f"v{upstream(profile.packages['kubelet'])}"
            return self.manager.nodes.set_profile(node, ProfileUpdate(kubelet_version=version))
        if service == "containerd" and "containerd.io" in profile.packages:
            runtime = f"containerd://{upstream(profile.packages['containerd.io'])}"
            return self.manager.nodes.set_profile(node, ProfileUpdate(container_runtime=runtime))
        return profile
