"""Inventories: Ansible's variable precedence, dynamic groups, host patterns."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pitstop.kube.selectors import parse_selector, selector_matches
from pitstop.runbook import Inventory, PatternError, RunbookError, load_inventory
from pitstop.runbook.inventory import Group

INVENTORY = """\
cluster:
  name: lab
  ssh: {user: ops, key: {secret: lab-key}}
all:
  vars: {level: all, only_all: 1}
  hosts:
    bastion:
  children:
    gpu:
      vars: {level: gpu, only_gpu: 1}
      hosts:
        gpu-01: {level: host}
        gpu-02:
      children:
        canary:
          vars: {level: canary}
          hosts:
            gpu-02:
        zone_a:
          hosts:
            gpu-01:
            gpu-03:
    dyn:
      from_nodes:
        selector: "nvidia.com/gpu.present=true,zone in (a, b)"
        domain_label: zone
"""


@pytest.fixture
def inventory(tmp_path: Path) -> Inventory:
    path = tmp_path / "inv.yaml"
    path.write_text(INVENTORY)
    return load_inventory(path)


def test_hosts_keep_inventory_order_and_cluster_defaults(inventory: Inventory) -> None:
    assert inventory.host_names() == ["bastion", "gpu-01", "gpu-02", "gpu-03"]
    assert inventory.cluster is not None and inventory.cluster.task_queue is None
    assert inventory.cluster.ssh is not None and inventory.cluster.ssh.port == 22
    assert inventory.cluster.ssh.key is not None and inventory.cluster.ssh.key.secret == "lab-key"


def test_variable_precedence_all_then_parent_then_child_then_host(inventory: Inventory) -> None:
    assert inventory.hostvars("bastion")["level"] == "all"
    assert inventory.hostvars("gpu-03")["level"] == "gpu"
    assert inventory.hostvars("gpu-02")["level"] == "canary"
    assert inventory.hostvars("gpu-01")["level"] == "host"
    gpu02 = inventory.hostvars("gpu-02")
    assert gpu02["only_all"] == 1 and gpu02["only_gpu"] == 1
    assert gpu02["inventory_hostname"] == "gpu-02"
    assert gpu02["group_names"] == ["canary", "gpu"]


def test_with_nodes_fills_dynamic_groups_with_labels_and_failure_domain(inventory: Inventory) -> None:
    nodes = [
        ("node-b", {"nvidia.com/gpu.present": "true", "zone": "b"}),
        ("node-c", {"nvidia.com/gpu.present": "true", "zone": "c"}),
        ("node-a", {"nvidia.com/gpu.present": "true", "zone": "a"}),
        ("cpu-1", {"zone": "a"}),
    ]
    assert inventory.resolve("dyn") == []
    live = inventory.with_nodes(nodes)
    assert live.resolve("dyn") == ["node-b", "node-a"]
    assert live.hostvars("node-a")["failure_domain"] == "a"
    assert live.hostvars("node-a")["labels"]["zone"] == "a"
    assert inventory.resolve("dyn") == []  # the original is unchanged


@pytest.mark.parametrize(
    ("pattern", "hosts"),
    [
        ("all", ["bastion", "gpu-01", "gpu-02", "gpu-03"]),
        ("*", ["bastion", "gpu-01", "gpu-02", "gpu-03"]),
        ("gpu", ["gpu-01", "gpu-02", "gpu-03"]),
        ("gpu-02", ["gpu-02"]),
        ("canary:bastion", ["bastion", "gpu-02"]),
        ("canary,bastion", ["bastion", "gpu-02"]),
        ("gpu:&zone_a", ["gpu-01", "gpu-03"]),
        ("gpu:!canary", ["gpu-01", "gpu-03"]),
        ("!gpu", ["bastion"]),
        ("!canary:gpu", ["gpu-01", "gpu-03"]),
        ("gpu-0*", ["gpu-01", "gpu-02", "gpu-03"]),
        ("~gpu-0[12]", ["gpu-01", "gpu-02"]),
        ("zone_*:!gpu-03", ["gpu-01"]),
    ],
)
def test_host_patterns(inventory: Inventory, pattern: str, hosts: list[str]) -> None:
    assert inventory.resolve(pattern) == hosts


def test_unknown_name_in_pattern_names_it_with_a_suggestion(inventory: Inventory) -> None:
    with pytest.raises(PatternError) as info:
        inventory.resolve("gpu:&zone_b")
    assert info.value.name == "zone_b" and info.value.suggestion == "zone_a"
    with pytest.raises(PatternError):
        inventory.resolve("nothing-*")


def test_dynamic_group_is_a_known_name_before_nodes_are_known(inventory: Inventory) -> None:
    assert inventory.resolve("gpu:!dyn") == ["gpu-01", "gpu-02", "gpu-03"]


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("a=1", {"a": "1"}, True),
        ("a==1", {"a": "2"}, False),
        ("a!=1", {}, True),
        ("a", {"a": ""}, True),
        ("!a", {"a": "x"}, False),
        ("a in (x, y),b", {"a": "y", "b": "1"}, True),
        ("a notin (x,y)", {"a": "x"}, False),
        ("", {"z": "1"}, True),
    ],
)
def test_label_selectors(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert selector_matches(selector, labels) is expected


def test_bad_selector_is_refused_at_its_position(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text("all:\n  children:\n    d:\n      from_nodes: {selector: 'a in b'}\n")
    with pytest.raises(RunbookError) as info:
        load_inventory(path)
    assert (info.value.line, info.value.column) == (4, 30)
    with pytest.raises(ValueError):
        parse_selector("=x")


def test_inventory_requires_all(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(textwrap.dedent("cluster: {name: x}\n"))
    with pytest.raises(RunbookError, match="top-level 'all:'"):
        load_inventory(path)


def test_stage_hosts_are_resolved_against_the_inventory(tmp_path: Path, inventory: Inventory) -> None:
    from pitstop.runbook import load_runbook

    path = tmp_path / "rb.yaml"
    path.write_text("name: x\nhosts: gpu:!canari\ntasks: [{debug: hi}]\n")
    with pytest.raises(RunbookError) as info:
        load_runbook(path, inventory)
    assert (info.value.line, info.value.column, info.value.suggestion) == (2, 8, "canary")


# ---------------------------------------------------------------- set algebra (hypothesis)

_HOSTS = [f"h{i}" for i in range(8)]


@st.composite
def _inventories(draw: st.DrawFn) -> Inventory:
    groups = {}
    for name in ("ga", "gb", "gc"):
        members = draw(st.lists(st.sampled_from(_HOSTS), unique=True))
        groups[name] = Group(name=name, hosts=members)
    groups["all"] = Group(name="all", children=["ga", "gb", "gc"])
    return Inventory(hosts={h: {} for h in _HOSTS}, groups=groups)


_TERMS = st.sampled_from(["ga", "gb", "gc", "h0", "h3", "h7"])


@settings(max_examples=200, deadline=None)
@given(_inventories(), _TERMS, _TERMS, _TERMS)
def test_pattern_operators_agree_with_set_algebra(inv: Inventory, a: str, b: str, c: str) -> None:
    def hosts(term: str) -> set[str]:
        return set(inv.resolve(term))

    assert set(inv.resolve(f"{a}:{b}")) == hosts(a) | hosts(b)
    assert set(inv.resolve(f"{a},{b}")) == hosts(a) | hosts(b)
    assert set(inv.resolve(f"{a}:&{b}")) == hosts(a) & hosts(b)
    assert set(inv.resolve(f"{a}:!{b}")) == hosts(a) - hosts(b)
    assert set(inv.resolve(f"!{b}")) == set(_HOSTS) - hosts(b)
    # Ansible's order of operations: unions, then intersections, then exclusions.
    assert set(inv.resolve(f"!{c}:{a}:&{b}")) == (hosts(a) & hosts(b)) - hosts(c)
    result = inv.resolve(f"{a}:{b}:!{c}")
    assert result == [h for h in _HOSTS if h in set(result)]  # inventory order
