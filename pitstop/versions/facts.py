"""The `ssh_facts` argument of inventory.versions, as runbooks pass it, made `node -> facts`.

Accepted shapes:
  - the registered result of a looped `ssh.facts` task (`facts` or `facts.results`): a list of
    `{...facts, item: <node>, ansible_loop_var: item, changed, failed, skipped, msg}`;
    the node is the loop item (a name, or a mapping with `node_name`/`name`/`inventory_hostname`),
    else the facts' `hostname`;
  - one registered `ssh.facts` result (a mapping with `hostname`);
  - a mapping node -> facts (e.g. built with set_fact from hostvars).
Failed and skipped results are left out (and reported), as are names that match no node.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

# Keys every ssh.facts result has; a mapping with them is one result, not a node -> facts map.
_FACT_KEYS = ("hostname", "boot_id", "kernel")
_ITEM_NAME_KEYS = ("node_name", "node", "name", "inventory_hostname")


class FactsError(ValueError):
    """`ssh_facts` has a shape the module cannot read; the message says which shapes work."""


@dataclass
class NodeFacts:
    by_node: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _candidates(result: Mapping[str, Any]) -> list[str]:
    names: list[str] = []
    loop_var = str(result.get("ansible_loop_var") or "item")
    item = result.get(loop_var)
    if isinstance(item, str) and item:
        names.append(item)
    elif isinstance(item, Mapping):
        names += [str(item[k]) for k in _ITEM_NAME_KEYS if item.get(k)]
    if result.get("hostname"):
        names.append(str(result["hostname"]))
    return names


def _results(value: Any) -> list[tuple[str | None, Mapping[str, Any]]]:
    """(explicit node name or None, result) pairs."""
    if isinstance(value, Mapping) and isinstance(value.get("results"), list):
        value = value["results"]
    if isinstance(value, list):
        out: list[tuple[str | None, Mapping[str, Any]]] = []
        for index, entry in enumerate(value):
            if not isinstance(entry, Mapping):
                raise FactsError(
                    f"ssh_facts[{index}] is a {type(entry).__name__}, not a registered ssh.facts result "
                    "(pass the `results` of a looped ssh.facts task, or a mapping node -> facts)"
                )
            out.append((None, entry))
        return out
    if isinstance(value, Mapping):
        if any(k in value for k in _FACT_KEYS):
            return [(None, value)]
        pairs: list[tuple[str | None, Mapping[str, Any]]] = []
        for node, facts in value.items():
            if not isinstance(facts, Mapping):
                raise FactsError(
                    f"ssh_facts[{node!r}] is a {type(facts).__name__}; a mapping node -> facts needs "
                    "the registered ssh.facts result of each node"
                )
            pairs.append((str(node), facts))
        return pairs
    raise FactsError(
        f"ssh_facts is a {type(value).__name__}; give the registered results of a looped ssh.facts "
        "task (e.g. '{{ facts.results }}') or a mapping node -> facts"
    )


def facts_by_node(value: Any, nodes: Collection[str]) -> NodeFacts:
    """Each result under the name of the cluster node it belongs to."""
    out = NodeFacts()
    if value is None or value == [] or value == {}:
        return out
    for explicit, result in _results(value):
        names = [explicit] if explicit else _candidates(result)
        label = names[0] if names else "a result without item or hostname"
        if result.get("failed") or result.get("skipped"):
            why = str(result.get("msg") or ("failed" if result.get("failed") else "skipped"))
            out.notes.append(f"ssh facts of {label} not used: {why}")
            continue
        node = next((n for n in names if n in nodes), None)
        if node is None:
            out.notes.append(f"ssh facts of {label} match no node of the cluster; not used")
            continue
        out.by_node[node] = dict(result)
    return out
