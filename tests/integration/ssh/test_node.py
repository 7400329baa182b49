"""ssh.facts, ssh.firmware_update and ssh.reboot on real sshd nodes (the fake GPU node's
updater, reboot and nvidia-smi are scripts on its PATH; see lab.py)."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from activities.ssh import ssh_facts, ssh_firmware_update, ssh_reboot
from pitstop.contracts import ModuleResult
from pitstop.ssh import close_all
from pitstop.ssh.protocol import FirmwareFiles
from tests.integration.ssh.lab import FakeNode, SshLab


def _firmware(lab: SshLab, node: FakeNode, target: str, **kw: Any) -> Any:
    args = {"target": target, "image": str(node.image(target)), "state_dir": node.state_dir}
    return lab.call("ssh.firmware_update", args, server=node.server, **kw)


def _reboot(lab: SshLab, node: FakeNode) -> ModuleResult:
    args = {
        "reboot_command": node.reboot_command,
        "boot_time_command": node.boot_id_command,
        "reboot_timeout": 60,
        "poll_interval": 0.2,
    }
    return lab.run(ssh_reboot, lab.call("ssh.reboot", args, server=node.server))


def test_facts_of_a_host_without_gpus(lab: SshLab) -> None:
    facts = lab.run(ssh_facts, lab.call("ssh.facts", {})).data
    assert facts["kernel"] == os.uname().release
    assert facts["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert facts["hostname"] == os.uname().nodename
    assert facts["os"]["id"] and facts["os"]["id"] in Path("/etc/os-release").read_text()
    assert facts["gpus"] == [] and facts["gpu_driver"] is None
    assert "nvidia-smi" in facts["nvidia_smi_error"]
    assert facts["firmware"] is None


def test_facts_parse_nvidia_smi_and_the_firmware_tool(lab: SshLab, fake_node: FakeNode) -> None:
    result = lab.run(ssh_facts, lab.call("ssh.facts", {}, server=fake_node.server))
    facts = result.data
    assert facts["gpu_count"] == 2
    assert facts["gpus"][1] == {
        "index": 1,
        "name": "NVIDIA H100 80GB HBM3",
        "driver_version": "550.54.15",
        "vbios_version": "96.00.89.00.01",
        "memory_total_mib": 81559,
    }
    assert facts["gpu_driver"] == "550.54.15"
    assert (facts["firmware"], facts["firmware_pending"]) == ("1.0", None)
    assert "2 GPU(s), driver 550.54.15, firmware 1.0" in result.msg


def test_firmware_flow_flashes_once_and_activates_only_after_reboot(lab: SshLab, fake_node: FakeNode) -> None:
    fake_node.set_flash_seconds(0.5)
    flashed = lab.run(ssh_firmware_update, _firmware(lab, fake_node, "2.0"))
    assert flashed.changed and flashed.data["reboot_required"] is True
    assert (flashed.data["previous"], flashed.data["current"], flashed.data["pending"]) == (
        "1.0",
        "1.0",
        "2.0",
    )
    assert "staged 2.0" in (flashed.stdout or "")
    assert len(fake_node.flashes()) == 1 and fake_node.flashes()[0].startswith("2.0 ")
    assert lab.heartbeats, "the wait for the updater heartbeats"

    # Another run before the reboot: nothing to flash, the reboot is still needed.
    again = lab.run(ssh_firmware_update, _firmware(lab, fake_node, "2.0", run_id="run-2"))
    assert not again.changed and again.data["reboot_required"] is True
    assert len(fake_node.flashes()) == 1
    # Read-only: retried as a worker would if the pooled connection was lost before it started.
    facts = lab.run_retried(ssh_facts, lab.call("ssh.facts", {}, server=fake_node.server)).data
    assert (facts["firmware"], facts["firmware_pending"]) == ("1.0", "2.0")

    before = fake_node.boot_id()
    rebooted = _reboot(lab, fake_node)
    assert rebooted.changed
    assert rebooted.data["boot_id_before"] == before
    assert rebooted.data["boot_id_after"] == fake_node.boot_id() != before
    assert rebooted.data["went_away"] is True

    after = lab.run(ssh_firmware_update, _firmware(lab, fake_node, "2.0", run_id="run-3"))
    assert not after.changed and after.data["reboot_required"] is False
    assert after.data["current"] == "2.0" and len(fake_node.flashes()) == 1
    # Once the target is active, pitstop's files for it are cleaned up.
    assert not Path(FirmwareFiles(fake_node.state_dir, "2.0").marker).exists()


def test_firmware_in_check_mode_says_what_it_would_do_and_flashes_nothing(
    lab: SshLab, fake_node: FakeNode
) -> None:
    result = lab.run(ssh_firmware_update, _firmware(lab, fake_node, "2.0", check_mode=True))
    assert result.changed and "would flash 2.0 (current 1.0)" in result.msg
    assert fake_node.flashes() == [] and fake_node.pending() is None


def test_firmware_retry_after_a_crash_mid_flash_waits_instead_of_flashing_again(
    lab: SshLab, fake_node: FakeNode
) -> None:
    fake_node.set_flash_seconds(2.0)
    call = _firmware(lab, fake_node, "3.0")
    first: list[ModuleResult | BaseException] = []

    def attempt() -> None:
        try:
            first.append(lab.run(ssh_firmware_update, call))
        except BaseException as exc:
            first.append(exc)

    thread = threading.Thread(target=attempt)
    thread.start()
    deadline = time.monotonic() + 10
    while not fake_node.flashes():
        assert time.monotonic() < deadline, "the flash never started"
        time.sleep(0.05)
    # The worker's connections die (as when the worker process is killed).
    close_all()
    thread.join(timeout=30)
    assert isinstance(first[0], ApplicationError) and not first[0].non_retryable

    # Temporal's retry of the same activity: same run and task.
    retried = lab.run(ssh_firmware_update, call)
    assert retried.changed and retried.data["pending"] == "3.0"
    assert "in_progress" in retried.data["steps"]
    assert len(fake_node.flashes()) == 1


def test_interrupted_flash_is_never_repeated_automatically(lab: SshLab, fake_node: FakeNode) -> None:
    files = FirmwareFiles(fake_node.state_dir, "2.0")
    Path(files.marker).parent.mkdir(parents=True)
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    # A marker from this boot whose updater is gone and left no exit status.
    Path(files.marker).write_text(f"pid=999999999 boot={boot} run=old task=t target=2.0\n")
    with pytest.raises(ApplicationError) as err:
        lab.run(ssh_firmware_update, _firmware(lab, fake_node, "2.0"))
    assert err.value.type == "PreconditionFailed" and err.value.non_retryable
    assert f"remove {files.marker}" in str(err.value)
    assert fake_node.flashes() == []


def test_failed_flash_reports_the_updater_output_and_allows_a_later_attempt(
    lab: SshLab, fake_node: FakeNode
) -> None:
    fake_node.set_flash_fails(True)
    with pytest.raises(ApplicationError) as err:
        lab.run(ssh_firmware_update, _firmware(lab, fake_node, "2.0"))
    assert err.value.type == "FirmwareUpdateFailed" and err.value.non_retryable
    assert "rc 3" in str(err.value) and "flash failed: device busy" in str(err.value)
    fake_node.set_flash_fails(False)
    result = lab.run(ssh_firmware_update, _firmware(lab, fake_node, "2.0", run_id="run-2"))
    assert result.changed and fake_node.pending() == "2.0"
    assert len(fake_node.flashes()) == 2


def test_missing_updater_is_a_precondition_naming_the_tool(lab: SshLab, fake_node: FakeNode) -> None:
    call = _firmware(lab, fake_node, "2.0")
    call.args["updater"] = "no-such-fwtool"
    with pytest.raises(ApplicationError) as err:
        lab.run(ssh_firmware_update, call)
    assert err.value.type == "PreconditionFailed"
    assert "'no-such-fwtool' not found" in str(err.value)


def test_reboot_retry_resumes_waiting_instead_of_rebooting_again(lab: SshLab, fake_node: FakeNode) -> None:
    from temporalio.testing import ActivityEnvironment

    before = fake_node.boot_id()
    args = {
        "reboot_command": "false",  # a second reboot would fail the test
        "boot_time_command": fake_node.boot_id_command,
        "reboot_timeout": 1.5,
        "poll_interval": 0.2,
    }
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_details=[{"boot_id_before": before}])
    with pytest.raises(ApplicationError) as err:
        env.run(ssh_reboot, lab.call("ssh.reboot", args, server=fake_node.server))
    # It only waited: the node never rebooted, so the wait times out with that reason.
    assert err.value.type == "RebootTimeout" and err.value.non_retryable
    assert "did not come back with a new boot id within 1.5s (went away: no" in str(err.value)
    assert fake_node.boot_id() == before
