"""`runs.require`: the lab rehearsal (docs/upgrade-process.md "Upgrade order") is proven by the lab run's own
report in Temporal — its runbook, its cluster, its stages — not by a name typed into a var."""

from __future__ import annotations

from pitstop.contracts import RunReport
from tests.integration.engine.conftest import RunFn

LAB_RUN = """
name: platform-upgrade
stages:
  - name: control-plane
    hosts: localhost
    tasks: [{test.step: {value: upgraded}}]
  - name: canary
    hosts: localhost
    tasks: [{test.step: {value: broken, fail_hosts: "{{ fail_canary | default([]) }}"}}]
"""


def inventory(cluster: str) -> str:
    return f"cluster: {{name: {cluster}}}\nall:\n  hosts:\n    localhost: {{}}\n"


def prod_run(
    lab_run_id: str,
    stages_ok: str = "[control-plane]",
    runbook: str = "platform-upgrade",
    same_vars: str | None = None,
) -> str:
    same = f"\n          same_vars: {same_vars}" if same_vars else ""
    return f"""
name: upgrade-prod
stages:
  - name: rehearsal
    hosts: localhost
    tasks:
      - runs.require:
          run_id: {lab_run_id}
          runbook: {runbook}
          stages_ok: {stages_ok}
          not_cluster: "{{{{ run.cluster }}}}"
          max_age: 30d{same}
        register: lab
"""


def outcome(report: RunReport) -> tuple[str, str]:
    host = report.stages[0].hosts[0]
    return host.status, host.tasks[0].msg


async def test_a_lab_run_that_passed_the_required_stages_counts(run: RunFn) -> None:
    lab = await run(LAB_RUN, inventory("lab"), vars={"fail_canary": ["localhost"]})
    assert [s.status for s in lab.stages] == ["ok", "failed"] and lab.cluster == "lab"
    # The lab's canary failed, but what this stage asks of it (the control plane) passed.
    status, msg = outcome(await run(prod_run(lab.run_id), inventory("prod")))
    assert status == "ok", msg
    assert msg.startswith(f"run {lab.run_id} (platform-upgrade on lab, failed, ended ")
    # Asking for the canary too: it does not count, and says why.
    status, msg = outcome(await run(prod_run(lab.run_id, "[control-plane, canary]"), inventory("prod")))
    assert status == "failed" and "its stage 'canary' ended failed" in msg


async def test_a_run_on_the_same_cluster_a_plan_or_another_runbook_does_not_count(run: RunFn) -> None:
    same = await run(LAB_RUN, inventory("prod"))
    status, msg = outcome(await run(prod_run(same.run_id), inventory("prod")))
    assert status == "failed" and "it ran on prod, the cluster being changed" in msg
    plan = await run(LAB_RUN, inventory("lab"), check_mode=True)
    status, msg = outcome(await run(prod_run(plan.run_id), inventory("prod")))
    assert status == "failed" and "it was a plan (check mode)" in msg
    status, msg = outcome(await run(prod_run(plan.run_id, runbook="etcd-backup"), inventory("prod")))
    assert "it ran runbook 'platform-upgrade', not 'etcd-backup'" in msg


async def test_an_unknown_run_is_refused_by_name(run: RunFn) -> None:
    status, msg = outcome(await run(prod_run("no-such-run"), inventory("prod")))
    assert status == "failed"
    assert "there is no run 'no-such-run' in namespace default" in msg


def prod_run_same(lab_run_id: str, targets: str) -> str:
    return prod_run(lab_run_id, same_vars=f'{{targets: {targets}, driver_target: "570.86.15"}}')


async def test_a_lab_run_of_other_targets_does_not_count(run: RunFn) -> None:
    lab_runbook = LAB_RUN.replace(
        "name: platform-upgrade\n",
        'name: platform-upgrade\nvars:\n  targets: {kubernetes: v1.31.2, gpu-driver: "570.86.15"}\n',
    )
    # The runbook's own vars, with the lab's -e on top, are what the lab run planned with.
    lab = await run(lab_runbook, inventory("lab"), vars={"driver_target": "570.86.15"})
    same = '{kubernetes: v1.31.2, gpu-driver: "570.86.15"}'
    status, msg = outcome(await run(prod_run_same(lab.run_id, same), inventory("prod")))
    assert status == "ok", msg
    other = '{kubernetes: v1.31.2, gpu-driver: "575.51.03"}'
    status, msg = outcome(await run(prod_run_same(lab.run_id, other), inventory("prod")))
    assert status == "failed"
    assert "it ran with targets where gpu-driver: '570.86.15' (here '575.51.03')" in msg, msg
    unset = await run(lab_runbook, inventory("lab"))
    status, msg = outcome(await run(prod_run_same(unset.run_id, same), inventory("prod")))
    assert status == "failed" and "it did not set driver_target" in msg, msg
