"""How much of each serving Deployment one wave would move to the new version at once.

A wave changes its nodes (driver, firmware, kubelet) and only then is observed. The replicas
of a Deployment that run on the wave's nodes when it starts are the ones that will run on the
changed nodes before anyone has watched them: a drained replica is rescheduled either onto
another node of the wave (still counted) or onto a node outside it (still the old version), so
that count bounds the model's exposure until the wave's window and gate. A model packed into
one failure domain would move whole; the limit refuses that wave before it starts.

At least one replica may always move: a one-replica Deployment can only change whole
(`kube.serving_check` reports it as not zero-downtime). Percentages round down, as the
Deployment controller rounds maxUnavailable. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from pydantic import BaseModel

from pitstop.kube.objects import Obj, controller_of, name_of, namespace_of, pod_is_active, uid_of
from pitstop.kube.serving import requests_gpus


class WaveShare(BaseModel):
    """One serving Deployment: its replicas, those on the wave's nodes, and the limit."""

    deployment: str
    replicas: int
    on_wave: int
    allowed: int

    @property
    def over(self) -> bool:
        return self.on_wave > self.allowed


def allowed_replicas(replicas: int, max_percent: float) -> int:
    """Replicas that may move at once: `max_percent` of `replicas`, rounded down, at least 1."""
    return max(1, math.floor(replicas * max_percent / 100.0 + 1e-9))


def wave_shares(
    deployments: Sequence[Obj],
    replica_sets: Sequence[Obj],
    pods: Sequence[Obj],
    nodes: Collection[str],
    *,
    max_percent: float,
    gpu_only: bool = True,
) -> list[WaveShare]:
    """Every serving Deployment with a replica on `nodes`, in the order given."""
    on_nodes = set(nodes)
    # Pod -> ReplicaSet -> Deployment, through controller references (uids, not names: a
    # ReplicaSet left by a deleted Deployment of the same name belongs to nobody).
    rs_deployment: dict[str, str] = {}
    for rs in replica_sets:
        owner = controller_of(rs)
        if owner is not None and owner.get("kind") == "Deployment":
            rs_deployment[uid_of(rs)] = str(owner.get("uid") or "")
    moving: dict[str, int] = {}
    for pod in pods:
        spec = pod.get("spec") or {}
        if spec.get("nodeName") not in on_nodes or not pod_is_active(pod):
            continue
        owner = controller_of(pod)
        if owner is None or owner.get("kind") != "ReplicaSet":
            continue
        deployment_uid = rs_deployment.get(str(owner.get("uid") or ""))
        if deployment_uid:
            moving[deployment_uid] = moving.get(deployment_uid, 0) + 1
    out: list[WaveShare] = []
    for deployment in deployments:
        count = moving.get(uid_of(deployment), 0)
        spec = deployment.get("spec") or {}
        pod_spec = (spec.get("template") or {}).get("spec") or {}
        if count == 0 or (gpu_only and not requests_gpus(pod_spec)):
            continue
        replicas = int(spec.get("replicas", 1))
        out.append(
            WaveShare(
                deployment=f"{namespace_of(deployment)}/{name_of(deployment)}",
                replicas=replicas,
                on_wave=count,
                allowed=allowed_replicas(max(replicas, count), max_percent),
            )
        )
    return out
