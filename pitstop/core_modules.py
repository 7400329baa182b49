"""Core modules (Ansible's `debug`, `assert`, `set_fact`, `fail`, `pause`).

They are pure: the engine evaluates them inside the workflow, with no activity.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from pitstop.module_spec import ModuleArgs, ModuleSpec


class DebugArgs(ModuleArgs):
    msg: str | None = Field(default=None, description="Message to print (templated).")
    var: str | None = Field(default=None, description="Name of a variable to print.")


class AssertArgs(ModuleArgs):
    that: list[str] | str = Field(description="Conditions (Jinja expressions without braces).")
    fail_msg: str | None = Field(default=None, description="Message when a condition is false.")
    success_msg: str | None = Field(default=None, description="Message when all conditions hold.")
    quiet: bool = False


class SetFactArgs(ModuleArgs):
    # set_fact takes arbitrary variable names as its keys, as in Ansible.
    model_config = ConfigDict(extra="allow")


class FailArgs(ModuleArgs):
    msg: str = Field(default="Failed as requested from the runbook.", description="Failure message.")


class PauseArgs(ModuleArgs):
    seconds: float | None = Field(default=None, ge=0, description="Wait this long (durable timer).")
    minutes: float | None = Field(default=None, ge=0, description="Wait this long (durable timer).")
    prompt: str | None = Field(default=None, description="Shown while paused.")


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


def core_module_args(name: str, args: dict[str, Any]) -> ModuleArgs:
    return CORE_MODULES[name].args_model.model_validate(args)
