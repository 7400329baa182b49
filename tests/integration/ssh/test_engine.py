"""SSH modules through the real engine (RunbookWorkflow on the embedded Temporal, worker
in-process): check-mode semantics, registered results, and Temporal's retry of a command
whose connection dropped mid-way."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from collections import Counter
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from pitstop.contracts import HostResult, RunReport
from tests.integration.engine.conftest import RunFn, StartFn
from tests.integration.ssh.lab import KEY_SECRET, SshLab
from tests.sshd import descendants, process_alive


def _inventory(lab: SshLab) -> str:
    return f"""
    cluster:
      name: lab
      ssh:
        user: root
        key: {{secret: {KEY_SECRET}}}
    all:
      children:
        nodes:
          hosts:
            node-a: {{ansible_host: 127.0.0.1, ansible_port: {lab.node.port}}}
    """


def _host(report: RunReport) -> HostResult:
    return report.stages[0].hosts[0]


async def test_check_mode_skips_commands_but_runs_tasks_marked_check_mode_false(
    lab: SshLab, run: RunFn
) -> None:
    scratch = lab.base / f"engine-{uuid.uuid4().hex[:8]}"
    scratch.mkdir()
    report = await run(
        f"""
        name: ssh-check
        hosts: nodes
        tasks:
          - name: kernel
            ssh.command: uname -r
            check_mode: false
            register: kernel
          - name: change
            ssh.command: touch {scratch}/touched
          - name: facts
            ssh.facts: {{}}
            register: facts
          - assert:
              that: ["facts.boot_id | length == 36", "kernel.stdout | trim == facts.kernel"]
        """,
        _inventory(lab),
        check_mode=True,
    )
    assert report.status == "succeeded", report.msg
    statuses = {t.name: t.status for t in _host(report).tasks}
    assert statuses["kernel"] == "changed"
    assert statuses["change"] == "skipped"
    assert statuses["facts"] == "ok"
    assert _host(report).registered["kernel"]["stdout"] == os.uname().release + "\n"
    assert not (scratch / "touched").exists()


@pytest.mark.parametrize(
    "guard",
    [
        pytest.param("creates: {done}", id="creates-regular-activity"),
        pytest.param("retry_on_disconnect: true", id="declared-safe-local-activity"),
    ],
)
async def test_dropped_connection_is_retried_by_temporal_for_a_guarded_command(
    lab: SshLab, run: RunFn, guard: str
) -> None:
    scratch = lab.base / f"engine-{uuid.uuid4().hex[:8]}"
    scratch.mkdir()
    pids, log, done = scratch / "pids", scratch / "log", scratch / "done"
    # The first attempt records its sshd session and hangs; later attempts finish at once.
    cmd = (
        f"echo attempt >> {log}; if [ ! -e {scratch}/first ]; then touch {scratch}/first; "
        f"echo $PPID $$ > {pids}; sleep 30; fi; touch {done}"
    )

    def drop_the_connection() -> None:
        deadline = time.monotonic() + 30
        while not (pids.exists() and pids.read_text().strip()):
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)
        session, shell = (int(p) for p in pids.read_text().split())
        for pid in [session, shell, *descendants(shell)]:
            if process_alive(pid):
                os.kill(pid, signal.SIGKILL)

    killer = threading.Thread(target=drop_the_connection)
    killer.start()
    report = await run(
        f"""
        name: ssh-drop
        hosts: nodes
        tasks:
          - name: guarded
            ssh.command:
              cmd: "{cmd}"
              {guard.format(done=done)}
        """,
        _inventory(lab),
    )
    killer.join(timeout=30)
    assert report.status == "succeeded", report.msg
    assert [t.status for t in _host(report).tasks] == ["changed"]
    assert log.read_text() == "attempt\nattempt\n"
    assert done.exists()


async def _host_history_kinds(client: Client, handle: WorkflowHandle[Any, RunReport]) -> Counter[str]:
    """Kinds of activity work in the host workflows' histories: `local` (a marker per local
    activity), `scheduled` (a regular activity), with the activity's name."""
    kinds: Counter[str] = Counter()
    async for event in handle.fetch_history_events():
        if event.HasField("child_workflow_execution_started_event_attributes"):
            child = event.child_workflow_execution_started_event_attributes.workflow_execution
            async for e in client.get_workflow_handle(
                child.workflow_id, run_id=child.run_id
            ).fetch_history_events():
                if e.HasField("marker_recorded_event_attributes"):
                    # Temporal's local-activity marker names the activity in its `data` detail.
                    data = e.marker_recorded_event_attributes.details["data"].payloads[0].data
                    kinds[f"local {json.loads(data)['activity_type']}"] += 1
                elif e.HasField("activity_task_scheduled_event_attributes"):
                    kinds[f"scheduled {e.activity_task_scheduled_event_attributes.activity_type.name}"] += 1
    return kinds


async def test_only_tasks_that_are_safe_to_run_twice_run_as_local_activities(
    lab: SshLab, start_run: StartFn, temporal_client: Client
) -> None:
    scratch = lab.base / f"engine-{uuid.uuid4().hex[:8]}"
    scratch.mkdir()
    handle = await start_run(
        f"""
        name: ssh-local
        hosts: nodes
        tasks:
          - name: read-only
            ssh.command: uname -r
            changed_when: false
            register: kernel
          - name: declared-safe
            ssh.command: {{cmd: "mkdir -p {scratch}/safe", retry_on_disconnect: true}}
          - name: facts
            ssh.facts: {{}}
            register: facts
          - name: plain
            ssh.command: "echo once >> {scratch}/log"
          - name: guarded
            ssh.command: {{cmd: "touch {scratch}/done", creates: "{scratch}/done"}}
          - assert:
              that: ["kernel.stdout | trim == facts.kernel"]
        """,
        _inventory(lab),
    )
    report = await handle.result()
    assert report.status == "succeeded", report.msg
    assert [(t.name, t.status) for t in _host(report).tasks] == [
        ("read-only", "ok"),
        ("declared-safe", "changed"),
        ("facts", "ok"),
        ("plain", "changed"),
        ("guarded", "changed"),
        ("assert", "ok"),
    ]
    kinds = await _host_history_kinds(temporal_client, handle)
    # Three local calls (the read-only command, the declared one, the facts), one marker each;
    # the plain command and the guarded one are regular activities, as before.
    assert kinds["local module.ssh.command"] == 2 and kinds["local module.ssh.facts"] == 1, kinds
    assert kinds["scheduled module.ssh.command"] == 2 and kinds["scheduled module.ssh.facts"] == 0, kinds
    assert (scratch / "log").read_text() == "once\n" and (scratch / "safe").is_dir()
