"""Turns a scenario into the cluster's first objects: namespaces, nodes (with their profiles
and leases), CRDs, the GPU Operator, and the scenario's workloads already running.

Seeding writes straight to the store (no controller delays), so a 1,000-node cluster with
20,000 pods is ready in seconds; the controllers then find everything consistent.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from pitstop.kube.objects import labels_of, name_of
from pitstop_sim.admission import prepare_create
from pitstop_sim.annotations import (
    CHECKPOINT_PROTOCOL,
    CHECKPOINT_SECONDS,
    DOMAIN_LABEL,
    DRIVER_VERSION_LABEL,
    FIRMWARE_VERSION_LABEL,
    GANG_LABEL,
    GPU_COUNT_LABEL,
    GPU_PRESENT_LABEL,
    GPU_PRODUCT_LABEL,
    HOSTNAME_LABEL,
    KUEUE_QUEUE_LABEL,
)
from pitstop_sim.api import KubeApi
from pitstop_sim.clock import rfc3339, rfc3339_micro
from pitstop_sim.context import SimContext
from pitstop_sim.controllers.kubelet import Kubelet, pod_ip, running_status
from pitstop_sim.controllers.workloads import (
    DAEMONSET_TOLERATIONS,
    daemon_pod,
    pod_from_template,
    template_hash,
)
from pitstop_sim.crds import gpu_operator_crds, kueue_crds, training_operator_crds, volcano_crds
from pitstop_sim.gpu_operator import (
    DRIVER_DAEMONSET,
    DRIVER_IMAGE_NAME,
    DRIVER_POD_LABELS,
    DRIVER_REPOSITORY,
    default_upgrade_policy,
    driver_image,
)
from pitstop_sim.models import NodeProfile, node_info_kube_proxy_version
from pitstop_sim.objects import (
    GENERATE_NAME_ATTEMPTS,
    GPU,
    new_uid,
    node_affinity_matches,
    owner_ref,
    pod_requests,
    random_suffix,
    redraw_suffix,
    untolerated,
)
from pitstop_sim.platform_objects import CONTROL_PLANE_LABEL, CONTROL_PLANE_TAINT, node_packages
from pitstop_sim.platform_seed import PlatformSeeder, platform_namespaces
from pitstop_sim.quantity import parse_quantity
from pitstop_sim.scenario import Deployment, NodeOverride, Pdb, Scenario, TrainingJob
from pitstop_sim.store import clone
from pitstop_sim.training_frameworks import (
    FRAMEWORK_STORAGE,
    direct_pod_marks,
    framework_object,
    jobset_job,
    kueue_workload,
    volcano_objects,
)

Obj = dict[str, Any]

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
GPU_OPERATOR_NAMESPACE = "gpu-operator"
# The driver DaemonSet is seeded only when the scenario's driver is operator-managed
# (`cluster.driver_management: operator`, see `_gpu_operator`).
GPU_OPERATOR_DAEMONSETS = (
    ("nvidia-device-plugin-daemonset", "nvcr.io/nvidia/k8s-device-plugin:v0.16.2"),
    ("nvidia-dcgm-exporter", "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.7-3.5.0-ubuntu22.04"),
)


class SeedError(ValueError):
    pass


def _quantity(name: str, value: Decimal) -> str:
    if name in ("memory", "ephemeral-storage"):
        return f"{name}={value / (1 << 30):g}Gi"
    return f"{name}={value:g}"


def node_profiles(scenario: Scenario) -> dict[str, NodeProfile]:
    shape = scenario.cluster
    platform = scenario.platform
    # With a platform, kubelets run the cluster's version unless the scenario says otherwise.
    kubelet_default = shape.kubelet_version
    if platform is not None and "kubelet_version" not in shape.model_fields_set:
        kubelet_default = platform.kubernetes_version
    out: dict[str, NodeProfile] = {}
    for index, name in enumerate(shape.node_names()):
        override = shape.node_overrides.get(name)
        profile = NodeProfile(
            name=name,
            domain=(override.domain if override and override.domain else shape.domain_of(index)),
            gpu_product=(override.gpu_product if override and override.gpu_product else shape.gpu_product),
            gpus=(override.gpus if override and override.gpus is not None else shape.gpus_per_node),
            driver_version=(
                override.driver_version if override and override.driver_version else shape.driver_version
            ),
            firmware_version=(
                override.firmware_version
                if override and override.firmware_version
                else shape.firmware_version
            ),
            kernel_version=(
                override.kernel_version if override and override.kernel_version else shape.kernel_version
            ),
            os_image=(override.os_image if override and override.os_image else shape.os_image),
            kubelet_version=(
                override.kubelet_version if override and override.kubelet_version else kubelet_default
            ),
            container_runtime=shape.container_runtime,
            health=scenario.health_of(name),
            boot_id=new_uid(),
        )
        out[name] = profile
    if platform is not None:
        domains = shape.domain_names()
        for index, name in enumerate(scenario.control_plane_names()):
            out[name] = NodeProfile(
                name=name,
                domain=domains[index % len(domains)],
                gpu_product="",
                gpus=0,
                driver_version="",
                firmware_version="",
                kernel_version=shape.kernel_version,
                os_image=shape.os_image,
                kubelet_version=platform.kubernetes_version,
                container_runtime=shape.container_runtime,
                role="control-plane",
                boot_id=new_uid(),
            )
        for profile in out.values():
            profile.packages = node_packages(profile, platform)
            if shape.driver_management == "operator":
                # The driver container brings the driver: no host package.
                profile.packages = {
                    k: v for k, v in profile.packages.items() if not k.startswith("nvidia-driver-")
                }
            if profile.role == "gpu" and profile.gpus > 0:
                profile.nic_driver = platform.nic_driver
    return out


class Seeder:
    def __init__(self, ctx: SimContext, api: KubeApi, kubelet: Kubelet) -> None:
        self.ctx = ctx
        self.api = api
        self.kubelet = kubelet
        self.scenario = ctx.scenario
        self._free: dict[str, dict[str, Decimal]] = {}
        self._nodes: list[Obj] = []
        self._cursor = 0

    def seed(self) -> None:
        scenario = self.scenario
        namespaces = list(SYSTEM_NAMESPACES)
        if scenario.cluster.gpu_operator:
            namespaces.append(GPU_OPERATOR_NAMESPACE)
        if scenario.cluster.kueue:
            namespaces.append("kueue-system")
        workloads = scenario.workloads
        platform = scenario.platform
        for ns in [
            *(platform_namespaces(platform) if platform else []),
            *workloads.namespaces,
            *(d.namespace for d in workloads.deployments),
            *(t.namespace for t in workloads.training_jobs),
            *(d.namespace for d in workloads.daemonsets),
            *(q.namespace for cq in workloads.cluster_queues for q in cq.local_queues),
        ]:
            if ns not in namespaces:
                namespaces.append(ns)
        for ns in namespaces:
            self._create("", "namespaces", None, {"metadata": {"name": ns}})
        for sa_ns in namespaces:
            self._create("", "serviceaccounts", sa_ns, {"metadata": {"name": "default", "namespace": sa_ns}})
        crds = []
        if scenario.cluster.kueue:
            crds += kueue_crds()
        if scenario.cluster.gpu_operator:
            crds += gpu_operator_crds()
        operators = {
            FRAMEWORK_STORAGE[t.framework][3]
            for t in scenario.workloads.training_jobs
            if t.framework in FRAMEWORK_STORAGE
        }
        crds += training_operator_crds(operators)
        if any(t.framework == "volcano" for t in scenario.workloads.training_jobs):
            crds += volcano_crds()
        platform_seed = PlatformSeeder(self) if platform is not None else None
        if platform_seed is not None:
            crds = platform_seed.crds(crds)
        for crd in crds:
            self.api.create(self.ctx.rt("apiextensions.k8s.io", "customresourcedefinitions"), None, crd)
        self.ctx.profiles.update(node_profiles(scenario))
        for name in scenario.all_node_names():
            self._node(self.ctx.profiles[name])
        self._nodes = self.ctx.store.list("nodes").items
        if platform_seed is not None:
            platform_seed.control_plane()
            platform_seed.daemonsets()
        if scenario.cluster.gpu_operator:
            self._gpu_operator()
        for ds in workloads.daemonsets:
            self._daemonset(ds.name, ds.namespace, ds.image, gpu_only=ds.gpu_nodes_only)
        # Gangs take whole nodes: place them before the services that fit anywhere.
        for job in workloads.training_jobs:
            self._training_job(job)
        for deploy in workloads.deployments:
            self._deployment(deploy)
        if platform_seed is not None:
            platform_seed.deployments()
            platform_seed.finish()
        for cq in workloads.cluster_queues:
            self._cluster_queue(
                cq.name, cq.stop_policy, cq.gpus, [(q.namespace, q.name) for q in cq.local_queues]
            )
        self.ctx.pdbs_never_allow.update(scenario.faults.pdbs_never_allow)

    # --- objects ------------------------------------------------------------------------------

    def _create(self, group: str, plural: str, namespace: str | None, body: Obj) -> Obj:
        rt = self.ctx.rt(group, plural)
        obj = prepare_create(rt, body, namespace, self.ctx.rng)
        return self.ctx.store.create(rt.storage, obj)

    def _node(self, profile: NodeProfile) -> None:
        override = self.scenario.cluster.node_overrides.get(profile.name)
        capacity = self._node_capacity(profile)
        body = {
            "metadata": {
                "name": profile.name,
                "labels": _node_labels(profile, override),
                "annotations": {
                    "node.alpha.kubernetes.io/ttl": "0",
                    "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                },
            },
            "spec": _node_spec(profile, self.kubelet.node_index(profile.name), override),
            "status": {
                "capacity": capacity,
                "allocatable": dict(capacity),
                "conditions": _node_conditions(rfc3339()),
                "addresses": [
                    {"type": "InternalIP", "address": self.kubelet.host_ip(profile.name)},
                    {"type": "Hostname", "address": profile.name},
                ],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": _node_info(profile),
            },
        }
        node = self._create("", "nodes", None, body)
        self._free[profile.name] = {k: parse_quantity(v) for k, v in capacity.items()}
        lease = {
            "metadata": {
                "name": profile.name,
                "namespace": "kube-node-lease",
                "ownerReferences": [{**owner_ref(node, block=False), "controller": False}],
            },
            "spec": {
                "holderIdentity": profile.name,
                "leaseDurationSeconds": 40,
                "renewTime": rfc3339_micro(),
            },
        }
        self._create("coordination.k8s.io", "leases", "kube-node-lease", lease)

    def _node_capacity(self, profile: NodeProfile) -> dict[str, str]:
        """A control-plane node has the platform's control-plane shape, if it names one."""
        shape = self.scenario.cluster
        cp_shape = self.scenario.platform.control_plane if self.scenario.platform else None
        control_plane = profile.role == "control-plane"
        capacity = {
            "cpu": cp_shape.cpu if control_plane and cp_shape else shape.cpu,
            "memory": cp_shape.memory if control_plane and cp_shape else shape.memory,
            "pods": str(shape.max_pods),
            "ephemeral-storage": "3840Gi",
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
        }
        if profile.gpus > 0:
            capacity[GPU] = str(profile.gpus)
        return capacity

    # --- placement ----------------------------------------------------------------------------

    def _fits(self, node: Obj, pod: Obj, requests: dict[str, Decimal]) -> bool:
        free = self._free[name_of(node)]
        if free.get("pods", Decimal(0)) < 1:
            return False
        if any(v > 0 and free.get(k, Decimal(0)) < v for k, v in requests.items()):
            return False
        if (node.get("spec") or {}).get("unschedulable"):
            return False
        taints = (node.get("spec") or {}).get("taints") or []
        if untolerated((pod.get("spec") or {}).get("tolerations") or [], taints, ("NoSchedule", "NoExecute")):
            return False
        return node_affinity_matches(pod, labels_of(node))

    def _place(self, pod: Obj, preferred: str | None, avoid: set[str] | None = None) -> str:
        requests = pod_requests(pod)
        if preferred is not None:
            node = next((n for n in self._nodes if name_of(n) == preferred), None)
            if node is None or not self._fits(node, pod, requests):
                raise SeedError(f"cannot place pod {name_of(pod)} on {preferred}: it does not fit there")
            return self._take(preferred, requests)
        count = len(self._nodes)
        for step in range(count):
            node = self._nodes[(self._cursor + step) % count]
            if avoid and name_of(node) in avoid:
                continue
            if self._fits(node, pod, requests):
                self._cursor = (self._cursor + step + 1) % count
                return self._take(name_of(node), requests)
        raise SeedError(
            f"the scenario's workloads do not fit: no node has room for pod {name_of(pod)} "
            f"(requests {', '.join(_quantity(k, v) for k, v in requests.items()) or 'nothing'})"
        )

    def _take(self, node: str, requests: dict[str, Decimal]) -> str:
        free = self._free[node]
        for key, value in requests.items():
            free[key] = free.get(key, Decimal(0)) - value
        free["pods"] = free.get("pods", Decimal(0)) - 1
        return node

    def _running_pod(self, pod: Obj, node: str) -> Obj:
        """Store `pod` (built for this call) running on `node`. Its name ends in a random suffix
        (generateName's 5 characters): on a clash, as the apiserver does, another is drawn; at
        10,000 nodes a DaemonSet's names clash almost surely."""
        prepared = prepare_create(
            self.ctx.rt("", "pods"), pod, pod["metadata"]["namespace"], self.ctx.rng, fresh=True
        )
        prepared["spec"]["nodeName"] = node
        for _ in range(GENERATE_NAME_ATTEMPTS):
            if self.ctx.store.get("pods", prepared["metadata"]["namespace"], name_of(prepared)) is None:
                break
            prepared["metadata"]["name"] = redraw_suffix(name_of(prepared), self.ctx.rng)
        prepared["status"] = running_status(
            prepared, self.kubelet.host_ip(node), pod_ip(self.kubelet.node_index(node), name_of(prepared))
        )
        stored = self.ctx.store.create("pods", prepared)
        self.ctx.logs[stored["metadata"]["uid"]] = f"{rfc3339()} starting on {node}\n"
        return stored

    def _pending_pod(self, pod: Obj) -> Obj:
        """Store `pod` (built for this call) unscheduled, for the scheduler."""
        prepared = prepare_create(
            self.ctx.rt("", "pods"), pod, pod["metadata"]["namespace"], self.ctx.rng, fresh=True
        )
        for _ in range(GENERATE_NAME_ATTEMPTS):
            if self.ctx.store.get("pods", prepared["metadata"]["namespace"], name_of(prepared)) is None:
                break
            prepared["metadata"]["name"] = redraw_suffix(name_of(prepared), self.ctx.rng)
        return self.ctx.store.create("pods", prepared)

    # --- workloads ----------------------------------------------------------------------------

    def _gpu_operator(self) -> None:
        cluster = self.scenario.cluster
        operator_driver = cluster.driver_management == "operator"
        self._create(
            "nvidia.com",
            "clusterpolicies",
            None,
            {
                "apiVersion": "nvidia.com/v1",
                "kind": "ClusterPolicy",
                "metadata": {"name": "cluster-policy"},
                "spec": {
                    "driver": {
                        # A host-installed driver is the GPU Operator's `driver.enabled=false`.
                        "enabled": operator_driver,
                        "usePrecompiled": False,
                        "repository": DRIVER_REPOSITORY,
                        "image": DRIVER_IMAGE_NAME,
                        "version": cluster.driver_version,
                        "upgradePolicy": default_upgrade_policy(),
                    },
                    "dcgmExporter": {"enabled": True},
                    "devicePlugin": {"enabled": True},
                },
                "status": {"state": "ready"},
            },
        )
        for name, image in GPU_OPERATOR_DAEMONSETS:
            if self.ctx.store.get("daemonsets", GPU_OPERATOR_NAMESPACE, name) is not None:
                continue  # the scenario's platform deploys this one itself
            self._daemonset(name, GPU_OPERATOR_NAMESPACE, image, gpu_only=True, tolerate_gpu=True)
        if (
            operator_driver
            and self.ctx.store.get("daemonsets", GPU_OPERATOR_NAMESPACE, DRIVER_DAEMONSET) is None
        ):
            self._daemonset(
                DRIVER_DAEMONSET,
                GPU_OPERATOR_NAMESPACE,
                driver_image(cluster.driver_version),
                gpu_only=True,
                tolerate_gpu=True,
                labels=dict(DRIVER_POD_LABELS),
                update_strategy={"type": "OnDelete"},
            )

    def _daemonset(
        self,
        name: str,
        namespace: str,
        image: str,
        *,
        gpu_only: bool,
        tolerate_gpu: bool = False,
        tolerate_all: bool = False,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        update_strategy: Obj | None = None,
    ) -> None:
        template_spec: Obj = {"containers": [{"name": name.removesuffix("-daemonset"), "image": image}]}
        if gpu_only:
            template_spec["nodeSelector"] = {GPU_PRESENT_LABEL: "true"}
        if tolerate_gpu:
            template_spec["tolerations"] = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]
        if tolerate_all:  # node agents (CNI, kube-proxy) run on control-plane nodes too
            template_spec["tolerations"] = [{"operator": "Exists"}]
        all_labels = {"app": name, **(labels or {})}
        template_meta: Obj = {"labels": dict(all_labels)}
        metadata: Obj = {"name": name, "namespace": namespace, "labels": all_labels}
        if annotations:
            template_meta["annotations"] = dict(annotations)
            metadata["annotations"] = dict(annotations)
        body: Obj = {
            "metadata": metadata,
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": template_meta, "spec": template_spec},
            },
        }
        if update_strategy is not None:
            body["spec"]["updateStrategy"] = dict(update_strategy)
        ds = self._create("apps", "daemonsets", namespace, body)
        tolerations = list(template_spec.get("tolerations") or []) + list(DAEMONSET_TOLERATIONS)
        revision = template_hash(ds["spec"]["template"])
        for node in self._nodes:
            probe = {"spec": template_spec}
            if not node_affinity_matches(probe, labels_of(node)):
                continue
            if untolerated(
                tolerations, (node.get("spec") or {}).get("taints") or [], ("NoSchedule", "NoExecute")
            ):
                continue
            pod = daemon_pod(ds, ds["spec"]["template"], name_of(node), self.ctx.rng, revision)
            self._take(name_of(node), pod_requests(pod))
            self._running_pod(pod, name_of(node))

    def _template(
        self,
        labels: dict[str, str],
        container: Obj,
        spec_extra: Obj | None = None,
        annotations: dict[str, str] | None = None,
    ) -> Obj:
        template_meta: Obj = {"labels": labels}
        if annotations:
            template_meta["annotations"] = annotations
        spec: Obj = {"containers": [container], "terminationGracePeriodSeconds": 30, **(spec_extra or {})}
        return {"metadata": template_meta, "spec": spec}

    def _resources(self, gpus: int, cpu: str, memory: str) -> Obj:
        requests: Obj = {"cpu": cpu, "memory": memory}
        limits: Obj = {}
        if gpus:
            requests[GPU] = str(gpus)
            limits[GPU] = str(gpus)
        out: Obj = {"requests": requests}
        if limits:
            out["limits"] = limits
        return out

    def _deployment(self, d: Deployment, annotations: dict[str, str] | None = None) -> None:
        labels = {"app": d.name, **d.labels}
        container: Obj = {
            "name": d.name,
            "image": d.image,
            "resources": self._resources(d.gpus, d.cpu, d.memory),
        }
        extra: Obj = {}
        if d.node_selector:
            extra["nodeSelector"] = dict(d.node_selector)
        if d.tolerations:
            extra["tolerations"] = [dict(t) for t in d.tolerations]
        replicas = {"app": labels["app"]}
        if d.topology_spread:
            extra["topologySpreadConstraints"] = [c.constraint(replicas) for c in d.topology_spread]
        if d.anti_affinity:
            term = {"labelSelector": {"matchLabels": replicas}, "topologyKey": d.anti_affinity}
            required = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
            extra["affinity"] = {"podAntiAffinity": required}
        if d.empty_dir:
            extra["volumes"] = [{"name": "scratch", "emptyDir": {}}]
            container["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
        template = self._template(labels, container, extra, annotations)
        deploy_meta: Obj = {"name": d.name, "namespace": d.namespace, "labels": labels}
        if annotations:
            deploy_meta["annotations"] = dict(annotations)
        deploy = self._create(
            "apps",
            "deployments",
            d.namespace,
            {
                "metadata": deploy_meta,
                "spec": {
                    "replicas": d.replicas,
                    "selector": {"matchLabels": dict(labels)},
                    "template": template,
                },
            },
        )
        pod_hash = template_hash(deploy["spec"]["template"])
        rs_template = {
            "metadata": {"labels": {**labels, "pod-template-hash": pod_hash}},
            "spec": deploy["spec"]["template"]["spec"],
        }
        rs = self._create(
            "apps",
            "replicasets",
            d.namespace,
            {
                "metadata": {
                    "name": f"{d.name}-{pod_hash}",
                    "namespace": d.namespace,
                    "labels": {**labels, "pod-template-hash": pod_hash},
                    "annotations": {
                        "deployment.kubernetes.io/desired-replicas": str(d.replicas),
                        "deployment.kubernetes.io/revision": "1",
                    },
                    "ownerReferences": [owner_ref(deploy)],
                },
                "spec": {
                    "replicas": d.replicas,
                    "selector": {"matchLabels": {**labels, "pod-template-hash": pod_hash}},
                    "template": rs_template,
                },
            },
        )
        for index in range(d.replicas):
            pod = pod_from_template(rs, rs_template, f"{name_of(rs)}-{random_suffix(self.ctx.rng)}")
            pod["metadata"]["namespace"] = d.namespace
            preferred = d.placement[index] if index < len(d.placement) else None
            if preferred is None and (d.topology_spread or d.anti_affinity):
                self._pending_pod(pod)  # placed, or not, by the scheduler's own rules at start
                continue
            node = self._place(pod, preferred)
            self._running_pod(pod, node)
        if d.pdb is not None:
            self._pdb(d.name, d.namespace, {"matchLabels": {"app": d.name}}, d.pdb)

    def _pdb(self, name: str, namespace: str, selector: Obj, pdb: Pdb) -> None:
        spec: Obj = {"selector": selector}
        if pdb.min_available is not None:
            spec["minAvailable"] = pdb.min_available
        if pdb.max_unavailable is not None:
            spec["maxUnavailable"] = pdb.max_unavailable
        self._create(
            "policy",
            "poddisruptionbudgets",
            namespace,
            {"metadata": {"name": name, "namespace": namespace}, "spec": spec},
        )

    def _training_job(self, t: TrainingJob) -> None:
        notes: dict[str, str] = {}
        speaks = t.checkpoint_protocol if t.checkpoint_protocol is not None else t.framework == "pitstop"
        if speaks:
            notes[CHECKPOINT_PROTOCOL] = "annotation"
            if t.checkpoint_seconds is not None:
                notes[CHECKPOINT_SECONDS] = str(t.checkpoint_seconds)
        container = {
            "name": "trainer",
            "image": t.image,
            "resources": self._resources(t.gpus_per_pod, "8", "64Gi"),
        }
        extra: Obj = {"restartPolicy": "Never"}
        if t.node_selector:
            extra["nodeSelector"] = dict(t.node_selector)
        if t.framework in FRAMEWORK_STORAGE:
            self._framework_object(t, container, extra)
        elif t.framework == "volcano":
            for group, plural, body in zip(
                ("batch.volcano.sh", "scheduling.volcano.sh"),
                ("jobs", "podgroups"),
                volcano_objects(t.name, t.pods, container),
                strict=True,
            ):
                obj = prepare_create(self.ctx.rt(group, plural), body, t.namespace, self.ctx.rng)
                obj["metadata"]["uid"] = body["metadata"].get("uid", obj["metadata"]["uid"])
                self.ctx.store.create(self.ctx.rt(group, plural).storage, obj)
        if t.framework in ("pitstop", "jobset"):
            self._training_batch_job(t, container, extra, notes)
        else:
            self._training_pods(t, container, extra, notes)
        if t.pdb:
            selector = {GANG_LABEL: t.name} if t.framework == "pitstop" else {"app": t.name}
            self._pdb(t.name, t.namespace, {"matchLabels": selector}, Pdb(min_available=t.pods))

    def _framework_object(self, t: TrainingJob, container: Obj, extra: Obj) -> None:
        """The operator's own object (PyTorchJob, JobSet, RayCluster), with the uid its pods
        name as their owner; its status is the operator's, written by the frameworks controller."""
        group, plural, _, _ = FRAMEWORK_STORAGE[t.framework]
        labels = {KUEUE_QUEUE_LABEL: t.queue} if t.queue else {}
        notes = {CHECKPOINT_PROTOCOL: "suspend"} if t.suspend_protocol else {}
        body = framework_object(t.framework, t.name, t.pods, container, extra, labels, notes)
        rt = self.ctx.rt(group, plural)
        obj = prepare_create(rt, body, t.namespace, self.ctx.rng)
        obj["metadata"]["uid"] = body["metadata"]["uid"]
        stored = self.ctx.store.create(rt.storage, obj)
        if t.queue:
            # Kueue admits the job as a whole through its Workload (the job's own suspend is Kueue's).
            cluster_queue = next(
                (
                    cq.name
                    for cq in self.scenario.workloads.cluster_queues
                    if any((q.namespace, q.name) == (t.namespace, t.queue) for q in cq.local_queues)
                ),
                None,
            )
            self._create(
                "kueue.x-k8s.io",
                "workloads",
                t.namespace,
                kueue_workload(stored, t.queue, cluster_queue, t.pods),
            )

    def _training_batch_job(self, t: TrainingJob, container: Obj, extra: Obj, notes: dict[str, str]) -> None:
        """A gang run by a batch Job: pitstop's own (labelled pitstop.dev/gang) or a JobSet's."""
        if t.framework == "jobset":
            name, marks, owner = jobset_job(t.name)
            labels, job_labels, owners = {**marks, "app": t.name}, dict(marks), [owner]
        else:
            name, labels, job_labels, owners = (
                t.name,
                {GANG_LABEL: t.name, "app": t.name},
                {GANG_LABEL: t.name},
                [],
            )
        template = self._template(labels, container, extra, notes or None)
        if t.queue and t.framework != "jobset":  # a JobSet is queued as a whole, by its own label
            job_labels[KUEUE_QUEUE_LABEL] = t.queue
        body = {
            "metadata": {
                "name": name,
                "namespace": t.namespace,
                "labels": job_labels,
                "annotations": dict(notes),
                **({"ownerReferences": owners} if owners else {}),
            },
            "spec": {
                "parallelism": t.pods,
                "completions": t.pods,
                "completionMode": "Indexed",
                "backoffLimit": t.pods * 2,
                "template": template,
            },
        }
        rt = self.ctx.rt("batch", "jobs")
        job = prepare_create(rt, body, t.namespace, self.ctx.rng)
        job["spec"]["suspend"] = False  # seeded gangs are already admitted and running
        job["status"] = {"active": t.pods, "ready": t.pods, "startTime": rfc3339()}
        job = self.ctx.store.create(rt.storage, job)
        used: set[str] = set()
        for index in range(t.pods):
            pod = pod_from_template(
                job,
                job["spec"]["template"],
                f"{name}-{index}-{random_suffix(self.ctx.rng)}",
                {"batch.kubernetes.io/job-completion-index": str(index)},
            )
            pod["metadata"].setdefault("annotations", {})["batch.kubernetes.io/job-completion-index"] = str(
                index
            )
            preferred = t.placement[index] if index < len(t.placement) else None
            node = self._place(pod, preferred, avoid=used)
            used.add(node)
            self._running_pod(pod, node)

    def _training_pods(self, t: TrainingJob, container: Obj, extra: Obj, notes: dict[str, str]) -> None:
        """A gang whose operator owns its pods directly (PyTorchJob, Volcano, Ray, LWS, unknown)."""
        used: set[str] = set()
        for index in range(t.pods):
            marks = direct_pod_marks(t.framework, t.name, index, random_suffix(self.ctx.rng))
            labels = dict(marks.labels) if t.framework == "unlabelled" else {**marks.labels, "app": t.name}
            metadata: Obj = {"name": marks.name, "namespace": t.namespace, "labels": labels}
            if marks.annotations or notes:
                metadata["annotations"] = {**marks.annotations, **notes}
            if marks.owner is not None:
                metadata["ownerReferences"] = [marks.owner]
            spec: Obj = {"containers": [clone(container)], "terminationGracePeriodSeconds": 30, **extra}
            if marks.scheduler:
                spec["schedulerName"] = marks.scheduler
            pod: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
            preferred = t.placement[index] if index < len(t.placement) else None
            node = self._place(pod, preferred, avoid=used)
            used.add(node)
            self._running_pod(pod, node)

    def _cluster_queue(self, name: str, policy: str, gpus: int | None, local: list[tuple[str, str]]) -> None:
        total = gpus if gpus is not None else sum(p.gpus for p in self.ctx.profiles.values())
        if self.ctx.store.get("kueue.x-k8s.io/resourceflavors", None, "default-flavor") is None:
            self._create(
                "kueue.x-k8s.io",
                "resourceflavors",
                None,
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta1",
                    "kind": "ResourceFlavor",
                    "metadata": {"name": "default-flavor"},
                },
            )
        self._create(
            "kueue.x-k8s.io",
            "clusterqueues",
            None,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "ClusterQueue",
                "metadata": {"name": name},
                "spec": {
                    "namespaceSelector": {},
                    "stopPolicy": policy,
                    "resourceGroups": [
                        {
                            "coveredResources": [GPU],
                            "flavors": [
                                {
                                    "name": "default-flavor",
                                    "resources": [{"name": GPU, "nominalQuota": total}],
                                }
                            ],
                        }
                    ],
                },
            },
        )
        for ns, queue in local:
            self._create(
                "kueue.x-k8s.io",
                "localqueues",
                ns,
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta1",
                    "kind": "LocalQueue",
                    "metadata": {"name": queue, "namespace": ns},
                    "spec": {"clusterQueue": name},
                },
            )


# --- a node's parts ---------------------------------------------------------------------------


def _node_labels(profile: NodeProfile, override: NodeOverride | None) -> dict[str, str]:
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        HOSTNAME_LABEL: profile.name,
        DOMAIN_LABEL: profile.domain,
        "node.kubernetes.io/instance-type": f"gpu-{profile.gpus}x",
        DRIVER_VERSION_LABEL: profile.driver_version,
        FIRMWARE_VERSION_LABEL: profile.firmware_version,
    }
    if profile.role == "control-plane":
        for key in (DRIVER_VERSION_LABEL, FIRMWARE_VERSION_LABEL):
            labels.pop(key)
        labels["node.kubernetes.io/instance-type"] = "cpu-control-plane"
        labels[CONTROL_PLANE_LABEL] = ""
    if profile.gpus > 0:
        labels.update(
            {
                GPU_PRESENT_LABEL: "true",
                GPU_PRODUCT_LABEL: profile.gpu_product,
                GPU_COUNT_LABEL: str(profile.gpus),
            }
        )
    if override:
        labels.update(override.labels)
    return labels


def _node_spec(profile: NodeProfile, index: int, override: NodeOverride | None) -> Obj:
    spec: Obj = {
        "podCIDR": f"10.{64 + index // 256}.{index % 256}.0/24",
        "podCIDRs": [f"10.{64 + index // 256}.{index % 256}.0/24"],
        "providerID": f"pitstop-sim://{profile.name}",
    }
    if override and override.taints:
        spec["taints"] = [t.model_dump(exclude_none=True) for t in override.taints]
    if profile.role == "control-plane":
        spec["taints"] = [dict(CONTROL_PLANE_TAINT)]
    if override and override.unschedulable:
        spec["unschedulable"] = True
    return spec


# A healthy kubelet's conditions: (type, status, reason, message).
_HEALTHY_CONDITIONS = (
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
)


def _node_conditions(stamp: str) -> list[Obj]:
    return [
        {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }
        for kind, status, reason, message in _HEALTHY_CONDITIONS
    ]


def _node_info(profile: NodeProfile) -> Obj:
    return {
        "machineID": new_uid().replace("-", ""),
        "systemUUID": new_uid(),
        "bootID": profile.boot_id,
        "kernelVersion": profile.kernel_version,
        "osImage": profile.os_image,
        "containerRuntimeVersion": profile.container_runtime,
        "kubeletVersion": profile.kubelet_version,
        "kubeProxyVersion": node_info_kube_proxy_version(profile.kubelet_version),
        "operatingSystem": "linux",
        "architecture": "amd64",
    }
