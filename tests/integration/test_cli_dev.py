"""`pitstop dev up|status|down` as a user runs them: separate processes, real parts."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    import boto3
    import httpx
    from botocore.config import Config
    from temporalio.client import WorkflowExecutionStatus

    from pitstop.client import connect
    from pitstop.devstack import StackConfig, etcd_tool, free_ports_config, port_free
    from pitstop.settings import Settings
    from pitstop.worker_app import build_worker


@activity.defn
def double(value: int) -> int:
    return value * 2


@workflow.defn
class DoubleWorkflow:
    @workflow.run
    async def run(self, value: int) -> int:
        return await workflow.execute_activity(double, value, start_to_close_timeout=timedelta(seconds=30))


def dev(*args: str) -> subprocess.CompletedProcess[str]:
    """Run `pitstop dev ...` in its own process (wide terminal so rich does not wrap messages)."""
    # `python -m pitstop.cli.dev` is the same typer app `pitstop dev` mounts; it keeps these
    # tests independent of the other CLI areas (test_pitstop_cli_mounts_dev covers the mount).
    return subprocess.run(
        [sys.executable, "-m", "pitstop.cli.dev", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "400"},
    )


def port_args(config: StackConfig) -> list[str]:
    return [
        "--home",
        str(config.home),
        "--temporal-port",
        str(config.temporal_port),
        "--ui-port",
        str(config.ui_port),
        "--s3-port",
        str(config.s3_port),
        "--etcd-port",
        str(config.etcd_client_port),
        "--etcd-peer-port",
        str(config.etcd_peer_port),
    ]


def pids(home: Path) -> dict[str, int]:
    return {p.stem: int(p.read_text()) for p in (home / "run").glob("*.pid")}


def alive(pid: int) -> bool:
    """Exists and is not a zombie waiting for init to reap it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] not in {"Z", "X"}
    except OSError:
        return False


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline and alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def check_every_part_answers(config: StackConfig) -> None:
    """UI answers, S3 stores and returns an object (boto3, path-style), etcd too (etcdctl)."""
    # Temporal UI
    assert httpx.get(f"http://127.0.0.1:{config.ui_port}", timeout=5).status_code == 200

    # S3 through boto3, path-style
    s3 = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{config.s3_port}",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(s3={"addressing_style": "path"}),
    )
    s3.create_bucket(Bucket="pitstop-artifacts")
    s3.put_object(Bucket="pitstop-artifacts", Key="hello.txt", Body=b"hello pitstop")
    assert s3.get_object(Bucket="pitstop-artifacts", Key="hello.txt")["Body"].read() == b"hello pitstop"

    # etcd through etcdctl
    endpoints = ["--endpoints", f"http://127.0.0.1:{config.etcd_client_port}"]
    etcdctl = str(etcd_tool("etcdctl"))
    subprocess.run([etcdctl, *endpoints, "put", "/pitstop/k", "v1"], check=True, capture_output=True)
    got = subprocess.run(
        [etcdctl, *endpoints, "get", "/pitstop/k", "--print-value-only"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert got.stdout.strip() == "v1"


async def adev(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(dev, *args)


@pytest.fixture
def config(tmp_path: Path) -> StackConfig:
    return free_ports_config(tmp_path / "home")


@pytest.fixture
def cleanup(config: StackConfig) -> object:
    yield None
    # Whatever a test did, leave nothing running.
    dev("down", "--home", str(config.home), "--grace", "2")


async def test_up_serves_every_part_down_stops_them_and_history_survives(
    config: StackConfig, cleanup: object, task_queue: str
) -> None:
    started = time.monotonic()
    up = await adev("up", *port_args(config))
    up_seconds = time.monotonic() - started
    assert up.returncode == 0, up.stderr
    ui_url = f"http://127.0.0.1:{config.ui_port}"
    assert ui_url in up.stdout
    assert up_seconds < 20, f"dev up took {up_seconds:.1f}s"

    await asyncio.to_thread(check_every_part_answers, config)

    # A workflow whose history must outlive a restart
    settings = Settings(temporal_address=f"127.0.0.1:{config.temporal_port}")
    client = await connect(settings, tracing=False)
    workflow_id = f"survives-restart-{uuid.uuid4()}"
    async with build_worker(client, task_queue, workflows=[DoubleWorkflow], activities=[double]):
        assert (
            await client.execute_workflow(DoubleWorkflow.run, 21, id=workflow_id, task_queue=task_queue) == 42
        )

    # status says healthy
    status = await adev("status", "--home", str(config.home))
    assert status.returncode == 0, status.stdout

    # down: every process gone, every port free
    before = pids(config.home)
    assert set(before) == {"temporal", "s3", "etcd"}
    down = await adev("down", "--home", str(config.home))
    assert down.returncode == 0, down.stderr
    assert "temporal" in down.stdout and "s3" in down.stdout and "etcd" in down.stdout
    assert [pid for pid in before.values() if alive(pid)] == []
    assert pids(config.home) == {}
    assert processes_mentioning(str(config.home)) == []
    assert port_free("127.0.0.1", config.temporal_port)
    assert (await adev("status", "--home", str(config.home))).returncode == 1

    # up again (ports remembered in the home): the earlier run is still there, completed
    again = await adev("up", "--home", str(config.home))
    assert again.returncode == 0, again.stderr
    client = await connect(settings, tracing=False)
    handle = client.get_workflow_handle(workflow_id)
    description = await handle.describe()
    assert description.status == WorkflowExecutionStatus.COMPLETED
    assert await handle.result() == 42
    history = await handle.fetch_history()
    assert len(history.events) > 3


def test_up_twice_is_a_noop_reporting_running_parts(config: StackConfig, cleanup: object) -> None:
    first = dev("up", *port_args(config), "--parts", "s3")
    assert first.returncode == 0, first.stderr
    pid = pids(config.home)["s3"]
    second = dev("up", *port_args(config), "--parts", "s3")
    assert second.returncode == 0, second.stderr
    assert pids(config.home) == {"s3": pid}
    assert str(pid) in second.stdout
    # Large payloads of every process of this home go to one directory in it.
    store = f"payload store: dir:{config.home.resolve() / 'payloads'}"
    assert store in first.stdout and store in second.stdout


def test_port_in_use_is_refused_and_nothing_starts(config: StackConfig, cleanup: object) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", config.temporal_port))
        squatter.listen()
        result = dev("up", *port_args(config))
    assert result.returncode == 1
    message = (
        f"port {config.temporal_port} (temporal) is already in use by another process; "
        "set PITSTOP_TEMPORAL_PORT or stop it"
    )
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert pids(config.home) == {} if (config.home / "run").exists() else True
    assert processes_mentioning(str(config.home)) == []


def test_status_of_a_stopped_stack_exits_1(config: StackConfig) -> None:
    result = dev("status", "--home", str(config.home))
    assert result.returncode == 1
    assert "temporal" in result.stdout


def test_pitstop_cli_mounts_dev() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pitstop.cli", "dev", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stderr
    for command in ("up", "down", "status"):
        assert command in result.stdout
