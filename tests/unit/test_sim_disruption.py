"""PodDisruptionBudget status arithmetic (the disruption controller's rules)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pitstop_sim.disruption import compute_status

Obj = dict[str, Any]
RS_REF = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "rs-uid", "controller": True}


def pod(name: str, *, ready: bool = True, terminating: bool = False, owner: Obj | None = RS_REF) -> Obj:
    meta: Obj = {"name": name, "namespace": "ns", "labels": {"app": "web"}}
    if owner:
        meta["ownerReferences"] = [owner]
    if terminating:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pdb(**spec: Any) -> Obj:
    return {
        "metadata": {"name": "web", "namespace": "ns", "generation": 3},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec},
    }


def test_min_available_counts_healthy_pods() -> None:
    pods = [pod("a"), pod("b"), pod("c", ready=False), pod("d", terminating=True)]
    status = compute_status(pdb(minAvailable=2), pods, lambda p: 4)
    assert (
        status["expectedPods"],
        status["desiredHealthy"],
        status["currentHealthy"],
        status["disruptionsAllowed"],
    ) == (4, 2, 2, 0)
    assert status["observedGeneration"] == 3
    assert status["conditions"][0]["reason"] == "InsufficientPods"


def test_max_unavailable_uses_the_controllers_scale() -> None:
    status = compute_status(pdb(maxUnavailable="25%"), [pod("a"), pod("b"), pod("c")], lambda p: 4)
    # 25% of 4 rounds up to 1: 3 desired, 3 healthy.
    assert (status["expectedPods"], status["desiredHealthy"], status["disruptionsAllowed"]) == (4, 3, 0)
    status = compute_status(pdb(maxUnavailable=1), [pod(n) for n in "abcd"], lambda p: 4)
    assert status["disruptionsAllowed"] == 1


def test_percentage_min_available_without_a_scalable_controller_allows_nothing() -> None:
    status = compute_status(
        pdb(minAvailable="50%"), [pod("a", owner=None), pod("b", owner=None)], lambda p: None
    )
    assert status["disruptionsAllowed"] == 0
    assert status["conditions"][0]["reason"] == "SyncFailed"


def test_recently_evicted_pods_do_not_count_as_healthy() -> None:
    budget = pdb(minAvailable=1)
    budget["status"] = {"disruptedPods": {"a": "2999-01-01T00:00:00Z"}}
    status = compute_status(budget, [pod("a"), pod("b")], lambda p: 2, now_ts=0)
    assert status["currentHealthy"] == 1
    assert status["disruptionsAllowed"] == 0
    assert status["disruptedPods"] == {"a": "2999-01-01T00:00:00Z"}


def test_a_blocked_pdb_never_allows() -> None:
    status = compute_status(pdb(minAvailable=0), [pod("a"), pod("b")], lambda p: 2, never_allow=True)
    assert status["disruptionsAllowed"] == 0


@given(st.integers(0, 12), st.integers(0, 12), st.integers(0, 12))
def test_allowed_disruptions_never_exceed_healthy_minus_min_available(
    healthy: int, unhealthy: int, minimum: int
) -> None:
    pods = [pod(f"h{i}") for i in range(healthy)] + [pod(f"u{i}", ready=False) for i in range(unhealthy)]
    status = compute_status(pdb(minAvailable=minimum), pods, lambda p: healthy + unhealthy)
    assert status["disruptionsAllowed"] == max(0, healthy - minimum)
    assert status["currentHealthy"] - status["disruptionsAllowed"] >= min(minimum, healthy)


@pytest.mark.parametrize(("spec", "desired"), [({"minAvailable": "50%"}, 3), ({"maxUnavailable": "50%"}, 2)])
def test_percentages_round_like_kubernetes(spec: Obj, desired: int) -> None:
    # minAvailable rounds up (ceil(2.5)=3); maxUnavailable rounds up too (5 - ceil(2.5) = 2).
    status = compute_status(pdb(**spec), [pod(n) for n in "abcde"], lambda p: 5)
    assert status["desiredHealthy"] == desired
