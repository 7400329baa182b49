"""Typed messages between the CLI, the workflows and the activities.

Everything that crosses a Temporal boundary (workflow input, activity input/output,
Update/Signal/Query payloads, the final report) is one of these pydantic models. The
workflows import this module through `imports_passed_through`, so it must stay free of
I/O and of client libraries.

Glossary: the six things called "stage"
---------------------------------------
A stage is written once, planned once, and then tracked by the run in three records; the
engine holds the five of one stage together in one `StageRun`.

* `Stage` (`pitstop/runbook/models.py`): the rule, as written in the runbook (tasks, gates,
  `serial`/`rolling`, `rollback_when`, `observe`, `rollback`). Part of `Plan.runbook`; never
  changes during a run.
* `PlannedStage` (here): the plan of that stage, resolved by `plan.load` against the
  inventory: the hosts it runs on, their failure domains, the warnings a reviewer must see.
  `Plan.stages`, in history once (the activity's result); never changes during a run.
* `StageProgress` (here): where the *current* stage is in its phases (`gate_before`, `hosts`,
  `observe`, `gate_after`) and which hosts started, finished, failed or were skipped.
  `RunProgress.stage`: only one exists, replaced when the next stage begins; carried across
  continue-as-new, so that a continued run resumes the stage where it was.
* `StageStatus` (here): what an operator sees of a stage while the run goes on: its state and
  each host's state. `RunProgress.statuses`; answered by the `status` Query (`RunStatus.stages`).
* `StageReport` (here): what a stage did, for the record: every host's `HostResult`, the
  observe checks, the compensations. `RunProgress.reports`; returned in `RunReport.stages`.
* `StageRun` (`workflows/run_stages.py`): the engine's handle on one stage, holding the five
  above together (the progress only while the stage is current). It never crosses a boundary:
  it is built from `RunProgress` when an execution starts, and every write goes through it to
  the records above, so that a stage's state is written in one place.

`RunVars` (here) is the `run` variable every task sees, typed from the workflow to the change
record (`records.change_record`); templates read it as plain JSON data.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

from pitstop.approvals import (
    Decision,
    GateRule,
    GateState,
    GateStatus,
    Requester,
    RequesterProof,
    VoteProof,
    VoteRecord,
)
from pitstop.module_spec import LocalMode
from pitstop.runbook.inventory import ClusterConfig
from pitstop.runbook.models import Runbook, Task
from pitstop.signing import digest
from pitstop.slack.contracts import SlackRunState

__all__ = [
    "Decision",
    "GateClosed",
    "GateRule",
    "GateState",
    "HostCommand",
    "HostGateRequest",
    "HostInput",
    "HostNotice",
    "HostResult",
    "ModuleCall",
    "ModuleExec",
    "ModuleResult",
    "Plan",
    "PlanHashes",
    "PlannedStage",
    "Requester",
    "RequesterProof",
    "RunOnceClaim",
    "RunOnceReply",
    "RunProgress",
    "RunReport",
    "RunRequest",
    "RunStatus",
    "RunVars",
    "StageProgress",
    "StageReport",
    "StageStatus",
    "StageVars",
    "TaskOutcome",
    "VoteProof",
    "VoteRecord",
    "request_digest",
]

# Output kept in workflow history is bounded; larger logs belong in an artifact store.
MAX_FIELD_BYTES = 64 * 1024


def bound_text(text: str | None, limit: int = MAX_FIELD_BYTES) -> str | None:
    if text is None:
        return None
    raw = text.encode()
    if len(raw) <= limit:
        return text
    head = raw[: limit - 200].decode(errors="ignore")
    return f"{head}\n... [{len(raw) - limit + 200} bytes truncated by pitstop]"


class RunRequest(BaseModel):
    """What starts a run: from the Temporal UI (one JSON object), the CLI, or a Schedule.

    `runbook` and `inventory` are paths relative to the worker's runbook directory
    (PITSTOP_RUNBOOK_DIR, default `runbooks/`), unless `files` carries them: the CLI sends
    the runbook, its imported task files and the inventory as a bundle, so the worker
    plans exactly what the operator has on disk.
    """

    model_config = ConfigDict(extra="forbid")

    runbook: str = Field(description="Runbook path, e.g. 'gpu-node-maintenance.yaml'.")
    inventory: str | None = Field(default=None, description="Inventory path, e.g. 'inventories/sim.yaml'.")
    files: dict[str, str] = Field(default_factory=dict, description="Bundle: relative path -> YAML text.")
    limit: str | None = Field(default=None, description="Host pattern further limiting every stage.")
    vars: dict[str, Any] = Field(default_factory=dict, description="Extra vars (highest precedence).")
    check_mode: bool = False
    tags: list[str] = Field(default_factory=list)
    skip_tags: list[str] = Field(default_factory=list)
    requested_by: str = "unknown"
    # Apply exactly what a plan (check-mode run) showed: refuse when anything changed.
    plan_of: str | None = Field(default=None, description="Run id of the approved plan.")
    expected_hashes: PlanHashes | None = None
    # Bounds one execution's history: after this many host launches the run continues as
    # new (between launches, with no host in flight), carrying its state in `state`. It also
    # does so earlier, when Temporal suggests it or the history reaches its budget
    # (workflows/run_hosts.py); each continue-as-new waits for the hosts in flight, so the
    # fewer the better.
    max_launches_per_execution: int = Field(default=2000, ge=1)
    # A promotion (runbooks/promotion.yaml, `runs.run`) starts each cluster's run with `hold`:
    # once its stages succeed the run waits, `held`, for the `release` signal (the promotion
    # went through) or `rollback` (a later ring failed: the runbook's own rollback runs, as if
    # its last stage had failed). A run that fails or rolls back on its own ends at once.
    hold: bool = Field(default=False, description="Stay open after succeeding until released or rolled back.")
    # Set by a holder of the vote key (the CLI next to the embedded stack, the demo): who asked.
    requester_proof: RequesterProof | None = Field(
        default=None, description="Signed requester (vote key); without it `requested_by` is a claim."
    )
    # Internal: only a run continuing as new sets these, signed with the worker key; a start
    # request that carries them is refused before anything runs.
    state: RunProgress | None = Field(default=None, description="Internal: carried across continue-as-new.")
    state_signature: str = Field(default="", description="Internal: the worker's signature of `state`.")


def request_digest(request: RunRequest) -> str:
    """What a requester proof signs: the request, without the proof and the internal state."""
    return digest(request.model_dump(mode="json", exclude={"requester_proof", "state", "state_signature"}))


class PlanHashes(BaseModel):
    model_config = ConfigDict(frozen=True)

    runbook: str
    inventory: str
    hosts: str
    content: str

    def differences(self, other: PlanHashes) -> list[str]:
        names = ("runbook", "inventory", "hosts")
        return [n for n in names if getattr(self, n) != getattr(other, n)]


class RetryExec(BaseModel):
    model_config = ConfigDict(frozen=True)

    maximum_attempts: int
    initial_interval_s: float
    backoff_coefficient: float
    maximum_interval_s: float
    non_retryable_error_types: list[str]


class ModuleExec(BaseModel):
    """How the engine calls one module (from the registry, fixed in the plan)."""

    model_config = ConfigDict(frozen=True)

    module: str
    activity: str
    pure: bool
    supports_check_mode: bool
    start_to_close_s: float
    heartbeat_s: float | None
    retry: RetryExec
    # `ModuleSpec.local`, as the worker that planned the run allowed it (plans recorded before
    # local activities existed read "never": their histories replay unchanged).
    local: LocalMode = "never"


class CanaryCover(BaseModel):
    """One value of a `waves.canary.cover` expression among a stage's hosts (a GPU product, a
    pool), how many hosts have it, and the canary-stage hosts that have it too."""

    model_config = ConfigDict(frozen=True)

    cover: str
    value: str
    hosts: int
    example: str
    canaries: list[str]


class PlannedStage(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    hosts: list[str]
    domains: dict[str, str] = Field(default_factory=dict)
    # What a reviewer of the plan must not miss about this stage (e.g. it deletes pods
    # without the Eviction API); shown as the run's notices from the start.
    warnings: list[str] = Field(default_factory=list)
    # `observe.duration` in seconds as planned (a templated one resolved with the run's vars);
    # None: the stage has no observe window, or a plan made before durations could be templated.
    observe_seconds: float | None = None
    # `waves`: the waves in the order they run, each host's wave, and each wave's observe
    # window in seconds (empty/None for a stage without waves).
    waves: list[str] = Field(default_factory=list)
    wave_of: dict[str, str] = Field(default_factory=dict)
    wave_observe_seconds: float | None = None
    # `waves.canary`: each value the stage's hosts need a passed canary for, and its canaries.
    coverage: list[CanaryCover] = Field(default_factory=list)

    def wave_hosts(self, wave: str) -> list[str]:
        return [h for h in self.hosts if self.wave_of.get(h) == wave]


class Plan(BaseModel):
    """Runbook + inventory, validated and resolved, recorded in history by `plan.load`."""

    runbook: Runbook
    stages: list[PlannedStage]
    hostvars: dict[str, dict[str, Any]]
    gates: dict[str, GateRule]
    modules: dict[str, ModuleExec]
    cluster: ClusterConfig | None = None
    task_queue: str
    extra_vars: dict[str, Any] = Field(default_factory=dict)
    check_mode: bool = False
    tags: list[str] = Field(default_factory=list)
    skip_tags: list[str] = Field(default_factory=list)
    hashes: PlanHashes
    # The worker's SLACK_DEFAULT_CHANNEL when it planned the run: where the run's thread and
    # gates without their own `slack_channel` post (None: only such gates post).
    slack_channel: str | None = None


class ModuleCall(BaseModel):
    """Input of every module activity."""

    module: str
    host: str
    args: dict[str, Any]
    check_mode: bool = False
    run_id: str
    task_path: str
    host_vars: dict[str, Any] = Field(default_factory=dict)
    cluster: ClusterConfig | None = None


class ModuleResult(BaseModel):
    """Output of every module, pure or activity. Text fields are bounded for history."""

    changed: bool = False
    failed: bool = False
    skipped: bool = False
    msg: str = ""
    data: dict[str, Any] = Field(default_factory=dict)
    rc: int | None = None
    stdout: str | None = None
    stderr: str | None = None
    diff: str | None = None

    @field_validator("stdout", "stderr", "diff", "msg")
    @classmethod
    def _bounded(cls, value: str | None) -> str | None:
        return bound_text(value)

    def as_var(self) -> dict[str, Any]:
        """The registered variable, shaped as Ansible users expect (`result.rc`, `result.failed`)."""
        out: dict[str, Any] = dict(self.data)
        out.update(
            changed=self.changed,
            failed=self.failed,
            skipped=self.skipped,
            msg=self.msg,
        )
        for key in ("rc", "stdout", "stderr"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.stdout is not None:
            out["stdout_lines"] = self.stdout.splitlines()
        return out


TaskStatus = Literal["ok", "changed", "failed", "skipped", "ignored", "rescued", "aborted"]
HostState = Literal["pending", "running", "ok", "failed", "skipped", "aborted"]


class TaskOutcome(BaseModel):
    task_id: str
    name: str
    module: str | None
    status: TaskStatus
    msg: str = ""
    attempts: int = 1
    started_at: datetime
    ended_at: datetime
    data: dict[str, Any] = Field(default_factory=dict)


class HostInput(BaseModel):
    """Input of one HostWorkflow: one host's task list in one stage."""

    run_workflow_id: str
    run_id: str
    stage: str
    host: str
    tasks: list[Task]
    handlers: list[Task] = Field(default_factory=list)
    vars: dict[str, Any]
    hostvars: dict[str, dict[str, Any]]
    modules: dict[str, ModuleExec]
    task_queue: str
    cluster: ClusterConfig | None = None
    check_mode: bool = False
    tags: list[str] = Field(default_factory=list)
    skip_tags: list[str] = Field(default_factory=list)
    approvers: dict[str, list[str]] = Field(default_factory=dict)
    requested_by: str = "unknown"
    # The parent's signature (worker key) of everything above, for this child and parent
    # execution: a host workflow started any other way refuses to run.
    signature: str = ""

    @field_serializer("tasks", "handlers", when_used="json")
    def _compact_tasks(self, tasks: list[Task]) -> list[dict[str, Any]]:
        # Every host of a stage gets the same tasks, and each child's input is stored in the
        # run's history: a Task's defaults were 1.3 KB of a 4 KB input for three tasks, and
        # the run continues as new by history size. Validation puts the defaults back.
        return [t.model_dump(mode="json", exclude_defaults=True) for t in tasks]


FACTS_LIMIT_BYTES = 64 * 1024


class Artifact(BaseModel):
    name: str
    uri: str
    host: str = ""
    stage: str = ""
    task: str = ""


class HostResult(BaseModel):
    host: str
    stage: str
    status: HostState
    msg: str = ""
    failed_task: str | None = None
    tasks: list[TaskOutcome] = Field(default_factory=list)
    registered: dict[str, Any] = Field(default_factory=dict)
    # Facts this host set with `set_fact` in this stage; they carry to the host's later
    # stages, as Ansible's do across plays (bounded: see FACTS_LIMIT_BYTES).
    facts: dict[str, Any] = Field(default_factory=dict)
    # Facts this host set on other hosts (`set_fact` with `delegate_to` and `delegate_facts`).
    delegated_facts: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # Documents a task left behind for people (change records, drill reports): a module
    # returns `data.artifact = {name, uri}` and the run's status and report list it.
    artifacts: list[Artifact] = Field(default_factory=list)
    changed: int = 0
    started_at: datetime
    ended_at: datetime


StageState = Literal[
    "pending", "waiting_gate", "running", "observing", "ok", "failed", "rolled_back", "skipped", "aborted"
]
RunState = Literal[
    "planning",
    "running",
    "waiting_gate",
    "paused",
    "rolling_back",
    # A promotion's ring: every stage is done and the run stays open until the promotion
    # releases it (it then ends as it would have) or rolls it back (a later ring failed).
    "held",
    "succeeded",
    "completed_with_failures",
    "failed",
    "rolled_back",
    "aborted",
]


class StageStatus(BaseModel):
    name: str
    status: StageState = "pending"
    hosts: dict[str, HostState] = Field(default_factory=dict)
    blocked_reason: str | None = None
    rollback_reason: str | None = None
    # The wave in progress ("2/3 zone-b") of a stage with `waves`.
    wave: str | None = None


class RunStatus(BaseModel):
    """Answer of the `status` Query: what an operator sees in `pitstop status`."""

    run_id: str
    runbook: str
    requested_by: str
    check_mode: bool
    status: RunState
    requester: Requester | None = None
    current_stage: str | None = None
    paused: bool = False
    stages: list[StageStatus] = Field(default_factory=list)
    gates: list[GateState] = Field(default_factory=list)
    rollback_reason: str | None = None
    plan_hash: str | None = None
    artifacts: list[Artifact] = Field(default_factory=list)
    # Things that went wrong beside the run (a Slack message that could not be posted).
    notices: list[str] = Field(default_factory=list)
    # The inventory's cluster (from the plan): with a `task_queue`, the run's module tasks wait
    # there for that cluster's own worker, and `pitstop status` says when none is polling it.
    cluster: ClusterConfig | None = None


class WaveReport(BaseModel):
    """One wave of a stage with `waves`: when its hosts started and ended, and its window."""

    wave: str
    number: int
    hosts: int
    gate: str | None = None
    started_at: datetime | None = None
    # What the wave's `checks` said before its hosts started (None: it has none).
    checks: str | None = None
    hosts_ended_at: datetime | None = None
    observed_until: datetime | None = None


class StageReport(BaseModel):
    name: str
    status: StageState
    hosts: list[HostResult] = Field(default_factory=list)
    rollback_reason: str | None = None
    rollback_hosts: list[HostResult] = Field(default_factory=list)
    observations: list[HostResult] = Field(default_factory=list)
    waves: list[WaveReport] = Field(default_factory=list)


class RunReport(BaseModel):
    """The run's outcome, kept in history as the change record's source."""

    run_id: str
    runbook: str
    requested_by: str
    check_mode: bool
    status: RunState
    requester: Requester | None = None
    started_at: datetime
    ended_at: datetime
    cluster: str | None = None
    hashes: PlanHashes | None = None
    stages: list[StageReport] = Field(default_factory=list)
    gates: list[GateState] = Field(default_factory=list)
    rollback_reason: str | None = None
    run_rollback: list[HostResult] = Field(default_factory=list)
    artifacts: list[Artifact] = Field(default_factory=list)
    msg: str = ""
    notices: list[str] = Field(default_factory=list)


class FailureVars(BaseModel):
    """One failed host of a stage (its stage hosts, observe checks and compensations)."""

    host: str
    task: str | None = None
    msg: str = ""


class StageVars(BaseModel):
    """One stage's outcome in the `run` variable (`run.stages[i]`)."""

    name: str
    status: StageState
    rollback_reason: str | None = None
    done_hosts: list[str] = Field(default_factory=list)
    failed_hosts: list[str] = Field(default_factory=list)
    failures: list[FailureVars] = Field(default_factory=list)


class VoteVars(BaseModel):
    approver: str
    approve: bool
    comment: str = ""
    source: str = ""
    verified: bool = False
    # ISO 8601 text, as templates and the change record show it.
    at: str


class GateVars(BaseModel):
    """One gate and its votes in the `run` variable (`run.gates[i]`)."""

    id: str
    status: GateStatus
    closed_reason: str | None = None
    votes: list[VoteVars] = Field(default_factory=list)


class RunVars(BaseModel):
    """The `run` variable: who asked for the run, and every stage's outcome and gate's votes so far.

    Built by the engine (`workflows/run_vars.py`) for every host's input; a runbook hands it to
    `records.change_record` as `run: "{{ run }}"`, which reads it back as this model. Every field
    has a default so that a record built outside the engine may pass only what it has.
    """

    id: str = ""
    runbook: str | None = None
    cluster: str | None = None
    requested_by: str | None = None
    # Whether a holder of the vote key vouched for the requester (and who that was).
    requester_verified: bool = False
    requester_source: str | None = None
    check_mode: bool = False
    started_at: str | None = None
    rollback_reason: str | None = None
    stages: list[StageVars] = Field(default_factory=list)
    gates: list[GateVars] = Field(default_factory=list)

    def as_template_var(self) -> dict[str, Any]:
        """What templates see as `run`: plain JSON data."""
        return self.model_dump(mode="json")


# Messages between a run and its host workflows. Each carries the sender's signature (worker
# key, see workflows/trust.py) over its other fields, the signal's name, the sender and
# receiver workflow ids and the receiving execution's run id; a message without a valid one
# changes nothing and is reported in the run's notices.


class HostGateRequest(BaseModel):
    """A host reached a `gate:` task; the parent opens the gate and answers with GateClosed."""

    gate_id: str
    template: str
    host: str
    signature: str = ""


class GateClosed(BaseModel):
    gate_id: str
    approved: bool
    reason: str
    signature: str = ""


class RunOnceClaim(BaseModel):
    """A host reached a `run_once` task; the first claim in the stage runs it."""

    task_id: str
    host: str
    signature: str = ""


class RunOnceReply(BaseModel):
    task_id: str
    owner: str
    result: ModuleResult | None = None
    signature: str = ""


class HostCommand(BaseModel):
    """Pause, resume or abort, from the run to one host. `seq` grows with every command the run
    sends that host, so a command seen in history cannot be sent again to undo a later one."""

    command: Literal["pause", "resume", "abort"]
    reason: str = ""
    seq: int
    signature: str = ""


class HostNotice(BaseModel):
    """A host tells the run something for its notices (a message it refused)."""

    host: str
    text: str
    signature: str = ""


StagePhase = Literal["gate_before", "hosts", "observe", "gate_after", "done"]
WavePhase = Literal["gate", "checks", "hosts", "observe"]


class StageProgress(BaseModel):
    phase: StagePhase = "gate_before"
    started: list[str] = Field(default_factory=list)
    done: list[str] = Field(default_factory=list)
    failed: list[str] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list)
    observe_round: int = 0
    # A stage with `waves`: the wave in progress and where it is (its gate, hosts, window).
    wave_index: int = 0
    wave_phase: WavePhase = "gate"


class RunProgress(BaseModel):
    """The whole state of a run, so that continue-as-new is one call."""

    plan: Plan
    started_at: datetime
    stage_index: int = 0
    stage: StageProgress = Field(default_factory=StageProgress)
    reports: list[StageReport] = Field(default_factory=list)
    statuses: list[StageStatus] = Field(default_factory=list)
    gates: dict[str, GateState] = Field(default_factory=dict)
    run_once: dict[str, RunOnceReply] = Field(default_factory=dict)
    rollback_reason: str | None = None
    executions: int = 1
    # Operator requests that outlive one execution (carried across continue-as-new).
    paused: bool = False
    skip_requests: list[str] = Field(default_factory=list)
    slack: SlackRunState = Field(default_factory=SlackRunState)
    notices: list[str] = Field(default_factory=list)
    # Each host's `set_fact` facts from the stages it has finished (Ansible keeps facts
    # across plays), and the documents tasks left behind.
    host_facts: dict[str, dict[str, Any]] = Field(default_factory=dict)
    artifacts: list[Artifact] = Field(default_factory=list)
    # Who asked for the run, as verified when it started (or not).
    requester: Requester | None = None


RunRequest.model_rebuild()
