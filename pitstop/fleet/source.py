"""Read the fleet from Temporal, as the CLI reads runs (never a cluster: clusters are reachable
only from their own workers). Runs are found by the search attributes every run keeps current
(workflows/run_status.py): `PitstopCluster`, `PitstopRunbook`, `PitstopStatus`, `PitstopStage`.

Bounded for large fleets: visibility is read in pages with a limit per query, only the newest
runs of each cluster and runbook are opened, and at most READS reads run at once (as
pitstop/report/source.py CHILD_READS bounds a report's)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from temporalio.client import Client, WorkflowExecution, WorkflowFailureError, WorkflowHandle
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError

from pitstop.contracts import ModuleResult, RunReport
from pitstop.fleet.extract import (
    DRILL_MODULE,
    INVENTORY_MODULE,
    UPLOAD_MODULE,
    TaskAt,
    backup_of,
    drill_of,
    inventory_of,
    last_task,
)
from pitstop.fleet.models import (
    Backup,
    ClusterInventory,
    ClusterStatus,
    Drill,
    FleetStatus,
    RunInFlight,
    RunRef,
)
from pitstop.fleet.skew import fleet_skew

# The names workflows/run_status.py upserts (the CLI does not import the workflows).
CLUSTER_KEY = SearchAttributeKey.for_keyword("PitstopCluster")
RUNBOOK_KEY = SearchAttributeKey.for_keyword("PitstopRunbook")
STAGE_KEY = SearchAttributeKey.for_keyword("PitstopStage")
STATUS_KEY = SearchAttributeKey.for_keyword("PitstopStatus")
RUN_TYPE = "RunbookWorkflow"

# Runbooks (their `name:`) whose runs take a cluster's version inventory.
INVENTORY_RUNBOOKS = ("fleet-inventory", "platform-upgrade")
BACKUP_RUNBOOK = "etcd-backup"
DRILL_RUNBOOK = "etcd-restore-drill"

# Reads (visibility pages, results, histories) in flight at once, whole fleet.
READS = 32
# Completed inventory runs opened per cluster looking for an inventory (a run may have ended
# before its inventory task): the newest first.
INVENTORY_RUNS = 5
# Completed backup or drill runs opened per cluster looking for one that was not a check-mode run.
RECOVERY_RUNS = 5
# Runs in progress listed per cluster.
IN_FLIGHT_SHOWN = 20
# Runs whose search attributes are read to find the clusters when none are named.
DISCOVERY_RUNS = 2000
PAGE = 100

CLUSTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


class FleetSourceError(Exception):
    """The fleet cannot be read as asked (a cluster name a query cannot hold)."""


def _quoted(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def cluster_query(cluster: str, *conditions: str) -> str:
    return " AND ".join((f"WorkflowType = '{RUN_TYPE}'", f"PitstopCluster = {_quoted(cluster)}", *conditions))


def _newest_first(runs: list[WorkflowExecution]) -> list[WorkflowExecution]:
    floor = datetime.min.replace(tzinfo=UTC)
    return sorted(runs, key=lambda w: (w.close_time or floor, w.start_time), reverse=True)


def _attr(execution: WorkflowExecution, key: SearchAttributeKey[str]) -> str | None:
    value = execution.typed_search_attributes.get(key)
    return str(value) if value is not None else None


class FleetReader:
    def __init__(self, client: Client, reads: int = READS) -> None:
        self.client = client
        self.limit = asyncio.Semaphore(reads)

    async def runs(self, query: str, limit: int) -> list[WorkflowExecution]:
        async with self.limit:
            listed = self.client.list_workflows(query, limit=limit, page_size=min(limit, PAGE))
            return [execution async for execution in listed]

    async def report(self, execution: WorkflowExecution) -> RunReport | None:
        handle: WorkflowHandle[Any, RunReport] = self.client.get_workflow_handle(
            execution.id, run_id=execution.run_id, result_type=RunReport
        )
        async with self.limit:
            try:
                return await handle.result(follow_runs=False)
            except (WorkflowFailureError, RPCError):
                return None  # no report (its history is gone, or it failed as a workflow)

    async def module_data(self, at: TaskAt, module: str) -> dict[str, Any] | None:
        """The data of the last `module.<module>` activity that completed and did not fail in
        the host workflow's history: where a result too large for the run's report is kept
        whole. Needs no worker; the client's converter decrypts (and fetches claim-checked
        payloads)."""
        handle = self.client.get_workflow_handle(at.host_workflow_id)
        scheduled: set[int] = set()
        completed: list[Sequence[Any]] = []
        async with self.limit:
            try:
                async for event in handle.fetch_history_events():
                    if event.HasField("activity_task_scheduled_event_attributes"):
                        attrs = event.activity_task_scheduled_event_attributes
                        if attrs.activity_type.name == f"module.{module}":
                            scheduled.add(event.event_id)
                    elif event.HasField("activity_task_completed_event_attributes"):
                        done = event.activity_task_completed_event_attributes
                        if done.scheduled_event_id in scheduled:
                            completed.append(done.result.payloads)
            except RPCError:
                return None
        for payloads in reversed(completed):
            [result] = await self.client.data_converter.decode(payloads, [ModuleResult])
            if isinstance(result, ModuleResult) and not result.failed:
                return result.data
        return None

    async def _task_data(self, at: TaskAt, module: str) -> dict[str, Any] | None:
        return at.data if at.data is not None else await self.module_data(at, module)

    async def inventory(self, cluster: str) -> ClusterInventory | None:
        names = ", ".join(_quoted(n) for n in INVENTORY_RUNBOOKS)
        query = cluster_query(cluster, f"PitstopRunbook IN ({names})", "ExecutionStatus = 'Completed'")
        for execution in _newest_first(await self.runs(query, INVENTORY_RUNS)):
            report = await self.report(execution)
            at = last_task(report, INVENTORY_MODULE) if report is not None else None
            if report is None or at is None:
                continue
            data = await self._task_data(at, INVENTORY_MODULE)
            inventory = inventory_of(report, at, data) if data is not None else None
            if inventory is not None:
                return inventory
        return None

    async def _newest_real(self, query: str) -> RunReport | None:
        """The report of the newest completed run of `query` that was not a check-mode run (a
        backup "succeeds" in check mode without uploading, a drill is skipped); at most
        RECOVERY_RUNS runs are opened."""
        for execution in _newest_first(await self.runs(query, RECOVERY_RUNS)):
            report = await self.report(execution)
            if report is not None and not report.check_mode:
                return report
        return None

    async def backup(self, cluster: str) -> tuple[Backup | None, RunRef | None]:
        """The newest succeeded backup, and the newest backup run when it did not succeed."""
        done = cluster_query(
            cluster, f"PitstopRunbook = {_quoted(BACKUP_RUNBOOK)}", "ExecutionStatus = 'Completed'"
        )
        newest, ok = await asyncio.gather(
            self._newest_real(done), self._newest_real(f"{done} AND PitstopStatus = 'succeeded'")
        )
        failed = None
        if newest is not None and newest.status != "succeeded":
            failed = RunRef(
                run_id=newest.run_id, status=newest.status, ended_at=newest.ended_at, msg=newest.msg
            )
        if ok is None:
            return None, failed
        at = last_task(ok, UPLOAD_MODULE)
        data = await self._task_data(at, UPLOAD_MODULE) if at is not None else None
        return backup_of(ok, data), failed

    async def drill(self, cluster: str) -> Drill | None:
        query = cluster_query(
            cluster, f"PitstopRunbook = {_quoted(DRILL_RUNBOOK)}", "ExecutionStatus = 'Completed'"
        )
        newest = await self._newest_real(query)
        if newest is None:
            return None
        at = last_task(newest, DRILL_MODULE)
        data = await self._task_data(at, DRILL_MODULE) if at is not None else None
        return drill_of(newest, data)

    async def in_flight(self, cluster: str) -> tuple[list[RunInFlight], bool]:
        query = cluster_query(cluster, "ExecutionStatus = 'Running'")
        running = await self.runs(query, IN_FLIGHT_SHOWN + 1)
        runs = [
            RunInFlight(
                run_id=w.id,
                runbook=_attr(w, RUNBOOK_KEY) or "?",
                stage=_attr(w, STAGE_KEY),
                status=_attr(w, STATUS_KEY),
                started_at=w.start_time,
            )
            for w in sorted(running, key=lambda w: w.start_time, reverse=True)
        ]
        return runs[:IN_FLIGHT_SHOWN], len(runs) > IN_FLIGHT_SHOWN

    async def cluster(self, name: str) -> ClusterStatus:
        inventory, (backup, failed), drill, (running, more) = await asyncio.gather(
            self.inventory(name), self.backup(name), self.drill(name), self.in_flight(name)
        )
        return ClusterStatus(
            name=name,
            inventory=inventory,
            backup=backup,
            backup_failed=failed,
            drill=drill,
            in_flight=running,
            in_flight_more=more,
        )

    async def clusters(self) -> tuple[list[str], str]:
        """The clusters the newest runs name (at most DISCOVERY_RUNS runs read), and how."""
        query = f"WorkflowType = '{RUN_TYPE}' AND PitstopCluster IS NOT NULL"
        runs = await self.runs(query, DISCOVERY_RUNS)
        names = sorted({n for w in runs if (n := _attr(w, CLUSTER_KEY))})
        how = f"clusters named by the newest {len(runs)} runs"
        if len(runs) >= DISCOVERY_RUNS:
            how += f" (at most {DISCOVERY_RUNS} read: name others with --clusters)"
        return names, how


def check_names(names: Sequence[str]) -> list[str]:
    bad = [n for n in names if not CLUSTER_NAME.match(n)]
    if bad:
        raise FleetSourceError(
            f"not a cluster name: {', '.join(repr(b) for b in bad)} (letters, digits, '.', '_', '-')"
        )
    return list(dict.fromkeys(names))


async def read_fleet(
    client: Client, clusters: Sequence[str] | None = None, named_by: str = "--clusters"
) -> FleetStatus:
    """The fleet view of the named clusters, or of every cluster the newest runs name.
    `named_by` says who named them (the CLI's --clusters, a runbook's `fleet.report`)."""
    reader = FleetReader(client)
    if clusters:
        names, how = check_names(clusters), f"clusters named by {named_by}"
    else:
        names, how = await reader.clusters()
    statuses = list(await asyncio.gather(*(reader.cluster(n) for n in names)))
    inventories = {s.name: s.inventory for s in statuses if s.inventory is not None}
    return FleetStatus(
        generated_at=datetime.now(UTC), clusters=statuses, skew=fleet_skew(inventories), discovery=how
    )
