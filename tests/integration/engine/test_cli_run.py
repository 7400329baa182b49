"""The `pitstop` CLI against the real dev server, run as a subprocess like an operator would."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.client import Client

from pitstop.settings import Settings

PITSTOP = Path(sys.executable).parent / "pitstop"

RUNBOOK = """\
name: cli-gated
approvers:
  sre: [alice, bob]
stages:
  - name: canary
    hosts: gpu
    gate: {before: true, approvers: sre, four_eyes: true}
    tasks:
      - name: step
        test.step: {value: "{{ inventory_hostname }}"}
"""
INVENTORY = """\
all:
  children:
    gpu:
      hosts:
        h00: {}
        h01: {}
"""


def pitstop_sync(settings: Settings, queue: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "PITSTOP_TASK_QUEUE": queue,
        # The CLI validates locally, so it must know the test-only modules the worker serves.
        "PITSTOP_MODULES": "tests.testmodules",
        "PYTHONPATH": str(Path(__file__).resolve().parents[3]),
        "COLUMNS": "200",
    }
    return subprocess.run([str(PITSTOP), *args], capture_output=True, text=True, env=env, timeout=120)


async def pitstop(settings: Settings, queue: str, *args: str) -> subprocess.CompletedProcess[str]:
    # In a thread: the in-process worker shares this event loop and must keep running.
    return await asyncio.to_thread(pitstop_sync, settings, queue, *args)


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    runbook, inventory = tmp_path / "runbook.yaml", tmp_path / "inventory.yaml"
    runbook.write_text(RUNBOOK)
    inventory.write_text(INVENTORY)
    return runbook, inventory


async def wait_status(settings: Settings, queue: str, run_id: str, wanted: str) -> dict[str, object]:
    for _ in range(100):
        out = await pitstop(settings, queue, "status", run_id, "--json")
        if out.returncode == 0:
            status: dict[str, object] = json.loads(out.stdout)
            if status["status"] == wanted:
                return status
        await asyncio.sleep(0.3)
    raise AssertionError(f"{run_id} never reached {wanted}: {out.stdout} {out.stderr}")


async def test_run_then_votes_from_the_cli_with_refusals_named(
    temporal_settings: Settings, engine_worker: str, files: tuple[Path, Path]
) -> None:
    runbook, inventory = files
    started = await pitstop(
        temporal_settings,
        engine_worker,
        "run",
        str(runbook),
        "-i",
        str(inventory),
        "--id",
        "cli-run-1",
        "--as",
        "alice",
    )
    assert started.returncode == 0, started.stderr
    assert "started cli-run-1" in started.stdout
    await wait_status(temporal_settings, engine_worker, "cli-run-1", "waiting_gate")
    # `status --watch` follows the run until it ends, whoever ends it.
    watch = asyncio.ensure_future(pitstop(temporal_settings, engine_worker, "status", "cli-run-1", "--watch"))

    own = await pitstop(temporal_settings, engine_worker, "approve", "cli-run-1", "--as", "alice")
    assert own.returncode == 1
    assert "four-eyes: 'alice' requested this run" in own.stderr
    stranger = await pitstop(temporal_settings, engine_worker, "approve", "cli-run-1", "--as", "mallory")
    assert stranger.returncode == 1
    assert "'mallory' is not an approver for gate 'canary:before' (allowed: alice, bob)" in stranger.stderr

    assert not watch.done(), "the watcher must still be following a run that waits at its gate"
    ok = await pitstop(temporal_settings, engine_worker, "approve", "cli-run-1", "--as", "bob", "-m", "fine")
    assert ok.returncode == 0, ok.stderr
    watched = await asyncio.wait_for(watch, timeout=120)
    assert watched.returncode == 0, watched.stderr
    assert "succeeded" in watched.stdout and "h01" in watched.stdout  # the final report, every host
    final = await wait_status(temporal_settings, engine_worker, "cli-run-1", "succeeded")
    gates = final["gates"]
    assert isinstance(gates, list)
    refused = {v["approver"] for v in gates[0]["refused"]}
    assert refused == {"alice", "mallory"}
    assert [v["approver"] for v in gates[0]["votes"]] == ["bob"]


async def test_apply_of_a_plan_is_refused_when_the_runbook_changed(
    temporal_settings: Settings, engine_worker: str, files: tuple[Path, Path], temporal_client: Client
) -> None:
    runbook, inventory = files
    runbook.write_text(RUNBOOK.replace("    gate: {before: true, approvers: sre, four_eyes: true}\n", ""))
    planned = await pitstop(temporal_settings, engine_worker, "plan", str(runbook), "-i", str(inventory))
    assert planned.returncode == 0, planned.stdout + planned.stderr
    plan_id = planned.stdout.split("started ")[1].split()[0]
    assert "would step" not in planned.stderr
    runbook.write_text(runbook.read_text().replace("name: step", "name: step changed"))
    applied = await pitstop(
        temporal_settings,
        engine_worker,
        "run",
        str(runbook),
        "-i",
        str(inventory),
        "--plan",
        plan_id,
        "--wait",
    )
    assert applied.returncode == 1
    assert "refusing to apply plan" in applied.stdout + applied.stderr
    assert "runbook changed since it was planned" in applied.stdout + applied.stderr


async def test_invalid_runbook_is_refused_before_anything_starts(
    temporal_settings: Settings, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nhosts: all\ntasks:\n  - debgu: hi\n")
    out = await pitstop(temporal_settings, "unused", "run", str(bad))
    assert out.returncode == 1
    assert "bad.yaml:4:5: unknown task keyword or module 'debgu' (did you mean 'debug'?)" in " ".join(
        out.stderr.split()
    )
    assert "Traceback" not in out.stderr


async def test_unreachable_temporal_is_a_clear_error(tmp_path: Path) -> None:
    out = await pitstop(Settings(temporal_address="127.0.0.1:1"), "q", "status", "some-run")
    assert out.returncode == 1
    assert "cannot reach Temporal at 127.0.0.1:1 (is `pitstop dev up` running?)" in " ".join(
        out.stderr.split()
    )
