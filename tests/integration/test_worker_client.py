"""The client factory and the worker against the real Temporal dev server."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType

# The sandbox re-imports this module to run the workflow; everything but the workflow
# itself is passed through so it is not re-executed (and not checked for determinism).
with workflow.unsafe.imports_passed_through():
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from pydantic import BaseModel
    from temporalio.client import Client

    from pitstop import worker_app
    from pitstop.client import PitstopConnectionError, connect
    from pitstop.devstack import free_port
    from pitstop.settings import Settings
    from pitstop.telemetry import setup_tracing


def repo_root() -> Path:
    # A function, not a module constant: the workflow sandbox forbids Path.resolve at import.
    return Path(__file__).resolve().parents[2]


class Greeting(BaseModel):
    name: str
    shouted: bool = False


@activity.defn
def shout(greeting: Greeting) -> Greeting:
    # A plain `def`: runs on the worker's thread pool, as pitstop's blocking activities do.
    return Greeting(name=greeting.name.upper(), shouted=True)


@workflow.defn
class GreetWorkflow:
    @workflow.run
    async def run(self, greeting: Greeting) -> Greeting:
        return await workflow.execute_activity(shout, greeting, start_to_close_timeout=timedelta(seconds=30))


class SlowJob(BaseModel):
    started_marker: str
    seconds: float


@activity.defn
def slow(job: SlowJob) -> str:
    Path(job.started_marker).write_text("started")
    time.sleep(job.seconds)
    return "finished"


@workflow.defn
class SlowWorkflow:
    @workflow.run
    async def run(self, job: SlowJob) -> str:
        return await workflow.execute_activity(slow, job, start_to_close_timeout=timedelta(seconds=60))


async def test_workflow_and_activity_run_through_build_worker_with_spans(
    temporal_client: Client, task_queue: str
) -> None:
    spans = InMemorySpanExporter()
    setup_tracing("pitstop-tests", environ={}, extra_exporters=[spans])

    async with worker_app.build_worker(
        temporal_client, task_queue, workflows=[GreetWorkflow], activities=[shout]
    ):
        result = await temporal_client.execute_workflow(
            GreetWorkflow.run,
            Greeting(name="pitstop"),
            id=f"greet-{uuid.uuid4()}",
            task_queue=task_queue,
            execution_timeout=timedelta(seconds=60),
        )

    # The pydantic converter returns the model itself, not a dict.
    assert result == Greeting(name="PITSTOP", shouted=True)
    names = {span.name for span in spans.get_finished_spans()}
    assert "StartWorkflow:GreetWorkflow" in names
    assert "RunWorkflow:GreetWorkflow" in names
    assert "StartActivity:shout" in names
    assert "RunActivity:shout" in names
    # One tracing interceptor, not two (client interceptors also apply to the worker).
    run_spans = [s for s in spans.get_finished_spans() if s.name == "RunActivity:shout"]
    assert len(run_spans) == 1


async def test_connect_to_unreachable_address_says_what_to_do() -> None:
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(PitstopConnectionError) as caught:
        await connect(Settings(temporal_address=address))
    assert f"cannot reach Temporal at {address} (is `pitstop dev up` running?)" in str(caught.value)


async def test_build_worker_with_nothing_to_serve_is_a_clear_error(
    temporal_client: Client, task_queue: str
) -> None:
    with pytest.raises(worker_app.EmptyRegistryError, match="no workflows or activities are registered"):
        worker_app.build_worker(temporal_client, task_queue, workflows=[], activities=[])


def test_worker_process_with_empty_registries_exits_with_message() -> None:
    # Empty the registries explicitly: the real ones fill up as the project grows.
    code = (
        "import workflows, activities, typer, worker\n"
        "workflows.WORKFLOWS.clear(); activities.ACTIVITIES.clear()\n"
        "typer.run(worker.main)\n"
    )
    env = {**os.environ, "TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}"}
    result = subprocess.run(
        [sys.executable, "-c", code, "--task-queue", "nothing"],
        cwd=repo_root(),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "no workflows or activities are registered" in result.stderr
    assert "Traceback" not in result.stderr


def test_worker_script_help_names_the_task_queue_option() -> None:
    result = subprocess.run(
        [sys.executable, "worker.py", "--help"],
        cwd=repo_root(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "--task-queue" in result.stdout


async def test_sigterm_lets_the_running_activity_finish(
    temporal_settings: Settings, temporal_client: Client, task_queue: str, tmp_path: Path
) -> None:
    # The real `python worker.py` entry point, with this module's workflow registered.
    code = (
        "import sys; sys.path.insert(0, sys.argv.pop(1))\n"
        "import typer, workflows, activities, worker, test_worker_client as t\n"
        "workflows.WORKFLOWS[:] = [t.SlowWorkflow]; activities.ACTIVITIES[:] = [t.slow]\n"
        "typer.run(worker.main)\n"
    )
    env = {**os.environ, "TEMPORAL_ADDRESS": temporal_settings.temporal_address}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        str(Path(__file__).parent),
        "--task-queue",
        task_queue,
        "--grace-seconds",
        "20",
        cwd=repo_root(),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        marker = tmp_path / "started"
        handle = await temporal_client.start_workflow(
            SlowWorkflow.run,
            SlowJob(started_marker=str(marker), seconds=2.0),
            id=f"slow-{uuid.uuid4()}",
            task_queue=task_queue,
        )
        # A loaded machine can take a while to import the worker; wait on the marker itself
        # (written by another process: there is no event to await).
        deadline = asyncio.get_running_loop().time() + 120
        while not marker.exists() and asyncio.get_running_loop().time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        assert marker.exists(), "the activity never started"

        process.send_signal(signal.SIGTERM)
        _, raw_stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    stderr = raw_stderr.decode(errors="replace")

    assert process.returncode == 0, stderr
    assert "worker stopped" in stderr
    history = await handle.fetch_history()
    completed = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED]
    assert len(completed) == 1, "the in-flight activity should have finished during the grace period"


def test_settings_read_temporal_variables() -> None:
    settings = Settings.from_env(
        {
            "TEMPORAL_ADDRESS": "temporal.example:7233",
            "TEMPORAL_NAMESPACE": "gpu-prod",
            "TEMPORAL_API_KEY": "k-123",
            "TEMPORAL_TLS": "true",
            "PITSTOP_TASK_QUEUE": "cluster-a",
        }
    )
    assert settings.temporal_address == "temporal.example:7233"
    assert settings.temporal_namespace == "gpu-prod"
    assert settings.task_queue == "cluster-a"
    assert settings.tls_enabled
    assert "k-123" not in repr(settings)  # the key never lands in a log line
    assert Settings.from_env({}) == Settings()
    assert not Settings().tls_enabled


def test_tracing_exporters_follow_otel_variables() -> None:
    from pitstop.telemetry import TelemetryConfigError, exporter_names

    assert exporter_names({}) == []
    assert exporter_names({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}) == ["otlp"]
    assert exporter_names({"OTEL_TRACES_EXPORTER": "console,otlp"}) == ["console", "otlp"]
    assert exporter_names({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "x"}) == []
    with pytest.raises(TelemetryConfigError):
        exporter_names({"OTEL_TRACES_EXPORTER": "zipkin"})
