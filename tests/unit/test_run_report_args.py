"""records.run_report's arguments and where its objects go, without S3 or Temporal; and that a
worker starting does not pay for matplotlib (it is imported when a report is drawn)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from activities.run_report import link, report_folder
from pitstop.contracts import ModuleCall
from pitstop.module_args.records import RunReportArgs
from pitstop.runbook.inventory import ClusterConfig


def _call(cluster: str | None) -> ModuleCall:
    return ModuleCall(
        module="records.run_report",
        host="localhost",
        args={},
        run_id="demo/run 7",
        task_path="report/0",
        cluster=ClusterConfig(name=cluster) if cluster else None,
    )


def test_objects_go_under_prefix_cluster_and_run_and_the_link_under_link_base() -> None:
    args = RunReportArgs(bucket="reports", link_base="https://reports.example.test/site/", cluster="")
    assert args.cluster is None and args.link_base == "https://reports.example.test/site"
    # The inventory's cluster when the task names none; run ids made safe as one key segment.
    assert report_folder(args, _call("gpu-prod")) == "run-reports/gpu-prod/demo_run_7"
    assert report_folder(args, _call(None)) == "run-reports/local/demo_run_7"
    key = "run-reports/gpu-prod/demo_run_7/demo_run_7.html"
    assert link(args, key) == f"https://reports.example.test/site/{key}"
    assert link(RunReportArgs(bucket="reports", link_base=""), key) == f"s3://reports/{key}"


def test_link_base_must_be_a_url_a_browser_opens() -> None:
    with pytest.raises(ValidationError, match="link_base 's3://reports' must be an http"):
        RunReportArgs(bucket="reports", link_base="s3://reports")


def test_a_worker_loads_the_module_without_matplotlib() -> None:
    code = "import sys, activities; print('matplotlib' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
