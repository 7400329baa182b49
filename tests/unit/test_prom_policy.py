"""The worker policy's `prometheus` section: endpoints prom.* may query, and prometheus_token
grants scoped to them; mistakes are refused when the policy loads, at their line."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from pitstop.policy.effective import WorkerPolicy
from pitstop.policy.errors import POLICY_ENV, PolicyError
from pitstop.policy.load import load_policy
from pitstop.policy.prometheus import check_prometheus
from pitstop.policy.show import policy_summary


def _load(tmp_path: Path, text: str) -> WorkerPolicy:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return load_policy({POLICY_ENV: str(path), "PITSTOP_HOME": str(tmp_path / "home"), "HOME": str(tmp_path)})


def test_endpoints_are_normalized_and_a_url_with_a_path_is_judged_by_its_server(tmp_path: Path) -> None:
    policy = _load(
        tmp_path,
        "prometheus:\n  endpoints: [http://Prometheus.monitoring:9090/, https://am.example]\n"
        "secrets:\n  prom-token: {purpose: prometheus_token, endpoints: ['https://am.example:443']}\n",
    )
    assert check_prometheus("http://prometheus.monitoring:9090/prometheus", "prom.query", policy) == (
        "http://prometheus.monitoring:9090"
    )
    assert check_prometheus("https://am.example/", "prom.alerts", policy) == "https://am.example:443"
    assert "prometheus http://Prometheus.monitoring:9090/, https://am.example" in policy_summary(policy)
    with pytest.raises(ApplicationError) as refused:
        check_prometheus("http://prometheus.monitoring:9091", "prom.query", policy)
    assert refused.value.type == "PolicyViolation"
    with pytest.raises(ApplicationError) as with_user:
        check_prometheus("http://admin:pw@prometheus.monitoring:9090", "prom.query", policy)
    assert "carries user information" in with_user.value.message


def test_policy_mistakes_are_refused_at_their_line(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match=r"policy.yaml:2:\d+: .*must start with http"):
        _load(tmp_path, "prometheus:\n  endpoints: [prometheus:9090]\n")
    with pytest.raises(PolicyError, match=r"is not in prometheus\.endpoints"):
        _load(
            tmp_path,
            "prometheus: {endpoints: ['http://p:9090']}\n"
            "secrets: {t: {purpose: prometheus_token, endpoints: ['http://other:9090']}}\n",
        )
    with pytest.raises(PolicyError, match="did you mean 'endpoints'"):
        _load(tmp_path, "prometheus:\n  endpoint: [http://p:9090]\n")
