"""The simulated kubelets: start pods bound to their node, run validation and batch pods to
completion (with logs), finish graceful deletions, restart containers after a node reboot,
and answer checkpoint requests for workloads that speak the annotation protocol."""

from __future__ import annotations

import contextlib
import hashlib
import json
from decimal import Decimal
from functools import lru_cache
from typing import Any

from pitstop.kube.objects import (
    annotations_of,
    controller_of,
    is_terminating,
    labels_of,
    meta,
    name_of,
    namespace_of,
    node_is_ready,
    pod_is_finished,
    pod_node,
    pod_phase,
)
from pitstop_sim.annotations import (
    CHECKPOINT_DONE,
    CHECKPOINT_PROTOCOL,
    CHECKPOINT_REQUESTED,
    CHECKPOINT_SECONDS,
    RUN_SECONDS,
    VALIDATION_LABEL,
)
from pitstop_sim.clock import rfc3339
from pitstop_sim.controllers.base import Controller
from pitstop_sim.events import EventRecorder
from pitstop_sim.objects import allocatable_of, pod_requests
from pitstop_sim.store import ObjectMissing, WatchEvent, clone
from pitstop_sim.validation_logs import (
    HOSTENGINE_REACHABLE,
    MOUNTED_FILES,
    hostengine_of,
    probe_of,
    produce,
)

Obj = dict[str, Any]
PodKey = tuple[str, str]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@lru_cache(maxsize=1024)
def _image_id(image: str) -> str:
    """What the runtime reports as the image's digest (a fleet runs a handful of images)."""
    return f"{image.split(':')[0]}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def _qualified(image: str) -> str:
    """The reference containerd resolves: Docker Hub's default registry and `library/`, and the
    `latest` tag, filled in as the image reference grammar does (distribution/reference)."""
    name, _, digest = image.partition("@")
    first = name.split("/", 1)[0]
    if "/" not in name or not ("." in first or ":" in first or first == "localhost"):
        name = f"docker.io/{name if '/' in name else 'library/' + name}"
    last = name.rsplit("/", 1)[-1]
    if not digest and ":" not in last:
        name += ":latest"
    return f"{name}@{digest}" if digest else name


def pod_ip(node_index: int, pod_name: str) -> str:
    digest = int(hashlib.sha1(pod_name.encode()).hexdigest()[:4], 16)
    return f"10.{64 + (node_index // 256) % 64}.{node_index % 256}.{2 + digest % 250}"


def running_status(pod: Obj, host_ip: str, ip: str, *, restart: bool = False) -> Obj:
    """Status of a pod whose containers all run and are ready."""
    if (pod.get("spec") or {}).get("hostNetwork"):
        ip = host_ip  # static control-plane pods and node agents share the node's address
    stamp = rfc3339()
    old = pod.get("status") or {}
    previous = {s.get("name"): s for s in old.get("containerStatuses") or []}
    statuses = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        name = container.get("name", "")
        before = previous.get(name) or {}
        restarts = int(before.get("restartCount", 0)) + (1 if restart else 0)
        image = container.get("image", "")
        statuses.append(
            {
                "name": name,
                "image": image,
                "imageID": _image_id(image),
                "containerID": f"containerd://{_digest(meta(pod).get('uid', '') + name + str(restarts))}",
                "ready": True,
                "started": True,
                "restartCount": restarts,
                "state": {"running": {"startedAt": stamp}},
            }
        )
    conditions = [
        {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": stamp}
        for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]
    return {
        "phase": "Running",
        "conditions": conditions,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": old.get("startTime") or stamp,
        "containerStatuses": statuses,
        "qosClass": old.get("qosClass", "BestEffort"),
    }


def not_ready_status(pod: Obj, reason: str = "NodeNotReady") -> Obj:
    status: Obj = clone(pod.get("status") or {})
    stamp = rfc3339()
    for cond in status.get("conditions") or []:
        if cond.get("type") in ("Ready", "ContainersReady") and cond.get("status") != "False":
            cond.update({"status": "False", "lastTransitionTime": stamp, "reason": reason})
    for cs in status.get("containerStatuses") or []:
        cs["ready"] = False
    return status


def finished_status(pod: Obj, succeeded: bool) -> Obj:
    status: Obj = clone(pod.get("status") or {})
    stamp = rfc3339()
    status["phase"] = "Succeeded" if succeeded else "Failed"
    for cond in status.get("conditions") or []:
        if cond.get("type") in ("Ready", "ContainersReady"):
            cond.update({"status": "False", "lastTransitionTime": stamp, "reason": "PodCompleted"})
    for cs in status.get("containerStatuses") or []:
        started = ((cs.get("state") or {}).get("running") or {}).get("startedAt", stamp)
        cs["ready"] = False
        cs["started"] = False
        cs["state"] = {
            "terminated": {
                "exitCode": 0 if succeeded else 1,
                "reason": "Completed" if succeeded else "Error",
                "startedAt": started,
                "finishedAt": stamp,
                "containerID": cs.get("containerID", ""),
            }
        }
    return status


def waiting_status(container: Obj, waiting: Obj) -> Obj:
    """A container status the kubelet reports before the container runs."""
    return {
        "name": container.get("name"),
        "image": container.get("image"),
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "started": False,
        "state": {"waiting": waiting},
    }


class Kubelet(Controller):
    name = "kubelet"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._to_start: set[PodKey] = set()
        self._starting: set[str] = set()  # pod uids with a start timer
        self._finishing: set[str] = set()  # uids with a completion timer
        self._terminating: set[str] = set()  # uids with a removal timer
        self._checkpoints: set[tuple[str, str, str, str]] = set()  # (storage, ns, name, token) in flight
        self._to_checkpoint: set[tuple[str, str, str]] = set()
        self._to_terminate: set[PodKey] = set()
        self._node_index: dict[str, int] = {}
        self.events = EventRecorder(self.ctx.store)
        self._pull_failed_uids: set[str] = set()  # waiting on an image the registry lacks
        self._mount_attempts: dict[str, int] = {}  # uid -> failed mounts of a missing ConfigMap
        self._admitted: set[str] = set()  # uids of pods admitted with extended resources

    # --- observing --------------------------------------------------------------------------

    def observe(self, event: WatchEvent) -> None:
        obj = event.obj
        if event.storage == "pods":
            if event.type == "DELETED":
                uid = meta(obj).get("uid", "")
                self.ctx.logs.pop(uid, None)
                self._pull_failed_uids.discard(uid)
                self._admitted.discard(uid)
                return
            key = (namespace_of(obj), name_of(obj))
            if is_terminating(obj):
                self._to_terminate.add(key)
            elif pod_node(obj) and pod_phase(obj) == "Pending":
                self._to_start.add(key)
            if CHECKPOINT_PROTOCOL in annotations_of(obj):
                self._to_checkpoint.add(("pods", *key))
        elif (
            event.storage == "jobs" and event.type != "DELETED" and CHECKPOINT_PROTOCOL in annotations_of(obj)
        ):
            self._to_checkpoint.add(("jobs", namespace_of(obj), name_of(obj)))
        elif event.storage == "nodes" and event.type == "MODIFIED":
            was, now = node_is_ready(event.old or {}), node_is_ready(obj)
            if now and not was:
                self._node_up(name_of(obj))

    def pending(self) -> bool:
        return bool(self._to_start or self._to_terminate or self._to_checkpoint)

    def resync(self) -> None:
        for pod in self.ctx.store.list("pods").items:
            key = (namespace_of(pod), name_of(pod))
            if is_terminating(pod):
                self._to_terminate.add(key)
            elif pod_node(pod) and pod_phase(pod) == "Pending":
                self._to_start.add(key)
            elif pod_phase(pod) == "Running":
                self._arm_completion(pod)

    def sync(self) -> None:
        to_start, self._to_start = self._to_start, set()
        for ns, name in sorted(to_start):
            pod = self.ctx.store.get("pods", ns, name)
            if pod is not None:
                self._schedule_start(pod)
        to_terminate, self._to_terminate = self._to_terminate, set()
        for ns, name in sorted(to_terminate):
            pod = self.ctx.store.get("pods", ns, name)
            if pod is not None:
                self._schedule_removal(pod)
        to_checkpoint, self._to_checkpoint = self._to_checkpoint, set()
        for storage, ns, name in sorted(to_checkpoint):
            obj = self.ctx.store.get(storage, ns, name)
            if obj is not None:
                self._schedule_checkpoint(storage, obj)

    # --- starting pods ------------------------------------------------------------------------

    def node_index(self, node: str) -> int:
        if node not in self._node_index:
            self._node_index[node] = len(self._node_index) + 1
        return self._node_index[node]

    def host_ip(self, node: str) -> str:
        index = self.node_index(node)
        return f"192.168.{index // 250}.{10 + index % 250}"

    def _schedule_start(self, pod: Obj) -> None:
        uid = meta(pod).get("uid", "")
        if uid in self._starting or uid in self._pull_failed_uids or is_terminating(pod):
            return
        node = self.ctx.store.get("nodes", None, pod_node(pod))
        if node is None or not node_is_ready(node):
            return  # started when the node becomes Ready
        if self._reject_if_out_of(pod, node):
            return
        self._starting.add(uid)
        delay = self.ctx.scenario.timing.pod_start_seconds
        key = (namespace_of(pod), name_of(pod))
        self.later(delay, lambda: self._start(key, uid))

    def _start(self, key: PodKey, uid: str, *, restart: bool = False) -> None:
        self._starting.discard(uid)
        pod = self.ctx.store.get("pods", *key)
        if pod is None or meta(pod).get("uid") != uid or is_terminating(pod) or pod_is_finished(pod):
            return
        node_name = pod_node(pod)
        node = self.ctx.store.get("nodes", None, node_name)
        if node is None or not node_is_ready(node):
            return
        missing = self._missing_image(pod)
        if missing is not None:
            self._pull_failed(pod, missing)
            return
        unmounted = self._missing_config_maps(pod)
        if unmounted:
            self._mount_failed(pod, unmounted, key, uid)
            return
        self._mount_attempts.pop(uid, None)
        started = clone(pod)
        started["status"] = running_status(
            pod, self.host_ip(node_name), pod_ip(self.node_index(node_name), name_of(pod)), restart=restart
        )
        if not restart or uid not in self.ctx.logs:
            self.ctx.logs[uid] = self._startup_log(pod, node_name)
        else:
            self.ctx.logs[uid] += f"{rfc3339()} container restarted after node reboot\n"
        stored = self.ctx.store.update("pods", started)
        self._arm_completion(stored)

    def _with_reachability(self, pod: Obj) -> Obj:
        """The pod as its producer sees it: marked when the hostengine its dcgmi names with
        `--host <service>.<namespace>[.svc...][:port]` is a Service of this cluster."""
        host = hostengine_of(pod)
        if host in (None, "embedded"):
            return pod
        labels = str(host).split(":", 1)[0].split(".")
        namespace = labels[1] if len(labels) > 1 else namespace_of(pod)
        if self.ctx.store.get("services", namespace, labels[0]) is None:
            return pod
        marked: Obj = clone(pod)
        marked["metadata"].setdefault("annotations", {})[HOSTENGINE_REACHABLE] = "true"
        return marked

    def _with_mounts(self, pod: Obj) -> Obj:
        """The pod as its producer sees it: marked with the files its ConfigMap volumes put in its
        container (`sim.pitstop.dev/mounted-files`), each with the probe it says it is."""
        spec = pod.get("spec") or {}
        volumes = {str(v.get("name")): v for v in spec.get("volumes") or []}
        containers = spec.get("containers") or [{}]
        files: dict[str, str] = {}
        for mount in containers[0].get("volumeMounts") or []:
            source = (volumes.get(str(mount.get("name"))) or {}).get("configMap")
            if not isinstance(source, dict):
                continue
            found = self.ctx.store.get("configmaps", namespace_of(pod), str(source.get("name") or ""))
            if found is None:
                continue
            data = {str(k): str(v) for k, v in (found.get("data") or {}).items()}
            data.update({str(k): "" for k in found.get("binaryData") or {}})
            items = source.get("items")
            if items:
                data = {
                    str(i.get("path")): data[str(i.get("key"))] for i in items if str(i.get("key")) in data
                }
            base = str(mount.get("mountPath") or "").rstrip("/")
            sub = str(mount.get("subPath") or "")
            if sub:
                if sub in data:
                    files[base] = probe_of(data[sub])
                continue
            for relative, text in data.items():
                files[f"{base}/{relative}"] = probe_of(text)
        if not files:
            return pod
        marked: Obj = clone(pod)
        marked["metadata"].setdefault("annotations", {})[MOUNTED_FILES] = json.dumps(files, sort_keys=True)
        return marked

    # --- volumes -----------------------------------------------------------------------------

    def _missing_config_maps(self, pod: Obj) -> list[tuple[str, str]]:
        """(volume, ConfigMap) of each configMap volume whose ConfigMap is not in the pod's
        namespace (and is not `optional`)."""
        missing: list[tuple[str, str]] = []
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            source = volume.get("configMap")
            if not isinstance(source, dict) or source.get("optional"):
                continue
            name = str(source.get("name") or "")
            if self.ctx.store.get("configmaps", namespace_of(pod), name) is None:
                missing.append((str(volume.get("name") or ""), name))
        return missing

    def _mount_failed(self, pod: Obj, unmounted: list[tuple[str, str]], key: PodKey, uid: str) -> None:
        """The kubelet's volume manager on a ConfigMap that is not there: the pod stays Pending,
        its containers in ContainerCreating, with a FailedMount event at each attempt
        (pkg/volume/configmap: `configmap "<name>" not found`), retried with a growing back-off
        (at most 2m2s) until the ConfigMap exists or the pod is deleted."""
        node = pod_node(pod)
        for volume, name in unmounted:
            message = f'MountVolume.SetUp failed for volume "{volume}" : configmap "{name}" not found'
            self.events.record(pod, "Warning", "FailedMount", message, "kubelet", node)
        attempts = self._mount_attempts.get(uid, 0)
        self._mount_attempts[uid] = attempts + 1
        if attempts == 0:
            creating = clone(pod)
            spec = pod.get("spec") or {}
            status = dict(creating.get("status") or {})
            status.update(phase="Pending", hostIP=self.host_ip(node))
            status["containerStatuses"] = [
                waiting_status(c, {"reason": "ContainerCreating"}) for c in spec.get("containers") or []
            ]
            creating["status"] = status
            self.ctx.store.update("pods", creating)
        self._starting.add(uid)
        self.later(min(0.5 * 2**attempts, 122.0), lambda: self._start(key, uid))

    # --- admission ---------------------------------------------------------------------------

    def _reject_if_out_of(self, pod: Obj, node: Obj) -> bool:
        """The kubelet's own admission of extended resources (GPUs): a pod bound to the node
        (by the scheduler, or by `spec.nodeName` past it) that asks for more than the node's
        allocatable minus what its other pods hold is rejected, as pkg/kubelet/lifecycle
        does: phase Failed, reason `OutOf<resource>`, and an event."""
        wanted = {k: v for k, v in pod_requests(pod).items() if "/" in k and v > 0}
        if not wanted:
            return False
        uid = meta(pod).get("uid", "")
        others = [
            p
            for p in self.ctx.pods_on_node(name_of(node))
            if meta(p).get("uid") != uid
            and not pod_is_finished(p)
            and (pod_phase(p) == "Running" or meta(p).get("uid") in self._admitted)
        ]
        allocatable = allocatable_of(node)
        for resource, requested in sorted(wanted.items()):
            used = sum((pod_requests(p).get(resource, Decimal(0)) for p in others), Decimal(0))
            capacity = allocatable.get(resource, Decimal(0))
            if used + requested <= capacity:
                continue
            message = (
                f"Node didn't have enough resource: {resource}, requested: {int(requested)}, "
                f"used: {int(used)}, capacity: {int(capacity)}"
            )
            self.events.record(pod, "Warning", f"OutOf{resource}", message, "kubelet", name_of(node))
            rejected = clone(pod)
            rejected["status"] = {
                **(pod.get("status") or {}),
                "phase": "Failed",
                "reason": f"OutOf{resource}",
                "message": f"Pod was rejected: {message}",
                "startTime": rfc3339(),
            }
            self.ctx.store.update("pods", rejected)
            return True
        self._admitted.add(uid)
        return False

    # --- images ------------------------------------------------------------------------------

    def _missing_image(self, pod: Obj) -> tuple[str, str] | None:
        """(container, image) of the first container whose image the registry does not have."""
        spec = pod.get("spec") or {}
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            image = str(container.get("image") or "")
            if not self.ctx.scenario.registry.has(image):
                return str(container.get("name") or ""), image
        return None

    def _pull_failed(self, pod: Obj, missing: tuple[str, str]) -> None:
        """containerd's answer to an image that is not there, as the kubelet reports it: the
        container waits in ErrImagePull, then ImagePullBackOff, with its events
        (pkg/kubelet/images/image_manager.go; the rpc text is containerd's `not found`)."""
        container, image = missing
        self._pull_failed_uids.add(meta(pod).get("uid", ""))
        reference = _qualified(image)
        rpc = (
            f'rpc error: code = NotFound desc = failed to pull and unpack image "{reference}": '
            f'failed to resolve reference "{reference}": {reference}: not found'
        )
        node = pod_node(pod)
        self.events.record(pod, "Normal", "Pulling", f'Pulling image "{image}"', "kubelet", node)
        self.events.record(
            pod, "Warning", "Failed", f'Failed to pull image "{image}": {rpc}', "kubelet", node
        )
        self.events.record(pod, "Warning", "Failed", "Error: ErrImagePull", "kubelet", node)
        self._set_waiting(pod, container, "ErrImagePull", rpc)
        key, uid = (namespace_of(pod), name_of(pod)), meta(pod).get("uid", "")

        def back_off() -> None:
            current = self.ctx.store.get("pods", *key)
            if current is None or meta(current).get("uid") != uid or is_terminating(current):
                return
            message = f'Back-off pulling image "{image}"'
            self.events.record(current, "Normal", "BackOff", message, "kubelet", node)
            self.events.record(current, "Warning", "Failed", "Error: ImagePullBackOff", "kubelet", node)
            self._set_waiting(current, container, "ImagePullBackOff", message)

        self.later(max(self.ctx.scenario.timing.pod_start_seconds, 1.0), back_off)

    def _set_waiting(self, pod: Obj, container: str, reason: str, message: str) -> None:
        waiting = clone(pod)
        spec = pod.get("spec") or {}
        status = dict(waiting.get("status") or {})
        status.update(phase="Pending", hostIP=self.host_ip(pod_node(pod)))

        def statuses(containers: list[Obj]) -> list[Obj]:
            return [
                waiting_status(
                    c,
                    {"reason": reason, "message": message}
                    if c.get("name") == container
                    else {"reason": "PodInitializing"},
                )
                for c in containers
            ]

        # An init container's pull failure shows in initContainerStatuses, as the kubelet does;
        # when a main container's image is missing, the init containers have already run.
        inits = spec.get("initContainers") or []
        if inits:
            status["initContainerStatuses"] = statuses(inits)
            if all(c.get("name") != container for c in inits):
                for done in status["initContainerStatuses"]:
                    done["state"] = {"terminated": {"reason": "Completed", "exitCode": 0}}
        status["containerStatuses"] = statuses(spec.get("containers") or [])
        waiting["status"] = status
        self.ctx.store.update("pods", waiting)

    def _startup_log(self, pod: Obj, node: str) -> str:
        image = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("image", "")
        return f"{rfc3339()} starting {image} on {node}\n"

    def _arm_completion(self, pod: Obj) -> None:
        """Validation pods, plain Job pods and pods with a run time finish on their own."""
        uid = meta(pod).get("uid", "")
        if uid in self._finishing:
            return
        labels, notes = labels_of(pod), annotations_of(pod)
        kind = labels.get(VALIDATION_LABEL)
        timing = self.ctx.scenario.timing
        seconds: float | None = None
        if kind:
            seconds = timing.validation_seconds.get(kind, timing.job_seconds)
        elif RUN_SECONDS in notes:
            try:
                seconds = float(notes[RUN_SECONDS])
            except ValueError:
                seconds = None
        else:
            ref = controller_of(pod)
            if ref is not None and ref.get("kind") == "Job" and not self.ctx.is_training(pod):
                seconds = timing.job_seconds
        if seconds is None:
            return
        outcome = None
        if kind:
            profile = self.ctx.profiles.get(pod_node(pod))
            if profile is not None:
                seen = self._with_mounts(self._with_reachability(pod))
                outcome = produce(kind, self.ctx.effective_profile(profile), seen)
                if outcome.seconds is not None:
                    seconds = outcome.seconds
        self._finishing.add(uid)
        key = (namespace_of(pod), name_of(pod))

        def finish() -> None:
            self._finishing.discard(uid)
            current = self.ctx.store.get("pods", *key)
            if current is None or meta(current).get("uid") != uid or pod_phase(current) != "Running":
                return
            if is_terminating(current):
                return
            succeeded = outcome.succeeded if outcome is not None else True
            if outcome is not None:
                self.ctx.logs[uid] = self.ctx.logs.get(uid, "") + outcome.log
            else:
                self.ctx.logs[uid] = self.ctx.logs.get(uid, "") + f"{rfc3339()} done\n"
            done = clone(current)
            done["status"] = finished_status(current, succeeded)
            self.ctx.store.update("pods", done)

        self.later(seconds, finish)

    # --- node reboots ------------------------------------------------------------------------

    def node_down(self, node: str) -> None:
        for pod in self.ctx.pods_on_node(node):
            if pod_phase(pod) != "Running" or is_terminating(pod):
                continue
            down = clone(pod)
            down["status"] = not_ready_status(pod)
            self.ctx.store.update("pods", down)

    def _node_up(self, node: str) -> None:
        """Containers restart after the node returns; they become ready after the start delay."""
        for pod in self.ctx.pods_on_node(node):
            uid = meta(pod).get("uid", "")
            key = (namespace_of(pod), name_of(pod))
            if is_terminating(pod):
                self._to_terminate.add(key)
                continue
            if pod_phase(pod) == "Pending":
                self._to_start.add(key)
            elif pod_phase(pod) == "Running" and uid not in self._starting:
                self._starting.add(uid)
                self.later(
                    self.ctx.scenario.timing.pod_start_seconds,
                    lambda k=key, u=uid: self._start(k, u, restart=True),
                )

    # --- deletion -----------------------------------------------------------------------------

    def _schedule_removal(self, pod: Obj) -> None:
        uid = meta(pod).get("uid", "")
        if uid in self._terminating:
            return
        grace = meta(pod).get("deletionGracePeriodSeconds", 30) or 0
        delay = min(float(grace), self.ctx.scenario.timing.pod_termination_seconds)
        self._terminating.add(uid)
        key = (namespace_of(pod), name_of(pod))

        def remove() -> None:
            self._terminating.discard(uid)
            current = self.ctx.store.get("pods", *key)
            if current is None or meta(current).get("uid") != uid:
                return
            node = self.ctx.store.get("nodes", None, pod_node(current))
            if node is not None and not node_is_ready(node):
                return  # the kubelet is away; the pod stays Terminating until it returns
            with contextlib.suppress(ObjectMissing):
                self.ctx.store.delete("pods", *key)

        self.later(delay, remove)

    def terminate(self, pod: Obj) -> None:
        """Delete a pod the way controllers do (graceful, not counted as a client action)."""
        if is_terminating(pod):
            return
        grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
        if not pod_node(pod) or pod_is_finished(pod) or self.ctx.scenario.timing.pod_termination_seconds <= 0:
            with contextlib.suppress(ObjectMissing):
                self.ctx.store.delete("pods", namespace_of(pod), name_of(pod))
            return
        marked = clone(pod)
        marked["metadata"]["deletionTimestamp"] = rfc3339()
        marked["metadata"]["deletionGracePeriodSeconds"] = grace
        self.ctx.store.update("pods", marked)

    # --- checkpoints --------------------------------------------------------------------------

    def _schedule_checkpoint(self, storage: str, obj: Obj) -> None:
        notes = annotations_of(obj)
        token = notes.get(CHECKPOINT_REQUESTED)
        if not notes.get(CHECKPOINT_PROTOCOL) or not token or notes.get(CHECKPOINT_DONE) == token:
            return
        ns, name = namespace_of(obj), name_of(obj)
        flight = (storage, ns, name, token)
        if flight in self._checkpoints:
            return
        self._checkpoints.add(flight)
        try:
            seconds = float(notes.get(CHECKPOINT_SECONDS, self.ctx.scenario.timing.checkpoint_seconds))
        except ValueError:
            seconds = self.ctx.scenario.timing.checkpoint_seconds
        uid = meta(obj).get("uid")

        def acknowledge() -> None:
            self._checkpoints.discard(flight)
            current = self.ctx.store.get(storage, ns, name)
            if current is None or meta(current).get("uid") != uid:
                return
            if annotations_of(current).get(CHECKPOINT_REQUESTED) != token:
                return  # superseded by a newer request, which has its own timer
            if storage == "pods" and (pod_phase(current) != "Running" or is_terminating(current)):
                return
            done = clone(current)
            done["metadata"].setdefault("annotations", {})[CHECKPOINT_DONE] = token
            self.ctx.store.update(storage, done)
            self.ctx.recorder.checkpoint_acknowledged()

        self.later(seconds, acknowledge)
