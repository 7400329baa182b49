"""Version Skew Policy rules over the states an upgrade passes through (pure, no I/O)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from pitstop.compat.matrix import load_skew_policy
from pitstop.compat.skew import (
    APISERVER_ONE_MINOR,
    CONTROL_PLANE_FIRST,
    KUBECTL_WITHIN,
    KUBELET_NOT_NEWER,
    KUBELET_TOO_OLD,
    PROXY_NOT_NEWER,
    PROXY_TOO_OLD,
    ClusterVersions,
    SkewPolicy,
    SkewReport,
    check_state,
    check_upgrade,
)

POLICY_URL = "https://kubernetes.io/releases/version-skew-policy/"
POLICY = load_skew_policy(Path(__file__).resolve().parents[2] / "runbooks" / "compat")


def cluster(apiserver: str, kubelets: dict[str, str], **more: object) -> ClusterVersions:
    return ClusterVersions.model_validate(
        {
            "apiservers": [apiserver],
            "controller_managers": [more.pop("cm", apiserver)],
            "schedulers": [more.pop("scheduler", apiserver)],
            "kubelets": kubelets,
            **more,
        }
    )


def rules(report: SkewReport) -> set[str]:
    return {violation.rule for violation in report.violations}


def test_two_minor_jump_is_refused_naming_the_skipped_minor_rule_and_source() -> None:
    nodes = {"gpu-node-001": "v1.30.6"}
    report = check_upgrade(cluster("v1.30.6", nodes), cluster("v1.32.0", nodes), POLICY)

    [step] = [v for v in report.violations if v.rule == APISERVER_ONE_MINOR]
    assert step.message == (
        "kube-apiserver v1.30.6 → v1.32.0 skips 1.31: upgrade one minor at a time "
        f"(rule {APISERVER_ONE_MINOR}, {POLICY_URL})"
    )
    assert report.checked[APISERVER_ONE_MINOR] == "violated"


def test_kubelets_too_old_once_the_control_plane_moves_are_refused() -> None:
    nodes = {"gpu-node-001": "v1.27.3", "gpu-node-002": "v1.31.2"}
    report = check_upgrade(cluster("v1.31.2", nodes), cluster("v1.32.0", nodes), POLICY)

    before_nodes = [v for v in report.violations if v.state == "before-nodes"]
    assert [v.rule for v in before_nodes] == [KUBELET_TOO_OLD]
    message = before_nodes[0].message
    assert (
        "kubelet v1.27.3 on gpu-node-001 would be 5 minor versions older than kube-apiserver v1.32.0"
        in message
    )
    assert "upgrade kubelet on those nodes to 1.29 or newer first" in message
    assert POLICY_URL in message


def test_kubelet_older_than_before_1_25_may_trail_by_two_minors_only() -> None:
    nodes = {"old": "v1.22.0"}
    report = check_upgrade(cluster("v1.24.0", nodes), cluster("v1.25.0", nodes), POLICY)
    assert any("3 minor versions older" in v.message and "at most 2" in v.message for v in report.violations)


def test_target_kubelet_newer_than_target_apiserver_breaks_the_control_plane_first_order() -> None:
    report = check_upgrade(cluster("v1.30.6", {"a": "v1.30.6"}), cluster("v1.31.2", {"a": "v1.32.0"}), POLICY)
    assert CONTROL_PLANE_FIRST in rules(report)
    [finding] = [v for v in report.violations if v.rule == CONTROL_PLANE_FIRST]
    assert "kubelet v1.32.0 on a would be newer than kube-apiserver v1.31.2" in finding.message


def test_a_kubelet_newer_than_the_apiserver_today_is_reported_as_it_is() -> None:
    report = check_upgrade(cluster("v1.30.6", {"a": "v1.31.0"}), cluster("v1.31.2", {"a": "v1.31.0"}), POLICY)
    [finding] = report.violations
    assert (finding.rule, finding.state) == (KUBELET_NOT_NEWER, "current")


def test_kubectl_two_minors_away_is_refused() -> None:
    report = check_upgrade(
        cluster("v1.30.6", {}, kubectl="v1.30.1"), cluster("v1.31.2", {}, kubectl="v1.33.0"), POLICY
    )
    assert rules(report) == {KUBECTL_WITHIN}


def test_ha_apiservers_two_minors_apart_are_refused() -> None:
    now = ClusterVersions(apiservers=["v1.29.0", "v1.31.0"])
    report = check_upgrade(now, now, POLICY)
    assert "skew/apiserver-ha-within-one-minor" in rules(report)


def test_many_nodes_on_one_version_make_one_bounded_finding() -> None:
    nodes = {f"gpu-node-{index:03d}": "v1.27.0" for index in range(40)}
    report = check_upgrade(cluster("v1.30.0", nodes), cluster("v1.31.0", nodes), POLICY)
    [before_nodes] = [v for v in report.violations if v.state == "before-nodes"]
    assert "and 35 more" in before_nodes.message


def test_policy_file_missing_a_rule_the_code_needs_is_refused() -> None:
    data = POLICY.model_dump()
    data["rules"] = [rule for rule in data["rules"] if rule["id"] != KUBELET_TOO_OLD]
    with pytest.raises(ValidationError, match=f"rules the skew checks need are missing: {KUBELET_TOO_OLD}"):
        SkewPolicy.model_validate(data)


minors = st.integers(min_value=25, max_value=40)
patches = st.integers(min_value=0, max_value=12)


@settings(max_examples=60, deadline=None)
@given(
    start=st.integers(min_value=27, max_value=40),
    patch=patches,
    lag=st.integers(min_value=0, max_value=2),
    upgrade_nodes=st.booleans(),
)
def test_any_one_minor_upgrade_with_kubelets_within_policy_passes(
    start: int, patch: int, lag: int, upgrade_nodes: bool
) -> None:
    # Kubelets up to two minors behind today are at most three behind once the control plane
    # moves (all >= 1.25, so the three-minor allowance applies).
    kubelet = f"v1.{start - lag}.{patch}"
    now = cluster(f"v1.{start}.{patch}", {"a": kubelet, "b": f"v1.{start}.0"}, kubectl=f"v1.{start}.0")
    new_kubelet = f"v1.{start + 1}.0" if upgrade_nodes else kubelet
    target = cluster(f"v1.{start + 1}.0", {"a": new_kubelet, "b": new_kubelet}, kubectl=f"v1.{start + 1}.0")

    report = check_upgrade(now, target, POLICY)

    assert report.violations == []
    assert report.checked[APISERVER_ONE_MINOR] == "ok"


@settings(max_examples=60, deadline=None)
@given(start=minors, jump=st.integers(min_value=2, max_value=5), patch=patches)
def test_any_jump_of_two_or_more_minors_fails_the_one_minor_rule(start: int, jump: int, patch: int) -> None:
    nodes = {"a": f"v1.{start}.{patch}"}
    report = check_upgrade(
        cluster(f"v1.{start}.{patch}", nodes), cluster(f"v1.{start + jump}.0", nodes), POLICY
    )

    [step] = [v for v in report.violations if v.rule == APISERVER_ONE_MINOR]
    skipped = ", ".join(f"1.{minor}" for minor in range(start + 1, start + jump))
    assert f"skips {skipped}:" in step.message


@settings(max_examples=60, deadline=None)
@given(apiserver=minors, behind=st.integers(min_value=4, max_value=8))
def test_any_kubelet_more_than_three_minors_behind_after_the_control_plane_fails(
    apiserver: int, behind: int
) -> None:
    kubelet = {"a": f"v1.{apiserver + 1 - behind}.0"}
    report = check_upgrade(
        cluster(f"v1.{apiserver}.0", kubelet), cluster(f"v1.{apiserver + 1}.0", kubelet), POLICY
    )
    assert any(v.rule == KUBELET_TOO_OLD and v.state == "before-nodes" for v in report.violations)


def test_ha_apiservers_narrow_the_kubelet_window_from_both_ends_as_the_policys_example() -> None:
    # kubernetes.io/releases/version-skew-policy, kubelet: "kube-apiserver instances are at
    # 1.32 and 1.31 - kubelet is supported at 1.31, 1.30, and 1.29 (1.32 is not supported
    # because that would be newer than the kube-apiserver instance at version 1.31)".
    kubelets = {f"node-{minor}": f"v1.{minor}.0" for minor in (32, 31, 30, 29, 28)}
    versions = ClusterVersions(apiservers=["v1.32.0", "v1.31.4"], kubelets=kubelets, kube_proxies=kubelets)
    report = SkewReport()
    check_state(versions, POLICY, "current", report)
    by_rule = {(v.rule, v.component): v.message for v in report.violations}
    assert set(by_rule) == {
        (KUBELET_NOT_NEWER, "kubelet"),
        (KUBELET_TOO_OLD, "kubelet"),
        (PROXY_NOT_NEWER, "kube-proxy"),
        (PROXY_TOO_OLD, "kube-proxy"),
    }
    assert (
        "kubelet v1.32.0 on node-32 is newer than kube-apiserver v1.31.4"
        in by_rule[(KUBELET_NOT_NEWER, "kubelet")]
    )
    assert by_rule[(KUBELET_TOO_OLD, "kubelet")].startswith(
        "now: kubelet v1.28.0 on node-28 is 4 minor versions older than kube-apiserver v1.32.0 (at most 3"
    )
    assert "upgrade kubelet on those nodes to 1.29 or newer" in by_rule[(KUBELET_TOO_OLD, "kubelet")]
