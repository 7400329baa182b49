"""What a run carries from stage to stage: facts (as Ansible keeps them across plays), the
`groups` magic variable, the `run` variable's stage outcomes and votes, and the documents
tasks leave behind (linked from the run's status and report)."""

from __future__ import annotations

from pitstop.approvals import Decision
from pitstop.contracts import RunReport, RunStatus
from tests.integration.engine.conftest import RunFn, StartFn, hosts_inventory, status_when

INVENTORY = hosts_inventory(2)


async def test_facts_set_in_one_stage_are_seen_by_the_same_host_in_later_stages(run: RunFn) -> None:
    report = await run(
        """
        name: carry
        stages:
          - name: first
            hosts: gpu
            tasks:
              - set_fact: {seen_first: "{{ inventory_hostname }}-1"}
              - test.step: {value: "registered"}
                register: only_here
          - name: second
            hosts: gpu
            tasks:
              - assert:
                  that:
                    - seen_first == inventory_hostname ~ '-1'
                    - only_here is not defined
                  fail_msg: "facts did not carry: {{ seen_first | default('undefined') }}"
              - set_fact: {seen_first: overwritten}
          - name: third
            hosts: gpu
            tasks:
              - assert: {that: "seen_first == 'overwritten'"}
        """,
        INVENTORY,
    )
    assert report.status == "succeeded", report.msg
    assert [h.facts for h in report.stages[1].hosts] == [{"seen_first": "overwritten"}] * 2


async def test_set_fact_beyond_the_carry_limit_fails_with_a_message_saying_what_to_do(run: RunFn) -> None:
    report = await run(
        """
        name: too-big
        hosts: gpu
        tasks:
          - set_fact: {blob: "{{ 'x' * 70000 }}"}
        """,
        hosts_inventory(1),
    )
    assert report.status == "failed"
    assert report.stages[0].hosts[0].status == "failed"
    msg = report.stages[0].hosts[0].msg
    assert "limited to 65536 bytes" in msg and "keep only what later stages need" in msg
    assert report.stages[0].hosts[0].facts == {}


async def test_groups_and_run_stage_outcomes_are_variables(run: RunFn) -> None:
    report = await run(
        """
        name: groups
        stages:
          - name: one
            hosts: gpu
            tasks:
              - test.step: {value: a}
          - name: two
            hosts: localhost
            tasks:
              - assert:
                  that:
                    - groups.gpu == ['h00', 'h01']
                    - groups.all | length == 2
                    - run.stages[0].name == 'one'
                    - run.stages[0].status == 'ok'
                    - run.stages[0].done_hosts == ['h00', 'h01']
                    - run.stages[1].status == 'running'
                    - run.runbook == 'groups'
        """,
        INVENTORY,
    )
    assert report.status == "succeeded", report.stages[1].hosts[0].msg


async def test_gate_votes_reach_the_run_variable(start_run: StartFn) -> None:
    handle = await start_run(
        """
        name: voted
        approvers: {sre: [alice]}
        stages:
          - name: one
            hosts: localhost
            gate: {before: true, approvers: sre}
            tasks:
              - assert:
                  that:
                    - run.gates[0].votes[0].approver == 'alice'
                    - run.gates[0].votes[0].comment == 'go ahead'
        """,
    )
    await status_when(handle, lambda s: s.status == "waiting_gate")
    await handle.execute_update(
        "decide", Decision(gate="one:before", approve=True, approver="alice", comment="go ahead")
    )
    report = await handle.result()
    assert report.status == "succeeded", report.stages[0].hosts[0].msg


async def test_artifacts_are_linked_from_status_and_report_once_each(start_run: StartFn) -> None:
    handle = await start_run(
        """
        name: docs
        stages:
          - name: write
            hosts: gpu
            tasks:
              - name: write the record
                test.step:
                  value: record
                  artifact: {name: change record, uri: "s3://records/{{ run.id }}.md"}
                run_once: true
        rollback:
          - test.step: {value: nothing}
        """,
        INVENTORY,
    )
    report: RunReport = await handle.result()
    assert report.status == "succeeded"
    uri = f"s3://records/{report.run_id}.md"
    assert [(a.name, a.uri, a.stage) for a in report.artifacts] == [("change record", uri, "write")]
    status: RunStatus = await handle.query("status", result_type=RunStatus)
    assert [a.uri for a in status.artifacts] == [uri]


async def test_facts_localhost_set_are_read_by_other_hosts_through_hostvars(run: RunFn) -> None:
    report = await run(
        """
        name: run-wide
        stages:
          - name: measure
            hosts: localhost
            tasks:
              - set_fact: {baseline: {nccl: 392}}
          - name: use
            hosts: gpu
            tasks:
              - assert:
                  that:
                    - hostvars['localhost'].baseline.nccl == 392
                    - baseline is not defined
        """,
        INVENTORY,
    )
    assert report.status == "succeeded", [h.msg for h in report.stages[1].hosts]


async def test_delegate_facts_gives_a_host_s_figures_to_localhost_for_later_stages(run: RunFn) -> None:
    report = await run(
        """
        name: canary-figures
        stages:
          - name: canary
            hosts: gpu
            tasks:
              - name: keep this node's figure where run-wide results live
                set_fact:
                  canary_figures: {"{{ inventory_hostname }}": 392}
                delegate_to: localhost
                delegate_facts: true
          - name: record
            hosts: localhost
            tasks:
              - assert:
                  that:
                    - canary_figures['h00'] == 392
        """,
        hosts_inventory(1),
    )
    assert report.status == "succeeded", [h.msg for s in report.stages for h in s.hosts]
    [canary] = report.stages[0].hosts
    assert canary.facts == {} and canary.delegated_facts == {"localhost": {"canary_figures": {"h00": 392}}}
