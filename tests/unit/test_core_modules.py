"""Pure modules (debug, assert, set_fact, fail, pause): typed arguments, run through one table."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pitstop.contracts import FACTS_LIMIT_BYTES, ModuleResult
from pitstop.core_modules import CORE_MODULES, PURE_MODULES, DebugArgs, PureCall, run_pure


class _Host:
    def __init__(
        self, variables: dict[str, Any] | None = None, check: bool = False, owner: str = "h1"
    ) -> None:
        self.slept: list[float] = []
        self.facts: dict[str, Any] = {}
        self.call = PureCall(
            variables=variables or {},
            check_mode=check,
            host="h1",
            owner=owner,
            facts=self.facts,
            sleep=self._sleep,
        )

    async def _sleep(self, seconds: float) -> None:
        self.slept.append(seconds)

    def run(self, module: str, args: Any) -> ModuleResult:
        return asyncio.run(run_pure(module, args, self.call))


def test_every_core_module_has_a_function_and_only_they_do() -> None:
    assert set(PURE_MODULES) == set(CORE_MODULES)
    assert all(PURE_MODULES[name].spec is CORE_MODULES[name] for name in CORE_MODULES)


def test_debug_writes_a_rendered_value_as_text() -> None:
    host = _Host({"nodes": ["a", "b"]})
    assert host.run("debug", {"msg": ["a", 1]}).msg == "['a', 1]"
    assert host.run("debug", {"msg": ""}).msg == "Hello world!"
    assert host.run("debug", {}).msg == "Hello world!"
    shown = host.run("debug", {"var": "nodes"})
    assert shown.msg == "nodes: ['a', 'b']" and shown.data == {"nodes": ["a", "b"]}
    missing = host.run("debug", {"var": "absent"})
    assert missing.failed and "absent" in missing.msg


def test_the_loader_still_refuses_a_literal_of_the_wrong_type() -> None:
    with pytest.raises(ValueError):
        DebugArgs.model_validate({"msg": ["not", "text"]})


def test_assert_evaluates_each_condition_and_names_the_first_false_one() -> None:
    host = _Host({"n": 3})
    assert host.run("assert", {"that": ["n > 1", "n < 3"]}).model_dump(include={"failed", "msg", "data"}) == {
        "failed": True,
        "msg": "Assertion failed: n < 3",
        "data": {"assertion": "n < 3"},
    }
    assert host.run("assert", {"that": "n == 3", "success_msg": "fine"}).msg == "fine"
    assert host.run("assert", {"that": "n == 4", "fail_msg": ""}).msg == "Assertion failed: n == 4"
    broken = host.run("assert", {"that": "n ==="})
    assert broken.failed and broken.msg.startswith("assert 'n ==='")


def test_fail_and_its_message() -> None:
    assert _Host().run("fail", {}).msg == "Failed as requested from the runbook."
    assert _Host().run("fail", {"msg": 42}).model_dump(include={"failed", "msg"}) == {
        "failed": True,
        "msg": "42",
    }


def test_pause_waits_on_the_durable_timer_except_in_check_mode() -> None:
    host = _Host()
    assert host.run("pause", {"seconds": "30", "minutes": 1}).msg == "paused 90s"
    assert host.slept == [90.0]
    checking = _Host(check=True)
    assert checking.run("pause", {"minutes": 2}).msg == "would pause 120s" and checking.slept == []
    wrong = host.run("pause", {"seconds": "soon"})
    assert wrong.failed and wrong.msg == "pause: 'seconds' and 'minutes' must be numbers"


def test_set_fact_sets_the_owners_facts_within_the_limit() -> None:
    host = _Host()
    result = host.run("set_fact", {"a": 1, "b": {"c": 2}})
    assert host.facts == {"a": 1, "b": {"c": 2}} and result.data == {"ansible_facts": {"a": 1, "b": {"c": 2}}}
    delegated = _Host(owner="localhost")
    assert delegated.run("set_fact", {"a": 1}).data == {
        "ansible_facts": {"a": 1},
        "delegated_to": "localhost",
    }
    too_big = delegated.run("set_fact", {"blob": "x" * FACTS_LIMIT_BYTES})
    assert too_big.failed and too_big.msg.startswith("set_fact: localhost's facts would be")
    assert delegated.facts == {"a": 1}


def test_an_unknown_pure_module_fails_the_task() -> None:
    result = _Host().run("include_role", {})
    assert result.failed and result.msg == "pure module 'include_role' is unknown to this engine"
