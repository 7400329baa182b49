"""Core modules (Ansible's `debug`, `assert`, `set_fact`, `fail`, `pause`).

They are pure: the engine evaluates them inside the workflow, with no activity. Each is
declared here (its Args and spec) beside the function that runs it; the engine calls them
through `run_pure`, with the task's rendered arguments and a `PureCall` (its variables, the
facts it may set, a durable timer). No I/O, no clock: these functions run in workflow code.

A templated argument may render to any value at run time. Where the engine has always
written such a value as text (a message, a variable name), the Args models turn it into
text when validated with the `RENDERED` context; the loader validates without it and keeps
refusing a literal of the wrong type.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from pitstop.contracts import FACTS_LIMIT_BYTES, ModuleResult
from pitstop.module_spec import ModuleArgs, ModuleSpec
from pitstop.runbook.templating import TemplateError, evaluate_bool, render

# Validation context of arguments rendered at run time (see the module docstring).
RENDERED = "rendered"


def _rendered(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get(RENDERED))


def _text_or_none(value: Any, info: ValidationInfo) -> Any:
    """A rendered optional message: empty means "not given", anything else is its text."""
    if not _rendered(info):
        return value
    return str(value) if value else None


class DebugArgs(ModuleArgs):
    msg: str | None = Field(default=None, description="Message to print (templated).")
    var: str | None = Field(default=None, description="Name of a variable to print.")

    _text = field_validator("msg", "var", mode="before")(_text_or_none)


class AssertArgs(ModuleArgs):
    that: list[str] | str = Field(description="Conditions (Jinja expressions without braces).")
    fail_msg: str | None = Field(default=None, description="Message when a condition is false.")
    success_msg: str | None = Field(default=None, description="Message when all conditions hold.")
    quiet: bool = False

    _text = field_validator("fail_msg", "success_msg", mode="before")(_text_or_none)

    @property
    def conditions(self) -> list[str]:
        return [self.that] if isinstance(self.that, str) else list(self.that)


class SetFactArgs(ModuleArgs):
    # set_fact takes arbitrary variable names as its keys, as in Ansible.
    model_config = ConfigDict(extra="allow")


class FailArgs(ModuleArgs):
    msg: str = Field(default="Failed as requested from the runbook.", description="Failure message.")

    @field_validator("msg", mode="before")
    @classmethod
    def _text(cls, value: Any, info: ValidationInfo) -> Any:
        return str(value) if _rendered(info) and not isinstance(value, str) else value


class PauseArgs(ModuleArgs):
    seconds: float | None = Field(default=None, ge=0, description="Wait this long (durable timer).")
    minutes: float | None = Field(default=None, ge=0, description="Wait this long (durable timer).")
    prompt: str | None = Field(default=None, description="Shown while paused.")

    @field_validator("seconds", "minutes", mode="before")
    @classmethod
    def _number(cls, value: Any, info: ValidationInfo) -> Any:
        if not _rendered(info):
            return value
        try:
            return float(value or 0)
        except (TypeError, ValueError):
            raise ValueError("not a number") from None

    @property
    def total_seconds(self) -> float:
        return (self.seconds or 0.0) + 60.0 * (self.minutes or 0.0)


def _spec(
    name: str, model: type[ModuleArgs], summary: str, free_form: str | None = None
) -> ModuleSpec[ModuleArgs]:
    return ModuleSpec(
        name=name,
        args_model=model,
        summary=summary,
        supports_check_mode=True,
        pure=True,
        free_form_arg=free_form,
    )


CORE_MODULES: dict[str, ModuleSpec[ModuleArgs]] = {
    s.name: s
    for s in (
        _spec("debug", DebugArgs, "Print a message or a variable.", free_form="msg"),
        _spec("assert", AssertArgs, "Fail unless every condition holds.", free_form="that"),
        _spec("set_fact", SetFactArgs, "Set host variables for later tasks."),
        _spec("fail", FailArgs, "Fail the host with a message.", free_form="msg"),
        _spec("pause", PauseArgs, "Wait for a duration on a durable timer."),
    )
}


# --- running them ---------------------------------------------------------------------------
@dataclass(frozen=True)
class PureCall:
    """What a pure module may use besides its arguments."""

    # The variables the task sees (its VarScope), for `debug: var` and `assert`.
    variables: Mapping[str, Any]
    check_mode: bool
    # The host running the task, and whose facts `set_fact` writes: the host itself, or the
    # delegate of a task with `delegate_facts`.
    host: str
    owner: str
    facts: dict[str, Any]
    # A durable timer that an abort cuts short.
    sleep: Callable[[float], Awaitable[None]]


async def debug(args: DebugArgs, call: PureCall) -> ModuleResult:
    if args.var:
        try:
            value = render("{{ " + args.var + " }}", call.variables)
        except TemplateError as exc:
            return ModuleResult(failed=True, msg=str(exc))
        return ModuleResult(msg=f"{args.var}: {value!r}", data={args.var: value})
    return ModuleResult(msg=args.msg or "Hello world!")


async def set_fact(args: SetFactArgs, call: PureCall) -> ModuleResult:
    # Facts carry to later stages through the run's history: bounded, and refused here
    # (where the runbook author can act) rather than dropped later.
    facts = dict(args.model_extra or {})
    size = len(json.dumps({**call.facts, **facts}, default=str))
    if size > FACTS_LIMIT_BYTES:
        whose = "this host's" if call.owner == call.host else f"{call.owner}'s"
        return ModuleResult(
            failed=True,
            msg=(
                f"set_fact: {whose} facts would be {size} bytes; facts carry to later stages "
                f"and are limited to {FACTS_LIMIT_BYTES} bytes per host and stage: keep only what "
                "later stages need (e.g. a summary of a result, not the whole result)"
            ),
        )
    call.facts.update(facts)
    data: dict[str, Any] = {"ansible_facts": facts}
    if call.owner != call.host:
        data["delegated_to"] = call.owner
    return ModuleResult(data=data)


async def assert_(args: AssertArgs, call: PureCall) -> ModuleResult:
    for condition in args.conditions:
        try:
            holds = evaluate_bool(condition, call.variables)
        except TemplateError as exc:
            return ModuleResult(failed=True, msg=f"assert {condition!r}: {exc}")
        if not holds:
            msg = args.fail_msg or f"Assertion failed: {condition}"
            return ModuleResult(failed=True, msg=msg, data={"assertion": condition})
    return ModuleResult(msg=args.success_msg or "All assertions passed")


async def fail(args: FailArgs, call: PureCall) -> ModuleResult:
    return ModuleResult(failed=True, msg=args.msg)


async def pause(args: PauseArgs, call: PureCall) -> ModuleResult:
    seconds = args.total_seconds
    if call.check_mode:
        return ModuleResult(msg=f"would pause {seconds:g}s")
    if seconds > 0:
        await call.sleep(seconds)
    return ModuleResult(msg=f"paused {seconds:g}s")


A = TypeVar("A", bound=ModuleArgs)


@dataclass(frozen=True)
class PureModule(Generic[A]):
    spec: ModuleSpec[ModuleArgs]
    args: type[A]
    run: Callable[[A, PureCall], Awaitable[ModuleResult]]
    # Said instead of pydantic's words when the rendered arguments do not validate.
    invalid: str | None = None

    async def __call__(self, raw: Any, call: PureCall) -> ModuleResult:
        try:
            args = self.args.model_validate(raw, context={RENDERED: True})
        except ValidationError as exc:
            if self.invalid is not None:
                return ModuleResult(failed=True, msg=self.invalid)
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'args'}: {e['msg']}" for e in exc.errors()
            )
            return ModuleResult(failed=True, msg=f"{self.spec.name}: {problems}")
        return await self.run(args, call)


PURE_MODULES: dict[str, PureModule[Any]] = {
    "debug": PureModule(CORE_MODULES["debug"], DebugArgs, debug),
    "assert": PureModule(CORE_MODULES["assert"], AssertArgs, assert_),
    "set_fact": PureModule(
        CORE_MODULES["set_fact"], SetFactArgs, set_fact, invalid="set_fact: give a mapping of facts"
    ),
    "fail": PureModule(CORE_MODULES["fail"], FailArgs, fail),
    "pause": PureModule(
        CORE_MODULES["pause"], PauseArgs, pause, invalid="pause: 'seconds' and 'minutes' must be numbers"
    ),
}


async def run_pure(module: str, args: Any, call: PureCall) -> ModuleResult:
    """Run pure module `module` with its rendered arguments."""
    runner = PURE_MODULES.get(module)
    if runner is None:
        return ModuleResult(failed=True, msg=f"pure module {module!r} is unknown to this engine")
    return await runner(args, call)
