"""The run's Slack messages, kept in step with the run's state (deterministic workflow code).

A gate with a Slack channel (its own `slack_channel`, else the worker's default channel
recorded in the plan) posts itself when it opens, and its message is updated whenever the
gate changes: a vote, an escalation (the second group is mentioned), its close by votes,
timeout or the end of the run. Rather than hooking every place a gate changes (the `decide`
Update, its Signal twin, timers, stops), a background task compares each gate with what its
message last showed and sends what differs. Progress and rollback lines go into the thread
under the run's first message.

The run hands the notifier facts (a stage ended, a rollback began, the run ended); the wording
of every message is here, none in the engine.

Nothing here may hold the run up or fail it: the activities run beside the run with short
timeouts and bounded retries, and a failure becomes a notice in the run's status and report.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, FailureError

with workflow.unsafe.imports_passed_through():
    from pitstop.contracts import Artifact, GateState, RunProgress, RunState, StageStatus
    from pitstop.slack.blocks import escape
    from pitstop.slack.contracts import GateMessage, GateNotice, MessageRef, RunNotice, add_notice

NOTIFY_TIMEOUT = timedelta(seconds=10)
# All attempts together: a Slack outage delays the run's first message by at most this much
# and never holds anything else.
NOTIFY_DEADLINE = timedelta(seconds=30)
NOTIFY_RETRY = RetryPolicy(
    maximum_attempts=3,
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=5),
    non_retryable_error_types=["InvalidArgs", "Unauthorized"],
)
# Documents listed in the end message at most (a module per host may leave one each).
ARTIFACTS_SHOWN = 10


def linked(artifact: Artifact) -> str:
    """A document the run left, as Slack shows it: a link when people can open it in a browser
    (http(s)), else its name and where it is (an s3:// URI opens nowhere)."""
    name = escape(artifact.name).replace("|", "/")
    if artifact.uri.startswith(("https://", "http://")):
        return f"<{escape(artifact.uri).replace('|', '%7C')}|{name}>"
    return f"{name}: {escape(artifact.uri)}"


def fingerprint(gate: GateState) -> str:
    """What a gate's message shows; the message is updated when this changes."""
    return f"{gate.status}|{int(gate.escalated)}|{len(gate.votes)}"


class SlackNotifier:
    def __init__(self, progress: RunProgress, requested_by: str, current_stage: Callable[[], str]) -> None:
        self.progress = progress
        self.requested_by = requested_by
        self.current_stage = current_stage
        self._outbox: list[tuple[str, bool]] = []
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        plan = self.progress.plan
        # A plan (check-mode run) asks nobody and announces nothing.
        return not plan.check_mode and self.run_channel() is not None

    def run_channel(self) -> str | None:
        plan = self.progress.plan
        if plan.slack_channel:
            return plan.slack_channel
        return next((rule.slack_channel for rule in plan.gates.values() if rule.slack_channel), None)

    def gate_channel(self, gate: GateState) -> str | None:
        return gate.rule.slack_channel or self.progress.plan.slack_channel

    # --- the run's side --------------------------------------------------------------------
    async def start(self) -> None:
        """Post the run's first message (once per run, not per execution), then follow the run."""
        if not self.enabled:
            return
        slack = self.progress.slack
        if not slack.started:
            slack.started = True
            slack.channel = self.run_channel()
            assert slack.channel is not None
            plan = self.progress.plan
            hosts = sorted({h for s in plan.stages for h in s.hosts})
            text = (
                f":arrow_forward: *{escape(plan.runbook.name)}* run `{escape(workflow.info().workflow_id)}` "
                f"started by {escape(self.requested_by)}: {len(plan.stages)} stage(s), {len(hosts)} host(s). "
                "Progress follows in this thread."
            )
            # Awaited, briefly: `notify.slack` tasks with `thread: run` reply under this message.
            slack.thread = await self._post(
                "notify.run_event", self._run_notice(text, None, False), "the run's first message"
            )
        self._stopping = False
        self._task = asyncio.create_task(self._follow())

    def say(self, text: str, broadcast: bool = False) -> None:
        """A line in the run's thread (sent in the background, in order)."""
        if self.enabled and self.progress.slack.thread is not None:
            self._outbox.append((text, broadcast))

    def stage_ended(self, status: StageStatus) -> None:
        """A stage ended (or stopped): its state and how many hosts ended how."""
        counts: dict[str, int] = {}
        for value in status.hosts.values():
            counts[value] = counts.get(value, 0) + 1
        summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "no hosts"
        self.say(f"Stage *{escape(status.name)}*: {status.status} ({summary})")

    def rolling_back(self, reason: str) -> None:
        """A rollback began: everyone in the channel sees it."""
        self.say(f":rewind: Rolling back: {escape(reason)}", broadcast=True)

    def run_ended(self, final: RunState, msg: str) -> None:
        """The run's outcome and the documents it left (its report, its change record); anything
        but success is shown in the channel too."""
        ending = f"Run ended: *{final}*" + (f": {escape(msg)}" if msg else "")
        documents = self.progress.artifacts
        ending += "".join(f"\n• {linked(a)}" for a in documents[:ARTIFACTS_SHOWN])
        if len(documents) > ARTIFACTS_SHOWN:
            ending += f"\n… and {len(documents) - ARTIFACTS_SHOWN} more (`pitstop status`)"
        self.say(ending, broadcast=final != "succeeded")

    async def stop(self) -> None:
        """Send everything still due, then stop following (before continue-as-new and at the end)."""
        self._stopping = True
        if self._task is not None:
            await self._task
            self._task = None
        while self._due():
            await self._flush()

    # --- the background task ---------------------------------------------------------------
    async def _follow(self) -> None:
        while True:
            await workflow.wait_condition(lambda: self._stopping or self._due())
            if not self._due():
                return
            await self._flush()

    def _due(self) -> bool:
        if not self.enabled:
            return False
        if self._outbox:
            return True
        for gate_id, gate in self.progress.gates.items():
            if self.gate_channel(gate) is None:
                continue
            known = self.progress.slack.gates.get(gate_id)
            if known is None or known.shown != fingerprint(gate):
                return True
        return False

    async def _flush(self) -> None:
        slack = self.progress.slack
        for gate_id, gate in list(self.progress.gates.items()):
            channel = self.gate_channel(gate)
            if channel is None:
                continue
            known = slack.gates.get(gate_id)
            shown = fingerprint(gate)
            if known is None:
                known = GateMessage(channel=channel, shown=shown)
                slack.gates[gate_id] = known
                known.message = await self._post(
                    "notify.gate_opened", self._gate_notice(gate, known, False), f"gate {gate_id}"
                )
                continue
            if known.shown == shown:
                continue
            was_escalated = known.shown.split("|")[1] == "1"
            known.shown = shown
            if known.message is None:
                continue  # never posted: nothing to update
            closing = gate.status != "open"
            notice = self._gate_notice(gate, known, gate.escalated and not was_escalated)
            name = "notify.gate_closed" if closing else "notify.gate_updated"
            await self._send(name, notice, f"gate {gate_id}")
        while self._outbox:
            text, broadcast = self._outbox.pop(0)
            await self._post("notify.run_event", self._run_notice(text, slack.thread, broadcast), "progress")

    # --- activities ----------------------------------------------------------------------
    async def _post(self, activity: str, arg: GateNotice | RunNotice, what: str) -> MessageRef | None:
        try:
            ref: MessageRef = await workflow.execute_activity(
                activity,
                arg,
                result_type=MessageRef,
                start_to_close_timeout=NOTIFY_TIMEOUT,
                schedule_to_close_timeout=NOTIFY_DEADLINE,
                retry_policy=NOTIFY_RETRY,
            )
            return ref
        except ActivityError as err:
            self._notice(what, err)
            return None

    async def _send(self, activity: str, arg: GateNotice, what: str) -> None:
        try:
            await workflow.execute_activity(
                activity,
                arg,
                start_to_close_timeout=NOTIFY_TIMEOUT,
                schedule_to_close_timeout=NOTIFY_DEADLINE,
                retry_policy=NOTIFY_RETRY,
            )
        except ActivityError as err:
            self._notice(what, err)

    def _notice(self, what: str, err: ActivityError) -> None:
        cause = err.cause
        reason = cause.message if isinstance(cause, FailureError) else str(err)
        text = f"Slack: {what} was not posted or updated: {reason}"
        workflow.logger.warning(text)
        self.progress.notices = add_notice(self.progress.notices, text)

    def _run_notice(self, text: str, thread: MessageRef | None, broadcast: bool) -> RunNotice:
        channel = self.progress.slack.channel
        assert channel is not None
        return RunNotice(
            run_id=workflow.info().workflow_id,
            runbook=self.progress.plan.runbook.name,
            channel=channel,
            text=text,
            thread=thread,
            broadcast=broadcast,
        )

    def _gate_notice(self, gate: GateState, known: GateMessage, escalated_now: bool) -> GateNotice:
        stage, hosts = self._where(gate.rule.gate_id)
        return GateNotice(
            run_id=workflow.info().workflow_id,
            runbook=self.progress.plan.runbook.name,
            requested_by=self.requested_by,
            stage=stage,
            hosts=hosts,
            gate=gate,
            channel=known.channel,
            message=known.message,
            thread=self.progress.slack.thread,
            escalated_now=escalated_now,
        )

    def _where(self, gate_id: str) -> tuple[str, list[str]]:
        """The stage and hosts a gate decides: `stage:before|after`, or `template@host`."""
        _, at, host = gate_id.rpartition("@")
        if at:
            return self.current_stage(), [host]
        stage = gate_id.rsplit(":", 1)[0]
        planned = next((s for s in self.progress.plan.stages if s.name == stage), None)
        return stage, list(planned.hosts) if planned else []
