"""Inventories as in Ansible's YAML format, plus a `cluster:` block and dynamic groups.

The `cluster:` block names the cluster and keeps what is the inventory's to say (the task
queue of a worker next to it, the SSH user and port, the name of the SSH key's secret). How
to reach the cluster — its kubeconfig and context, in-cluster credentials, the nodes'
known_hosts file — is the worker's (PITSTOP_WORKER_POLICY, docs/policy.md): an inventory that
sets it is refused where it says so, because an inventory is untrusted input and a kubeconfig
or known_hosts path would let it choose which worker file is used (and a kubeconfig can run
programs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from pitstop.kube.selectors import parse_selector, selector_matches
from pitstop.module_spec import SecretRef
from pitstop.runbook._checks import (
    check_inline_secrets,
    check_secret_ref_fields,
    check_template_syntax,
    field_keys,
    require_mapping,
    type_name,
    validate_model,
)
from pitstop.runbook._yaml import Node, YamlDoc, load_yaml
from pitstop.runbook.patterns import resolve_pattern


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SSHConfig(_Frozen):
    """SSH defaults for the cluster's nodes."""

    user: str | None = None
    port: int = Field(default=22, ge=1, le=65535)
    key: SecretRef | None = None
    # known_hosts lines held in a secret, instead of the worker's file for the cluster.
    known_hosts_secret: SecretRef | None = None
    jump_host: str | None = None


class ClusterConfig(_Frozen):
    """Which cluster this inventory describes (the worker knows how to reach it)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    # None: module activities run on the same queue as the run itself.
    task_queue: str | None = None
    ssh: SSHConfig | None = None


class FromNodes(_Frozen):
    """A dynamic group: the cluster's nodes matching a label selector."""

    selector: str = ""
    # Label whose value becomes the host's `failure_domain`.
    domain_label: str | None = None


class Group(_Frozen):
    name: str
    hosts: list[str] = []
    children: list[str] = []
    vars: dict[str, Any] = {}
    from_nodes: FromNodes | None = None


_GROUP_KEYS = ["hosts", "vars", "children", "from_nodes"]
_TOP_KEYS = ["all", "cluster"]
# What the worker holds, not the inventory: key -> what the worker's operator configures instead.
_WORKER_HELD = {
    "kubeconfig": "its kubeconfig at $PITSTOP_HOME/clusters/{name}/kubeconfig, or clusters.{name}.kubeconfig",
    "context": "clusters.{name}.context",
    "in_cluster": "clusters.{name}.in_cluster",
}
_WORKER_HELD_SSH = {
    "known_hosts": "its nodes' known_hosts at $PITSTOP_HOME/clusters/{name}/known_hosts, or "
    "clusters.{name}.known_hosts (or name a secret here with known_hosts_secret)",
}


def _refuse_worker_held(cluster_node: Node) -> None:
    raw = cluster_node.value
    name = raw.get("name") if isinstance(raw.get("name"), str) else "NAME"
    sections = [(cluster_node, "cluster", _WORKER_HELD)]
    if isinstance(raw.get("ssh"), dict):
        sections.append((cluster_node.child("ssh"), "cluster.ssh", _WORKER_HELD_SSH))
    for node, where, held in sections:
        for key, instead in held.items():
            if key in node.value:
                raise node.child(key).error(
                    f"{where}.{key} is not the inventory's to set: the worker holds how it reaches "
                    f"cluster '{name}'. Remove it, and have the worker's operator register the "
                    f"cluster on the worker: {instead.format(name=name)} in PITSTOP_WORKER_POLICY "
                    "(see docs/policy.md)",
                    at_key=True,
                )


class Inventory(_Frozen):
    """Hosts (in inventory order) with their own vars, groups, and the cluster block."""

    path: str | None = None
    hosts: dict[str, dict[str, Any]] = {}
    groups: dict[str, Group] = {}
    cluster: ClusterConfig | None = None

    def host_names(self) -> list[str]:
        return list(self.hosts)

    def group_hosts(self, name: str) -> list[str]:
        """Hosts of a group and of all its descendants, in inventory order."""
        if name == "all":
            return list(self.hosts)
        members: set[str] = set()
        pending = [name]
        seen: set[str] = set()
        while pending:
            current = pending.pop()
            if current in seen or current not in self.groups:
                continue
            seen.add(current)
            members.update(self.groups[current].hosts)
            pending.extend(self.groups[current].children)
        return [h for h in self.hosts if h in members]

    def group_names(self, host: str) -> list[str]:
        """Groups containing `host` (directly or through children), sorted; without `all`."""
        return sorted(g for g in self.groups if g != "all" and host in self.group_hosts(g))

    def _depths(self) -> dict[str, int]:
        depths = {"all": 0}
        changed = True
        # Longest path from `all`: a child is always deeper than each of its parents.
        while changed:
            changed = False
            for group in self.groups.values():
                base = depths.get(group.name)
                if base is None:
                    continue
                for child in group.children:
                    if depths.get(child, -1) < base + 1 and base + 1 <= len(self.groups):
                        depths[child] = base + 1
                        changed = True
        return depths

    def hostvars(self, host: str) -> dict[str, Any]:
        """Ansible's precedence: all vars < parent group < child group < host vars."""
        if host not in self.hosts:
            raise KeyError(host)
        depths = self._depths()
        groups = sorted(self.group_names(host), key=lambda g: (depths.get(g, 1), g))
        merged: dict[str, Any] = dict(self.groups["all"].vars) if "all" in self.groups else {}
        for name in groups:
            merged.update(self.groups[name].vars)
        merged.update(self.hosts[host])
        merged["inventory_hostname"] = host
        merged["group_names"] = sorted(groups)
        return merged

    def resolve(self, pattern: str) -> list[str]:
        """Hosts matched by an Ansible host pattern, in inventory order."""
        groups = {name: group.hosts for name, group in self.groups.items()}
        return resolve_pattern(pattern, list(self.hosts), groups, self.group_hosts)

    def stage_hosts(self, pattern: str) -> list[str]:
        """A stage's hosts: its pattern resolved, with Ansible's implicit localhost (a stage of
        `hosts: localhost` runs on the worker whether or not the inventory names it)."""
        if pattern.strip() in ("localhost", "127.0.0.1") and "localhost" not in self.hosts:
            return ["localhost"]
        return self.resolve(pattern)

    def dynamic_groups(self) -> list[Group]:
        return [g for g in self.groups.values() if g.from_nodes is not None]

    def with_nodes(self, nodes: list[tuple[str, dict[str, str]]]) -> Inventory:
        """A copy where each `from_nodes` group holds the matching cluster nodes."""
        hosts = {name: dict(hvars) for name, hvars in self.hosts.items()}
        groups = dict(self.groups)
        for group in self.dynamic_groups():
            assert group.from_nodes is not None
            members: list[str] = list(group.hosts)
            for node_name, labels in nodes:
                if not selector_matches(group.from_nodes.selector, labels):
                    continue
                node_vars = hosts.setdefault(node_name, {})
                node_vars["labels"] = dict(labels)
                domain_label = group.from_nodes.domain_label
                if domain_label is not None and domain_label in labels:
                    node_vars["failure_domain"] = labels[domain_label]
                if node_name not in members:
                    members.append(node_name)
            groups[group.name] = group.model_copy(update={"hosts": members})
        return self.model_copy(update={"hosts": hosts, "groups": groups})


class _Builder:
    """Collects groups and hosts while walking the YAML tree."""

    def __init__(self) -> None:
        self.hosts: dict[str, dict[str, Any]] = {}
        self.groups: dict[str, dict[str, Any]] = {}

    def group(self, name: str, node: Node) -> None:
        raw = node.value
        entry = self.groups.setdefault(name, {"name": name, "hosts": [], "children": [], "vars": {}})
        if raw is None:
            return
        require_mapping(node, f"group '{name}'")
        node.check_keys(_GROUP_KEYS, f"group '{name}'")
        if "vars" in raw and raw["vars"] is not None:
            require_mapping(node.child("vars"), f"vars of group '{name}'")
            check_inline_secrets(node.child("vars"))
            entry["vars"].update(raw["vars"])
        if "hosts" in raw and raw["hosts"] is not None:
            hosts_node = node.child("hosts")
            if not isinstance(raw["hosts"], dict):
                raise hosts_node.error(
                    f"hosts of group '{name}' must be a mapping of host names to their vars "
                    f"(e.g. `gpu-01: {{}}`), got {type_name(raw['hosts'])}"
                )
            for host, host_vars in raw["hosts"].items():
                host_node = hosts_node.child(host)
                if host_vars is not None:
                    require_mapping(host_node, f"vars of host '{host}'")
                    check_inline_secrets(host_node)
                self.hosts.setdefault(str(host), {}).update(host_vars or {})
                if str(host) not in entry["hosts"]:
                    entry["hosts"].append(str(host))
        if "from_nodes" in raw:
            from_node = node.child("from_nodes")
            require_mapping(from_node, "from_nodes")
            from_node.check_keys(field_keys(FromNodes), "from_nodes")
            spec = validate_model(FromNodes, raw["from_nodes"], from_node, "from_nodes")
            try:
                parse_selector(spec.selector)
            except ValueError as exc:
                raise from_node.child("selector").error(str(exc)) from None
            entry["from_nodes"] = spec
        if "children" in raw and raw["children"] is not None:
            children_node = node.child("children")
            if not isinstance(raw["children"], dict):
                raise children_node.error(
                    f"children of group '{name}' must be a mapping of group names, "
                    f"got {type_name(raw['children'])}"
                )
            for child in raw["children"]:
                if str(child) == "all":
                    raise children_node.child(child).error("'all' cannot be a child group", at_key=True)
                if str(child) not in entry["children"]:
                    entry["children"].append(str(child))
                self.group(str(child), children_node.child(child))


def parse_inventory(doc: YamlDoc) -> Inventory:
    root = doc.root()
    raw = require_mapping(root, "an inventory")
    root.check_keys(_TOP_KEYS, "inventory")
    if "all" not in raw:
        raise root.error("an inventory needs a top-level 'all:' group")
    check_template_syntax(root)
    builder = _Builder()
    builder.group("all", root.child("all"))
    cluster = None
    if "cluster" in raw:
        cluster_node = root.child("cluster")
        require_mapping(cluster_node, "cluster")
        _refuse_worker_held(cluster_node)
        cluster_node.check_keys(field_keys(ClusterConfig), "cluster")
        if isinstance(raw["cluster"].get("ssh"), dict):
            cluster_node.child("ssh").check_keys(field_keys(SSHConfig), "cluster.ssh")
        check_secret_ref_fields(ClusterConfig, cluster_node)
        cluster = validate_model(ClusterConfig, raw["cluster"], cluster_node, "cluster")
    groups = {name: Group.model_validate(data) for name, data in builder.groups.items()}
    return Inventory(path=doc.path, hosts=builder.hosts, groups=groups, cluster=cluster)


def load_inventory(path: str | Path) -> Inventory:
    """Load and validate an inventory file; errors are RunbookError with positions."""
    return parse_inventory(load_yaml(path))
