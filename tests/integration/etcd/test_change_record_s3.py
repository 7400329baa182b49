"""records.change_record writes its JSON and Markdown to the moto S3 server, and
acceptance.check's object-storage probe asks the same server."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from activities.acceptance import acceptance_check
from activities.records import records_change_record
from pitstop.contracts import ModuleCall
from pitstop.records.change_record import SECTIONS, sanitize
from tests.integration.kube.conftest import ModuleRunner, StartSim, module_runner, start_sim
from tests.unit.test_change_record import acceptance, compat, inventory, run_var

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["module_runner", "start_sim"]


def call(args: dict[str, Any], check_mode: bool = False) -> ModuleCall:
    return ModuleCall(
        module="records.change_record",
        host="localhost",
        args=args,
        check_mode=check_mode,
        run_id="platform-upgrade/run 7",
        task_path="record/0",
    )


@pytest.fixture
def record_args(s3_endpoint: str, bucket: str) -> dict[str, Any]:
    before = acceptance(392, {})
    return {
        "bucket": bucket,
        "endpoint_url": s3_endpoint,
        "addressing_style": "path",
        "cluster": "gpu-prod",
        "goal": "Kubernetes 1.30 -> 1.31",
        "risk": "control plane restarts",
        "inventory": inventory(),
        "compat": compat(),
        "deprecations": {"findings": []},
        "crd_webhooks": {"findings": []},
        "canary": {"hosts": ["gpu-node-001"], "scope": "one GPU node"},
        "acceptance": {"canary-gpu-nodes": acceptance(391, before["measured"])},
        "observation": {"window": "30m", "result": {"failed": False, "msg": "quiet"}},
        "rollback_triggers": ["NCCL below baseline by 10%"],
        "run": {**run_var(["ok", "ok", "ok", "ok"]), "id": "platform-upgrade/run 7"},
    }


def test_the_record_is_written_as_json_and_markdown_and_reads_back(
    record_args: dict[str, Any], s3_client: S3Client, bucket: str
) -> None:
    result = records_change_record(call(record_args))
    json_key = "change-records/gpu-prod/platform-upgrade-run-7.json"
    md_key = "change-records/gpu-prod/platform-upgrade-run-7.md"
    assert result.changed and not result.failed
    assert result.data["json_uri"] == f"s3://{bucket}/{json_key}"
    assert result.data["md_uri"] == f"s3://{bucket}/{md_key}"
    assert result.data["artifact"] == {"name": "change record", "uri": f"s3://{bucket}/{md_key}"}
    stored = json.loads(s3_client.get_object(Bucket=bucket, Key=json_key)["Body"].read())
    assert stored == result.data["record"]
    assert all(field in stored for field, _ in SECTIONS)
    assert stored["outcome"] == "succeeded"
    markdown = s3_client.get_object(Bucket=bucket, Key=md_key)["Body"].read().decode()
    assert markdown == result.data["markdown"]
    for _, heading in SECTIONS:
        assert f"\n## {heading}\n" in markdown
    # Writing the same record again changes nothing.
    again = records_change_record(call(record_args))
    assert not again.changed and "up to date" in again.msg


def test_the_bucket_is_created_when_asked(record_args: dict[str, Any], s3_client: S3Client) -> None:
    fresh = f"{record_args['bucket']}-records"
    result = records_change_record(call({**record_args, "bucket": fresh, "create_bucket": True}))
    assert result.changed
    key = "change-records/gpu-prod/platform-upgrade-run-7.md"
    assert s3_client.get_object(Bucket=fresh, Key=key)["Body"].read().decode() == result.data["markdown"]


def test_check_mode_says_what_it_would_write_and_writes_nothing(
    record_args: dict[str, Any], s3_client: S3Client, bucket: str
) -> None:
    result = records_change_record(call(record_args, check_mode=True))
    assert result.msg.startswith(
        f"would write s3://{bucket}/change-records/gpu-prod/platform-upgrade-run-7.json"
    )
    assert s3_client.list_objects_v2(Bucket=bucket).get("KeyCount") == 0


def test_object_storage_acceptance_asks_the_store(
    start_sim: StartSim, module_runner: ModuleRunner, s3_endpoint: str, bucket: str
) -> None:
    sim = start_sim("cluster: {nodes: 1, domains: 1}")
    store = {"endpoint_url": s3_endpoint, "addressing_style": "path"}
    ok = module_runner(
        acceptance_check,
        sim,
        {"layers": ["storage/object_storage"], "object_storage": {**store, "bucket": bucket}},
        host="localhost",
    )
    [check] = ok.data["layers"]["storage"]["checks"]
    assert check["status"] == "passed" and check["value"] >= 0
    assert bucket in check["detail"]
    missing = module_runner(
        acceptance_check,
        sim,
        {"layers": ["storage/object_storage"], "object_storage": {**store, "bucket": "no-such-bucket-here"}},
        host="localhost",
    )
    assert missing.failed
    assert "storage/object_storage: HeadBucket no-such-bucket-here: 404" in missing.msg


RUNBOOK = """
name: accept-and-record
stages:
  - name: baseline
    hosts: localhost
    tasks:
      - name: measure before
        acceptance.check:
          layers: [network/nccl, gpu/discovery]
          nodes: [gpu-node-001]
          poll_interval_seconds: 0.2
        register: before
      # set_fact carries the result to the next stage (registered vars are per stage).
      - name: keep the baseline
        set_fact:
          baseline_result: "{{ before }}"
  - name: canary
    hosts: localhost
    tasks:
      - name: accept
        acceptance.check:
          layers: [network/nccl, gpu/discovery]
          nodes: [gpu-node-001]
          poll_interval_seconds: 0.2
          baseline: "{{ baseline_result.measured }}"
          on_deviation: report
        register: after
      - name: record
        records.change_record:
          bucket: "{{ bucket }}"
          endpoint_url: "{{ s3_endpoint }}"
          addressing_style: path
          cluster: rehearsal
          goal: rehearse acceptance and the record
          canary: {hosts: [gpu-node-001], scope: one GPU node}
          acceptance: {baseline: "{{ baseline_result }}", canary: "{{ after }}"}
          run: "{{ run }}"
        register: record
"""


async def test_acceptance_feeds_its_baseline_forward_and_the_record_reports_both_stages(
    start_sim: StartSim, run: Any, s3_endpoint: str, bucket: str, s3_client: S3Client
) -> None:
    sim = start_sim("cluster: {nodes: 2, domains: 1}\ntiming: {time_scale: 60}")
    sim.register("rehearsal")  # the worker holds its kubeconfig; the inventory names it
    inventory = (
        "cluster: {name: rehearsal}\n"
        "all:\n  hosts:\n    localhost: {}\n"
        f"  vars: {{bucket: {bucket}, s3_endpoint: '{s3_endpoint}'}}\n"
    )
    report = await run(RUNBOOK, inventory)
    assert report.status == "succeeded", [
        (t.name, t.msg) for st in report.stages for h in st.hosts for t in h.tasks if t.status == "failed"
    ]
    [canary] = report.stages[1].hosts
    accepted = next(t for t in canary.tasks if t.name == "accept")
    assert accepted.status == "ok" and accepted.msg.startswith("acceptance passed (2 passed")
    # The report keeps small task data only; the record itself is read back from the store.
    base = f"change-records/rehearsal/{sanitize(report.run_id)}"
    record = json.loads(s3_client.get_object(Bucket=bucket, Key=f"{base}.json")["Body"].read())
    assert [v["stage"] for v in record["validation_results"]] == ["baseline", "canary"]
    assert [s["name"] for s in record["stages"]] == ["baseline", "canary"]
    assert (
        record["run_id"] == report.run_id
        and record["goal_and_risk"]["goal"] == "rehearse acceptance and the record"
    )
    [nccl] = [f for f in record["validation_results"][1]["figures"] if f["check"] == "network/nccl"]
    assert nccl["baseline"] == pytest.approx(390, rel=0.02) and nccl["status"] == "passed"
    markdown = s3_client.get_object(Bucket=bucket, Key=f"{base}.md")["Body"].read().decode()
    assert "### After canary: passed" in markdown and "- Hosts: gpu-node-001" in markdown
    # The module's artifact is listed with the run.
    assert [a.uri for h in report.stages[1].hosts for a in h.artifacts] == [f"s3://{bucket}/{base}.md"]


EXPLAIN_RUNBOOK = """
name: explain-deviation
approvers: {leads: [dana]}
stages:
  - name: baseline
    hosts: localhost
    gate: {after: true, approvers: leads}
    tasks:
      - acceptance.check:
          layers: [network/nccl]
          nodes: [gpu-node-001]
          poll_interval_seconds: 0.2
        register: before
      - set_fact: {baseline: "{{ before.measured }}"}
  - name: acceptance
    hosts: localhost
    tasks:
      - acceptance.check:
          layers: [network/nccl]
          nodes: [gpu-node-001]
          poll_interval_seconds: 0.2
          baseline: "{{ baseline }}"
          on_deviation: report
        register: after
      - name: a deviation must be explained
        when: not after.passed
        gate: {name: explain, approvers: leads, require_comment: true}
"""


async def test_a_deviation_reported_by_acceptance_waits_for_a_written_explanation(
    start_sim: StartSim, start_run: Any
) -> None:
    from temporalio.client import WorkflowUpdateFailedError

    from pitstop.contracts import Decision
    from pitstop_sim.models import NodeHealth, ProfileUpdate
    from tests.integration.engine.conftest import status_when

    sim = start_sim("cluster: {nodes: 2, domains: 1}\ntiming: {time_scale: 60}")
    sim.register("rehearsal")  # the worker holds its kubeconfig; the inventory names it
    inventory = "cluster: {name: rehearsal}\nall:\n  hosts:\n    localhost: {}\n"
    handle = await start_run(EXPLAIN_RUNBOOK, inventory)
    await status_when(handle, lambda s: any(g.status == "open" for g in s.gates), within=60)
    # Between the baseline and the acceptance the canary's NCCL bandwidth halves.
    sim.set_node_profile("gpu-node-001", ProfileUpdate(health=NodeHealth(nccl_busbw_gbps=190)))
    await handle.execute_update("decide", Decision(gate="baseline:after", approve=True, approver="dana"))
    await status_when(
        handle,
        lambda s: any(g.rule.gate_id == "explain@localhost" and g.status == "open" for g in s.gates),
        within=60,
    )
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(
            "decide", Decision(gate="explain@localhost", approve=True, approver="dana")
        )
    assert "comment" in str(refused.value.cause).lower()
    why = "NCCL drop is the new driver's known regression on this SKU; vendor case 123 opened"
    await handle.execute_update(
        "decide", Decision(gate="explain@localhost", approve=True, approver="dana", comment=why)
    )
    report = await handle.result()
    assert report.status == "succeeded", report.msg
    [accepted] = [t for t in report.stages[1].hosts[0].tasks if t.module == "acceptance.check"]
    assert "network/nccl" in accepted.msg and "baseline" in accepted.msg
    explained = next(g for g in report.gates if g.rule.gate_id == "explain@localhost")
    assert [(v.approver, v.comment) for v in explained.votes] == [("dana", why)]
