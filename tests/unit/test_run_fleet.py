"""A host's input carries only what its tasks can name of the fleet, so its size does not
grow with the fleet (issue 15: at 1,000 nodes every child carried every host's variables)."""

from __future__ import annotations

import json
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from activities.plan import build_plan
from pitstop.client import data_converter
from pitstop.contracts import HostInput, HostResult, RunProgress, RunRequest, RunVars, TaskOutcome
from pitstop.runbook.fleet_refs import expression_refs
from workflows import run_vars, trust
from workflows.run_fleet import FleetCache
from workflows.run_stages import StageRuns, fresh_records

NOW = datetime(2026, 1, 1, tzinfo=UTC)


# --- what expressions read ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{{ hostvars['localhost'].baseline }}", {"hostvars": {"localhost"}}),
        ("{{ hostvars.node_7.ip }}", {"hostvars": {"node_7"}}),
        ("{{ hostvars[inventory_hostname].ip }}", {"hostvars": {"inventory_hostname"}}),
        ("{{ hostvars[item].ip }}", {"hostvars": {"*"}}),
        ("{{ groups.gpu_canary + groups['control_plane'] }}", {"groups": {"gpu_canary", "control_plane"}}),
        ("{{ groups | length }}", {"groups": {"*"}}),
        ("stage.failed_hosts | length > 0", {"stage": {"failed_hosts"}}),
        ("run.stages[0].status == 'ok'", {"run": {"stages"}}),
        ("{{ vars['groups'] }}", {"groups": {"*"}}),
        ("{{ vars[name] }}", {v: {"*"} for v in ("hostvars", "groups", "stage", "run")}),
        ("{% for run in items %}{{ run }}{% endfor %}", {"run": {"*"}}),
        ("run the drain on every node", {}),  # prose: not an expression
        ("{{ inventory_hostname }} and {{ item.name }}", {}),
        # A dict's own methods read any key (review: `groups.get('gpu', [])` came back empty).
        ("inventory_hostname in groups.get('gpu', [])", {"groups": {"*"}}),
        ("{{ hostvars.keys() | list | length }}", {"hostvars": {"*"}}),
        ("{{ vars.get('groups', {}) }}", {v: {"*"} for v in ("hostvars", "groups", "stage", "run")}),
        ("{% for g, hs in groups.items() %}{{ g }}{% endfor %}", {"groups": {"*"}}),
        # `inventory_hostname` rebound in the template: `hostvars[inventory_hostname]` is any host.
        (
            "{% for inventory_hostname in groups.gpu %}{{ hostvars[inventory_hostname].ip }}{% endfor %}",
            {"groups": {"gpu"}, "hostvars": {"*"}},
        ),
    ],
)
def test_fleet_refs_name_literal_keys_or_any_key(text: str, expected: dict[str, set[str]]) -> None:
    assert {k: set(v) for k, v in expression_refs([text]).named.items()} == expected


def test_a_chain_thousands_of_links_long_is_read_without_recursion() -> None:
    chain = "groups.gpu" + "[0]" * 5000
    assert {k: set(v) for k, v in expression_refs([chain]).named.items()} == {"groups": {"gpu"}}


# --- host inputs ----------------------------------------------------------------------------
def _progress(tmp_path: Path, hosts: int, tasks: str) -> RunProgress:
    inventory = {
        "all": {"children": {"gpu": {"hosts": {f"node-{i:05d}": _hostvars(i) for i in range(hosts)}}}}
    }
    runbook = textwrap.dedent(
        """\
        name: fleet
        stages:
          - name: maintain
            hosts: gpu
            rolling: {max_in_flight: 100}
            tasks:
        """
    ) + textwrap.indent(textwrap.dedent(tasks), "      ")
    tmp_path.mkdir(parents=True, exist_ok=True)
    files = {"runbook.yaml": runbook, "inventory.yaml": json.dumps(inventory)}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    plan = build_plan(RunRequest(runbook="runbook.yaml", inventory="inventory.yaml", files=files))
    reports, statuses = fresh_records(plan.stages)
    return RunProgress(plan=plan, started_at=NOW, reports=reports, statuses=statuses)


def _hostvars(i: int) -> dict[str, object]:
    # What `from_nodes` gives a node: its address, labels and failure domain.
    return {
        "ansible_host": f"10.0.{i // 250}.{i % 250}",
        "topology_zone": f"zone-{i % 8}",
        "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "pool": f"pool-{i % 4}"},
    }


def _input(progress: RunProgress, host: str, facts: dict[str, dict[str, object]] | None = None) -> HostInput:
    stages = StageRuns(progress)
    run = RunVars(id="r1", runbook="fleet", stages=[run_vars.stage_outcome(s) for s in stages])
    stage = stages.all[0]
    return run_vars.host_input(
        run_id="r1",
        plan=progress.plan,
        stage=stage,
        host=host,
        tasks=stage.rule.tasks,
        host_facts=facts or {},
        run_var=run.as_template_var(),
        requested_by="alice",
        stage_handlers=True,
        fleet=FleetCache(progress.plan),
    )


def _size(inp: HostInput) -> int:
    return len(inp.model_dump_json())


MAINTAIN = """\
- kube.annotate: {annotations: {pitstop/maintained: "{{ run.id }}"}}
- debug: {msg: "{{ inventory_hostname }} in {{ topology_zone }} done ({{ stage.name }})"}
"""


def test_a_hosts_input_does_not_grow_with_the_fleet(tmp_path: Path) -> None:
    small = _input(_progress(tmp_path / "a", 20, MAINTAIN), "node-00007")
    large = _input(_progress(tmp_path / "b", 400, MAINTAIN), "node-00007")
    assert _size(large) == _size(small)
    assert set(large.hostvars) == {"node-00007", "localhost"}
    assert large.hostvars["node-00007"]["ansible_host"] == "10.0.0.7"
    assert large.vars["groups"] == {}
    assert large.vars["stage"] == {"name": "maintain"}
    assert "stages" not in large.vars["run"] and large.vars["run"]["id"] == "r1"


def test_localhost_facts_reach_every_host(tmp_path: Path) -> None:
    progress = _progress(tmp_path, 50, "- debug: {msg: \"{{ hostvars['localhost'].baseline.bw }}\"}\n")
    inp = _input(progress, "node-00003", {"localhost": {"baseline": {"bw": 380}}, "node-00004": {"x": 1}})
    assert inp.hostvars["localhost"]["baseline"] == {"bw": 380}
    assert set(inp.hostvars) == {"node-00003", "localhost"}  # another host's facts stay its own


def test_named_hosts_and_groups_are_sent_and_only_they(tmp_path: Path) -> None:
    tasks = """\
    - debug: {msg: "{{ hostvars['node-00011'].ansible_host }} {{ groups.gpu | length }}"}
    - kube.cordon: {reason: drain}
      delegate_to: node-00012
    """
    inp = _input(_progress(tmp_path, 40, tasks), "node-00001")
    assert set(inp.hostvars) == {"node-00001", "node-00011", "node-00012", "localhost"}
    assert set(inp.vars["groups"]) == {"gpu"} and len(inp.vars["groups"]["gpu"]) == 40


@pytest.mark.parametrize(
    "tasks",
    [
        '- debug: {msg: "{{ hostvars[item].ansible_host }}"}\n  loop: "{{ groups.gpu }}"\n',
        '- kube.cordon: {reason: drain}\n  delegate_to: "{{ groups.gpu[0] }}"\n',
    ],
)
def test_computed_host_names_get_every_hosts_vars(tmp_path: Path, tasks: str) -> None:
    inp = _input(_progress(tmp_path, 30, tasks), "node-00001")
    assert len(inp.hostvars) == 31  # every node and localhost: correct first


def test_the_stage_and_run_lists_are_sent_when_named(tmp_path: Path) -> None:
    tasks = '- debug: {msg: "{{ stage.done_hosts }}"}\n  when: run.stages | length > 0\n'
    inp = _input(_progress(tmp_path, 10, tasks), "node-00001")
    assert inp.vars["stage"]["done_hosts"] == [] and "results" not in inp.vars["stage"]
    assert inp.vars["run"]["stages"][0]["name"] == "maintain"


def test_template_keys_are_read_and_plain_strings_are_not(tmp_path: Path) -> None:
    tasks = """\
    - name: run the drain in stage two
      set_fact: {"{{ groups.gpu[0] }}_is_leader": true}
      tags: [run, stage]
    """
    inp = _input(_progress(tmp_path, 12, tasks), "node-00001")
    assert set(inp.vars["groups"]) == {"gpu"}
    assert inp.vars["stage"] == {"name": "maintain"} and "stages" not in inp.vars["run"]


def test_a_loop_over_inventory_hostname_gets_every_hosts_vars(tmp_path: Path) -> None:
    tasks = """\
    - debug: {msg: "{{ hostvars[inventory_hostname].ansible_host }}"}
      loop: "{{ groups.gpu }}"
      loop_control: {loop_var: inventory_hostname}
    """
    inp = _input(_progress(tmp_path, 12, tasks), "node-00001")
    assert len(inp.hostvars) == 13


def test_node_labels_and_facts_never_widen_the_input(tmp_path: Path) -> None:
    # Values are never rendered again, so they read nothing: a label saying `vars` or `stage`
    # (anyone who labels nodes could set one) or a deeply nested fact costs nothing.
    progress = _progress(tmp_path, 400, MAINTAIN)
    plain = _size(_input(progress, "node-00007"))
    progress.plan.hostvars["node-00007"]["labels"]["env"] = "vars"
    note, out = "stage " + "a.b" * 3000, "x" + "[0]" * 5000
    progress.plan.hostvars["node-00007"]["note"] = note
    widened = _input(progress, "node-00007", {"node-00007": {"out": out, "tier": "run"}})
    assert set(widened.hostvars) == {"node-00007", "localhost"}
    assert widened.vars["groups"] == {} and widened.vars["stage"] == {"name": "maintain"}
    # Only the host's own new values (in its vars, and its note again in its hostvars).
    assert _size(widened) - plain < 2 * len(note) + len(out) + 1_000


# --- the state carried across continue-as-new ----------------------------------------------
def test_the_carried_states_digest_survives_the_data_converters_round_trip(tmp_path: Path) -> None:
    # The next execution checks the signature with the digest of the state the converter gave
    # it: pydantic's JSON must come out the same bytes after the trip, with what hosts register.
    progress = _progress(tmp_path, 3, "- debug: {msg: hi}\n")
    awkward: dict[str, object] = {
        "float": 0.1 + 0.2,
        "big": 2**70,
        "tiny": 5e-324,
        "unicode": "节点 ✓ \u2028",
        "nested": {"z": [1, 2.0, None, True], "a": {"b": []}},
        "tuple": (1, "x"),
    }
    progress.reports[0].hosts.append(
        HostResult(
            host="node-00000",
            stage="maintain",
            status="ok",
            registered={"out": awkward},
            facts={"when": NOW.isoformat()},
            tasks=[
                TaskOutcome(
                    task_id="t1",
                    name="x",
                    module="debug",
                    status="ok",
                    started_at=NOW,
                    ended_at=NOW,
                    data=awkward,
                )
            ],
            started_at=NOW,
            ended_at=NOW,
        )
    )
    request = RunRequest(runbook="r", state=progress)
    [payload] = data_converter().payload_converter.to_payloads([request])
    [received] = data_converter().payload_converter.from_payloads([payload], [RunRequest])
    assert received.state is not None
    assert trust.state_digest(received.state) == trust.state_digest(progress)
    # ... and the digest is of the content: one changed value changes it.
    received.state.reports[0].hosts[0].registered["out"]["float"] = 0.3
    assert trust.state_digest(received.state) != trust.state_digest(progress)


RICH = """\
- name: drain with a rescue
  block:
    - kube.cordon: {reason: maintenance}
      register: cordoned
      retries: 3
      delay: 5
      until: cordoned is succeeded
      tags: [drain]
  rescue:
    - fail: {msg: "{{ inventory_hostname }} could not drain"}
  always:
    - debug: {msg: done}
      loop: [1, 2]
      loop_control: {loop_var: attempt}
      ignore_errors: true
- kube.annotate: {annotations: {pitstop/maintained: "yes"}}
  when: ["cordoned is defined", "run.id != ''"]
  changed_when: false
"""


def test_a_hosts_tasks_travel_without_their_defaults_and_arrive_whole(tmp_path: Path) -> None:
    inp = _input(_progress(tmp_path, 5, RICH), "node-00001")
    sent = json.loads(inp.model_dump_json())
    first = sent["tasks"][0]
    assert "loop_var" not in first and "ignore_errors" not in first  # defaults left out
    assert first["rescue"][0]["module"] == "fail"
    received = HostInput.model_validate_json(inp.model_dump_json())
    assert received == inp  # every field back, defaults included
    assert received.tasks[0].always[0].loop_var == "attempt"
    assert received.tasks[0].block is not None and received.tasks[0].block[0].retries == 3
    compact = len(inp.model_dump_json())
    full = len(inp.model_dump_json(exclude={"tasks", "handlers"})) + len(
        json.dumps([t.model_dump(mode="json") for t in inp.tasks])
    )
    assert compact < full * 0.7
