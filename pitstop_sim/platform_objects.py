"""Objects of the scenario's platform, built from its `platform:` section: node packages,
control-plane mirror pods, CRDs, webhook configurations, Services and Helm release Secrets.

Pure functions from spec to object bodies; `platform_seed` stores them and `platform` keeps
them in step when upgrade commands change versions.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import yaml

from pitstop.helm import HelmRelease, encode_release
from pitstop_sim.models import NodeProfile
from pitstop_sim.platform_spec import Component, CrdSpec, HelmChart, Platform, WebhookSpec

Obj = dict[str, Any]

CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
CONTROL_PLANE_TAINT = {"key": CONTROL_PLANE_LABEL, "effect": "NoSchedule"}
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
STATIC_COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd")
# What kubeadm deploys with each minor (constants.go: etcd per Kubernetes version, CoreDNS).
ETCD_IMAGE = {28: "3.5.9-0", 29: "3.5.10-0", 30: "3.5.15-0", 31: "3.5.15-0", 32: "3.5.16-0", 33: "3.5.21-0"}
COREDNS_IMAGE = {28: "v1.10.1", 29: "v1.11.1", 30: "v1.11.1", 31: "v1.11.3", 32: "v1.11.3", 33: "v1.12.0"}


def upstream(version: str) -> str:
    """A Debian package version's upstream part: `1.30.6-1.1` -> `1.30.6`, `1:2.0-3` -> `2.0`."""
    return version.split(":", 1)[-1].split("-", 1)[0]


def kube_minor(version: str) -> int:
    return int(version.lstrip("v").split(".")[1])


def runtime_version(container_runtime: str) -> str:
    """`containerd://1.7.20` -> `1.7.20`."""
    return container_runtime.split("://", 1)[-1]


def driver_package(driver_version: str) -> str:
    """`550.90.07` -> `nvidia-driver-550` (Ubuntu's package per driver branch)."""
    return f"nvidia-driver-{driver_version.split('.', 1)[0]}"


def kernel_package(kernel_version: str) -> str:
    return f"linux-image-{kernel_version}"


def kernel_package_version(release: str) -> str:
    """`5.15.0-105-generic` -> `5.15.0-105.1`: the archive's version of a release's packages
    (image, headers, prebuilt modules), one per release as in Ubuntu's archive."""
    flavourless = re.sub(r"-[a-z][a-z0-9-]*$", "", release)
    return f"{flavourless}.1"


def node_packages(profile: NodeProfile, platform: Platform) -> dict[str, str]:
    """The node's dpkg view: defaults from its versions, then the scenario's packages."""
    kube = profile.kubelet_version.lstrip("v")
    packages = {
        "kubeadm": f"{kube}-1.1",
        "kubelet": f"{kube}-1.1",
        "kubectl": f"{kube}-1.1",
        "containerd.io": f"{runtime_version(profile.container_runtime)}-1",
        kernel_package(profile.kernel_version): kernel_package_version(profile.kernel_version),
    }
    if profile.role == "gpu" and profile.driver_version:
        packages[driver_package(profile.driver_version)] = f"{profile.driver_version}-0ubuntu1"
        # DKMS built the driver's modules against these; without them the driver would not load.
        packages[f"linux-headers-{profile.kernel_version}"] = kernel_package_version(profile.kernel_version)
    for name, version in platform.packages.items():
        if profile.role == "control-plane" and name.startswith("nvidia-driver-"):
            continue  # no GPUs, no driver
        if name.startswith("nvidia-driver-"):
            packages = {k: v for k, v in packages.items() if not k.startswith("nvidia-driver-")}
        packages[name] = version
    packages.update(platform.node_packages.get(profile.name, {}))
    return packages


# --- control plane ----------------------------------------------------------------------------
def static_image(component: str, version: str) -> str:
    if component == "etcd":
        return f"registry.k8s.io/etcd:{ETCD_IMAGE.get(kube_minor(version), '3.5.15-0')}"
    return f"registry.k8s.io/{component}:{version}"


def coredns_image(version: str) -> str:
    return f"registry.k8s.io/coredns/coredns:{COREDNS_IMAGE.get(kube_minor(version), 'v1.11.3')}"


def mirror_pod(component: str, node: Obj, version: str) -> Obj:
    """The kubelet's mirror of a static control-plane pod (kubeadm's manifests)."""
    node_name = node["metadata"]["name"]
    image = static_image(component, version)
    config_hash = hashlib.sha256(f"{component}/{node_name}/{image}".encode()).hexdigest()[:32]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{component}-{node_name}",
            "namespace": "kube-system",
            "labels": {"component": component, "tier": "control-plane"},
            "annotations": {
                MIRROR_ANNOTATION: config_hash,
                "kubernetes.io/config.hash": config_hash,
                "kubernetes.io/config.source": "file",
            },
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": node_name,
                    "uid": node["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": node_name,
            "hostNetwork": True,
            "priorityClassName": "system-node-critical",
            "priority": 2000001000,
            "containers": [{"name": component, "image": image, "command": [component]}],
            "tolerations": [{"operator": "Exists", "effect": "NoExecute"}],
        },
    }


# --- CRDs, webhooks, services --------------------------------------------------------------------
def crd_body(spec: CrdSpec) -> Obj:
    singular = spec.kind.lower()
    body: Obj = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": spec.name},
        "spec": {
            "group": spec.group,
            "names": {
                "plural": spec.plural,
                "singular": singular,
                "kind": spec.kind,
                "listKind": f"{spec.kind}List",
            },
            "scope": spec.scope,
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": version == spec.storage_version,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
                for version in spec.versions
            ],
            "conversion": {"strategy": "None"},
        },
    }
    service = spec.conversion.service
    if spec.conversion.strategy == "Webhook" and service is not None:
        body["spec"]["conversion"] = {
            "strategy": "Webhook",
            "webhook": {
                "clientConfig": {
                    "service": {
                        "namespace": service.namespace,
                        "name": service.name,
                        "path": service.path or "/convert",
                        "port": service.port,
                    }
                },
                "conversionReviewVersions": ["v1"],
            },
        }
    return body


def webhook_configuration(spec: WebhookSpec) -> tuple[str, Obj]:
    """(plural, body) of a validating or mutating webhook configuration."""
    kind = "ValidatingWebhookConfiguration" if spec.kind == "validating" else "MutatingWebhookConfiguration"
    service: Obj = {"namespace": spec.service.namespace, "name": spec.service.name, "port": spec.service.port}
    if spec.service.path:
        service["path"] = spec.service.path
    webhook: Obj = {
        "name": f"{spec.name}.{spec.service.namespace}.svc",
        "clientConfig": {"service": service},
        "rules": [dict(rule) for rule in spec.rules],
        "failurePolicy": spec.failure_policy,
        "matchPolicy": "Equivalent",
        "namespaceSelector": {},
        "objectSelector": {},
        "sideEffects": "None",
        "timeoutSeconds": 10,
        "admissionReviewVersions": ["v1"],
    }
    if spec.kind == "mutating":
        webhook["reinvocationPolicy"] = "Never"
    body = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": spec.name},
        "webhooks": [webhook],
    }
    return f"{kind.lower()}s", body


def service_body(component: Component, name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": component.namespace, "labels": {"app": component.name}},
        "spec": {
            "type": "ClusterIP",
            "selector": {"app": component.name},
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 9443}],
        },
    }


# --- Helm ----------------------------------------------------------------------------------------
def workload_manifest(component: Component) -> Obj:
    """The component's workload as its chart renders it (what `helm get manifest` shows)."""
    labels = {"app": component.name, **component.labels}
    pod: Obj = {
        "metadata": {"labels": dict(labels)},
        "spec": {"containers": [{"name": component.name, "image": component.image}]},
    }
    if component.annotations:
        pod["metadata"]["annotations"] = dict(component.annotations)
    spec: Obj = {"selector": {"matchLabels": {"app": component.name}}, "template": pod}
    if component.kind == "Deployment":
        spec = {"replicas": component.replicas, **spec}
    return {
        "apiVersion": "apps/v1",
        "kind": component.kind,
        "metadata": {"name": component.name, "namespace": component.namespace, "labels": labels},
        "spec": spec,
    }


def render_manifest(chart: HelmChart, objects: list[Obj]) -> str:
    docs = []
    for index, obj in enumerate(objects):
        kind = str(obj.get("kind", "object")).lower()
        source = f"# Source: {chart.chart}/templates/{kind}-{index}.yaml\n"
        docs.append("---\n" + source + yaml.safe_dump(obj, sort_keys=False))
    return "".join(docs)


def helm_secret(chart: HelmChart, namespace: str, objects: list[Obj], crds: dict[str, Obj]) -> Obj:
    """The Secret Helm 3 keeps for the chart's release (the current revision, deployed)."""
    files: dict[str, str | bytes] = {
        "values.yaml": "# default values\n",
        **{f"crds/{name}.yaml": yaml.safe_dump(body, sort_keys=False) for name, body in crds.items()},
    }
    release = HelmRelease(
        name=chart.release,
        namespace=namespace,
        version=chart.revision,
        status="deployed",
        chart_name=chart.chart,
        chart_version=chart.version,
        app_version=chart.app_version or chart.version,
        manifest=render_manifest(chart, [*objects, *(dict(o) for o in chart.objects)]),
        files=files,
    )
    return encode_release(release)
