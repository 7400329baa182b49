"""Rich renderings of a run's status and report, shared by `pitstop status`, `run --wait`
and `pitstop demo`."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from rich.console import Group
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from pitstop.contracts import GateState, Requester, RunReport, RunStatus, VoteRecord

_STYLE = {
    "ok": "green",
    "succeeded": "green",
    "approved": "green",
    "running": "cyan",
    "waiting_gate": "yellow",
    "open": "yellow",
    "paused": "yellow",
    "observing": "cyan",
    "pending": "dim",
    "skipped": "dim",
    "failed": "red",
    "rejected": "red",
    "aborted": "red",
    "rolled_back": "magenta",
    "rolling_back": "magenta",
    "held": "cyan",
    "completed_with_failures": "yellow",
}


def styled(value: str) -> Text:
    return Text(value, style=_STYLE.get(value, ""))


def ui_link(ui_url: str, namespace: str, workflow_id: str) -> str:
    return f"{ui_url.rstrip('/')}/namespaces/{namespace}/workflows/{workflow_id}"


def requester_said(requested_by: str, requester: Requester | None) -> str:
    """`alice (verified: cli:alice)` or `alice (unverified)`: what the run knows of who asked."""
    if requester is not None and requester.verified:
        return f"{requester.name} (verified: {requester.subject})"
    return f"{requested_by} (unverified)"


# Hosts in flight named per stage; a 10,000-host stage says how many more.
IN_FLIGHT_SHOWN = 5
_ENDED = ("ok", "failed", "skipped", "aborted")


def stage_progress(hosts: Mapping[str, str]) -> tuple[int, int, list[str]]:
    """(hosts ended, hosts in all, hosts running) of one stage."""
    ended = sum(1 for state in hosts.values() if state in _ENDED)
    return ended, len(hosts), [h for h, state in hosts.items() if state == "running"]


def how_to_decide(run_id: str, gate: GateState) -> str:
    """The command that answers an open gate, for the people allowed to."""
    who = ", ".join(gate.rule.approvers[:5]) + (" …" if len(gate.rule.approvers) > 5 else "")
    verified = " (verified votes: Slack, or the CLI with the vote key)" if gate.rule.require_verified else ""
    return f"pitstop approve {run_id} --gate {gate.rule.gate_id}   # {who}{verified}"


def status_view(status: RunStatus) -> Group:
    head = Text.assemble(
        (status.runbook, "bold"),
        "  ",
        styled(status.status),
        f"  run {status.run_id}  requested by {requester_said(status.requested_by, status.requester)}",
        "  (check mode)" if status.check_mode else "",
    )
    stages = Table(title="stages", title_justify="left")
    stages.add_column("stage")
    stages.add_column("status")
    stages.add_column("progress")
    stages.add_column("ended", justify="right")
    stages.add_column("hosts")
    stages.add_column("note")
    for stage in status.stages:
        counts: dict[str, int] = {}
        for value in stage.hosts.values():
            counts[value] = counts.get(value, 0) + 1
        summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        ended, total, running = stage_progress(stage.hosts)
        if running:
            named = ", ".join(running[:IN_FLIGHT_SHOWN])
            more = f" +{len(running) - IN_FLIGHT_SHOWN}" if len(running) > IN_FLIGHT_SHOWN else ""
            summary += f"\nin flight: {named}{more}"
        bar = ProgressBar(total=max(total, 1), completed=ended, width=20)
        note = stage.rollback_reason or stage.blocked_reason or ""
        if stage.wave and not stage.rollback_reason:
            note = f"wave {stage.wave}" + (f"; {note}" if note else "")
        stages.add_row(stage.name, styled(stage.status), bar, f"{ended}/{total}", summary, note)
    parts: list[Table | Text] = [head, stages]
    if status.gates:
        parts.append(gates_table(status.gates))
        parts.extend(
            Text(f"to decide: {how_to_decide(status.run_id, g)}", style="yellow")
            for g in status.gates
            if g.status == "open"
        )
    if status.rollback_reason:
        parts.append(Text(f"rollback: {status.rollback_reason}", style="magenta"))
    parts.extend(Text(f"{a.name}: {a.uri}", style="cyan") for a in status.artifacts)
    parts.extend(Text(f"notice: {n}", style="yellow") for n in status.notices)
    return Group(*parts)


def gates_table(gates: list[GateState]) -> Table:
    table = Table(title="gates", title_justify="left")
    table.add_column("gate")
    table.add_column("status")
    table.add_column("approvals")
    table.add_column("votes")
    table.add_column("refused")
    for gate in gates:
        votes = ", ".join(f"{v.approver} {'+' if v.approve else '-'} ({_by(v)})" for v in gate.votes)
        refused = "; ".join(f"{v.approver}: {v.reason}" for v in gate.refused[-3:])
        status = gate.status if gate.status != "open" else f"open (needs {gate.quorum})"
        if gate.rule.require_verified:
            status += ", verified votes only"
        if gate.note and gate.status == "open":
            status += f"; {gate.note}"
        table.add_row(gate.rule.gate_id, styled(status), str(gate.approvals), votes, refused)
    return table


def _by(vote: VoteRecord) -> str:
    if vote.verified:
        return vote.source
    return f"unverified, claims {vote.claimed_source}" if vote.claimed_source else "unverified"


# A finished fleet-wide run lists its hosts that did not end `ok` in full, and this many of
# the others per stage (10,000 identical rows help nobody; `--all-hosts` shows them all).
OK_ROWS_SHOWN = 20


def report_view(report: RunReport, ok_rows: int | None = OK_ROWS_SHOWN) -> Group:
    head = Text.assemble(
        (report.runbook, "bold"),
        "  ",
        styled(report.status),
        f"  run {report.run_id}  requested by {requester_said(report.requested_by, report.requester)}",
        f"  {int((report.ended_at - report.started_at).total_seconds())}s",
    )
    hosts = Table(title="hosts", title_justify="left")
    hosts.add_column("stage")
    hosts.add_column("host")
    hosts.add_column("status")
    hosts.add_column("changed", justify="right")
    hosts.add_column("tasks", justify="right")
    hosts.add_column("message")
    for stage in report.stages:
        ok = [h for h in stage.hosts if h.status == "ok"]
        hidden = {h.host for h in ok[ok_rows:]} if ok_rows is not None else set()
        for host in stage.hosts:
            if host.host in hidden:
                continue
            hosts.add_row(
                stage.name,
                host.host,
                styled(host.status),
                str(host.changed),
                str(len(host.tasks)),
                (f"{host.failed_task}: " if host.failed_task else "") + host.msg,
            )
        if hidden:
            hosts.add_row(
                stage.name, f"… {len(hidden)} more", styled("ok"), "", "", "(--all-hosts lists them)"
            )
    parts: list[Table | Text] = [head, hosts]
    if any(stage.waves for stage in report.stages):
        parts.append(waves_table(report))
    if report.gates:
        parts.append(gates_table(report.gates))
    if report.msg:
        parts.append(Text(report.msg, style="yellow"))
    parts.extend(Text(f"{a.name}: {a.uri}", style="cyan") for a in report.artifacts)
    parts.extend(Text(f"notice: {n}", style="yellow") for n in report.notices)
    return Group(*parts)


def waves_table(report: RunReport) -> Table:
    """One row per wave of the stages that ran in waves: when its hosts ran and were watched."""
    table = Table(title="waves", title_justify="left")
    for column in ("stage", "wave", "hosts", "gate", "started", "hosts ended", "observed until"):
        table.add_column(column)

    def at(moment: datetime | None) -> str:
        return moment.strftime("%H:%M:%S") if moment is not None else "-"

    for stage in report.stages:
        for wave in stage.waves:
            table.add_row(
                Text(stage.name),
                Text(f"{wave.number} {wave.wave}"),  # as written: no markup, no emoji codes
                str(wave.hosts),
                Text(wave.gate or "-"),
                at(wave.started_at),
                at(wave.hosts_ended_at),
                at(wave.observed_until),
            )
    return table
