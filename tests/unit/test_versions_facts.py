"""The SSH facts inventory.versions is given, and the new read-only version probes of ssh.facts:
the shapes runbooks register (looped results, one result, node -> facts) and the tools' output."""

from __future__ import annotations

from typing import Any

import pytest

from activities.versions import helm_releases
from pitstop.helm import HelmRelease, encode_release
from pitstop.ssh import protocol
from pitstop.ssh.facts import parse_containerd_version, parse_kubelet_version, parse_ofed_version
from pitstop.versions.facts import FactsError, facts_by_node

NODES = {"gpu-node-001", "gpu-node-002", "cp-001"}


def result(hostname: str, **extra: Any) -> dict[str, Any]:
    return {
        "hostname": hostname,
        "kernel": "5.15.0",
        "boot_id": "b",
        "gpu_driver": "550.90.07",
        "changed": False,
        "failed": False,
        "skipped": False,
        "msg": "",
        **extra,
    }


def test_looped_results_are_keyed_by_their_loop_item_then_their_hostname() -> None:
    registered = {
        "changed": False,
        "results": [
            result("ip-10-0-0-1", item="gpu-node-001", ansible_loop_var="item"),
            result("gpu-node-002", host={"inventory_hostname": "gpu-2"}, ansible_loop_var="host"),
            result("cp-001", item={"node_name": "cp-001", "name": "control"}, ansible_loop_var="item"),
        ],
    }
    got = facts_by_node(registered, NODES)
    assert sorted(got.by_node) == ["cp-001", "gpu-node-001", "gpu-node-002"]
    assert got.by_node["gpu-node-001"]["hostname"] == "ip-10-0-0-1"
    assert got.notes == []
    # The list itself (`facts.results`) works the same.
    assert sorted(facts_by_node(registered["results"], NODES).by_node) == sorted(got.by_node)


def test_failed_skipped_and_unknown_hosts_are_left_out_with_a_note() -> None:
    got = facts_by_node(
        [
            result("gpu-node-001", item="gpu-node-001", failed=True, msg="ssh: connection refused"),
            {"item": "gpu-node-002", "skipped": True, "changed": False, "failed": False, "msg": ""},
            result("bastion", item="bastion"),
        ],
        NODES,
    )
    assert got.by_node == {}
    assert got.notes == [
        "ssh facts of gpu-node-001 not used: ssh: connection refused",
        "ssh facts of gpu-node-002 not used: skipped",
        "ssh facts of bastion match no node of the cluster; not used",
    ]


def test_one_result_or_a_node_to_facts_mapping_is_accepted() -> None:
    assert list(facts_by_node(result("gpu-node-002"), NODES).by_node) == ["gpu-node-002"]
    mapping = {"gpu-node-001": result("x"), "cp-001": result("y")}
    assert sorted(facts_by_node(mapping, NODES).by_node) == ["cp-001", "gpu-node-001"]
    assert facts_by_node(None, NODES).by_node == {}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("gpu-node-001", "ssh_facts is a str; give the registered results of a looped ssh.facts task"),
        ([1], "ssh_facts[0] is a int, not a registered ssh.facts result"),
        ({"gpu-node-001": "550"}, "ssh_facts['gpu-node-001'] is a str; a mapping node -> facts needs"),
    ],
)
def test_unreadable_shapes_say_which_shapes_work(value: Any, message: str) -> None:
    with pytest.raises(FactsError, match=message.replace("[", r"\[").replace("]", r"\]")):
        facts_by_node(value, NODES)


def test_version_probe_outputs_are_parsed_as_the_components_print_them() -> None:
    assert parse_kubelet_version("Kubernetes v1.30.6\n") == "v1.30.6"
    assert parse_kubelet_version("kubelet: command not found") is None
    assert (
        parse_containerd_version("containerd containerd.io 1.7.20 8fc6bcff51318944179630522a095cc9dbf9f353")
        == "1.7.20"
    )
    assert (
        parse_containerd_version("containerd github.com/containerd/containerd v1.7.22 7f7fdf5f") == "1.7.22"
    )
    assert parse_ofed_version("MLNX_OFED_LINUX-24.07-0.6.1.0:\n") == "24.07-0.6.1.0"
    assert parse_ofed_version("OFED-internal-24.10-1.1.4.0:") == "24.10-1.1.4.0"
    assert parse_ofed_version("") is None
    assert protocol.package_version("containerd.io") == "dpkg-query -W -f='${Version}' containerd.io"


def test_helm_records_the_newest_revision_wins_and_unreadable_ones_are_noted() -> None:
    def secret(revision: int, app: str) -> dict[str, Any]:
        release = HelmRelease(
            name="gpu-operator",
            namespace="gpu-operator",
            version=revision,
            chart_name="gpu-operator",
            chart_version=app,
            app_version=app,
        )
        return encode_release(release)

    broken = {"metadata": {"name": "sh.helm.release.v1.x.v1", "namespace": "ops"}, "data": {"release": "%%%"}}
    notes: list[str] = []
    releases = helm_releases(
        [secret(3, "v24.6.2"), broken, secret(4, "v24.9.2"), secret(2, "v24.3.0")], notes
    )
    assert [(r.name, r.version, r.app_version) for r in releases] == [("gpu-operator", 4, "v24.9.2")]
    assert len(notes) == 1
    assert notes[0].startswith("secret ops/sh.helm.release.v1.x.v1: data.release is not base64")
