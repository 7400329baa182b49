"""Issue #13, through the engine: values with no JSON form fail their task instead of wedging
the run, an expensive expression in one run leaves another run on the same worker alone, and
hostile YAML in a run's bundle fails `plan.load` with its place in the file.

A real Temporal dev server and worker, as tests/integration/engine does.
"""

from __future__ import annotations

import asyncio

import pytest

from pitstop.contracts import RunReport, TaskOutcome
from tests.integration.engine import conftest as engine
from tests.integration.engine.conftest import RunFn, StartFn
from tests.testmodules import CALLS

pytestmark = pytest.mark.integration

# The engine's fixtures, used here as in tests/integration/engine.
engine_worker = engine.engine_worker
start_run = engine.start_run
run = engine.run

# Each run below must end well within this; a wedged run (the failure before the budget) never
# ends, and the test fails instead of hanging.
RUN_DEADLINE_S = 120.0


def _outcomes(report: RunReport) -> dict[str, TaskOutcome]:
    return {t.name: t for stage in report.stages for host in stage.hosts for t in host.tasks}


async def test_non_json_values_fail_their_task_and_the_run_finishes(run: RunFn) -> None:
    report = await asyncio.wait_for(
        run(
            """
            name: leaks
            hosts: localhost
            vars: {d: {a: 1, b: 2}, n: 3}
            tasks:
              - name: keys
                test.step: {value: "{{ d.keys() }}"}
              - name: range
                test.step: {value: "{{ range(n) }}"}
              - name: fact from a cycler
                set_fact: {c: "{{ cycler(d.a, d.b) }}"}
                ignore_errors: true
              - name: cycler
                test.step: {value: "{{ cycler(d.a, d.b) }}"}
                ignore_errors: true
              - name: when on a joiner
                test.step: {value: never}
                when: "{{ joiner(d.a) }}"
              - name: after
                test.step: {value: after}
            """
        ),
        RUN_DEADLINE_S,
    )
    assert report.status == "failed", report.msg
    outcomes = _outcomes(report)
    # Ansible's values: a dict's keys and a range become lists.
    assert [c[2]["value"] for c in CALLS] == [["a", "b"], [0, 1, 2]]
    assert outcomes["keys"].status == outcomes["range"].status == "changed"
    fact = outcomes["fact from a cycler"]
    assert fact.status == "ignored"
    assert "the result is a cycler, which is not plain data" in fact.msg
    cycler = outcomes["cycler"]
    assert cycler.status == "ignored"
    assert cycler.msg.startswith("arguments: the result is a cycler, which is not plain data")
    # A condition that cannot be evaluated fails its task whatever ignore_errors says, as in
    # Ansible; the host stops there.
    when = outcomes["when on a joiner"]
    assert when.status == "failed"
    assert when.msg.startswith("when: the result is a joiner, which is not plain data")
    assert report.stages[0].hosts[0].failed_task == "when on a joiner"
    # The tasks that failed to render called nothing, and nothing ran after the failure.
    assert "after" not in outcomes and len(CALLS) == 2


async def test_a_constant_expression_with_no_json_form_fails_the_plan(run: RunFn) -> None:
    # Using no variable, it fails the same way on every host: plan.load says so up front.
    report = await asyncio.wait_for(
        run(
            """
            name: constant
            hosts: localhost
            tasks:
              - test.step: {value: "{{ cycler(1, 2) }}"}
            """
        ),
        RUN_DEADLINE_S,
    )
    assert report.status == "failed"
    assert report.msg.startswith("plan failed: runbook.yaml:5:24:"), report.msg
    assert "uses no variable and fails when evaluated: the result is a cycler" in report.msg
    assert CALLS == []


HEAVY = "{% for i in range(n) %}{% for j in range(n) %}{% endfor %}{% endfor %}"


async def test_an_expensive_expression_in_one_run_leaves_another_run_alone(start_run: StartFn) -> None:
    heavy = await start_run(
        f"""
        name: heavy
        hosts: localhost
        vars: {{n: 100000}}
        tasks:
          - name: heavy
            test.step: {{value: "{HEAVY}"}}
            loop: [1, 2, 3, 4, 5]
        """
    )
    light = await start_run(
        """
        name: light
        hosts: localhost
        tasks:
          - name: light
            test.step: {value: "{{ range(3) | sum }}"}
            loop: [1, 2, 3]
        """
    )
    heavy_report, light_report = await asyncio.wait_for(
        asyncio.gather(heavy.result(), light.result()), RUN_DEADLINE_S
    )
    assert light_report.status == "succeeded", light_report.msg
    assert heavy_report.status == "failed"
    heavy_task = _outcomes(heavy_report)["heavy"]
    assert "MAX_RENDER_STEPS" in heavy_task.msg
    # The heavy run's module was never called: each item failed while rendering.
    assert [c[2]["value"] for c in CALLS] == [3, 3, 3]


LAUGHS = "\n".join(
    [
        "name: laughs",
        "vars:",
        '  a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]',
        *(f"  {c}: &{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi", strict=True)),
        "hosts: localhost",
        "tasks:",
        "  - test.step: {value: x}",
    ]
)


@pytest.mark.parametrize(
    ("runbook", "where", "message"),
    [
        (LAUGHS, "runbook.yaml:8:", "MAX_YAML_VALUES"),
        (
            "name: tag\nvars:\n  x: !!python/object/apply:os.system ['true']\nhosts: localhost\n"
            "tasks:\n  - test.step: {value: x}\n",
            "runbook.yaml:3:6:",
            "explicit tag !!python/object/apply:os.system is refused",
        ),
        (
            "name: deep\nvars:\n  x: "
            + "[" * 200
            + "]" * 200
            + "\nhosts: localhost\ntasks:\n  - test.step: {}\n",
            "runbook.yaml:3:",
            "MAX_YAML_DEPTH",
        ),
    ],
    ids=["billion-laughs", "python-tag", "deep-nesting"],
)
async def test_hostile_yaml_fails_plan_load_with_its_place(
    run: RunFn, runbook: str, where: str, message: str
) -> None:
    report = await asyncio.wait_for(run(runbook), RUN_DEADLINE_S)
    assert report.status == "failed"
    assert report.msg.startswith(f"plan failed: {where}"), report.msg
    assert message in report.msg
    assert report.stages == [] and CALLS == []
