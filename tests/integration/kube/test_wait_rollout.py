"""kube.wait_rollout against the rehearsal cluster, with the real `kubectl rollout status` as the
reference: at each moment of a rollout, pitstop's verdict is the line kubectl prints, and the task
returns only once kubectl would say "successfully rolled out"."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from activities.kube.apply import apply
from activities.kube.rollout import wait_rollout
from pitstop.kube.rollout import status_of
from pitstop_sim import SimCluster
from tests.integration.kube.conftest import ModuleRunner, StartSim
from tests.integration.kube.test_apply import kube
from tests.integration.sim.conftest import Kubectl, kubectl_for

__all__ = ["kubectl_for"]

CLUSTER = """
cluster: {nodes: 3, domains: 1}
timing: {time_scale: 4, pod_start_seconds: 4, recreate_delay_seconds: 1}
"""
WEB = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 3
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: "registry.local/web:1"}]
"""


def kubectl_says(kubectl: Kubectl, what: str) -> str:
    return kubectl("rollout", "status", what, "-n", "default", "--watch=false").strip()


def test_the_wait_ends_when_kubectl_says_rolled_out_and_agrees_with_it_on_the_way(
    start_sim: StartSim,
    module_runner: ModuleRunner,
    kubectl_for: Callable[[SimCluster], Kubectl],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sim = start_sim(CLUSTER)
    kubectl = kubectl_for(sim)
    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(tmp_path))
    (tmp_path / "web.yaml").write_text(WEB)
    module_runner(apply, sim, {"src": "web.yaml"})
    module_runner(wait_rollout, sim, {"src": "web.yaml", "poll_interval_seconds": 0.2, "timeout_seconds": 60})
    (tmp_path / "web.yaml").write_text(WEB.replace("web:1", "web:2"))
    module_runner(apply, sim, {"src": "web.yaml"})

    # While it rolls, each verdict pitstop reads is the line kubectl prints for the same object.
    path = "/apis/apps/v1/namespaces/default/deployments/web"
    compared: list[str] = []
    for _ in range(300):
        before = kube(sim).get(path)
        said = kubectl_says(kubectl, "deployment/web")
        after = kube(sim).get(path)
        if before["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]:
            assert status_of(after).message == said
            compared.append(said)
        if "successfully rolled out" in said:
            break
    waiting = [m for m in compared if m.startswith('Waiting for deployment "web" rollout to finish')]
    assert waiting, compared  # it was compared while rolling, not only once finished
    assert kubectl_says(kubectl, "deployment/web") == status_of(kube(sim).get(path)).message

    # The task itself: started on a fresh change, it returns when the rollout is complete.
    (tmp_path / "web.yaml").write_text(WEB.replace("web:1", "web:3"))
    module_runner(apply, sim, {"src": "web.yaml"})
    pool = ThreadPoolExecutor(max_workers=1)
    waiting = pool.submit(
        module_runner,
        wait_rollout,
        sim,
        {"src": "web.yaml", "poll_interval_seconds": 0.2, "timeout_seconds": 60},
    )
    result = waiting.result(timeout=90)
    pool.shutdown()
    assert result.data["rolled_out"] == ["Deployment default/web"]
    assert kubectl_says(kubectl, "deployment/web") == 'deployment "web" successfully rolled out'
    status = kube(sim).get(path)["status"]
    assert status["updatedReplicas"] == status["availableReplicas"] == status["replicas"] == 3


def test_a_workload_that_is_not_there_or_never_finishes_fails_by_name(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    with pytest.raises(ApplicationError) as missing:
        module_runner(
            wait_rollout,
            sim,
            {"objects": ["Deployment default/ghost"], "poll_interval_seconds": 0.1, "timeout_seconds": 0.5},
        )
    assert missing.value.type == "Timeout"
    assert missing.value.message.endswith("not rolled out: Deployment default/ghost: not found")
    with pytest.raises(ApplicationError, match="is not a workload"):
        module_runner(wait_rollout, sim, {"objects": ["Pod default/x"]})
