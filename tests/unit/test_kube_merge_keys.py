"""The one strategic-merge table (`pitstop.kube.merge_keys`) against the upstream struct tags,
and the two sides that read it: kubectl's apply (`pitstop.kube.apply`) computes a patch that
the rehearsal cluster's apiserver (`pitstop_sim.patch`) applies to the intended object.

Each expected row is a `patchStrategy`/`patchMergeKey` struct tag of k8s.io/api (core/v1,
apps/v1, batch/v1, policy/v1 types.go) or k8s.io/apimachinery (meta/v1 ObjectMeta); a list
without a tag is atomic (replaced whole).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pitstop.kube.apply import last_applied_of, three_way_strategic_merge_patch, with_last_applied
from pitstop.kube.merge_keys import ListMerge, list_merge
from pitstop_sim.patch import PatchError, strategic_merge_patch

Obj = dict[str, Any]

UPSTREAM_TAGS = [
    # (parent, field, merge key; None = primitives merged as a set), where the tag stands
    ("metadata", "ownerReferences", "uid"),  # meta/v1 ObjectMeta.OwnerReferences
    ("metadata", "finalizers", None),  # meta/v1 ObjectMeta.Finalizers (patchStrategy merge)
    ("spec", "containers", "name"),  # core/v1 PodSpec.Containers
    ("spec", "initContainers", "name"),
    ("spec", "ephemeralContainers", "name"),
    ("spec", "volumes", "name"),  # patchStrategy "merge,retainKeys"
    ("spec", "imagePullSecrets", "name"),
    ("spec", "hostAliases", "ip"),
    ("spec", "topologySpreadConstraints", "topologyKey"),
    ("spec", "schedulingGates", "name"),
    ("spec", "resourceClaims", "name"),
    ("containers", "ports", "containerPort"),  # core/v1 Container.Ports
    ("initContainers", "ports", "containerPort"),
    ("containers", "env", "name"),
    ("containers", "volumeMounts", "mountPath"),
    ("containers", "volumeDevices", "devicePath"),
    ("spec", "ports", "port"),  # core/v1 ServiceSpec.Ports
    ("status", "conditions", "type"),  # PodStatus, NodeStatus, DeploymentStatus, PDB status, ...
    ("status", "addresses", "type"),  # core/v1 NodeStatus.Addresses
    ("status", "podIPs", "ip"),  # core/v1 PodStatus.PodIPs
    ("spec", "podCIDRs", None),  # core/v1 NodeSpec.PodCIDRs
    ("", "secrets", "name"),  # core/v1 ServiceAccount.Secrets
]

ATOMIC = [
    ("spec", "taints"),  # core/v1 NodeSpec.Taints: no patch strategy
    ("spec", "tolerations"),  # core/v1 PodSpec.Tolerations
    ("containers", "command"),
    ("ingress", "ports"),  # networking/v1 NetworkPolicyIngressRule.Ports
    ("subsets", "addresses"),  # core/v1 EndpointSubset.Addresses
    ("", "ports"),  # discovery/v1 EndpointSlice.Ports
]


@pytest.mark.parametrize(("parent", "field", "key"), UPSTREAM_TAGS)
def test_the_table_holds_the_upstream_merge_keys(parent: str, field: str, key: str | None) -> None:
    assert list_merge(field, parent) == ListMerge(key)


@pytest.mark.parametrize(("parent", "field"), ATOMIC)
def test_lists_without_a_patch_strategy_are_replaced_whole(parent: str, field: str) -> None:
    assert list_merge(field, parent) is None


def test_the_apiserver_merges_service_ports_on_port() -> None:
    # ServiceSpec.Ports: patchMergeKey "port". The simulator used to key every `ports` list on
    # containerPort and refused this patch ("does not contain the merge key").
    service = {"spec": {"ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}]}}
    patched = strategic_merge_patch(service, {"spec": {"ports": [{"port": 443, "targetPort": 8443}]}})
    assert patched["spec"]["ports"] == [
        {"name": "http", "port": 80},
        {"name": "https", "port": 443, "targetPort": 8443},
    ]
    pod = {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80}]}]}}
    with pytest.raises(PatchError, match="merge key 'containerPort'"):
        strategic_merge_patch(pod, {"spec": {"containers": [{"name": "c", "ports": [{"port": 80}]}]}})


def test_kubectls_patch_of_a_node_status_merges_addresses_and_conditions_by_type() -> None:
    # NodeStatus.Addresses and .Conditions: patchMergeKey "type". pitstop's apply used to
    # replace both lists whole.
    def node(ready: str) -> Obj:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n1"},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "conditions": [{"type": "Ready", "status": ready}],
            },
        }

    old, new = node("False"), node("True")
    live = with_last_applied(old)
    live["status"]["conditions"].append({"type": "DiskPressure", "status": "False"})
    patch = three_way_strategic_merge_patch(json.loads(last_applied_of(old)), with_last_applied(new), live)
    # kubectl (apimachinery's diffLists) also sends the manifest's order of a changed list.
    assert patch["status"] == {
        "conditions": [{"type": "Ready", "status": "True"}],
        "$setElementOrder/conditions": [{"type": "Ready"}],
    }
    applied = strategic_merge_patch(live, patch)
    assert applied["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "DiskPressure", "status": "False"},  # set by another writer: kept
    ]


def test_what_apply_sends_the_apiserver_turns_into_the_manifest() -> None:
    # The two readers of the table, end to end: kubectl's three-way patch for a changed
    # Deployment and Service, applied as the apiserver applies it, gives the new manifest.
    def objects(image: str, port: int, env: list[Obj]) -> list[Obj]:
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "finalizers": ["a"]},
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "c", "image": image, "env": env, "ports": [{"containerPort": port}]}
                        ]
                    }
                }
            },
        }
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"ports": [{"name": "http", "port": port, "targetPort": port}]},
        }
        return [deployment, service]

    before = objects("web:1", 80, [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
    after = objects("web:2", 8080, [{"name": "B", "value": "3"}])
    for old, new in zip(before, after, strict=True):
        live = with_last_applied(old)
        patch = three_way_strategic_merge_patch(
            json.loads(last_applied_of(old)), with_last_applied(new), live
        )
        assert strategic_merge_patch(live, patch) == with_last_applied(new)
