"""Properties of the pure host scheduler (workflows/rollout.py)."""

from __future__ import annotations

import heapq

from hypothesis import given, settings
from hypothesis import strategies as st

from workflows.rollout import (
    RolloutLimits,
    RolloutState,
    blocked_reason,
    failure_budget_exceeded,
    lower_bound_makespan,
    next_hosts,
    order_hosts,
    serial_batches,
)


def test_serial_ramp_one_then_half_of_six_gives_1_3_2() -> None:
    hosts = [f"h{i}" for i in range(6)]
    assert [len(b) for b in serial_batches(hosts, [1, "50%"])] == [1, 3, 2]


def test_serial_number_and_percentage() -> None:
    hosts = [f"h{i}" for i in range(10)]
    assert [len(b) for b in serial_batches(hosts, 4)] == [4, 4, 2]
    assert [len(b) for b in serial_batches(hosts, "30%")] == [3, 3, 3, 1]
    # A percentage that rounds to zero still makes progress, as in Ansible.
    assert [len(b) for b in serial_batches(hosts[:3], "10%")] == [1, 1, 1]


def test_failure_budget_is_cumulative_and_strict() -> None:
    assert not failure_budget_exceeded(1, 20, 5)  # exactly 5%
    assert failure_budget_exceeded(2, 20, 5)
    assert failure_budget_exceeded(1, 20, 0)
    assert not failure_budget_exceeded(5, 20, None)


def test_domain_round_robin_interleaves_domains() -> None:
    domains = {"a1": "a", "a2": "a", "b1": "b", "b2": "b", "c1": "c"}
    assert order_hosts(list(domains), domains, "domain_round_robin") == ["a1", "b1", "c1", "a2", "b2"]


def test_blocked_reason_names_the_spent_budget() -> None:
    state = RolloutState(hosts=["a", "b", "c"], failed={"a"})
    limits = RolloutLimits(max_in_flight=1, max_fail_percentage=10)
    assert next_hosts(state, limits) == []
    reason = blocked_reason(state, limits)
    assert reason is not None and "failure budget spent: 1 of 3" in reason


hosts_and_domains = st.integers(min_value=1, max_value=40).flatmap(
    lambda n: st.tuples(
        st.just([f"h{i:02d}" for i in range(n)]),
        st.lists(st.sampled_from("abcde"), min_size=n, max_size=n),
        st.lists(st.floats(min_value=1, max_value=100), min_size=n, max_size=n),
        st.lists(st.booleans(), min_size=n, max_size=n),
    )
)


def simulate(
    hosts: list[str],
    domains: dict[str, str],
    durations: dict[str, float],
    fails: set[str],
    limits: RolloutLimits,
) -> tuple[RolloutState, list[tuple[float, set[str]]], list[str]]:
    """Event-driven run of the scheduler; returns the final state, the in-flight set at each
    launch moment, and the hosts launched after the budget was spent (must be none)."""
    state = RolloutState(hosts=hosts, domain_of=domains)
    clock = 0.0
    events: list[tuple[float, str]] = []
    snapshots: list[tuple[float, set[str]]] = []
    late: list[str] = []
    while True:
        spent_before = failure_budget_exceeded(len(state.failed), len(hosts), limits.max_fail_percentage)
        launch = next_hosts(state, limits)
        if spent_before:
            late.extend(launch)
        for host in launch:
            state.in_flight.add(host)
            heapq.heappush(events, (clock + durations[host], host))
        if launch:
            snapshots.append((clock, set(state.in_flight)))
        if not events:
            break
        clock, host = heapq.heappop(events)
        state.in_flight.discard(host)
        (state.failed if host in fails else state.done).add(host)
    return state, snapshots, late


@settings(max_examples=300, deadline=None)
@given(
    data=hosts_and_domains,
    window=st.integers(min_value=1, max_value=8),
    per_domain=st.one_of(st.none(), st.integers(min_value=1, max_value=3)),
    max_fail=st.one_of(st.none(), st.floats(min_value=0, max_value=50)),
)
def test_window_never_exceeds_limits_and_stops_once_budget_spent(
    data: tuple[list[str], list[str], list[float], list[bool]],
    window: int,
    per_domain: int | None,
    max_fail: float | None,
) -> None:
    hosts, domain_list, duration_list, fail_list = data
    domains = dict(zip(hosts, domain_list, strict=True))
    durations = dict(zip(hosts, duration_list, strict=True))
    fails = {h for h, f in zip(hosts, fail_list, strict=True) if f}
    limits = RolloutLimits(
        max_in_flight=window, max_unavailable_per_domain=per_domain, max_fail_percentage=max_fail
    )
    _, snapshots, late = simulate(hosts, domains, durations, fails, limits)

    for _, in_flight in snapshots:
        assert len(in_flight) <= window
        if per_domain is not None:
            # Failed hosts stay unavailable: count them with those in flight.
            for domain in set(domain_list):
                busy = [h for h in in_flight if domains[h] == domain]
                assert len(busy) <= per_domain
    assert late == []


@settings(max_examples=200, deadline=None)
@given(data=hosts_and_domains, window=st.integers(min_value=1, max_value=8))
def test_every_host_scheduled_when_nothing_fails(
    data: tuple[list[str], list[str], list[float], list[bool]], window: int
) -> None:
    hosts, domain_list, duration_list, _ = data
    domains = dict(zip(hosts, domain_list, strict=True))
    durations = dict(zip(hosts, duration_list, strict=True))
    limits = RolloutLimits(max_in_flight=window, max_unavailable_per_domain=1, max_fail_percentage=0)
    state, _, _ = simulate(hosts, domains, durations, set(), limits)
    assert state.done == set(hosts)
    assert not state.pending()


@settings(max_examples=200, deadline=None)
@given(data=hosts_and_domains, window=st.integers(min_value=1, max_value=8))
def test_per_domain_limit_counts_failed_hosts_as_unavailable(
    data: tuple[list[str], list[str], list[float], list[bool]], window: int
) -> None:
    hosts, domain_list, duration_list, fail_list = data
    domains = dict(zip(hosts, domain_list, strict=True))
    durations = dict(zip(hosts, duration_list, strict=True))
    fails = {h for h, f in zip(hosts, fail_list, strict=True) if f}
    limits = RolloutLimits(max_in_flight=window, max_unavailable_per_domain=1)
    state, _, _ = simulate(hosts, domains, durations, fails, limits)
    # A domain with a failed (left cordoned) host never starts another one after it.
    for domain in set(domain_list):
        failed_here = [h for h in state.failed if domains[h] == domain]
        assert len(failed_here) <= 1


@settings(max_examples=100, deadline=None)
@given(data=hosts_and_domains, window=st.integers(min_value=1, max_value=8))
def test_lower_bound_never_exceeds_a_real_schedule(
    data: tuple[list[str], list[str], list[float], list[bool]], window: int
) -> None:
    hosts, domain_list, duration_list, _ = data
    domains = dict(zip(hosts, domain_list, strict=True))
    durations = dict(zip(hosts, duration_list, strict=True))
    limits = RolloutLimits(max_in_flight=window, max_unavailable_per_domain=2)
    state = RolloutState(hosts=hosts, domain_of=domains)
    clock = 0.0
    events: list[tuple[float, str]] = []
    while True:
        for host in next_hosts(state, limits):
            state.in_flight.add(host)
            heapq.heappush(events, (clock + durations[host], host))
        if not events:
            break
        clock, host = heapq.heappop(events)
        state.in_flight.discard(host)
        state.done.add(host)
    assert lower_bound_makespan(durations, domains, window, 2) <= clock + 1e-9
