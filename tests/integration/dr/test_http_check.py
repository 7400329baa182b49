"""`dr.http_check` against a real local HTTP server: registries the worker policy allows are
probed (OCI /v2/ 401 = reachable), anything else is refused before a request is sent."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from activities.dr.reach import http_check
from pitstop.policy.errors import POLICY_ENV, PolicyError
from pitstop.policy.load import load_policy
from tests.integration.dr.conftest import DrSite
from tests.integration.dr.registry import registry_server, tls_server
from tests.policy_site import PolicyLayer


def allow_http(policy: PolicyLayer, url: str) -> None:
    policy.doc.setdefault("http", {}).setdefault("endpoints", []).append(url)
    policy.site.write()


@pytest.fixture
def registry(worker_policy: PolicyLayer) -> Iterator[str]:
    with registry_server() as url:
        allow_http(worker_policy, url)
        yield url


def test_an_allowed_registry_and_model_registry_are_reachable_and_unset_ones_unconfigured(
    dr_site: DrSite, registry: str
) -> None:
    targets = [
        {"name": "container registry", "url": registry, "kind": "oci_registry"},
        {"name": "model registry", "url": f"{registry}/api/2.0/mlflow/health"},
        {"name": "mirror", "url": ""},
    ]
    result = dr_site.run(http_check, dr_site.call("dr.http_check", {"targets": targets}, host="localhost"))
    rows = {r["name"]: r for r in result.data["targets"]}
    assert rows["container registry"]["reachable"] is True
    assert (
        rows["container registry"]["why"]
        == "GET /v2/ answered 401 (Docker-Distribution-API-Version: registry/2.0)"
    )
    assert rows["model registry"]["reachable"] is True and rows["model registry"]["status"] == 200
    assert result.data["unconfigured"] == ["mirror"] and rows["mirror"]["why"] == "not configured"


def test_an_endpoint_outside_the_policy_is_refused_before_any_request(dr_site: DrSite, registry: str) -> None:
    targets = [
        {"name": "container registry", "url": registry, "kind": "oci_registry"},
        {"name": "metadata", "url": "http://169.254.169.254/latest/meta-data/iam/"},
    ]
    with pytest.raises(ApplicationError) as refused:
        dr_site.run(http_check, dr_site.call("dr.http_check", {"targets": targets}, host="localhost"))
    assert refused.value.type == "PolicyViolation"
    assert (
        "dr.http_check: metadata: http://169.254.169.254/latest/meta-data/iam/ is not an endpoint this "
        f"worker may send requests to (policy http.endpoints: {registry})" in refused.value.message
    )


def test_a_redirect_is_not_followed(dr_site: DrSite, registry: str) -> None:
    targets = [{"name": "model registry", "url": f"{registry}/moved"}]
    result = dr_site.run(http_check, dr_site.call("dr.http_check", {"targets": targets}, host="localhost"))
    row = result.data["targets"][0]
    assert row["status"] == 302 and row["why"] == "GET answered 302"


def test_an_allowed_but_unreachable_registry_is_reported_or_fails_when_asked(
    dr_site: DrSite, worker_policy: PolicyLayer
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    allow_http(worker_policy, dead)
    targets = [{"name": "container registry", "url": dead, "kind": "oci_registry"}]
    result = dr_site.run(http_check, dr_site.call("dr.http_check", {"targets": targets}, host="localhost"))
    assert result.data["unreachable"] == ["container registry"]
    assert result.data["targets"][0]["why"] == "unreachable: Connection refused"
    with pytest.raises(ApplicationError) as failed:
        dr_site.run(
            http_check,
            dr_site.call(
                "dr.http_check", {"targets": targets, "fail_on_unreachable": True}, host="localhost"
            ),
        )
    assert failed.value.message.startswith(
        "unreachable: container registry (container registry: unreachable:"
    )


def test_the_policy_file_names_a_bad_http_endpoint_at_its_line(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "http:\n  endpoints:\n    - https://registry.internal:5000\n    - ftp://mirror.internal\n"
    )
    environ = {POLICY_ENV: str(policy), "PITSTOP_HOME": str(tmp_path / "home")}
    with pytest.raises(PolicyError) as refused:
        load_policy(environ)
    assert (
        f"{policy}:4:7: http.endpoints: 'ftp://mirror.internal' must start with http:// or https://"
        in str(refused.value)
    )
    policy.write_text("http:\n  endpoints: [https://Registry.internal:5000/]\n")
    assert [rule.endpoint for rule in load_policy(environ).http] == ["https://registry.internal:5000"]


def test_a_tls_endpoint_is_ok_while_its_certificate_covers_the_name_and_lasts(
    dr_site: DrSite, worker_policy: PolicyLayer, tmp_path: Path
) -> None:
    with tls_server(tmp_path, days=90) as ingress:
        allow_http(worker_policy, ingress)
        targets = [{"name": "ingress certificate", "url": ingress, "kind": "tls"}]
        fine = dr_site.run(http_check, dr_site.call("dr.http_check", {"targets": targets}, host="localhost"))
        row = fine.data["targets"][0]
        assert fine.data["reachable"] == ["ingress certificate"]
        assert row["names"] == ["localhost"] and row["days_left"] in (89, 90)
        assert row["why"].startswith("localhost resolves to ") and "certificate valid until " in row["why"]

        args = {"targets": targets, "cert_min_days": 120}
        soon = dr_site.run(http_check, dr_site.call("dr.http_check", args, host="localhost"))
        assert soon.data["unreachable"] == ["ingress certificate"]
        assert soon.data["targets"][0]["why"].endswith(": expires within 120 days")


def test_a_certificate_for_another_name_is_not_ok(
    dr_site: DrSite, worker_policy: PolicyLayer, tmp_path: Path
) -> None:
    with tls_server(tmp_path, name="ingress.example.com") as ingress:
        allow_http(worker_policy, ingress)
        targets = [{"name": "ingress certificate", "url": ingress, "kind": "tls"}]
        result = dr_site.run(
            http_check, dr_site.call("dr.http_check", {"targets": targets}, host="localhost")
        )
        assert result.data["targets"][0]["why"].endswith(", but it names ingress.example.com, not localhost")
