"""Seeds the scenario's `platform:` section: control-plane mirror pods and kube-proxy, the
components (Deployments, DaemonSets, their Services), CRDs with their stored versions,
webhook configurations and Helm release Secrets. Called by `Seeder` at the right moments
(CRDs before nodes, DaemonSets before the workloads that fill nodes, the rest last)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pitstop_sim.platform_objects import (
    STATIC_COMPONENTS,
    crd_body,
    helm_secret,
    mirror_pod,
    service_body,
    webhook_configuration,
    workload_manifest,
)
from pitstop_sim.platform_spec import Component, Platform
from pitstop_sim.scenario import Deployment
from pitstop_sim.ssh.pki import KUBEADM_CONFIGMAP, cluster_configuration
from pitstop_sim.store import clone

if TYPE_CHECKING:
    from pitstop_sim.seed import Seeder

Obj = dict[str, Any]


def platform_namespaces(platform: Platform) -> list[str]:
    out: list[str] = []
    for ns in [
        *(c.namespace for c in platform.components),
        *(r.namespace for r in platform.helm_releases),
    ]:
        if ns not in out:
            out.append(ns)
    return out


class PlatformSeeder:
    def __init__(self, seeder: Seeder) -> None:
        assert seeder.scenario.platform is not None
        self.seeder = seeder
        self.ctx = seeder.ctx
        self.platform: Platform = seeder.scenario.platform
        self.ctx.kubernetes_version = self.platform.kubernetes_version

    def crds(self, builtin: list[Obj]) -> list[Obj]:
        """The built-in CRDs, each replaced by the scenario's definition of the same name."""
        mine = {spec.name: crd_body(spec) for spec in self.platform.crds}
        out = [mine.pop(crd["metadata"]["name"], crd) for crd in builtin]
        return out + list(mine.values())

    def control_plane(self) -> None:
        version = self.platform.kubernetes_version
        for name in self.seeder.scenario.control_plane_names():
            node = self.ctx.store.get("nodes", None, name)
            assert node is not None
            for component in STATIC_COMPONENTS:
                self.seeder._take(name, {})
                self.seeder._running_pod(mirror_pod(component, node, version), name)
        self.seeder._daemonset(
            "kube-proxy",
            "kube-system",
            f"registry.k8s.io/kube-proxy:{version}",
            gpu_only=False,
            tolerate_all=True,
            labels={"k8s-app": "kube-proxy"},
        )
        # What `kubeadm init` uploads (and `kubeadm upgrade apply` updates): dr.pki_backup reads it.
        config = cluster_configuration("kubernetes", self.seeder.scenario.control_plane_names(), version)
        self.seeder._create(
            "",
            "configmaps",
            "kube-system",
            {"metadata": {"name": KUBEADM_CONFIGMAP}, "data": {"ClusterConfiguration": config}},
        )

    def daemonsets(self) -> None:
        for c in self.platform.components:
            if c.kind == "DaemonSet":
                self.seeder._daemonset(
                    c.name,
                    c.namespace,
                    c.image,
                    gpu_only=c.nodes == "gpu",
                    tolerate_gpu=c.nodes == "gpu",
                    tolerate_all=c.nodes == "all",
                    labels=c.labels,
                    annotations=c.annotations,
                )

    def deployments(self) -> None:
        for c in self.platform.components:
            if c.kind == "Deployment":
                spec = Deployment(
                    name=c.name,
                    namespace=c.namespace,
                    replicas=c.replicas,
                    gpus=c.gpus,
                    image=c.image,
                    labels=c.labels,
                    node_selector=c.node_selector,
                )
                self.seeder._deployment(spec, c.annotations or None)

    def finish(self) -> None:
        self._stored_versions()
        for c in self.platform.components:
            if c.service:
                self.seeder._create("", "services", c.namespace, service_body(c, c.service))
        for spec in self.platform.webhooks:
            plural, body = webhook_configuration(spec)
            self.seeder._create("admissionregistration.k8s.io", plural, None, body)
        for c in self.platform.components:
            if c.helm is not None:
                objects = [workload_manifest(c)] + ([service_body(c, c.service)] if c.service else [])
                self._helm(c, objects)
        for release in self.platform.helm_releases:
            secret = helm_secret(release, release.namespace, [], self._crds(release.crds))
            self.seeder._create("", "secrets", release.namespace, secret)

    def _helm(self, c: Component, objects: list[Obj]) -> None:
        assert c.helm is not None
        secret = helm_secret(c.helm, c.namespace, objects, self._crds(c.helm.crds))
        self.seeder._create("", "secrets", c.namespace, secret)

    def _crds(self, names: list[str]) -> dict[str, Obj]:
        out: dict[str, Obj] = {}
        for name in names:
            crd = self.ctx.store.get("customresourcedefinitions", None, name)
            if crd is not None:
                body = {k: v for k, v in clone(crd).items() if k != "status"}
                body["metadata"] = {"name": name}
                out[name] = body
        return out

    def _stored_versions(self) -> None:
        for spec in self.platform.crds:
            if spec.stored_versions is None:
                continue
            crd = self.ctx.store.get("customresourcedefinitions", None, spec.name)
            if crd is None:
                continue
            updated = clone(crd)
            updated.setdefault("status", {})["storedVersions"] = list(spec.stored_versions)
            self.ctx.store.update("customresourcedefinitions", updated)
