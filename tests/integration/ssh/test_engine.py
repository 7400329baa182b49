"""SSH modules through the real engine (RunbookWorkflow on the embedded Temporal, worker
in-process): check-mode semantics, registered results, and Temporal's retry of a command
whose connection dropped mid-way."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

from pitstop.contracts import HostResult, RunReport
from tests.integration.engine.conftest import RunFn
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


async def test_dropped_connection_is_retried_by_temporal_for_a_guarded_command(
    lab: SshLab, run: RunFn
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
              creates: {done}
        """,
        _inventory(lab),
    )
    killer.join(timeout=30)
    assert report.status == "succeeded", report.msg
    assert [t.status for t in _host(report).tasks] == ["changed"]
    assert log.read_text() == "attempt\nattempt\n"
    assert done.exists()
