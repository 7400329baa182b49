"""pitstop's SSH modules against the rehearsal cluster's nodes: each node has its own host key
in the generated known_hosts, answers from its simulator profile, and a firmware flash
shows only after the node reboots (Kubernetes node NotReady, then Ready)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from activities.ssh import ssh_command, ssh_copy, ssh_facts, ssh_firmware_update, ssh_reboot, ssh_script
from pitstop.contracts import ModuleResult
from pitstop.ssh.protocol import FirmwareFiles
from pitstop_sim import ScenarioError, parse_scenario
from pitstop_sim.ssh import SshDrop, SshNodeFaults
from pitstop_sim.ssh.keys import new_key, public_line
from tests.integration.sim_ssh.conftest import NODE, OTHER, SCENARIO, SimNodes

NEW_FIRMWARE = "97.00.01.00.01"
FIRMWARE_LABEL = "pitstop.dev/firmware-version"


def _node(nodes: SimNodes, name: str) -> dict[str, Any]:
    node = nodes.sim.get("nodes", name)
    assert node is not None
    return node


def _label(nodes: SimNodes, name: str, label: str) -> str:
    return str(_node(nodes, name)["metadata"]["labels"][label])


def _node_info(nodes: SimNodes, name: str) -> dict[str, str]:
    return _node(nodes, name)["status"]["nodeInfo"]


def _flash(nodes: SimNodes, *, run_id: str = "run-1") -> ModuleResult:
    args = {"target": NEW_FIRMWARE, "image": str(nodes.firmware_image(NEW_FIRMWARE))}
    return nodes.run(ssh_firmware_update, nodes.call("ssh.firmware_update", args, run_id=run_id))


def _facts(nodes: SimNodes, host: str = NODE) -> dict[str, Any]:
    return nodes.run(ssh_facts, nodes.call("ssh.facts", {}, host=host)).data


def test_each_node_has_its_own_host_key_and_reports_its_own_profile(nodes: SimNodes) -> None:
    lines = nodes.sim.known_hosts_path.read_text().splitlines()
    ports = {name: nodes.inventory.hostvars(name)["ansible_port"] for name in (NODE, OTHER)}
    assert sorted(line.split()[0] for line in lines) == sorted(f"[127.0.0.1]:{p}" for p in ports.values())
    assert len({line.split()[2] for line in lines}) == 2, "two nodes, two host keys"
    assert nodes.inventory.hostvars(OTHER)["failure_domain"] == "zone-b"

    for name in (NODE, OTHER):
        facts = _facts(nodes, name)
        info = _node_info(nodes, name)
        assert facts["hostname"] == name
        assert (facts["kernel"], facts["boot_id"]) == (info["kernelVersion"], info["bootID"])
        assert facts["os"] == {"id": "ubuntu", "version_id": "22.04", "pretty_name": info["osImage"]}
        assert facts["gpu_count"] == int(_label(nodes, name, "nvidia.com/gpu.count")) == 4
        assert facts["gpu_driver"] == _label(nodes, name, "pitstop.dev/driver-version")
        assert facts["firmware"] == _label(nodes, name, FIRMWARE_LABEL)
        gpus = facts["gpus"]
        assert isinstance(gpus, list)
        assert {g["vbios_version"] for g in gpus} == {facts["firmware"]}
        assert gpus[0]["name"] == _label(nodes, name, "nvidia.com/gpu.product").replace("-", " ")
    assert _facts(nodes, OTHER)["gpus"][0]["memory_total_mib"] == 40960


def test_a_changed_host_key_is_refused_naming_the_fingerprint_offered(nodes: SimNodes) -> None:
    port = nodes.sim.ssh_port(NODE)
    impostor, _ = new_key()
    tampered = nodes.sim.ssh_files.directory / "known_hosts.tampered"
    ours = f"[127.0.0.1]:{port} "
    lines = nodes.sim.known_hosts_path.read_text().splitlines()
    tampered.write_text(
        "".join(f"{ours}{public_line(impostor)}\n" if x.startswith(ours) else f"{x}\n" for x in lines)
    )
    with pytest.raises(ApplicationError) as refused:
        nodes.run(ssh_facts, nodes.call("ssh.facts", {}, known_hosts=tampered))
    assert refused.value.type == "HostKeyMismatch" and refused.value.non_retryable
    assert "CHANGED" in refused.value.message
    assert nodes.sim.ssh_info(NODE).host_key_fingerprint in refused.value.message
    # The other node's entry is intact: it is still trusted.
    assert _facts(nodes, OTHER)["hostname"] == OTHER
    assert nodes.sim.ssh_info(NODE).commands == 0, "nothing ran on the node with the unverified key"


def test_commands_answer_like_a_shell_with_become_timeout_and_unknown_commands(nodes: SimNodes) -> None:
    def command(cmd: str, **args: object) -> ModuleResult:
        return nodes.run(ssh_command, nodes.call("ssh.command", {"cmd": cmd, **args}))

    kernel = command("uname -r")
    assert (kernel.rc, kernel.stdout) == (0, _node_info(nodes, NODE)["kernelVersion"] + "\n")
    assert command("whoami").stdout == "ops\n"
    assert command("whoami", become=True).stdout == "root\n"
    missing = command("dcgmi-frobnicate --all")
    assert (missing.rc, missing.stderr, missing.failed) == (127, "sh: 1: dcgmi-frobnicate: not found\n", True)
    slow = command("sleep 30", timeout=0.5)
    assert slow.rc == 124 and slow.data["timed_out"] is True
    assert "sleep 30" not in " ".join(nodes.sim.ssh_info(NODE).running), "the timed-out command is gone"

    marker = "/var/lib/pitstop-done"
    first = command(f"echo done > {marker}", creates=marker)
    again = command(f"echo done > {marker}", creates=marker)
    assert first.changed and not again.changed and "exists" in again.msg


def test_copy_and_script_use_sftp_on_the_nodes_file_system(nodes: SimNodes) -> None:
    args = {"dest": "/etc/pitstop.conf", "content": "mode = maintenance\n", "mode": "0640"}
    copied = nodes.run(ssh_copy, nodes.call("ssh.copy", args))
    unchanged = nodes.run(ssh_copy, nodes.call("ssh.copy", args))
    assert copied.changed and not unchanged.changed
    assert nodes.sim.ssh_endpoints.host(NODE).fs.read("/etc/pitstop.conf") == b"mode = maintenance\n"
    assert copied.data["mode"] == "0640"

    script = "#!/bin/sh\ncat /etc/pitstop.conf\nhostname\n"
    result = nodes.run(ssh_script, nodes.call("ssh.script", {"content": script}))
    assert (result.rc, result.stdout) == (0, f"mode = maintenance\n{NODE}\n")
    assert nodes.sim.ssh_endpoints.host(NODE).fs.listdir("/tmp") == [], "the script's directory is removed"


def test_firmware_flow_changes_the_version_only_after_reboot(nodes: SimNodes) -> None:
    old = _label(nodes, NODE, FIRMWARE_LABEL)
    flashed = _flash(nodes)
    assert flashed.changed and flashed.data["reboot_required"] is True
    assert (flashed.data["current"], flashed.data["pending"]) == (old, NEW_FIRMWARE)
    assert "staged 97.00.01.00.01; active after reboot" in (flashed.stdout or "")
    assert nodes.heartbeats, "the wait for the updater heartbeats"

    # Flashed, not active: the tool, nvidia-smi and the Kubernetes label all still say `old`.
    before = _facts(nodes)
    assert (before["firmware"], before["firmware_pending"]) == (old, NEW_FIRMWARE)
    assert {g["vbios_version"] for g in before["gpus"]} == {old}
    assert _label(nodes, NODE, FIRMWARE_LABEL) == old
    again = _flash(nodes, run_id="run-2")
    assert not again.changed and again.data["reboot_required"] is True

    seen = len(nodes.sim.timeline())
    rebooted = nodes.run(ssh_reboot, nodes.call("ssh.reboot", {"poll_interval": 0.2, "reboot_timeout": 60}))
    assert rebooted.data["went_away"] is True
    assert rebooted.data["boot_id_before"] == before["boot_id"] != rebooted.data["boot_id_after"]
    assert _node_info(nodes, NODE)["bootID"] == rebooted.data["boot_id_after"]
    events = [e.event for e in nodes.sim.timeline()[seen:] if e.node == NODE]
    assert events == ["reboot", "not_ready", "ready"]

    after = _facts(nodes)
    assert (after["firmware"], after["firmware_pending"]) == (NEW_FIRMWARE, None)
    assert {g["vbios_version"] for g in after["gpus"]} == {NEW_FIRMWARE}
    assert _label(nodes, NODE, FIRMWARE_LABEL) == NEW_FIRMWARE
    assert _label(nodes, OTHER, FIRMWARE_LABEL) != NEW_FIRMWARE
    done = _flash(nodes, run_id="run-3")
    assert not done.changed and done.data["reboot_required"] is False
    assert not nodes.sim.ssh_endpoints.host(NODE).fs.exists(
        FirmwareFiles("/var/lib/pitstop", NEW_FIRMWARE).marker
    )
    counters = nodes.sim.counters()
    assert (counters.firmware_flashes, counters.reboots) == ({NODE: 1}, {NODE: 1})


def test_a_connection_dropped_mid_flash_is_retried_without_flashing_twice(nodes: SimNodes) -> None:
    # 3 real seconds: the retry below starts while the updater still runs.
    faults = SshNodeFaults(flash_seconds=60, drops=[SshDrop(command="pitstop-fwupdate --apply")])
    nodes.sim.set_ssh_faults(NODE, faults)
    call_args = {"target": NEW_FIRMWARE, "image": str(nodes.firmware_image(NEW_FIRMWARE))}
    with pytest.raises(ApplicationError) as dropped:
        nodes.run(ssh_firmware_update, nodes.call("ssh.firmware_update", call_args))
    assert dropped.value.type == "ConnectionLost" and not dropped.value.non_retryable
    assert any("sh -c" in p for p in nodes.sim.ssh_info(NODE).running), "the flash runs on without its client"

    # Temporal's retry: the same run and task find the flash in progress and wait for it.
    retried = nodes.run(ssh_firmware_update, nodes.call("ssh.firmware_update", call_args))
    assert retried.changed and retried.data["pending"] == NEW_FIRMWARE
    assert retried.data["steps"][0] == "in_progress"
    assert nodes.sim.counters().firmware_flashes == {NODE: 1}
    assert nodes.sim.ssh_info(NODE).drops_injected == 1


def test_a_node_that_never_returns_refuses_connections_until_the_reboot_times_out(
    start_nodes: Callable[..., SimNodes],
) -> None:
    nodes = start_nodes(
        "faults: {nodes_never_return: [gpu-node-002], ssh: {gpu-node-001: {flash_fails: true}}}\n"
    )
    assert nodes.sim.ssh_info(NODE).faults.flash_fails, "SSH faults come from the scenario too"
    args = {"poll_interval": 0.2, "reboot_timeout": 2}
    with pytest.raises(ApplicationError) as timed_out:
        nodes.run(ssh_reboot, nodes.call("ssh.reboot", args, host=OTHER))
    assert timed_out.value.type == "RebootTimeout"
    assert "went away: yes" in timed_out.value.message and "connection refused" in timed_out.value.message
    assert nodes.sim.ssh_info(OTHER).up is False
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", nodes.sim.ssh_port(OTHER)), timeout=5).close()
    assert _facts(nodes, NODE)["hostname"] == NODE, "the other node is unaffected"


def test_scenario_ssh_faults_must_name_nodes_of_the_cluster() -> None:
    with pytest.raises(ScenarioError) as bad:
        parse_scenario(SCENARIO + "faults:\n  ssh:\n    gpu-node-003: {flash_fails: true}\n", "s.yaml")
    assert "faults.ssh: unknown node 'gpu-node-003'" in str(bad.value)
    assert "did you mean 'gpu-node-001'" in str(bad.value) or "gpu-node-001 .. gpu-node-002" in str(bad.value)
