"""`fleet.report` through a real worker (issue 21): after the shipped fleet-inventory runbook ran
on two rehearsal clusters with different Kubernetes versions, a run's task writes the fleet view
of those two and of a cluster no run inventoried to the moto S3 server, read from Temporal as
`pitstop fleet status` reads it: the run lists it among its artifacts, the Markdown and the HTML
hold both clusters' versions and "never inventoried" for the third, and the runbook registers
each cluster's versions. Check mode writes nothing; a bucket the worker policy does not allow
fails the task with the policy's words and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pitstop.contracts import RunReport, RunStatus
from pitstop.report.write import report_stem
from tests.integration.engine.conftest import RunFn, StartFn, engine_worker, run, start_run
from tests.integration.etcd.conftest import aws_env, bucket, cluster
from tests.integration.sim.conftest import StartSim, start_sim
from tests.integration.test_fleet_status import SIM, on, platform, table_rows, visible
from tests.policy_site import PolicyLayer

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from temporalio.client import Client

__all__ = ["aws_env", "bucket", "cluster", "engine_worker", "run", "start_run", "start_sim"]

REPO = Path(__file__).resolve().parents[2]
LINK_BASE = "https://fleet.example.test/reports"

RUNBOOK = """
name: fleet-report-here
stages:
  - name: fleet
    hosts: localhost
    tasks:
      - name: The fleet before
        fleet.report:
          clusters: "{{ clusters }}"
          title: before
          bucket: "{{ bucket }}"
          endpoint_url: "{{ s3_endpoint }}"
          addressing_style: path
          link_base: "{{ link_base }}"
        register: fleet
      - name: What the runbook registered
        debug: {msg: "{{ fleet.versions | to_json }}|{{ fleet.never_inventoried | join(',') }}"}
"""


def inventory(clusters: list[str], bucket: str, s3_endpoint: str) -> str:
    return (
        "all:\n  hosts:\n    localhost: {}\n"
        f"  vars: {{bucket: {bucket}, s3_endpoint: '{s3_endpoint}', link_base: '{LINK_BASE}', "
        f"clusters: {json.dumps(clusters)}}}\n"
    )


def _keys(s3_client: S3Client, bucket: str) -> list[str]:
    return sorted(o["Key"] for o in s3_client.list_objects_v2(Bucket=bucket).get("Contents", []))


def _tasks(report: RunReport) -> list[Any]:
    [stage] = report.stages
    [host] = stage.hosts
    return host.tasks


@pytest.fixture(autouse=True)
def shipped_compat(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PITSTOP_COMPAT_DIR", str(REPO / "runbooks" / "compat"))


@pytest.fixture
async def fleet(start_sim: StartSim, run: RunFn, temporal_client: Client, cluster: str) -> list[str]:
    """Two clusters inventoried by the shipped fleet-inventory runbook, and one never."""
    old, new, empty = cluster, f"{cluster}-b", f"{cluster}-none"
    start_sim(SIM, platform("v1.30.6")).register(old)
    start_sim(SIM, platform("v1.31.2")).register(new)
    inventory_runbook = (REPO / "runbooks" / "fleet-inventory.yaml").read_text()
    for name in (old, new):
        report = await run(inventory_runbook, on(name))
        assert report.status == "succeeded", report.msg
        await visible(temporal_client, f"WorkflowId = '{report.run_id}' AND ExecutionStatus = 'Completed'", 1)
    return [old, new, empty]


async def test_the_fleet_view_is_written_to_s3_linked_from_the_run_and_its_versions_registered(
    fleet: list[str], start_run: StartFn, s3_endpoint: str, bucket: str, s3_client: S3Client
) -> None:
    old, new, empty = fleet
    handle = await start_run(RUNBOOK, inventory(fleet, bucket, s3_endpoint))
    report = await handle.result()
    assert report.status == "succeeded", report.msg
    folder = f"fleet-reports/{report_stem(report.run_id)}"
    md_key, html_key = f"{folder}/fleet-status-before.md", f"{folder}/fleet-status-before.html"

    # The run lists the view among its artifacts (what `pitstop status`, the UI and Slack show).
    [artifact] = report.artifacts
    assert (artifact.name, artifact.uri) == ("fleet status (before)", f"{LINK_BASE}/{html_key}")
    status = await handle.query("status", result_type=RunStatus)
    assert [(a.name, a.uri) for a in status.artifacts] == [(artifact.name, artifact.uri)]

    assert _keys(s3_client, bucket) == sorted([md_key, html_key])
    markdown = s3_client.get_object(Bucket=bucket, Key=md_key)["Body"].read().decode()
    rows = table_rows(markdown)
    # Columns in the order named; the cluster no run inventoried is said, not invented.
    assert ["kubernetes", "v1.30.6", "v1.31.2"] in [r[1:] for r in rows if len(r) == 4]
    assert ["kubernetes", "v1.31.2", "-", f"{old} (v1.30.6)", "-"] in rows
    assert f"{empty}: never inventoried: run runbooks/fleet-inventory.yaml on it" in markdown
    assert "clusters named by this run's fleet.report" in markdown
    page = s3_client.get_object(Bucket=bucket, Key=html_key)
    assert page["ContentType"] == "text/html; charset=utf-8"
    assert f'<td class="marked">{old} (v1.30.6)</td>' in page["Body"].read().decode()

    # The runbook registered each cluster's component versions (and which cluster has none).
    fleet_task, said = _tasks(report)
    assert fleet_task.status == "changed"
    versions_json, never = said.msg.split("|")
    versions = json.loads(versions_json)
    assert set(versions) == {old, new}
    assert (versions[old]["kubernetes"], versions[new]["kubernetes"]) == ("v1.30.6", "v1.31.2")
    assert all(isinstance(v, str) for per in versions.values() for v in per.values()), "versions only"
    assert never == empty


async def test_check_mode_reads_the_fleet_and_writes_nothing(
    fleet: list[str], run: RunFn, s3_endpoint: str, bucket: str, s3_client: S3Client
) -> None:
    report = await run(RUNBOOK, inventory(fleet, bucket, s3_endpoint), check_mode=True)
    assert report.status == "succeeded", report.msg
    fleet_task, said = _tasks(report)
    stem = report_stem(report.run_id)
    assert fleet_task.msg.startswith(
        f"would write s3://{bucket}/fleet-reports/{stem}/fleet-status-before.html"
    )
    assert "3 cluster(s), 2 inventoried" in fleet_task.msg
    assert json.loads(said.msg.split("|")[0])[fleet[0]]["kubernetes"] == "v1.30.6"
    assert report.artifacts == []
    assert _keys(s3_client, bucket) == []


async def test_a_bucket_the_policy_does_not_allow_fails_the_task_and_writes_nothing(
    run: RunFn, worker_policy: PolicyLayer, s3_endpoint: str, bucket: str, s3_client: S3Client
) -> None:
    # The same moto server under another name, where the operator allowed only reports-*.
    alias = s3_endpoint.replace("127.0.0.1", "localhost")
    worker_policy.allow_s3(alias, ["reports-*"])
    report = await run(RUNBOOK, inventory(["lab"], bucket, alias))
    assert report.status == "failed"
    fleet_task = _tasks(report)[0]
    assert fleet_task.status == "failed"
    assert (
        f"fleet.report: bucket {bucket!r} at {alias} is not one this worker may use (policy s3.endpoints"
    ) in fleet_task.msg
    assert report.artifacts == []
    assert _keys(s3_client, bucket) == []
