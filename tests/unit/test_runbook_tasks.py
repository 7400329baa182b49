"""Task parsing (Ansible's rule), module args, imports and the runbook-wide checks."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pitstop.runbook import RunbookError, Serial, load_runbook
from pitstop.runbook.models import Runbook
from workflows.rollout import serial_batches

REPO = Path(__file__).resolve().parents[2]


def _load(tmp_path: Path, text: str, name: str = "rb.yaml") -> Runbook:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return load_runbook(path)


def _error(tmp_path: Path, text: str) -> RunbookError:
    with pytest.raises(RunbookError) as info:
        _load(tmp_path, text)
    return info.value


def test_single_stage_runbook_becomes_one_stage_named_after_the_runbook(tmp_path: Path) -> None:
    rb = _load(tmp_path, "name: hello\nhosts: all\nserial: 2\ntasks:\n  - debug: hi\n")
    assert [s.name for s in rb.stages] == ["hello"]
    assert rb.stages[0].hosts == "all"
    assert rb.stages[0].serial == Serial((2,))


def test_task_keywords_and_module_are_split_like_ansible(tmp_path: Path) -> None:
    rb = _load(
        tmp_path,
        """\
        name: x
        hosts: all
        tasks:
          - name: wait
            pause: {seconds: 3}
            when: ready
            register: waited
            retries: 2
            delay: 1m
            timeout: 1h30m
            loop: [1, 2]
            loop_control: {loop_var: n}
            changed_when: false
            tags: slow
        """,
    )
    task = rb.stages[0].tasks[0]
    assert task.module == "pause" and task.args == {"seconds": 3}
    assert task.when == ["ready"] and task.register == "waited"
    assert (task.retries, task.delay, task.timeout) == (2, 60.0, 5400.0)
    assert task.loop == [1, 2] and task.loop_var == "n"
    assert task.changed_when == ["False"] and task.tags == ["slow"]
    assert task.source.line == 4 and task.task_id == "x/0"


def test_free_form_string_becomes_the_modules_free_form_arg(tmp_path: Path) -> None:
    rb = _load(tmp_path, "name: x\nhosts: all\ntasks:\n  - debug: hello\n")
    assert rb.stages[0].tasks[0].args == {"msg": "hello"}


def test_string_args_refused_for_module_without_free_form(tmp_path: Path) -> None:
    err = _error(tmp_path, "name: x\nhosts: all\ntasks:\n  - pause: soon\n")
    assert "takes a mapping of arguments" in err.message and (err.line, err.column) == (4, 12)


def test_templated_value_is_accepted_for_any_arg_type(tmp_path: Path) -> None:
    rb = _load(tmp_path, "name: x\nhosts: all\ntasks:\n  - pause: {seconds: '{{ wait | int }}'}\n")
    assert rb.stages[0].tasks[0].args == {"seconds": "{{ wait | int }}"}


def test_missing_required_module_arg_is_an_error(tmp_path: Path) -> None:
    err = _error(tmp_path, "name: x\nhosts: all\ntasks:\n  - assert: {fail_msg: nope}\n")
    assert "needs argument 'that'" in err.message


def test_block_rescue_always_get_nested_stable_ids(tmp_path: Path) -> None:
    rb = _load(
        tmp_path,
        """\
        name: x
        stages:
          - name: canary
            hosts: all
            tasks:
              - debug: one
              - block:
                  - debug: two
                  - debug: three
                rescue:
                  - debug: four
                always:
                  - debug: five
        """,
    )
    block = rb.stages[0].tasks[1]
    assert block.kind == "block"
    assert [t.task_id for t in block.walk()] == [
        "canary/1",
        "canary/1/block/0",
        "canary/1/block/1",
        "canary/1/rescue/0",
        "canary/1/always/0",
    ]
    ids = [t.task_id for t in rb.all_tasks()]
    assert len(ids) == len(set(ids))


def test_rescue_without_block_is_an_error(tmp_path: Path) -> None:
    err = _error(tmp_path, "name: x\nhosts: all\ntasks:\n  - debug: a\n    rescue: [{debug: b}]\n")
    assert "'rescue' needs a 'block'" in err.message


def test_import_tasks_inlines_the_file_and_applies_when_tags_vars(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "t.yaml").write_text("- debug: a\n  when: b\n- kube.cordon: {}\n")
    rb = _load(
        tmp_path,
        """\
        name: x
        hosts: all
        tasks:
          - debug: first
          - import_tasks: tasks/t.yaml
            when: c
            tags: [maint]
            vars: {reason: r}
          - debug: last
        """,
    )
    tasks = rb.stages[0].tasks
    assert [t.module for t in tasks] == ["debug", "debug", "kube.cordon", "debug"]
    assert tasks[1].when == ["c", "b"] and tasks[2].when == ["c"]
    assert tasks[1].tags == ["maint"] and tasks[2].vars == {"reason": "r"}
    assert tasks[1].source.path.endswith("t.yaml") and tasks[1].source.line == 1
    assert [t.task_id for t in tasks] == ["x/0", "x/1", "x/2", "x/3"]


def test_import_cycle_is_reported_as_a_chain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("a.yaml").write_text("- import_tasks: b.yaml\n")
    Path("b.yaml").write_text("- debug: x\n- import_tasks: a.yaml\n")
    err = _error(tmp_path, "name: x\nhosts: all\ntasks:\n  - import_tasks: a.yaml\n")
    assert err.message == "import cycle: a.yaml -> b.yaml -> a.yaml"
    assert (err.path, err.line, err.column) == ("b.yaml", 2, 17)


def test_import_of_a_mapping_is_refused(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text("name: not a task list\n")
    err = _error(tmp_path, "name: x\nhosts: all\ntasks:\n  - import_tasks: m.yaml\n")
    assert "must be a YAML list of tasks" in err.message


def test_disruptive_module_needs_serial_or_rolling_even_when_imported(tmp_path: Path) -> None:
    (tmp_path / "d.yaml").write_text("- block:\n    - kube.drain: {}\n")
    err = _error(tmp_path, "name: x\nhosts: all\ntasks:\n  - import_tasks: d.yaml\n")
    assert "disruptive module 'kube.drain'" in err.message
    rb = _load(tmp_path, "name: x\nhosts: all\nserial: [1, '50%']\ntasks:\n  - import_tasks: d.yaml\n")
    serial = rb.stages[0].serial
    assert serial is not None
    hosts = [f"h{i}" for i in range(10)]
    assert [len(batch) for batch in serial_batches(hosts, list(serial.root))] == [1, 5, 4]


def test_quorum_counts_distinct_users_across_groups(tmp_path: Path) -> None:
    text = """\
        name: x
        approvers: {sre: [alice, bob], leads: [bob]}
        hosts: all
        gate: {before: true, approvers: [sre, leads, alice], quorum: QUORUM}
        tasks: [{debug: hi}]
        """
    assert _load(tmp_path, text.replace("QUORUM", "2")).stages[0].gate is not None
    err = _error(tmp_path, text.replace("QUORUM", "3"))
    assert "quorum 3 exceeds the 2 distinct" in err.message


def test_per_host_gate_task_is_checked_too(tmp_path: Path) -> None:
    err = _error(
        tmp_path,
        "name: x\nhosts: all\ntasks:\n  - name: ok?\n    gate: {approvers: bob, quorum: 2}\n",
    )
    assert "quorum 2 exceeds" in err.message
    rb = _load(tmp_path, "name: x\nhosts: all\ntasks:\n  - gate: {approvers: bob, timeout: 90s}\n")
    gate = rb.stages[0].tasks[0].gate
    assert gate is not None and gate.approvers == ["bob"] and gate.timeout == 90


def test_secret_ref_in_args_is_accepted_and_template_under_secret_key_too(tmp_path: Path) -> None:
    rb = _load(
        tmp_path,
        "name: x\nhosts: all\nvars:\n  db_password: {secret: db}\n  api_token: '{{ lookup_token }}'\n"
        "tasks: [{debug: hi}]\n",
    )
    assert rb.vars["db_password"] == {"secret": "db"}


def test_notify_of_a_stage_handler_is_accepted(tmp_path: Path) -> None:
    rb = _load(
        tmp_path,
        "name: x\nstages:\n  - name: s\n    hosts: all\n    tasks: [{debug: a, notify: h}]\n"
        "    handlers: [{name: h, debug: b}]\n",
    )
    assert rb.stages[0].tasks[0].notify == ["h"]


def test_shipped_examples_load(tmp_path: Path) -> None:
    rb = load_runbook(REPO / "runbooks" / "examples" / "gpu-node-maintenance.yaml")
    assert [s.name for s in rb.stages] == ["canary", "fleet"]
    fleet = rb.stages[1]
    assert fleet.rolling is not None and fleet.rolling.max_in_flight == "10%"
    assert fleet.gate is not None and fleet.gate.timeout == 5400 and fleet.gate.quorum == 2
    assert fleet.observe is not None and fleet.observe.duration == 1800
    assert fleet.tasks[0].vars == {"reason": "fleet maintenance"}
