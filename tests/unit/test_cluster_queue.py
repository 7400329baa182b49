"""What `pitstop status` says of a run whose cluster queue no worker polls (pitstop.cluster_queue)."""

from __future__ import annotations

from pitstop.cluster_queue import waiting_line
from pitstop.contracts import RunState, RunStatus
from pitstop.runbook.inventory import ClusterConfig


def status(state: RunState = "running", cluster: ClusterConfig | None = None) -> RunStatus:
    return RunStatus(
        run_id="run-1", runbook="rb", requested_by="me", check_mode=False, status=state, cluster=cluster
    )


PROD = ClusterConfig(name="prod", task_queue="pitstop-prod")


def test_a_running_run_on_a_cluster_queue_without_pollers_says_it_waits_and_what_to_start() -> None:
    line = waiting_line(status(cluster=PROD), [])
    assert line is not None
    assert line.startswith("waiting: no worker is polling task queue 'pitstop-prod' (cluster prod)")
    assert "--activities-only --task-queue pitstop-prod" in line and "docs/deployment.md" in line


def test_nothing_to_say_with_a_poller_without_a_cluster_queue_or_after_the_end() -> None:
    assert waiting_line(status(cluster=PROD), ["123@node"]) is None
    assert waiting_line(status(cluster=ClusterConfig(name="prod")), []) is None
    assert waiting_line(status(), []) is None
    assert waiting_line(status("succeeded", PROD), []) is None
    assert waiting_line(status("waiting_gate", PROD), []) is not None


def test_a_held_run_waits_on_its_promotion_not_on_a_worker() -> None:
    assert waiting_line(status("held", PROD), []) is None
