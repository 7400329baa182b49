"""Pure host scheduling for a stage: serial batches, rolling windows, failure budget.

No Temporal imports and no I/O: the workflow asks "which hosts may start now?" after
every host completes, and these functions answer from the state it passes in. They are
exercised directly by property tests and by `bench/rollout_efficiency.py`.

Two strategies, as in the language:
- `serial` (Ansible): fixed batches; a batch finishes before the next one starts.
- `rolling` (pitstop): a sliding window; a new host starts as soon as a slot frees, subject
  to `max_in_flight` overall and `max_unavailable_per_domain` per failure domain. A host
  that failed and was left out of service (cordoned) still counts as unavailable in its
  domain, as the GPU Operator's upgrade controller counts cordoned nodes.

The failure budget is cumulative over the stage (unlike Ansible's per-batch maths): once
`failed / total > max_fail_percentage`, nothing new is launched.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

SerialValue = int | str


def resolve_count(value: SerialValue, total: int) -> int:
    """A number or "N%" of `total`, at least 1 (Ansible rounds percentages down)."""
    if isinstance(value, str):
        text = value.strip()
        if not text.endswith("%"):
            return max(1, int(text))
        pct = float(text[:-1])
        return max(1, int(total * pct / 100.0))
    return max(1, int(value))


def serial_batches(hosts: Sequence[str], serial: SerialValue | Sequence[SerialValue]) -> list[list[str]]:
    """Split hosts into Ansible `serial` batches; the last ramp value repeats."""
    ramp: list[SerialValue] = [serial] if isinstance(serial, int | str) else list(serial)
    if not ramp:
        raise ValueError("serial ramp list is empty")
    total = len(hosts)
    batches: list[list[str]] = []
    index = 0
    step = 0
    while index < total:
        size = resolve_count(ramp[min(step, len(ramp) - 1)], total)
        batches.append(list(hosts[index : index + size]))
        index += size
        step += 1
    return batches


def failure_budget_exceeded(failed: int, total: int, max_fail_percentage: float | None) -> bool:
    """Cumulative over the stage: exceeded when the failed share is strictly above the limit."""
    if total <= 0 or max_fail_percentage is None:
        return False
    return failed * 100.0 > max_fail_percentage * total


@dataclass(frozen=True)
class RolloutLimits:
    """Limits for one stage, already resolved to absolute numbers."""

    max_in_flight: int
    max_unavailable_per_domain: int | None = None
    max_fail_percentage: float | None = None
    any_errors_fatal: bool = False
    # A failed host stays out of service (e.g. left cordoned) and keeps using its
    # domain's unavailability allowance.
    failed_hosts_unavailable: bool = True


@dataclass
class RolloutState:
    """What the scheduler needs to know about a stage in progress."""

    hosts: list[str]
    domain_of: Mapping[str, str] = field(default_factory=dict)
    in_flight: set[str] = field(default_factory=set)
    done: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    skipped: set[str] = field(default_factory=set)
    # Hosts per domain that were already unavailable before the stage started.
    already_unavailable: Mapping[str, int] = field(default_factory=dict)
    # Serial batches: only these hosts may start now (None = every host of the stage).
    eligible: set[str] | None = None

    def pending(self) -> list[str]:
        finished = self.in_flight | self.done | self.failed | self.skipped
        return [h for h in self.hosts if h not in finished and (self.eligible is None or h in self.eligible)]

    def domain(self, host: str) -> str:
        return self.domain_of.get(host, "")

    def unavailable_by_domain(self, count_failed: bool) -> Counter[str]:
        counts: Counter[str] = Counter(self.already_unavailable)
        for host in self.in_flight:
            counts[self.domain(host)] += 1
        if count_failed:
            for host in self.failed:
                counts[self.domain(host)] += 1
        return counts


def stop_launching(state: RolloutState, limits: RolloutLimits) -> bool:
    """True once the stage may not start any new host."""
    if limits.any_errors_fatal and state.failed:
        return True
    return failure_budget_exceeded(len(state.failed), len(state.hosts), limits.max_fail_percentage)


def next_hosts(state: RolloutState, limits: RolloutLimits) -> list[str]:
    """Hosts that may start now under a sliding window.

    Without a per-domain limit: pending hosts in the order given by `state.hosts`.
    With one, slots go first to the domain with the most hosts still pending (its first
    pending host in order), so that no domain is left to finish alone at the end while the
    window sits idle — hosts listed rack by rack would otherwise drain the first racks
    first. A host blocked by its domain never blocks hosts of other domains.
    """
    if stop_launching(state, limits):
        return []
    free = limits.max_in_flight - len(state.in_flight)
    if free <= 0:
        return []
    pending = state.pending()
    cap = limits.max_unavailable_per_domain
    if cap is None:
        return pending[:free]
    unavailable = state.unavailable_by_domain(limits.failed_hosts_unavailable)
    queues: dict[str, list[str]] = {}
    for host in pending:
        queues.setdefault(state.domain(host), []).append(host)
    first_seen = {domain: i for i, domain in enumerate(queues)}
    chosen: list[str] = []
    while len(chosen) < free:
        open_domains = [d for d, q in queues.items() if q and unavailable[d] < cap]
        if not open_domains:
            break
        domain = max(open_domains, key=lambda d: (len(queues[d]), -first_seen[d]))
        chosen.append(queues[domain].pop(0))
        unavailable[domain] += 1
    return chosen


def blocked_reason(state: RolloutState, limits: RolloutLimits) -> str | None:
    """Why nothing can start while hosts remain pending (for status and reports)."""
    if not state.pending():
        return None
    if limits.any_errors_fatal and state.failed:
        return "any_errors_fatal: a host failed"
    if stop_launching(state, limits):
        return (
            f"failure budget spent: {len(state.failed)} of {len(state.hosts)} hosts failed "
            f"(max_fail_percentage {limits.max_fail_percentage:g})"
        )
    if len(state.in_flight) >= limits.max_in_flight:
        return f"window full: {len(state.in_flight)} in flight (max_in_flight {limits.max_in_flight})"
    if not next_hosts(state, limits):
        # Whether hosts are still in flight or not, say which domains hold the rest back.
        unavailable = state.unavailable_by_domain(limits.failed_hosts_unavailable)
        blocked = sorted({state.domain(h) for h in state.pending()})
        detail = ", ".join(f"{d or '(no domain)'}: {unavailable[d]} unavailable" for d in blocked)
        return (
            f"every pending host's failure domain is at max_unavailable_per_domain "
            f"{limits.max_unavailable_per_domain} ({detail})"
        )
    return None


def order_hosts(hosts: Sequence[str], domain_of: Mapping[str, str], order: str) -> list[str]:
    """`inventory` keeps the given order; `domain_round_robin` interleaves domains so that
    consecutive launches land in different failure domains."""
    if order != "domain_round_robin":
        return list(hosts)
    by_domain: dict[str, list[str]] = {}
    for host in hosts:
        by_domain.setdefault(domain_of.get(host, ""), []).append(host)
    queues = list(by_domain.values())
    result: list[str] = []
    for i in range(max((len(q) for q in queues), default=0)):
        result.extend(q[i] for q in queues if i < len(q))
    return result


def lower_bound_makespan(
    durations: Mapping[str, float],
    domain_of: Mapping[str, str],
    max_in_flight: int,
    max_unavailable_per_domain: int | None,
) -> float:
    """A lower bound on any schedule's makespan under the same limits (for benchmarks)."""
    if not durations:
        return 0.0
    total_work = sum(durations.values())
    bound = max(max(durations.values()), total_work / max_in_flight)
    if max_unavailable_per_domain is not None:
        per_domain: dict[str, float] = {}
        for host, seconds in durations.items():
            key = domain_of.get(host, "")
            per_domain[key] = per_domain.get(key, 0.0) + seconds
        bound = max(bound, max(per_domain.values()) / max_unavailable_per_domain)
    return bound
