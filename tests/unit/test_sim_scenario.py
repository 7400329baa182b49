"""Scenario files: defaults, cross-references, and errors a person can act on."""

from __future__ import annotations

from pathlib import Path

import pytest

from pitstop_sim.scenario import ScenarioError, load_scenario, parse_scenario


def error(text: str) -> str:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(text, "s.yaml")
    return str(caught.value)


def test_defaults_make_a_small_gpu_cluster() -> None:
    scenario = parse_scenario("", "s.yaml")
    assert scenario.cluster.node_names() == ["gpu-node-001", "gpu-node-002", "gpu-node-003", "gpu-node-004"]
    assert [scenario.cluster.domain_of(i) for i in range(4)] == ["zone-a", "zone-a", "zone-b", "zone-b"]
    assert scenario.timing.time_scale == 1.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cluster:\n  nodez: 3\n", "s.yaml:2:3: unknown key 'nodez' in cluster (did you mean 'nodes'?)"),
        (
            "timing: {reboot_secs: 3}\n",
            "s.yaml:1:10: unknown key 'reboot_secs' in timing (did you mean 'reboot_seconds'?)",
        ),
        (
            "faults:\n  api_errors:\n    - {verb: post, status: 500}\n",
            "invalid value for 'faults.api_errors[0].verb'",
        ),
        (
            "faults:\n  api_errors:\n    - {status: 500, count: 1, rate: 0.5}\n",
            "give 'count' or 'rate', not both",
        ),
        (
            "workloads:\n  deployments:\n    - {name: web, pdb: {}}\n",
            "a pdb needs exactly one of 'min_available' or 'max_unavailable'",
        ),
        (
            "workloads:\n  deployments:\n    - {name: web, pdb: {max_unavailable: 150%}}\n",
            "'150%' is neither a count nor a percentage",
        ),
        ("cluster: {nodes: 2, domains: 3}\n", "3 failure domains need at least 3 nodes, got 2"),
        ("cluster: {cpu: lots}\n", "'lots' is not a Kubernetes quantity"),
        (
            "health:\n  nodes:\n    gpu-node-9: {nccl_busbw_gbps: 1}\n",
            "health.nodes: unknown node 'gpu-node-9' (the cluster has gpu-node-001 .. gpu-node-004)",
        ),
        (
            "faults: {pdbs_never_allow: [serving/web]}\n",
            "no workload in the scenario has a PDB named 'serving/web'",
        ),
        ("- a\n- b\n", "s.yaml:1:1: a scenario must be a mapping"),
        ("cluster: {nodes: [\n", "s.yaml:2:1: YAML syntax error"),
    ],
)
def test_bad_scenarios_say_where_and_what(text: str, message: str) -> None:
    assert message in error(text)


def test_command_line_shape_overrides_are_checked() -> None:
    scenario = parse_scenario("cluster: {nodes: 4}\n", "s.yaml")
    assert scenario.with_shape(nodes=10, domains=5).cluster.domain_names()[-1] == "zone-e"
    with pytest.raises(ScenarioError, match="3 failure domains need at least 3 nodes"):
        scenario.with_shape(nodes=2, domains=3)


def test_health_faults_fold_into_node_profiles() -> None:
    scenario = parse_scenario(
        "faults: {nodes_fail_validation: [gpu-node-002], nodes_never_return: [gpu-node-003]}\n"
        "health: {default: {nccl_busbw_gbps: 300}}\n",
        "s.yaml",
    )
    assert scenario.health_of("gpu-node-002").fails("dcgm")
    assert scenario.health_of("gpu-node-003").never_returns_after_reboot
    assert scenario.health_of("gpu-node-001").nccl_busbw_gbps == 300
    assert not scenario.health_of("gpu-node-001").fails("nccl")


def test_missing_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="file not found"):
        load_scenario(tmp_path / "absent.yaml")
