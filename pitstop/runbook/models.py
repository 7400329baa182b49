"""The runbook as the engine sees it: frozen pydantic models, already validated.

The YAML shape (one module key per task, `loop_control`, `import_tasks`, top-level `tasks`)
is turned into these by `pitstop.runbook.validate`; these models never see raw YAML.
"""

from __future__ import annotations

import re
import warnings
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, RootModel, WithJsonSchema

from pitstop.runbook.durations import Duration, TemplatedDuration

_PERCENT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*%\s*")


def _count_or_percent(value: Any) -> int | str:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a host count or a percentage like '25%'")
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"{value} is not allowed: a host count must be at least 1")
        return value
    if isinstance(value, str):
        match = _PERCENT.fullmatch(value)
        if match:
            percent = float(match.group(1))
            if not 0 < percent <= 100:
                raise ValueError(f"percentage {value!r} must be between 1% and 100%")
            return f"{match.group(1)}%"
        if value.strip().isdigit():
            return _count_or_percent(int(value))
    raise ValueError(f"{value!r} is not a host count or a percentage like '25%'")


COUNT_OR_PERCENT_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "integer", "minimum": 1},
        {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*%\s*$"},
    ]
}

# A number of hosts (>= 1) or a percentage of the stage's hosts ("10%").
CountOrPercent = Annotated[
    int | str, BeforeValidator(_count_or_percent), WithJsonSchema(COUNT_OR_PERCENT_SCHEMA)
]


def _str_list(value: Any) -> Any:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return value


def _expr_list(value: Any) -> Any:
    # `when: true` and `changed_when: false` are YAML booleans; keep them as expressions.
    if value is None:
        return []
    if not isinstance(value, list):
        value = [value]
    return [str(v) if isinstance(v, bool | int | float) else v for v in value]


def _optional_expr_list(value: Any) -> Any:
    return None if value is None else _expr_list(value)


STR_OR_LIST_SCHEMA: dict[str, Any] = {
    "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]
}
# A list of names; one name may be written without the list.
StrList = Annotated[list[str], BeforeValidator(_str_list), WithJsonSchema(STR_OR_LIST_SCHEMA)]
ExprList = Annotated[list[str], BeforeValidator(_expr_list)]
Identifier = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourcePos(_Frozen):
    """Where a task was written (for errors, the UI and reports)."""

    path: str
    line: int
    column: int


class Serial(RootModel[tuple[CountOrPercent, ...]]):
    """Ansible's `serial`: one batch size, or a ramp `[1, 5, "25%"]` whose last size repeats.
    The batches themselves are cut by `workflows.rollout.serial_batches`."""

    model_config = ConfigDict(frozen=True)

    root: tuple[CountOrPercent, ...] = Field(min_length=1)


def _serial_input(value: Any) -> Any:
    if value is None or isinstance(value, Serial):
        return value
    if isinstance(value, list | tuple):
        if not value:
            raise ValueError("serial ramp list must not be empty")
        return list(value)
    return [value]


class Rolling(_Frozen):
    """A sliding window of hosts in flight instead of Ansible's batches."""

    max_in_flight: CountOrPercent = 1
    max_unavailable_per_domain: int | None = Field(default=None, ge=1)
    # Expression giving a host's failure domain, e.g. "{{ failure_domain }}".
    domain: str | None = None
    order: Literal["inventory", "domain_round_robin"] = "inventory"


class Gate(_Frozen):
    """An approval gate: before/after a stage, or a task in a host's task list."""

    name: str | None = None
    before: bool = False
    after: bool = False
    approvers: Annotated[
        list[str], BeforeValidator(_str_list), Field(min_length=1), WithJsonSchema(STR_OR_LIST_SCHEMA)
    ]
    quorum: int = Field(default=1, ge=1)
    four_eyes: bool = False
    # Count only votes signed with the vote key (the Slack bridge); CLI/UI votes are claims.
    require_verified: bool = False
    require_comment: bool = False
    timeout: Duration | None = None
    on_timeout: Literal["reject", "approve", "escalate"] = "reject"
    escalate_to: StrList = []
    prompt: str | None = None
    slack_channel: str | None = None


# `register` is also ABCMeta.register on the class; the field is what Ansible users expect,
# and pydantic only warns that the class attribute is shadowed.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message='Field name "register"')

    class Task(_Frozen):
        """One task: a module call, a block, a per-host gate (imports are already expanded)."""

        name: str | None = None
        module: str | None = None
        args: dict[str, Any] = {}
        when: ExprList = []
        register: Identifier | None = None
        loop: Any = None
        loop_var: Identifier = "item"
        retries: int | None = Field(default=None, ge=0)
        delay: Duration | None = None
        until: str | None = None
        timeout: Duration | None = None
        ignore_errors: bool = False
        failed_when: Annotated[list[str] | None, BeforeValidator(_optional_expr_list)] = None
        changed_when: Annotated[list[str] | None, BeforeValidator(_optional_expr_list)] = None
        notify: StrList = []
        tags: StrList = []
        run_once: bool = False
        delegate_to: str | None = None
        delegate_facts: bool = False
        check_mode: bool | None = None
        block: list[Task] | None = None
        rescue: list[Task] = []
        always: list[Task] = []
        gate: Gate | None = None
        vars: dict[str, Any] = {}
        source: SourcePos
        task_id: str

        @property
        def kind(self) -> Literal["module", "block", "gate"]:
            if self.block is not None:
                return "block"
            if self.gate is not None:
                return "gate"
            return "module"

        def walk(self) -> list[Task]:
            """This task and every task nested in its block/rescue/always, in order."""
            out = [self]
            for child in (*(self.block or []), *self.rescue, *self.always):
                out.extend(child.walk())
            return out


class Observe(_Frozen):
    """A window after the stage; a failing check is a rollback trigger. `duration` may be a
    template of the run's vars (`"{{ observe_window }}"`), resolved when the run is planned."""

    duration: TemplatedDuration
    interval: Duration = 60.0
    checks: list[Task] = []


class WaveCanary(_Frozen):
    """Canary coverage: every value of each `cover` expression among the stage's hosts (a GPU
    product, a pool) must have a host in stage `stage` with that value; checked when the run is
    planned (a canary at all) and before the first wave (a canary that passed)."""

    stage: str
    cover: Annotated[
        list[str], BeforeValidator(_str_list), Field(min_length=1), WithJsonSchema(STR_OR_LIST_SCHEMA)
    ]


class Waves(_Frozen):
    """The stage's hosts in waves, one wave at a time: a wave's hosts run (under the stage's
    `rolling`/`serial` limits), then its `observe` window; `gate` opens before every wave after
    the first (the stage's own `gate.before` stands for the first); `checks` run on the worker
    once the wave may start, before any of its hosts: a failing check stops the run there."""

    # Expression giving a host's wave, e.g. "{{ failure_domain }}"; default: the stage's
    # `rolling.domain` (or the host's `failure_domain`).
    by: str | None = None
    # Waves to run first, in this order; the others follow in inventory order.
    order: StrList = []
    gate: Gate | None = None
    observe: Observe | None = None
    canary: WaveCanary | None = None
    # E.g. `kube.wave_replicas` over `{{ stage.wave_hosts }}`: judged when the wave starts
    # (after its gate, which may have waited hours), not when the run was planned.
    checks: list[Task] = []


class Stage(_Frozen):
    """Ansible's play: a host pattern and the tasks run on each host."""

    name: str
    hosts: str
    serial: Annotated[Serial | None, BeforeValidator(_serial_input)] = None
    rolling: Rolling | None = None
    max_fail_percentage: float | None = Field(default=None, ge=0, le=100)
    any_errors_fatal: bool = False
    gate: Gate | None = None
    tasks: list[Task] = []
    handlers: list[Task] = []
    rollback_when: ExprList = []
    rollback: list[Task] = []
    rollback_run_once: bool = False
    observe: Observe | None = None
    waves: Waves | None = None
    vars: dict[str, Any] = {}
    tags: StrList = []
    source: SourcePos

    def observe_checks(self) -> list[Task]:
        """The checks the stage runs on the worker: of every observe window (its own, and its
        waves') and its waves' `checks`."""
        out = list(self.observe.checks) if self.observe else []
        if self.waves is not None and self.waves.observe is not None:
            out += self.waves.observe.checks
        if self.waves is not None:
            out += self.waves.checks
        return out


def _approver_groups(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _str_list(v) for k, v in value.items()}
    return value


class Runbook(_Frozen):
    """A validated runbook: stages in order, handlers, and run-level rollback."""

    name: str
    description: str = ""
    vars: dict[str, Any] = {}
    approvers: Annotated[dict[str, list[str]], BeforeValidator(_approver_groups)] = {}
    stages: list[Stage] = Field(min_length=1)
    handlers: list[Task] = []
    rollback: list[Task] = []
    cluster: str | None = None
    path: str

    def all_tasks(self) -> list[Task]:
        """Every task of the runbook (nested ones included), in document order."""
        out: list[Task] = []
        for stage in self.stages:
            for task in (*stage.tasks, *stage.handlers, *stage.rollback, *stage.observe_checks()):
                out.extend(task.walk())
        for task in (*self.handlers, *self.rollback):
            out.extend(task.walk())
        return out

    def expand_approvers(self, approvers: list[str]) -> set[str]:
        """Users meant by a gate's approvers: group names expand to their members."""
        users: set[str] = set()
        for name in approvers:
            users.update(self.approvers.get(name, [name]))
        return users
