"""`waves` as written and as planned: the waves' order, a host with no wave refused, canary
coverage recorded (and refused when a value has no canary), the wave gate's rule, and the
loader's refusals of a wave block that cannot mean anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from activities.plan import _canonical, build_plan
from pitstop.contracts import Plan, RunRequest
from pitstop.runbook import RunbookError
from pitstop.runbook._yaml import parse_yaml
from pitstop.runbook.validate import parse_runbook
from workflows import waves

INVENTORY = """
all:
  children:
    fleet:
      hosts:
        a1: {failure_domain: zone-a, product: H100, pool: training}
        b1: {failure_domain: zone-b, product: H100, pool: inference}
        c1: {failure_domain: zone-c, product: A100, pool: training}
        a2: {failure_domain: zone-a, product: A100, pool: training}
    canaries:
      hosts:
        k1: {failure_domain: zone-a, product: H100, pool: training}
        k2: {failure_domain: zone-b, product: A100, pool: inference}
"""

RUNBOOK = """
name: waves
approvers: {sre: [alice]}
stages:
  - name: canary
    hosts: canaries
    tasks: [{debug: {msg: canary}}]
  - name: widen
    hosts: fleet
    rolling: {max_in_flight: 2}
    waves:
      order: [zone-c]
      gate: {approvers: sre, prompt: "Next zone?", timeout: 8h}
      observe: {duration: "{{ window }}", interval: 10s}
      canary: {stage: canary, cover: ["{{ product }}", "{{ pool }}"]}
    vars: {window: 30m}
    tasks: [{debug: {msg: widen}}]
"""


def plan(runbook: str = RUNBOOK, inventory: str = INVENTORY, **vars: object) -> Plan:
    files = {"runbook.yaml": runbook, "inventory.yaml": inventory}
    return build_plan(RunRequest(runbook="runbook.yaml", inventory="inventory.yaml", files=files, vars=vars))


def test_waves_are_the_failure_domains_named_first_then_in_inventory_order() -> None:
    widen = plan().stages[1]
    assert widen.waves == ["zone-c", "zone-a", "zone-b"]
    assert widen.wave_hosts("zone-a") == ["a1", "a2"]
    assert widen.wave_observe_seconds == 1800.0
    assert plan(window="2h").stages[1].wave_observe_seconds == 7200.0
    by_value = {(c.cover, c.value): c.canaries for c in widen.coverage}
    assert by_value == {
        ("{{ product }}", "H100"): ["k1"],
        ("{{ product }}", "A100"): ["k2"],
        ("{{ pool }}", "training"): ["k1"],
        ("{{ pool }}", "inference"): ["k2"],
    }
    rule = plan().gates["widen:wave"]
    assert (rule.approvers, rule.prompt, rule.timeout_seconds) == (["alice"], "Next zone?", 28800.0)


def test_waves_by_an_expression_and_a_wave_order_naming_no_wave_is_refused_unless_limited() -> None:
    runbook = RUNBOOK.replace("order: [zone-c]", 'by: "{{ pool }}"\n      order: [zone-x]')
    with pytest.raises(ValueError) as refused:
        plan(runbook)
    assert str(refused.value) == (
        "stage 'widen': waves.order names 'zone-x', which no host of the stage is in "
        "(its waves: 'training', 'inference')"
    )
    files = {"runbook.yaml": runbook, "inventory.yaml": INVENTORY}
    limited = build_plan(
        RunRequest(runbook="runbook.yaml", inventory="inventory.yaml", files=files, limit="a1:b1:k1:k2")
    )
    widen = limited.stages[1]
    assert widen.waves == ["training", "inference"]
    assert "waves.order names 'zone-x', which no host of this run (--limit) is in" in widen.warnings[0]


def test_a_wave_name_that_would_confuse_its_gate_is_refused() -> None:
    with pytest.raises(ValueError, match="host c1 is in wave 'zone@c'; a wave name may not contain '@'"):
        plan(inventory=INVENTORY.replace("c1: {failure_domain: zone-c,", "c1: {failure_domain: zone@c,"))


def test_a_task_gate_named_like_the_wave_gate_is_refused() -> None:
    runbook = RUNBOOK.replace(
        "tasks: [{debug: {msg: widen}}]", "tasks: [{gate: {name: 'widen:wave', approvers: sre}}]"
    )
    with pytest.raises(ValueError, match=r"gate name 'widen:wave' .* is already the id of another gate"):
        plan(runbook)


def test_a_stage_without_waves_hashes_as_before_waves_existed() -> None:
    body = plan().runbook.model_dump(mode="json")
    assert body["stages"][0]["waves"] is None  # the model has the field ...
    assert "waves" not in _canonical(body)["stages"][0]  # ... the hash does not see it
    assert "waves" in _canonical(body)["stages"][1]


def test_a_host_with_no_wave_is_refused_when_the_run_is_planned() -> None:
    with pytest.raises(ValueError) as refused:
        plan(inventory=INVENTORY.replace("a2: {failure_domain: zone-a, ", "a2: {"))
    assert str(refused.value) == (
        "stage 'widen' runs in waves by its failure domain (rolling.domain, or the host's "
        "failure_domain), which is empty for host a2: give every host of the stage its wave "
        "(a host with no domain could land in any wave)"
    )


def test_a_pool_without_a_canary_is_refused_naming_the_pool_and_its_hosts() -> None:
    inventory = INVENTORY.replace(
        "k2: {failure_domain: zone-b, product: A100, pool: inference}",
        "k2: {failure_domain: zone-b, product: A100, pool: training}",
    )
    with pytest.raises(ValueError) as refused:
        plan(inventory=inventory)
    assert str(refused.value) == (
        "stage 'widen' would change hosts that no canary in stage 'canary' stands for "
        "(waves.canary.cover): {{ pool }} = 'inference' on 1 host (b1) (the canaries give 'training'). "
        "Add a host with each of these values to stage 'canary', or leave those hosts out of this run"
    )


def test_coverage_before_the_first_wave_counts_only_canaries_that_passed() -> None:
    widen = plan().stages[1]
    assert waves.uncovered(widen, {"k1", "k2"}) == []
    assert waves.uncovered(widen, {"k1"}) == [
        "{{ product }} = 'A100' (2 hosts, e.g. c1): its canaries (k2) did not pass",
        "{{ pool }} = 'inference' (1 host, e.g. b1): its canaries (k2) did not pass",
    ]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ("gate: {approvers: sre,", "gate: {before: true, approvers: sre,"),
            "stage 'widen': a wave's gate opens before every wave after the first; 'before'/'after' "
            "do not apply (use the stage's own gate for the first wave)",
        ),
        (
            ("canary: {stage: canary,", "canary: {stage: widen,"),
            "stage 'widen': waves.canary.stage 'widen' is this stage; name a stage that runs before this one",
        ),
        (
            ("canary: {stage: canary,", "canary: {stage: canery,"),
            "stage 'widen': waves.canary.stage 'canery' is not a stage of this runbook; name a stage "
            "that runs before this one",
        ),
        (("order: [zone-c]", "oder: [zone-c]"), "unknown key 'oder' in waves"),
    ],
)
def test_a_wave_block_that_cannot_mean_anything_is_refused_where_it_is_written(
    change: tuple[str, str], message: str
) -> None:
    with pytest.raises(RunbookError) as refused:
        parse_runbook(parse_yaml(RUNBOOK.replace(*change), "rb.yaml"))
    assert message in str(refused.value)
    assert refused.value.line > 1


def test_the_shipped_upgrade_plans_in_waves_against_the_staging_inventory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runbooks = Path(__file__).resolve().parents[2] / "runbooks"
    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(runbooks))
    planned = build_plan(RunRequest(runbook="platform-upgrade.yaml", inventory="inventories/staging.yaml"))
    stages = {s.name: s for s in planned.stages}
    assert stages["widen"].waves == ["zone-a", "zone-b"]
    assert stages["widen"].wave_hosts("zone-b") == ["stg-gpu-03", "stg-gpu-04"]
    covered = {(c.value, tuple(c.canaries)) for c in stages["widen"].coverage}
    assert ("NVIDIA-H100-80GB-HBM3", ("stg-gpu-01",)) in covered
    # Every pool's kubelets: the system pool's node too, in its zone's wave.
    assert "stg-sys-01" in stages["node-components"].wave_hosts("zone-a")
    assert planned.gates["widen:wave"].approvers == ["alice", "bob", "carol"]
