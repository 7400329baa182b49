"""Has a rollout finished? The verdict of `kubectl rollout status`, word for word
(k8s.io/kubectl pkg/polymorphichelpers/rollout_status.go): a changed spec counts only once the
controller has observed it (`observedGeneration`), then every replica must be updated, no old
one left and every updated one available; a DaemonSet on every node it should run on; a
StatefulSet ready and at the update revision (or past its partition).

A Deployment whose Progressing condition says ProgressDeadlineExceeded has failed: waiting
longer will not finish it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class RolloutFailed(Exception):
    """The rollout cannot finish by waiting (progress deadline exceeded, unsupported strategy)."""


@dataclass(frozen=True)
class RolloutStatus:
    done: bool
    message: str


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def status_of(obj: Mapping[str, Any]) -> RolloutStatus:
    kind = obj.get("kind")
    if kind == "Deployment":
        return deployment(obj)
    if kind == "DaemonSet":
        return daemon_set(obj)
    if kind == "StatefulSet":
        return stateful_set(obj)
    raise RolloutFailed(f"no rollout status for kind {kind!r} (Deployment, DaemonSet or StatefulSet)")


def _parts(obj: Mapping[str, Any]) -> tuple[str, Mapping[str, Any], Mapping[str, Any], int, int]:
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    return (
        str(meta.get("name", "")),
        obj.get("spec") or {},
        status,
        _int(meta.get("generation")),
        _int(status.get("observedGeneration")),
    )


def deployment(obj: Mapping[str, Any]) -> RolloutStatus:
    name, spec, status, generation, observed = _parts(obj)
    if generation > observed:
        return RolloutStatus(False, "Waiting for deployment spec update to be observed...")
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
            raise RolloutFailed(f'deployment "{name}" exceeded its progress deadline')
    updated = _int(status.get("updatedReplicas"))
    if "replicas" in spec and updated < _int(spec.get("replicas")):
        return RolloutStatus(
            False,
            f'Waiting for deployment "{name}" rollout to finish: {updated} out of '
            f"{_int(spec.get('replicas'))} new replicas have been updated...",
        )
    replicas = _int(status.get("replicas"))
    if replicas > updated:
        return RolloutStatus(
            False,
            f'Waiting for deployment "{name}" rollout to finish: {replicas - updated} old replicas are '
            "pending termination...",
        )
    available = _int(status.get("availableReplicas"))
    if available < updated:
        return RolloutStatus(
            False,
            f'Waiting for deployment "{name}" rollout to finish: {available} of {updated} updated replicas '
            "are available...",
        )
    return RolloutStatus(True, f'deployment "{name}" successfully rolled out')


def daemon_set(obj: Mapping[str, Any]) -> RolloutStatus:
    name, spec, status, generation, observed = _parts(obj)
    strategy = (spec.get("updateStrategy") or {}).get("type") or "RollingUpdate"
    if strategy != "RollingUpdate":
        raise RolloutFailed("rollout status is only available for RollingUpdate strategy type")
    if generation > observed:
        return RolloutStatus(False, "Waiting for daemon set spec update to be observed...")
    desired = _int(status.get("desiredNumberScheduled"))
    updated = _int(status.get("updatedNumberScheduled"))
    if updated < desired:
        return RolloutStatus(
            False,
            f'Waiting for daemon set "{name}" rollout to finish: {updated} out of {desired} new pods '
            "have been updated...",
        )
    available = _int(status.get("numberAvailable"))
    if available < desired:
        return RolloutStatus(
            False,
            f'Waiting for daemon set "{name}" rollout to finish: {available} of {desired} updated pods are '
            "available...",
        )
    return RolloutStatus(True, f'daemon set "{name}" successfully rolled out')


def stateful_set(obj: Mapping[str, Any]) -> RolloutStatus:
    _, spec, status, generation, observed = _parts(obj)
    strategy = spec.get("updateStrategy") or {}
    if (strategy.get("type") or "RollingUpdate") != "RollingUpdate":
        raise RolloutFailed("rollout status is only available for RollingUpdate strategy type")
    if observed == 0 or generation > observed:
        return RolloutStatus(False, "Waiting for statefulset spec update to be observed...")
    replicas = _int(spec.get("replicas"), 1)
    ready = _int(status.get("readyReplicas"))
    if ready < replicas:
        return RolloutStatus(False, f"Waiting for {replicas - ready} pods to be ready...")
    rolling = strategy.get("rollingUpdate")
    updated = _int(status.get("updatedReplicas"))
    # The apiserver defaults rollingUpdate.partition to 0, so on a real cluster this branch is
    # the one kubectl takes.
    if isinstance(rolling, Mapping):
        partition = _int(rolling.get("partition"))
        if "partition" in rolling and updated < replicas - partition:
            return RolloutStatus(
                False,
                f"Waiting for partitioned roll out to finish: {updated} out of {replicas - partition} "
                "new pods have been updated...",
            )
        return RolloutStatus(True, f"partitioned roll out complete: {updated} new pods have been updated...")
    update_revision, current_revision = status.get("updateRevision"), status.get("currentRevision")
    if update_revision != current_revision:
        return RolloutStatus(
            False,
            f"waiting for statefulset rolling update to complete {updated} pods at revision "
            f"{update_revision}...",
        )
    return RolloutStatus(
        True,
        f"statefulset rolling update complete {_int(status.get('currentReplicas'))} pods at revision "
        f"{current_revision}...",
    )
