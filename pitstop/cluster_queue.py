"""Is a cluster's worker there? What `pitstop status` says of a run whose module tasks wait on
its cluster's own task queue (the inventory's `cluster.task_queue`) while no worker polls it.

Such a run does not fail: its activities have only a start-to-close timeout, which starts when
a worker picks them up, so they wait on the queue for as long as the worker is missing and run
once it starts (docs/deployment.md, "A worker per cluster").

Temporal lists a task queue's pollers with the time each last *started* a poll, and keeps a
poller listed for minutes after it stopped. A live worker on an idle queue starts a new long
poll at least once a minute (the server answers an empty poll after ~60 s), so a poller not
seen for longer than `LIVE_WITHIN` is a worker that is gone.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from pitstop.contracts import RunStatus

# The server's long-poll expiry (1 min) plus room for a loaded machine.
LIVE_WITHIN = timedelta(seconds=75)
# A run in these states waits on no cluster worker (a held run waits on its promotion).
_ENDED = {"succeeded", "completed_with_failures", "failed", "rolled_back", "aborted", "held"}
DEPLOYMENT_DOC = 'docs/deployment.md, "A worker per cluster"'


async def live_pollers(client: Client, queue: str, *, now: datetime | None = None) -> list[str]:
    """Identities of the workers that polled `queue` for activities within `LIVE_WITHIN`."""
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
        )
    )
    since = (now or datetime.now(UTC)) - LIVE_WITHIN
    return [
        poller.identity
        for poller in response.pollers
        if poller.HasField("last_access_time") and poller.last_access_time.ToDatetime(tzinfo=UTC) >= since
    ]


def waiting_line(status: RunStatus, pollers: list[str]) -> str | None:
    """The line to show for a run whose cluster queue has no live poller, else None."""
    cluster = status.cluster
    if cluster is None or not cluster.task_queue or status.status in _ENDED or pollers:
        return None
    return (
        f"waiting: no worker is polling task queue {cluster.task_queue!r} (cluster {cluster.name}): "
        f"the run's module tasks wait there until one does — start the cluster's worker "
        f"(`python worker.py --activities-only --task-queue {cluster.task_queue}` inside the cluster; "
        f"{DEPLOYMENT_DOC})"
    )


async def run_waiting(client: Client, status: RunStatus) -> str | None:
    """`waiting_line` for a run, asking Temporal only when the run has a cluster queue."""
    cluster = status.cluster
    if cluster is None or not cluster.task_queue or status.status in _ENDED:
        return None
    return waiting_line(status, await live_pollers(client, cluster.task_queue))
