"""Taint lists, Job names, selectors, diffs, and the annotation contract with the simulator."""

from __future__ import annotations

from typing import Any

import pytest

from pitstop.kube import annotations as ours
from pitstop.kube.budgets import covers
from pitstop.kube.diff import object_diff
from pitstop.kube.names import job_name
from pitstop.kube.selectors import check_selector, matches, object_selector_matches, selector_requirements
from pitstop.kube.taints import describe, with_taint, without_taint
from pitstop_sim import annotations as sim
from pitstop_sim.disruption import pdb_selects


def test_adding_a_taint_is_idempotent_and_replaces_a_different_value() -> None:
    base = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
    added, changed = with_taint(base, "pitstop.dev/maintenance", "run-1", "NoSchedule")
    assert changed
    assert added[-1] == {"key": "pitstop.dev/maintenance", "value": "run-1", "effect": "NoSchedule"}
    same, changed = with_taint(added, "pitstop.dev/maintenance", "run-1", "NoSchedule")
    assert not changed and same == added
    replaced, changed = with_taint(added, "pitstop.dev/maintenance", "run-2", "NoSchedule")
    assert changed and [t.get("value") for t in replaced] == [None, "run-2"]
    other_effect, changed = with_taint(added, "pitstop.dev/maintenance", "run-1", "NoExecute")
    assert changed and len(other_effect) == 3


def test_removing_a_taint_by_key_and_optionally_effect() -> None:
    taints = [
        {"key": "k", "effect": "NoSchedule"},
        {"key": "k", "value": "v", "effect": "NoExecute"},
        {"key": "other", "effect": "NoSchedule"},
    ]
    kept, removed = without_taint(taints, "k", "NoExecute")
    assert [describe(t) for t in removed] == ["k=v:NoExecute"]
    assert len(kept) == 2
    kept, removed = without_taint(taints, "k")
    assert [describe(t) for t in kept] == ["other:NoSchedule"]
    assert without_taint(taints, "absent") == (taints, [])


def test_job_names_are_deterministic_dns_labels() -> None:
    a = job_name("DCGM diag", "run-1", "validate/0", "gpu-node-001")
    assert a == job_name("DCGM diag", "run-1", "validate/0", "gpu-node-001")
    assert a.startswith("dcgm-diag-") and len(a) == len("dcgm-diag-") + 10
    assert a != job_name("DCGM diag", "run-1", "validate/0", "gpu-node-002")
    assert a != job_name("DCGM diag", "run-2", "validate/0", "gpu-node-001")
    long = job_name("x" * 200, "r", "t", "n")
    assert len(long) <= 63


def test_selectors_in_both_forms() -> None:
    assert matches(None, {}) and matches("", {"a": "b"})
    assert matches("app=web,tier in (a,b)", {"app": "web", "tier": "a"})
    assert not matches("app=web,!canary", {"app": "web", "canary": "1"})
    assert object_selector_matches({}, {"any": "thing"})
    assert not object_selector_matches(None, {"any": "thing"})
    selector = {
        "matchLabels": {"app": "web"},
        "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}],
    }
    assert object_selector_matches(selector, {"app": "web", "tier": "fe"})
    assert not object_selector_matches(selector, {"app": "web", "tier": "db"})
    assert not object_selector_matches({"matchExpressions": [{"key": "a", "operator": "Bogus"}]}, {"a": "1"})
    with pytest.raises(ValueError, match="invalid label selector term"):
        check_selector("tier in (a")


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ({"key": "a", "operator": "Bogus", "values": ["1"]}, "is not a valid label selector operator"),
        ({"key": "a", "operator": "NotIn", "values": []}, "values set can't be empty"),
        ({"key": "a", "operator": "Exists", "values": ["1"]}, "values set must be empty"),
    ],
)
def test_an_invalid_selector_object_selects_nothing(expression: dict[str, Any], error: str) -> None:
    # k8s.io/apimachinery LabelSelectorAsSelector / labels.NewRequirement refuse these, and the
    # eviction subresource skips a PDB whose selector it cannot read ("This object has an
    # invalid selector, it does not match the pod"). The simulator's disruption arithmetic and
    # pitstop's drain planning read them through the same function, so they agree.
    selector = {"matchExpressions": [expression]}
    with pytest.raises(ValueError, match=error):
        selector_requirements(selector)
    assert not object_selector_matches(selector, {"a": "2"})
    pdb = {"metadata": {"namespace": "ns"}, "spec": {"selector": selector}}
    pod = {"metadata": {"namespace": "ns", "labels": {"a": "2"}}}
    assert not covers(pdb, pod) and not pdb_selects(pdb, pod)


def test_diff_ignores_the_fields_every_write_changes() -> None:
    before = {
        "metadata": {"name": "n", "resourceVersion": "1", "generation": 1},
        "spec": {"stopPolicy": "None"},
    }
    same = {
        "metadata": {"name": "n", "resourceVersion": "2", "generation": 2},
        "spec": {"stopPolicy": "None"},
    }
    assert object_diff(before, same, "ClusterQueue n") == ""
    after = {"metadata": {"name": "n", "resourceVersion": "2"}, "spec": {"stopPolicy": "Hold"}}
    diff = object_diff(before, after, "ClusterQueue n")
    assert '-    "stopPolicy": "None"' in diff and '+    "stopPolicy": "Hold"' in diff
    assert diff.startswith("--- ClusterQueue n (before)")


def test_checkpoint_annotations_are_the_ones_the_rehearsal_cluster_answers() -> None:
    assert (ours.GANG_LABEL, ours.CHECKPOINT_PROTOCOL, ours.CHECKPOINT_REQUESTED, ours.CHECKPOINT_DONE) == (
        sim.GANG_LABEL,
        sim.CHECKPOINT_PROTOCOL,
        sim.CHECKPOINT_REQUESTED,
        sim.CHECKPOINT_DONE,
    )
    assert (ours.HOSTNAME_LABEL, ours.VALIDATION_LABEL) == (sim.HOSTNAME_LABEL, sim.VALIDATION_LABEL)


def test_a_later_acknowledged_checkpoint_satisfies_an_earlier_request() -> None:
    from pitstop.kube.annotations import (
        CHECKPOINT_DONE,
        CHECKPOINT_PROTOCOL,
        CHECKPOINT_REQUESTED,
        GANG_LABEL,
    )
    from pitstop.kube.checkpoint import Workload

    def pod(requested: str, done: str | None) -> Workload:
        notes = {CHECKPOINT_PROTOCOL: "annotation", CHECKPOINT_REQUESTED: requested}
        if done is not None:
            notes[CHECKPOINT_DONE] = done
        return Workload({"metadata": {"name": "p", "labels": {GANG_LABEL: "g"}, "annotations": notes}})

    # Two nodes of one gang in flight: node-b's request overwrote node-a's.
    assert pod("run/node-b", "run/node-b").satisfied("run/node-a")
    assert not pod("run/node-b", None).satisfied("run/node-a")  # the later one is not answered yet
    assert not pod("run/node-a", "run/old").satisfied("run/node-a")
    assert pod("run/node-a", "run/node-a").satisfied("run/node-a")
