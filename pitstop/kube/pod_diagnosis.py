"""Why a pod is not running or did not finish, in the words `kubectl describe pod` would use:
its phase, each container's waiting/terminated reason and message, the scheduler's verdict, and
the latest events about it. Used by kube.job so a probe stuck on a missing image says so within
a poll instead of "did not finish" after its whole timeout (the seed's troubleshooting table:
Pending / ContainerCreating / CrashLoopBackOff / GPU not visible).

Terminal reasons are the kubelet's waiting reasons a pod does not recover from without someone
changing it (pkg/kubelet/images and kuberuntime): a pull that backs off, an invalid image name,
`imagePullPolicy: Never` without the image, a container config that cannot be built (a missing
Secret or ConfigMap), a container that cannot be created or started, a crash loop. `ErrImagePull`
is the first failed pull; the kubelet retries it, so it is not terminal until it turns into
`ImagePullBackOff`. A pod the scheduler cannot place (`PodScheduled=False`, `Unschedulable`)
may get room later (a drain finishing elsewhere), so it is terminal only after a grace period.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

TERMINAL_WAITING = frozenset(
    {
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "CrashLoopBackOff",
    }
)
EVENTS_SHOWN = 5


@dataclass(frozen=True)
class Diagnosis:
    text: str
    terminal_reason: str | None  # the reason that will not clear by itself, if any
    unschedulable: bool

    def __str__(self) -> str:
        return self.text


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def _condition(pod: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == kind:
            return cond
    return None


def _event_time(event: Mapping[str, Any]) -> str:
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or (event.get("series") or {}).get("lastObservedTime")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )


def diagnose(pod: Mapping[str, Any] | None, events: Iterable[Mapping[str, Any]] = ()) -> Diagnosis:
    if pod is None:
        return Diagnosis("no pod was created (see the Job's events)", None, False)
    name = (pod.get("metadata") or {}).get("name", "?")
    phase = (pod.get("status") or {}).get("phase") or "Unknown"
    parts = [f"pod {name}: {phase}"]
    # The kubelet's admission refusals put their reason on the pod itself, e.g.
    # "OutOfnvidia.com/gpu: Node didn't have enough resource: nvidia.com/gpu, requested: 8, ...".
    pod_reason = (pod.get("status") or {}).get("reason")
    if pod_reason:
        pod_message = str((pod.get("status") or {}).get("message") or "").strip()
        parts[0] += f" ({pod_reason}{': ' + pod_message if pod_message else ''})"
    terminal: str | None = None
    for status in _containers(pod):
        state = status.get("state") or {}
        for kind in ("waiting", "terminated"):
            detail = state.get(kind)
            if not isinstance(detail, dict):
                continue
            reason = str(detail.get("reason") or "")
            message = str(detail.get("message") or "").strip()
            text = f"container {status.get('name')} {kind}: {reason or 'no reason given'}"
            if kind == "terminated" and detail.get("exitCode") is not None:
                text += f" (exit code {detail.get('exitCode')})"
            if message:
                text += f": {message}"
            parts.append(text)
            if kind == "waiting" and reason in TERMINAL_WAITING and terminal is None:
                terminal = reason
    scheduled = _condition(pod, "PodScheduled")
    unschedulable = bool(
        scheduled and scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable"
    )
    if unschedulable and scheduled is not None:
        parts.append(f"not scheduled: {scheduled.get('message') or 'Unschedulable'}")
    recent = sorted(events, key=_event_time)[-EVENTS_SHOWN:]
    if recent:
        parts.append(
            "events: "
            + "; ".join(
                f"{e.get('type', 'Normal')} {e.get('reason', '')}: {str(e.get('message') or '').strip()}"
                for e in recent
            )
        )
    return Diagnosis("; ".join(parts), terminal, unschedulable)
