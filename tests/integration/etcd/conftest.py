"""etcd backup and drill fixtures: the session's real etcd and moto S3, a fresh bucket per
test, S3 credentials in the environment (moto accepts any), and the shipped runbooks."""

from __future__ import annotations

import hashlib
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pitstop.devstack import DevStack, etcd_tool

# The engine fixtures (a worker with every registered activity, `run` a runbook to its end).
from tests.integration.engine.conftest import engine_worker, run, start_run  # noqa: F401
from tests.policy_site import PolicyLayer

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

REPO = Path(__file__).resolve().parents[3]
RUNBOOKS = REPO / "runbooks"


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a worker next to moto has: any credentials, no AWS endpoint or profile of its own."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def bucket(s3_client: S3Client) -> str:
    name = f"etcd-{uuid.uuid4().hex[:12]}"
    s3_client.create_bucket(Bucket=name)
    return name


@pytest.fixture
def cluster() -> str:
    return f"c{uuid.uuid4().hex[:8]}"


@pytest.fixture
def live_data_dir(stack: DevStack) -> Path:
    """The data directory of the session's (live) etcd."""
    return stack.home / "etcd"


def etcdctl(endpoint: str, *args: str) -> str:
    done = subprocess.run(
        [str(etcd_tool("etcdctl")), f"--endpoints={endpoint}", *args],
        capture_output=True,
        text=True,
        check=True,
        env={"ETCDCTL_API": "3", "PATH": "/usr/bin:/bin"},
    )
    return done.stdout


def put_nodes(endpoint: str, cluster: str, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        etcdctl(endpoint, "put", f"/registry/minions/{cluster}-node-{i}", f'{{"kind":"Node","n":{i}}}')


def tree_digest(root: Path) -> dict[str, str]:
    """SHA-256 of every file under `root`, by relative path."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def settled_digest(root: Path) -> dict[str, str]:
    """The digest once etcd has flushed what it was writing (two equal readings)."""
    previous = tree_digest(root)
    for _ in range(50):
        time.sleep(0.2)
        current = tree_digest(root)
        if current == previous:
            return current
        previous = current
    return previous


@dataclass(frozen=True)
class Site:
    """One test's site: where etcd and S3 are, which bucket and cluster, which directories."""

    etcd_endpoint: str
    s3_endpoint: str
    bucket: str
    cluster: str
    live_data_dir: Path
    work: Path

    @property
    def prefix(self) -> str:
        return f"etcd-backups/{self.cluster}/"

    def inventory(self, **extra: str) -> str:
        lines = [
            "all:",
            "  children:",
            "    etcd_backup:",
            "      hosts:",
            "        localhost: {}",
            "      vars:",
            f"        cluster_name: {self.cluster}",
            f"        etcd_endpoints: {self.etcd_endpoint}",
            f"        etcd_live_data_dirs: [{self.live_data_dir}]",
            "        etcd_count_prefixes: [/registry/minions/]",
            f"        s3_bucket: {self.bucket}",
            f"        s3_endpoint_url: {self.s3_endpoint}",
            "        s3_addressing_style: path",
            f"        backup_dir: {self.work / 'backups'}",
            f"        drill_dir: {self.work / 'drills'}",
        ]
        lines += [f"        {k}: {v}" for k, v in extra.items()]
        return "\n".join(lines) + "\n"


@pytest.fixture
def site(
    etcd_endpoint: str,
    s3_endpoint: str,
    bucket: str,
    cluster: str,
    live_data_dir: Path,
    tmp_path: Path,
    worker_policy: PolicyLayer,
) -> Iterator[Site]:
    # The site keeps its backups and drills in directories of its own (backup_dir, drill_dir),
    # which its operator lets modules write; the stack's policy already allows its etcd and S3.
    worker_policy.allow_write(tmp_path)
    yield Site(etcd_endpoint, s3_endpoint, bucket, cluster, live_data_dir, tmp_path)


def shipped(name: str) -> str:
    return (RUNBOOKS / name).read_text()


def shipped_tasks() -> dict[str, str]:
    """The task files the shipped etcd runbooks import, as a run's bundle carries them."""
    return {f"tasks/{p.name}": p.read_text() for p in (RUNBOOKS / "tasks").glob("etcd-*.yaml")}
