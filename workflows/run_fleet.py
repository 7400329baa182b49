"""What of the fleet a host workflow's input carries: only what its tasks can name.

A child gets its own variables, `localhost`'s (run-wide facts live there), and of `hostvars`,
`groups`, `stage` and `run` only the keys its tasks, handlers and variables name
(`pitstop.runbook.fleet_refs`). A task list that reads one of them with a computed key gets all
of it: correct first, small where the runbook lets us. So a 10,000-host stage whose tasks name
no other host sends each child a few KB, whatever the fleet's size.

`FleetCache` keeps, for one execution of a run, what does not change from host to host: the
inventory's groups and each task list's references (computed once per stage, not per host,
so that launching N hosts costs O(N), not O(N²)). Pure: no Temporal calls, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pitstop.contracts import Plan
from pitstop.runbook.fleet_refs import ANY_KEY, SELF_KEY, FleetRefs, task_refs
from pitstop.runbook.models import Task
from pitstop.runbook.templating import is_template

LOCALHOST = "localhost"
# `stage` and `run` keys whose size grows with the fleet; the others are always sent.
STAGE_FLEET_KEYS = ("hosts", "done_hosts", "failed_hosts", "skipped_hosts", "results", "wave_hosts")
RUN_FLEET_KEYS = ("stages", "gates")


def all_groups(plan: Plan) -> dict[str, list[str]]:
    """Ansible's `groups` magic variable: each group's hosts, and `all`."""
    out: dict[str, list[str]] = {"all": []}
    for host, hv in plan.hostvars.items():
        if host != LOCALHOST:
            out["all"].append(host)
        for group in hv.get("group_names") or []:
            out.setdefault(str(group), []).append(host)
    return out


class FleetCache:
    """Per-execution caches of what every host of a stage shares (see the module docstring)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self._groups: dict[str, list[str]] | None = None
        self._positions: dict[str, int] | None = None
        self._refs: dict[tuple[str, tuple[str, ...]], FleetRefs] = {}

    def positions(self) -> dict[str, int]:
        """Each host's place in the inventory (to keep views in its order cheaply)."""
        if self._positions is None:
            self._positions = {h: i for i, h in enumerate(self.plan.hostvars)}
        return self._positions

    def groups(self) -> dict[str, list[str]]:
        if self._groups is None:
            self._groups = all_groups(self.plan)
        return self._groups

    def refs(self, scope: str, tasks: Sequence[Task], handlers: Sequence[Task], stage_vars: Any) -> FleetRefs:
        """What a task list (with its handlers) reads of the fleet. Variable values are never
        rendered a second time, so they name nothing; a layer that sets `inventory_hostname`
        makes `hostvars[inventory_hostname]` any host."""
        key = (scope, tuple(t.task_id for t in (*tasks, *handlers)))
        refs = self._refs.get(key)
        if refs is None:
            plan = self.plan
            rebinds = any(SELF_KEY in layer for layer in (plan.runbook.vars, stage_vars, plan.extra_vars))
            refs = task_refs([*tasks, *handlers], rebinds_self=rebinds)
            delegates = {t.delegate_to for task in (*tasks, *handlers) for t in task.walk() if t.delegate_to}
            # A templated `delegate_to` may name any host: its connection variables must be at hand.
            named = ANY_KEY if any(is_template(d) for d in delegates) else frozenset(delegates)
            refs = refs.union(FleetRefs({"hostvars": named}))
            self._refs[key] = refs
        return refs


def hostvars_view(
    fleet: FleetCache, host: str, refs: FleetRefs, localhost_facts: Mapping[str, Any] | None
) -> dict[str, dict[str, Any]]:
    """`hostvars` as the host's input carries it: itself, `localhost` (with the run-wide facts
    set there in earlier stages), and the hosts its tasks name; every host if they compute the
    name. Other hosts' facts stay their own. In the inventory's order, as Ansible gives it."""
    everything = fleet.plan.hostvars
    keys = refs.keys("hostvars")
    if refs.reads("hostvars") and keys is None:
        view = dict(everything)
    else:
        position = fleet.positions()
        wanted = sorted(
            (h for h in {host, LOCALHOST, *(keys or ())} if h in position), key=position.__getitem__
        )
        view = {h: everything[h] for h in wanted}
    if localhost_facts:
        view[LOCALHOST] = {**view.get(LOCALHOST, {"inventory_hostname": LOCALHOST}), **localhost_facts}
    return view


def groups_view(groups: Mapping[str, list[str]], refs: FleetRefs) -> dict[str, list[str]]:
    if not refs.reads("groups"):
        return {}
    keys = refs.keys("groups")
    return {g: hosts for g, hosts in groups.items() if keys is None or g in keys}


def fleet_keys_read(refs: FleetRefs, variable: str, fleet_keys: Sequence[str]) -> set[str]:
    """Which of a variable's fleet-sized keys its readers may read."""
    if not refs.reads(variable):
        return set()
    keys = refs.keys(variable)
    return set(fleet_keys) if keys is None else {k for k in fleet_keys if k in keys}


def trimmed(
    value: Mapping[str, Any], refs: FleetRefs, variable: str, fleet_keys: Sequence[str]
) -> dict[str, Any]:
    """`stage` or `run` without the fleet-sized keys its readers do not name."""
    keep = fleet_keys_read(refs, variable, fleet_keys)
    return {k: v for k, v in value.items() if k not in fleet_keys or k in keep}
