"""Where each component's version is found (pure): one function per kind of source in the
component table, each answering `{where: version}` for what it saw."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pitstop.helm import HelmRelease
from pitstop.kube.objects import Obj, annotations_of, key_of, labels_of, name_of
from pitstop.versions.components import (
    AnnotationSource,
    ApiserverSource,
    Component,
    ControlPlaneSource,
    HelmSource,
    ImagePattern,
    ImageSource,
    NodeInfoSource,
    NodeLabelSource,
    PackageSource,
    SshFactSource,
)

Unit = Literal["node", "workload", "release", "cluster"]

# The first dotted run of numbers at the start of an image tag: v24.6.2, 3.3.7-3.5.0-ubuntu22.04
# -> 3.3.7, 24.08-py3 -> 24.08, 550.90.07-ubuntu22.04 -> 550.90.07.
_TAG_VERSION = re.compile(r"^(v?\d+(?:\.\d+)+)")


@dataclass(frozen=True)
class ClusterView:
    """What the activity read from the cluster, and the SSH facts it was given (node -> facts)."""

    version: Mapping[str, Any] | None
    nodes: list[Obj]
    gpu_nodes: frozenset[str]
    control_plane_pods: list[Obj] = field(default_factory=list)
    # kube-system's kube-proxy pods (label k8s-app=kube-proxy): each node's kube-proxy version.
    proxy_pods: list[Obj] = field(default_factory=list)
    workloads: list[Obj] = field(default_factory=list)
    helm_releases: list[HelmRelease] = field(default_factory=list)
    facts: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass
class Found:
    """The versions a component was found at, where (node, workload, release), and from which
    sources (human-readable, in the order used)."""

    unit: Unit
    where: dict[str, str] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)

    def add(self, where: str, version: str, source: str) -> None:
        self.where[where] = version
        if source not in self.sources:
            self.sources.append(source)


# --- images --------------------------------------------------------------------------------


def split_image(image: str) -> tuple[str, str | None]:
    """`nvcr.io/nvidia/gpu-operator:v24.6.2@sha256:..` -> (`nvcr.io/nvidia/gpu-operator`, `v24.6.2`)."""
    ref = image.split("@", 1)[0]
    repo, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:
        return ref, None
    return repo, tag


def repository_matches(repository: str, pattern: str) -> bool:
    """Whole path segments at the end: `calico/node` matches `docker.io/calico/node`."""
    repo = repository.strip("/").split("/")
    want = pattern.strip("/").split("/")
    return len(repo) >= len(want) and repo[-len(want) :] == want


def tag_version(tag: str | None, pattern: ImagePattern) -> str:
    if not tag:
        return "latest"
    if pattern.tag_pattern:
        match = re.search(pattern.tag_pattern, tag)
        if match:
            return match.group(1)
    match = _TAG_VERSION.match(tag)
    return match.group(1) if match else tag


def pod_spec(obj: Obj) -> Obj:
    """The pod spec of a pod or of a workload's template."""
    spec = obj.get("spec") or {}
    template = spec.get("template")
    if isinstance(template, dict):
        inner = template.get("spec")
        return inner if isinstance(inner, dict) else {}
    return spec if isinstance(spec, dict) else {}


def images_of(obj: Obj) -> list[str]:
    spec = pod_spec(obj)
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    return [str(c.get("image")) for c in containers if isinstance(c, dict) and c.get("image")]


def image_match(image: str, patterns: list[ImagePattern]) -> tuple[str, str] | None:
    """(version, repository) of an image matching one of the patterns, the product prefixed."""
    repository, tag = split_image(image)
    for pattern in patterns:
        if any(repository_matches(repository, p) for p in pattern.repositories):
            version = tag_version(tag, pattern)
            return (f"{pattern.product} {version}" if pattern.product else version), repository
    return None


# --- sources -------------------------------------------------------------------------------


def _fact(facts: Mapping[str, Any], path: str) -> Any:
    value: Any = facts
    for part in path.split("."):
        if isinstance(value, Mapping):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def debian_upstream(version: str) -> str:
    """`1.30.6-1.1` -> `v1.30.6` (epoch and Debian revision dropped, as Kubernetes writes it)."""
    upstream = version.split(":", 1)[-1].rsplit("-", 1)[0]
    return upstream if upstream.startswith("v") else f"v{upstream}"


def node_value(source: Any, node: Obj | None, facts: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(version, source description) of one node source on one node, or None."""
    if isinstance(source, NodeInfoSource):
        info = ((node or {}).get("status") or {}).get("nodeInfo") or {}
        value = info.get(source.field)
        return (str(value), f"node status.nodeInfo.{source.field}") if value else None
    if isinstance(source, NodeLabelSource):
        labels = labels_of(node or {})
        if source.labels:
            for label in source.labels:
                if labels.get(label):
                    return labels[label], f"node label {label}"
            return None
        parts = [labels.get(label) for label in source.join]
        if parts and parts[0]:
            present = [p for p in parts if p]
            return ".".join(present), f"node labels {', '.join(source.join[: len(present)])}"
        return None
    if isinstance(source, SshFactSource):
        value = _fact(facts or {}, source.fact)
        if value is None or value == "":
            return None
        return f"{source.prefix}{value}", f"ssh facts ({source.fact})"
    if isinstance(source, PackageSource):
        value = _fact(facts or {}, f"packages.{source.package}")
        if not value:
            return None
        return debian_upstream(str(value)), f"ssh facts (dpkg {source.package})"
    return None


def detect_nodes(component: Component, view: ClusterView, found: Found, node_names: list[str]) -> None:
    """Fill `found` per node from the component's node sources, in order: a node takes its
    version from the first source that has one for it."""
    nodes = {name_of(n): n for n in view.nodes}
    for source in component.detect:
        for name in node_names:
            if name in found.where:
                continue
            hit = node_value(source, nodes.get(name), view.facts.get(name))
            if hit is not None:
                found.add(name, *hit)


def detect_cluster(source: Any, view: ClusterView) -> Found | None:
    """A cluster-level source: apiserver, control-plane pods, images, Helm, annotations."""
    if isinstance(source, ApiserverSource):
        git = (view.version or {}).get("gitVersion")
        if not git:
            return None
        found = Found("cluster")
        found.add("apiserver", str(git), "apiserver /version")
        return found
    if isinstance(source, ControlPlaneSource):
        found = Found("node")
        for pod in view.control_plane_pods:
            if labels_of(pod).get("component") != source.component:
                continue
            for image in images_of(pod):
                repository, tag = split_image(image)
                if repository_matches(repository, source.component) and tag:
                    node = str((pod.get("spec") or {}).get("nodeName") or name_of(pod))
                    found.add(node, tag, f"kube-system pod component={source.component} (image tag)")
        return found if found.where else None
    if isinstance(source, ImageSource):
        found = Found("workload")
        for workload in view.workloads:
            for image in images_of(workload):
                hit = image_match(image, source.images)
                if hit is not None:
                    found.add(key_of(workload), hit[0], f"image tag ({hit[1]})")
                    break
        return found if found.where else None
    if isinstance(source, HelmSource):
        found = Found("release")
        for release in view.helm_releases:
            if release.chart_name in source.charts and release.status == "deployed":
                version = release.app_version or release.chart_version
                found.add(f"{release.namespace}/{release.name}", version, f"helm release {release.name}")
        return found if found.where else None
    if isinstance(source, AnnotationSource):
        found = Found("workload")
        for workload in view.workloads:
            template = ((workload.get("spec") or {}).get("template") or {}).get("metadata") or {}
            value = annotations_of(workload).get(source.key) or (template.get("annotations") or {}).get(
                source.key
            )
            if value:
                found.add(key_of(workload), str(value), f"workload annotation {source.key}")
        return found if found.where else None
    return None
