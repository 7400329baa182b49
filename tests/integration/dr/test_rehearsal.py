"""The shipped runbooks/dr-readiness.yaml through the engine, on a rehearsal cluster with a
kubeadm control-plane node, the moto S3 server and a local registry: the report's verified and
unverified rows, the objects in S3 with the reported hashes, and no private key byte anywhere
in the run's history (the run's workflow and every host workflow)."""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from temporalio.client import Client

from tests.integration.dr.conftest import CP, DrSite
from tests.integration.dr.registry import registry_server, tls_server
from tests.integration.dr.test_http_check import allow_http
from tests.integration.engine.conftest import StartFn
from tests.policy_site import PolicyLayer

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

RUNBOOKS = Path(__file__).resolve().parents[3] / "runbooks"
TASKS = ("tasks/dr-pki.yaml", "tasks/dr-cluster.yaml", "tasks/dr-report.yaml")


@pytest.fixture
def registry(worker_policy: PolicyLayer) -> Iterator[str]:
    with registry_server() as url:
        allow_http(worker_policy, url)
        yield url


@pytest.fixture
def ingress(worker_policy: PolicyLayer, tmp_path: Path) -> Iterator[str]:
    with tls_server(tmp_path) as url:
        allow_http(worker_policy, url)
        yield url


def _inventory(site: DrSite, bucket: str, s3_endpoint: str, registry: str, ingress: str) -> str:
    assert site.inventory.path is not None
    doc: dict[str, Any] = yaml.safe_load(Path(site.inventory.path).read_text())
    doc["all"]["children"]["dr_worker"] = {"hosts": {"localhost": {}}}
    doc["all"]["vars"] = {
        "cluster_name": "rehearsal",
        "s3_bucket": bucket,
        "s3_endpoint_url": s3_endpoint,
        "s3_addressing_style": "path",
        "s3_sse": "AES256",
        "registry_url": registry,
        "model_registry_url": f"{registry}/health",
        "ingress_url": ingress,
        "cert_min_days": 30,
    }
    return yaml.safe_dump(doc)


def _rows(table: str) -> dict[str, tuple[str, str]]:
    """The report's rows: item -> (status, evidence or why)."""
    out: dict[str, tuple[str, str]] = {}
    for line in table.splitlines()[3:-1]:
        item, status, detail = re.split(r"\s{2,}", line, maxsplit=2)
        out[item] = (status, detail)
    return out


async def _history_bytes(client: Client, workflow_id: str) -> bytes:
    """Every event of the run's workflow and of each child (host) workflow, serialized."""
    out = bytearray()
    pending = [workflow_id]
    while pending:
        async for event in client.get_workflow_handle(pending.pop()).fetch_history_events():
            out += event.SerializeToString()
            if event.HasField("child_workflow_execution_started_event_attributes"):
                pending.append(
                    event.child_workflow_execution_started_event_attributes.workflow_execution.workflow_id
                )
    return bytes(out)


async def test_the_runbook_backs_up_checks_and_reports_verified_and_unverified_items(
    dr_site: DrSite,
    registry: str,
    ingress: str,
    start_run: StartFn,
    temporal_client: Client,
    s3_client: S3Client,
    s3_endpoint: str,
    bucket: str,
) -> None:
    handle = await start_run(
        (RUNBOOKS / "dr-readiness.yaml").read_text(),
        _inventory(dr_site, bucket, s3_endpoint, registry, ingress),
        extra_files={name: (RUNBOOKS / name).read_text() for name in TASKS},
    )
    report = await handle.result()
    assert report.status == "succeeded", report.msg

    host = report.stages[-1].hosts[0]
    table = next(t for t in host.tasks if t.module == "dr.report").msg
    rows = _rows(table)
    assert host.registered["dr_report"]["verified"] == [
        "control-plane PKI",
        "kubeadm config",
        "certificate expiry",
        "queue/policy export",
        "container registry",
        "model registry",
        "DNS/ingress certificate",
    ]
    assert [item for item, (status, _) in rows.items() if status == "unverified"] == [
        "etcd snapshot",
        "GitOps source",
        "training checkpoints",
        "inference failover",
    ]
    assert rows["etcd snapshot"][1] == (
        f"PreconditionFailed: no snapshot of cluster 'rehearsal' under s3://{bucket}/etcd-backups/rehearsal/ "
        "(runbooks/etcd-backup.yaml makes them)"
    )
    assert rows["GitOps source"][1] == "no GitOps controller found"
    for item in ("training checkpoints", "inference failover"):
        assert rows[item][1] == "not checkable by pitstop yet"
    assert (
        rows["container registry"][1]
        == f"{registry}: GET /v2/ answered 401 (Docker-Distribution-API-Version: registry/2.0)"
    )
    assert rows["kubeadm config"][1].startswith(
        f"ConfigMap kube-system/kubeadm-config, kubeadm-config.yaml in s3://{bucket}/dr-backups/rehearsal/pki/"
    )
    assert re.search(r"first to expire \S+ on \d{4}-\d\d-\d\d \(36[45] days\)", rows["certificate expiry"][1])
    assert rows["DNS/ingress certificate"][1].startswith(f"{ingress}: localhost resolves to ")
    assert table.splitlines()[-1] == "7 of 11 recovery items verified"

    # The objects the evidence names exist, with the hashes it gives.
    for item in ("control-plane PKI", "queue/policy export"):
        match = re.match(r"s3://([^/]+)/(\S+) sha256 ([0-9a-f]{64})", rows[item][1])
        assert match is not None, rows[item][1]
        body = s3_client.get_object(Bucket=match[1], Key=match[2])["Body"].read()
        assert hashlib.sha256(body).hexdigest() == match[3]
    assert f"from {CP})" in rows["control-plane PKI"][1]
    pki_key = re.match(r"s3://[^/]+/(\S+)", rows["control-plane PKI"][1])
    assert pki_key is not None
    archive = s3_client.get_object(Bucket=bucket, Key=pki_key[1])["Body"].read()

    # No byte of any private key in history: neither the PEM markers nor any line of a key.
    history = await _history_bytes(temporal_client, handle.id)
    assert b"PRIVATE KEY" not in history
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        keys = [m for m in tar.getmembers() if m.name.endswith(".key")]
        assert {m.name for m in keys} >= {
            "pki/ca.key",
            "pki/sa.key",
            "pki/front-proxy-ca.key",
            "pki/etcd/ca.key",
        }
        for member in keys:
            handle_ = tar.extractfile(member)
            assert handle_ is not None
            for line in handle_.read().splitlines():
                if not line.startswith(b"-----"):
                    assert line not in history, member.name


async def test_a_plan_uploads_nothing_and_says_what_the_run_would_back_up(
    dr_site: DrSite,
    registry: str,
    ingress: str,
    start_run: StartFn,
    s3_client: S3Client,
    s3_endpoint: str,
    bucket: str,
) -> None:
    handle = await start_run(
        (RUNBOOKS / "dr-readiness.yaml").read_text(),
        _inventory(dr_site, bucket, s3_endpoint, registry, ingress),
        extra_files={name: (RUNBOOKS / name).read_text() for name in TASKS},
        check_mode=True,
    )
    report = await handle.result()
    assert report.status == "succeeded", report.msg
    host = report.stages[-1].hosts[0]
    rows = _rows(next(t for t in host.tasks if t.module == "dr.report").msg)
    assert rows["control-plane PKI"] == (
        "unverified",
        f"plan: would archive pki, kubeadm-config.yaml from {CP}:/etc/kubernetes to s3://{bucket}/dr-backups/"
        f"rehearsal/pki/{rows['control-plane PKI'][1].split('/rehearsal/pki/', 1)[1]}",
    )
    assert rows["queue/policy export"][0] == "unverified"
    assert rows["queue/policy export"][1].startswith(
        "plan: would export 3 objects of 3 kinds; not installed: "
        "WorkloadPriorityClass.kueue.x-k8s.io/v1beta1, "
    )
    # Read-only checks run in a plan as in the run.
    assert rows["certificate expiry"][0] == rows["container registry"][0] == "verified"
    assert s3_client.list_objects_v2(Bucket=bucket).get("KeyCount") == 0
