"""`kube.*` modules: the Kubernetes API through the official `kubernetes` client.

  nodes.py       kube.cordon, kube.uncordon, kube.taint, kube.untaint, kube.annotate,
                 kube.wait_node_ready
  drain.py       kube.drain (Eviction API, PDB waits, resumable)
  checkpoint.py  kube.wait_for_workloads (the checkpoint protocol)
  suspend.py     protocol `suspend` (whole jobs through their operators), kube.resume_workloads
  admission.py   kube.stop_admission, kube.resume_admission (Kueue stopPolicy or a taint)
  capacity.py    kube.capacity_check (spare GPUs and PDB headroom)
  job.py         kube.job (a Job pinned to a node, with its logs)
  generic.py     kube.get, kube.patch
  upgrade_checks.py  kube.deprecations, kube.crd_webhook_check (pre-upgrade, read-only)
  apply.py       kube.apply (server-side apply by default; client-side as kubectl)
  removals.py    kube.removals (what a component's new release no longer ships; read-only)
  readiness.py   kube.readiness (a MultiKueue worker cluster against the manager's expectation)
  delete.py      kube.delete (exactly those objects, with uid/resourceVersion preconditions)
  rollout.py     kube.wait_rollout (kubectl rollout status's verdict)
  serving.py     kube.serving_check (zero-downtime practice of serving Deployments),
                 kube.wave_replicas (how much of a serving Deployment one wave moves)
  gpu_driver.py  gpu.driver_management, gpu.operator_driver_hold, gpu.operator_driver_node
                 (the GPU Operator's containerized driver, rolled by pitstop)
  inventory.py   dynamic inventory groups (`from_nodes`) for plan.load
  client.py      the cached ApiClient per cluster and the JSON layer over it
  common.py      node name, deadlines, heartbeats, error translation

Activities are plain `def`s: the client blocks, so they run on the worker's thread pool.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from activities.kube.admission import resume_admission, stop_admission
from activities.kube.apply import apply
from activities.kube.capacity import capacity_check
from activities.kube.checkpoint import wait_for_workloads
from activities.kube.delete import delete
from activities.kube.drain import drain_node
from activities.kube.generic import get, patch
from activities.kube.gpu_driver import GPU_DRIVER_ACTIVITIES
from activities.kube.job import run_job
from activities.kube.nodes import annotate, cordon, taint, uncordon, untaint, wait_node_ready
from activities.kube.readiness import readiness
from activities.kube.removals import removals
from activities.kube.rollout import wait_rollout
from activities.kube.serving import serving_check, wave_replicas
from activities.kube.suspend import resume_workloads
from activities.kube.upgrade_checks import crd_webhook_check, deprecations

KUBE_ACTIVITIES: list[Callable[..., Any]] = [
    cordon,
    uncordon,
    taint,
    untaint,
    annotate,
    wait_node_ready,
    drain_node,
    wait_for_workloads,
    resume_workloads,
    stop_admission,
    resume_admission,
    capacity_check,
    run_job,
    get,
    patch,
    deprecations,
    crd_webhook_check,
    apply,
    removals,
    readiness,
    delete,
    wait_rollout,
    serving_check,
    wave_replicas,
    *GPU_DRIVER_ACTIVITIES,
]
