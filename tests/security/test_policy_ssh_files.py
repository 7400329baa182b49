# ruff: noqa: F811  (pytest fixtures imported from the engine and SSH fixtures by name)
"""Worker policy, files rule, over SSH: `ssh.copy src`, `ssh.script src` and
`ssh.firmware_update image` read only files the operator lets modules read (issue #13).

The attack: ship `/proc/self/environ` or a private key from the worker to a node, then
`ssh.command: cat` registers it into history. Here every read is refused before a connection is
opened: the node's filesystem gets no copy, and neither the worker's environment nor the key's
bytes appear anywhere in the run's history.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from tests.integration.ssh.conftest import lab, ssh_lab, sshd_binary  # noqa: F401
from tests.integration.ssh.lab import KEY_SECRET, SshLab
from tests.security.policy_fixtures import engine_worker, run, run_history_json, start_run, tasks  # noqa: F401

pytestmark = pytest.mark.integration


def _environ_entries() -> list[str]:
    """This process's environment as /proc/self/environ holds it (the in-process worker's)."""
    raw = Path("/proc/self/environ").read_bytes().split(b"\0")
    return [entry.decode(errors="replace") for entry in raw if len(entry) >= 16]


def _node_files(drop: Path) -> list[Path]:
    return sorted(drop.rglob("*"))


async def test_worker_files_never_reach_a_node_or_the_history(
    start_run: Any, temporal_client: Client, lab: SshLab, tmp_path_factory: pytest.TempPathFactory
) -> None:
    drop = tmp_path_factory.mktemp("node-drop")  # a directory on the node (this machine)
    key_path = lab.key.path  # the fleet key's file on the worker, outside every readable directory
    runbook = textwrap.dedent(
        f"""
        name: exfiltrate
        hosts: nodes
        serial: 1
        tasks:
          - name: environ
            ssh.copy: {{src: /proc/self/environ, dest: {drop}/environ}}
            ignore_errors: true
          - name: key as a script
            ssh.script: {{src: {key_path}}}
            ignore_errors: true
          - name: key as firmware
            ssh.firmware_update: {{target: "9.9.9", image: {key_path}, state_dir: {drop}/state}}
            ignore_errors: true
          - name: the home's key
            ssh.copy: {{src: "~/.ssh/id_ed25519", dest: {drop}/id}}
            ignore_errors: true
          - name: climbing out
            ssh.copy: {{src: "../../../../../../../..{key_path}", dest: {drop}/climbed}}
            ignore_errors: true
          - name: show
            ssh.command: cat {drop}/environ {drop}/id {drop}/climbed {drop}/state/firmware-9.9.9.img
            register: shown
            ignore_errors: true
        """
    )
    inventory = textwrap.dedent(
        f"""
        cluster:
          name: lab
          ssh: {{user: root, key: {{secret: {KEY_SECRET}}}}}
        all:
          children:
            nodes:
              hosts:
                node-a: {{ansible_host: 127.0.0.1, ansible_port: {lab.node.port}}}
        """
    )
    handle = await start_run(runbook, inventory)
    report = await handle.result()

    outcome = tasks(report)
    outside = "is outside the directories this worker may read"
    refusals = {
        "environ": "is in /proc, which no module may read (built-in default (system))",
        "key as a script": f"ssh.script: src: {key_path} {outside}",
        "key as firmware": f"ssh.firmware_update: image: {key_path} {outside}",
        "the home's key": "ssh.copy: src: ~/.ssh/id_ed25519 starts with '~'",
        "climbing out": f"(resolves to {key_path}) {outside}",
    }
    for name, refusal in refusals.items():
        assert outcome[name].status == "ignored", (name, outcome[name].msg)
        assert outcome[name].msg.startswith(f"PolicyViolation: {outcome[name].module}: "), outcome[name].msg
        assert refusal in outcome[name].msg, outcome[name].msg
    assert outcome["show"].status == "ignored"  # cat found nothing to show
    assert _node_files(drop) == [], "nothing reached the node"

    history = await run_history_json(temporal_client, handle)
    leaked_env = [entry for entry in _environ_entries() if entry in history]
    assert leaked_env == []
    key_lines = [
        line for line in lab.key.private_text.splitlines() if len(line) >= 16 and "-----" not in line
    ]
    assert key_lines and [line for line in key_lines if line in history] == []
