"""The state one run's handlers and engine parts share, and how the run shows it.

`RunbookWorkflow` keeps one `RunContext`: the request, the run's `RunProgress` (with its
`StageRuns`), what operators asked for (pause, abort, rollback, skips), the run's children and
its Slack notifier. The engine parts (`run_hosts`, `run_rollback`, `run_gate_wait`) read and
write the run through it; `set_status`, `upsert` and `details` keep Temporal's view of the run
(search attributes, current details) in step; `signed_state` is what the next execution
continues with. Workflow code, no I/O.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from temporalio import workflow

from workflows import trust

with workflow.unsafe.imports_passed_through():
    from pitstop.contracts import GateState, Requester, RunProgress, RunRequest, RunState
    from pitstop.slack.contracts import add_notice
    from workflows import run_status
    from workflows.notifier import SlackNotifier
    from workflows.run_children import HostChildren
    from workflows.run_stages import StageRuns


class RunContext:
    def __init__(self, request: RunRequest) -> None:
        self.request = request
        # Nothing from `request.state` is trusted before the run has checked its signature:
        # the validators and queries see no plan and no gates until then.
        self.progress: RunProgress | None = None
        self.stages: StageRuns | None = None
        self.run_status: RunState = "planning"
        self.requester = Requester(name=request.requested_by)
        # Refusals heard before the plan exists (they join the run's notices once it does).
        self.early_notices: list[str] = []
        # What operators asked for.
        self.paused = False
        self.abort_reason: str | None = None
        self.rollback_request: str | None = None
        # A held run (a promotion's ring, RunRequest.hold) was let go by its promotion.
        self.released = False
        self.hosts_to_skip: set[str] = set()
        # Why the current stage stopped launching (a rollback trigger); open host gates of
        # the stage close with it, so that hosts waiting for a vote do not hold the rollback.
        self.halt_reason: str | None = None
        # Why the run failed or stopped (its report's `msg`).
        self.msg = ""
        self.children = HostChildren()
        # Set once the plan is known (it decides whether and where the run posts to Slack).
        self.slack: SlackNotifier | None = None
        self._indexed: dict[str, str] = {}
        # Keeps references to background tasks (child watchers, host gate timers).
        self._background: set[asyncio.Task[None]] = set()

    def take(self, progress: RunProgress) -> None:
        """The run's state from now on (planned afresh, or continued)."""
        self.progress = progress
        self.stages = StageRuns(progress)

    def p(self) -> RunProgress:
        assert self.progress is not None
        return self.progress

    def stage_runs(self) -> StageRuns:
        assert self.stages is not None
        return self.stages

    def gates(self) -> dict[str, GateState]:
        return self.progress.gates if self.progress is not None else {}

    def who(self) -> Requester:
        """Who asked for the run (verified or not)."""
        if self.progress is not None and self.progress.requester is not None:
            return self.progress.requester
        return self.requester

    def who_shown(self) -> str:
        requester = self.who()
        return requester.name if requester.verified else f"{requester.name} (unverified)"

    def current_stage_name(self) -> str | None:
        current = self.stages.current() if self.stages is not None else None
        return current.name if current is not None else None

    def notice(self, text: str) -> None:
        if self.progress is None:
            self.early_notices = add_notice(self.early_notices, text)
        else:
            self.progress.notices = add_notice(self.progress.notices, text)

    def in_background(self, work: Coroutine[Any, Any, None]) -> None:
        self._background.add(asyncio.create_task(work))

    async def signed_state(self) -> tuple[RunProgress, str] | None:
        """The state for the next execution, signed by this one, once no handler is running;
        None when an abort or rollback arrived meanwhile (this execution handles it)."""
        progress = self.p()
        while True:
            await workflow.wait_condition(workflow.all_handlers_finished)
            if self.abort_reason is not None or self.rollback_request is not None:
                return None
            progress.paused = self.paused
            progress.skip_requests = sorted(self.hosts_to_skip)
            state = progress.model_copy(update={"executions": progress.executions + 1})
            signed = trust.state_digest(state)
            signature = await trust.sign_state(signed)
            # A message handled while the state was signed would be lost: sign again. (The
            # copy is shallow: a handler's change to the progress shows in its digest too.)
            unchanged = (self.paused, sorted(self.hosts_to_skip)) == (
                progress.paused,
                progress.skip_requests,
            )
            if (
                workflow.all_handlers_finished()
                and unchanged
                and trust.state_digest(progress.model_copy(update={"executions": state.executions})) == signed
            ):
                return state, signature

    # --- Temporal's view of the run ----------------------------------------------------------
    def shown_status(self) -> RunState:
        return run_status.shown_state(self.run_status, self.paused)

    def set_status(self, status: RunState) -> None:
        self.run_status = status
        self.upsert()
        self.details()

    def upsert(self, stage: str | None = None) -> None:
        updates = run_status.search_attribute_updates(
            self.shown_status(), self.progress, stage, self._indexed
        )
        if updates:
            workflow.upsert_search_attributes(updates)

    def details(self) -> None:
        if self.progress is not None:
            workflow.set_current_details(run_status.details(self.progress, self.shown_status()))
