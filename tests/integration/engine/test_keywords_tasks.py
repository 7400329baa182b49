"""Task keywords, with Ansible's meaning: when, register, loop, retries/until/delay, timeout,
ignore_errors, failed_when, changed_when, notify + handlers, tags, run_once, delegate_to,
block/rescue/always, and the pure modules (set_fact, assert, fail, debug, pause)."""

from __future__ import annotations

import itertools

from pitstop.contracts import HostResult, TaskOutcome
from tests.integration.engine.conftest import RunFn, hosts_inventory
from tests.testmodules import CALLS, RECORDS


def outcomes(host: HostResult) -> dict[str, TaskOutcome]:
    return {t.name: t for t in host.tasks}


def values(task_prefix: str, host: str | None = None) -> list[object]:
    return [a.get("value") for h, t, a in CALLS if t.startswith(task_prefix) and (host is None or h == host)]


KEYWORDS = """
name: keywords
hosts: gpu
vars:
  packages: [a, b, c]
tasks:
  - name: only on h00
    test.step: {value: only}
    when: inventory_hostname == 'h00'
    register: only
  - name: skipped result is registered
    assert: {that: "only is skipped or inventory_hostname == 'h00'"}
  - name: first
    test.step: {value: "{{ inventory_hostname }}-one"}
    register: first
  - name: use registered
    test.step: {value: "{{ first.value }}-again"}
  - name: loop
    test.step: {value: "{{ pkg }}"}
    loop: "{{ packages }}"
    loop_control: {loop_var: pkg}
    when: pkg != 'b'
    register: looped
  - name: loop results
    assert:
      that:
        - looped.results | length == 3
        - looped.results[1].skipped
        - looped.results[2].value == 'c'
  - name: task vars
    debug: {msg: "{{ greeting }}"}
    vars: {greeting: hi}
  - name: task vars stay with their task
    assert: {that: "greeting is not defined"}
  - name: set a fact
    set_fact: {answer: "{{ 40 + 2 }}"}
  - name: use the fact
    assert: {that: "answer | int == 42", fail_msg: "fact not set"}
  - name: ignored failure
    fail: {msg: boom}
    ignore_errors: true
  - name: failed_when false overrides a failure
    test.step: {value: x, fail_hosts: [h00, h01]}
    failed_when: false
  - name: failed_when on the result
    test.step: {value: bad}
    register: fw
    failed_when: fw.value == 'bad' and inventory_hostname == 'h01'
    ignore_errors: true
  - name: notify but report unchanged
    test.step: {value: quiet}
    changed_when: false
    notify: restart
  - name: notify once
    test.step: {value: n1}
    changed_when: inventory_hostname == 'h00'
    notify: restart
  - name: notify twice
    test.step: {value: n2}
    changed_when: inventory_hostname == 'h00'
    notify: [restart]
  - name: conditional block
    when: marker is not defined
    block:
      - name: sets the marker
        set_fact: {marker: true}
      - name: after the marker
        test.step: {value: in-block}
  - name: say hello
    debug: {msg: "hello {{ inventory_hostname }}"}
  - name: show a variable
    debug: {var: first.value}
  - name: wait a little
    pause: {seconds: 0.2}
handlers:
  - name: restart
    test.step: {value: handler}
  - name: never notified
    test.step: {value: other}
"""


async def test_conditions_registers_loops_facts_and_handlers(run: RunFn) -> None:
    report = await run(KEYWORDS, hosts_inventory(2))
    assert report.status == "succeeded", report.msg
    hosts = {h.host: h for h in report.stages[0].hosts}
    h00, h01 = outcomes(hosts["h00"]), outcomes(hosts["h01"])

    # when
    assert values("keywords/0") == ["only"]
    assert [h for h, t, _ in CALLS if t == "keywords/0"] == ["h00"]
    assert h01["only on h00"].status == "skipped" and h00["only on h00"].status == "changed"
    # register, then use in a later task
    assert sorted(values("keywords/3")) == ["h00-one-again", "h01-one-again"]
    # loop + loop_control.loop_var, with `when` evaluated per item
    assert values("keywords/4", "h00") == ["a", "c"]
    assert h00["loop results"].status == "ok"
    # task vars
    assert h00["task vars"].msg == "hi" and h00["task vars stay with their task"].status == "ok"
    # set_fact + assert
    assert h00["use the fact"].status == "ok" and h01["use the fact"].status == "ok"
    # ignore_errors
    assert h00["ignored failure"].status == "ignored" and h00["ignored failure"].msg == "boom"
    # failed_when
    assert h00["failed_when false overrides a failure"].status in ("ok", "changed")
    assert h00["failed_when on the result"].status == "changed"
    assert h01["failed_when on the result"].status == "ignored"
    assert "failed_when condition met" in h01["failed_when on the result"].msg
    # changed_when
    assert h00["notify but report unchanged"].status == "ok"
    assert h00["notify once"].status == "changed" and h01["notify once"].status == "ok"
    # A block's `when` applies to each task in it (Ansible): the marker set by the first
    # task makes the second skip.
    assert h00["sets the marker"].status == "ok"
    assert h00["after the marker"].status == "skipped"
    assert values("keywords/16/") == []
    # debug
    assert h00["say hello"].msg == "hello h00"
    assert h01["show a variable"].msg == "first.value: 'h01-one'"
    # pause waits on a durable timer
    pause = h00["wait a little"]
    assert pause.msg == "paused 0.2s"
    assert (pause.ended_at - pause.started_at).total_seconds() >= 0.2
    # notify + handlers: notified three times, runs once, last, only where a task changed
    assert [h for h, t, _ in CALLS if t.startswith("handlers/")] == ["h00"]
    assert values("handlers/0") == ["handler"]
    assert hosts["h00"].tasks[-1].name == "restart"
    handler_call = next(r for r in RECORDS if r.task.startswith("handlers/"))
    assert handler_call.started > max(
        r.ended for r in RECORDS if r.host == "h00" and r.task.startswith("keywords/")
    )


async def test_retries_until_and_delay_retry_on_durable_timers(run: RunFn) -> None:
    report = await run(
        """
        name: retries
        hosts: gpu
        tasks:
          - name: until met on the third try
            test.step: {value: u}
            register: r
            until: r.attempt == 3
            retries: 5
            delay: 0.3s
          - name: retries without until retry failures
            test.step: {value: f, fail_times: 2}
            retries: 3
            delay: 0.2s
          - name: until never met
            test.step: {value: never}
            register: n
            until: n.value == 'other'
            retries: 1
            delay: 0.1s
            ignore_errors: true
          - name: attempt limited by timeout
            test.step: {value: slow, sleep: 0.6}
            timeout: 0.2s
            ignore_errors: true
          - name: permanent error
            test.step: {value: raise}
            ignore_errors: true
        """,
        hosts_inventory(1),
    )
    assert report.status == "succeeded", report.msg
    tasks = outcomes(report.stages[0].hosts[0])

    assert tasks["until met on the third try"].status == "changed"
    assert tasks["until met on the third try"].attempts == 3
    tries = sorted((r for r in RECORDS if r.task == "retries/0"), key=lambda r: r.started)
    assert len(tries) == 3
    for before, after in itertools.pairwise(tries):
        assert after.started - before.ended >= 0.3

    assert tasks["retries without until retry failures"].attempts == 3
    assert tasks["retries without until retry failures"].status == "changed"
    gaps = sorted((r for r in RECORDS if r.task == "retries/1"), key=lambda r: r.started)
    assert all(b.started - a.ended >= 0.2 for a, b in itertools.pairwise(gaps))

    never = tasks["until never met"]
    assert (never.status, never.attempts) == ("ignored", 2)
    assert never.msg == "until condition not met after 2 attempts"

    # timeout limits each attempt; the module's retry policy (3 attempts) then gives up.
    slow = tasks["attempt limited by timeout"]
    assert slow.status == "ignored"
    assert "timeout" in slow.msg.lower()
    assert len([c for c in CALLS if c[1] == "retries/3"]) == 3

    # A non-retryable module error is called once and named once in the message.
    permanent = tasks["permanent error"]
    assert (permanent.status, permanent.msg) == ("ignored", "InvalidArgs: bad args")
    assert len([c for c in CALLS if c[1] == "retries/4"]) == 1


async def test_run_once_runs_one_call_per_stage_and_delegate_to_keeps_the_host_vars(run: RunFn) -> None:
    report = await run(
        """
        name: once
        hosts: "gpu:!h03"
        serial: 2
        tasks:
          - name: once
            test.step: {value: "{{ inventory_hostname }}"}
            run_once: true
            register: once
          - name: see once
            test.step: {value: "{{ once.value }}"}
          - name: helper
            set_fact: {helper: h03}
          - name: delegated
            test.step: {value: "{{ inventory_hostname }}"}
            delegate_to: "{{ helper }}"
        """,
        hosts_inventory(4),
    )
    assert report.status == "succeeded", report.msg
    once_calls = [c for c in CALLS if c[1] == "once/0"]
    assert len(once_calls) == 1
    owner = once_calls[0][0]
    # Every host, in both serial batches, carries the one result.
    assert sorted(h for h, t, _ in CALLS if t == "once/1") == ["h00", "h01", "h02"]
    assert values("once/1") == [owner, owner, owner]
    assert all(h.registered["once"]["value"] == owner for h in report.stages[0].hosts)

    delegated = [(h, a["value"]) for h, t, a in CALLS if t == "once/3"]
    assert sorted(delegated) == [("h03", "h00"), ("h03", "h01"), ("h03", "h02")]


async def test_block_rescue_always_assert_and_fail(run: RunFn) -> None:
    report = await run(
        """
        name: blocks
        hosts: gpu
        tasks:
          - name: guarded
            block:
              - name: risky
                test.step: {value: risky, fail_hosts: [h01, h02]}
              - name: after risky
                test.step: {value: after}
            rescue:
              - name: recover
                test.step: {value: "recovered {{ ansible_failed_task.name }}", fail_hosts: [h02]}
            always:
              - name: cleanup
                test.step: {value: cleanup}
          - name: unnamed failure rescued
            when: inventory_hostname == 'h00'
            block:
              - assert: {that: "1 == 2", fail_msg: "math broke"}
            rescue:
              - debug: {msg: "{{ ansible_failed_result.msg }}"}
          - name: final
            test.step: {value: final}
        """,
        hosts_inventory(3),
    )
    assert report.status == "completed_with_failures"
    hosts = {h.host: h for h in report.stages[0].hosts}

    assert hosts["h00"].status == "ok"
    assert values("blocks/0", "h00") == ["risky", "after", "cleanup"]
    h00 = hosts["h00"].tasks
    assert [t.status for t in h00 if t.module == "assert"] == ["rescued"]
    assert [t.msg for t in h00 if t.module == "assert"] == ["math broke"]
    assert [t.msg for t in h00 if t.module == "debug"] == ["math broke"]

    # rescue runs on failure and the host is not failed; always runs.
    assert hosts["h01"].status == "ok"
    assert values("blocks/0", "h01") == ["risky", "recovered risky", "cleanup"]
    assert outcomes(hosts["h01"])["risky"].status == "rescued"
    assert values("blocks/2", "h01") == ["final"]

    # A failure in rescue fails the host; always still runs; nothing after the block.
    assert hosts["h02"].status == "failed"
    assert hosts["h02"].failed_task == "recover"
    assert values("blocks/0", "h02") == ["risky", "recovered risky", "cleanup"]
    assert values("blocks/2", "h02") == []


TAGGED = """
name: tagged
hosts: gpu
tags: [gpu-stage]
tasks:
  - name: t-a
    test.step: {value: a}
    tags: [a]
  - name: t-b
    test.step: {value: "{{ only_defined_for_b }}"}
    when: only_defined_for_b
    tags: [b]
  - name: t-always
    test.step: {value: always}
    tags: always
  - name: t-never
    test.step: {value: never}
    tags: [never]
  - name: untagged
    test.step: {value: untagged}
"""


async def test_tags_and_skip_tags_select_tasks(run: RunFn) -> None:
    report = await run(TAGGED, hosts_inventory(1), tags=["a"])
    assert report.status == "succeeded", report.msg
    assert values("tagged/") == ["a", "always"]
    # Tasks left out by tags are not evaluated (t-b's `when` names an undefined variable),
    # so they do not show in the report.
    assert [t.name for t in report.stages[0].hosts[0].tasks] == ["t-a", "t-always"]

    CALLS.clear()
    report = await run(TAGGED, hosts_inventory(1), skip_tags=["a"], vars={"only_defined_for_b": "b"})
    assert report.status == "succeeded", report.msg
    assert values("tagged/") == ["b", "always", "untagged"]

    # A stage's tags apply to each of its tasks, as a play's do in Ansible: asking for the
    # stage's tag selects even the `never` task, which now carries a requested tag.
    CALLS.clear()
    report = await run(TAGGED, hosts_inventory(1), tags=["gpu-stage"], vars={"only_defined_for_b": "b"})
    assert report.status == "succeeded", report.msg
    assert values("tagged/") == ["a", "b", "always", "never", "untagged"]


async def test_run_once_with_many_hosts_starting_at_once_runs_once_and_every_host_goes_on(run: RunFn) -> None:
    # A host's first message can reach the run in the same workflow task as the news that the
    # host started; the run's answer must not be lost then (it once was: every host waited).
    report = await run(
        """
        name: crowd
        hosts: gpu
        tasks:
          - name: shared
            test.step: {value: "{{ inventory_hostname }}"}
            run_once: true
            register: shared
          - name: after
            test.step: {value: "saw {{ shared.value }}"}
        """,
        hosts_inventory(10),
    )
    assert report.status == "succeeded", report.msg
    [owner] = [h for h, t, _ in CALLS if t == "crowd/0"]
    assert sorted(a["value"] for _, t, a in CALLS if t == "crowd/1") == [f"saw {owner}"] * 10


async def test_a_failing_local_activity_is_a_failed_task_that_ignore_errors_and_rescue_see(
    run: RunFn,
) -> None:
    # test.read runs as a local activity (like ssh.facts): its ApplicationError must reach the
    # task as a failed result, not fail the host workflow past ignore_errors and rescue.
    report = await run(
        """
        name: local-failure
        stages:
          - name: s
            hosts: all
            tasks:
              - name: ignored
                test.read: {value: raise}
                ignore_errors: true
              - name: guarded
                block:
                  - name: inner
                    test.read: {value: raise}
                rescue:
                  - name: rescued
                    test.step: {value: "rescued {{ ansible_failed_result.msg }}"}
        """,
        hosts_inventory(1),
    )
    assert report.status == "succeeded", report.msg
    (host,) = report.stages[0].hosts
    tasks = outcomes(host)
    assert tasks["ignored"].status == "ignored"
    assert tasks["ignored"].msg == "PreconditionFailed: read refused"
    assert values("s/1/rescue/0") == ["rescued PreconditionFailed: read refused"]
