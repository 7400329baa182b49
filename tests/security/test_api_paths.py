"""Names go into Kubernetes API paths only when the apiserver would accept them, URL-encoded.

The attack: a node name `n1/../../namespaces/default/secrets/x` (from a `node` argument, a
host's `node_name` var or an inventory) went into `/api/v1/nodes/<name>` as is; the HTTP stack
normalised the dot segments and the request read a Secret. Every name is now checked against
the apiserver's rule for it (nodes, pods: DNS-1123 subdomain; namespaces: DNS-1123 label;
other kinds: a path segment) before any request, and the simulator's own request counters show
that nothing was asked of it.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from typer.testing import CliRunner

from activities.kube.capacity import capacity_check
from activities.kube.client import Kube, api_base, api_client, namespaced, node_path, pod_path, segment
from activities.kube.generic import get, patch
from activities.kube.job import run_job
from activities.kube.nodes import cordon
from activities.observe import observe
from pitstop.cli.app import app
from pitstop.kube.names import InvalidName, check_name
from pitstop.runbook.inventory import ClusterConfig
from pitstop_sim import SimCluster
from tests.integration.engine.conftest import RunFn
from tests.integration.kube import conftest as kube_fixtures
from tests.integration.kube.conftest import ModuleRunner, StartSim

start_sim, module_runner = kube_fixtures.start_sim, kube_fixtures.module_runner
engine_worker, start_run, run = kube_fixtures.engine_worker, kube_fixtures.start_run, kube_fixtures.run

TRAVERSAL = "n1/../../namespaces/default/secrets/x"
HOSTILE_NAMES = [
    TRAVERSAL,
    "..",
    ".",
    "n1%2F..%2F..%2Fsecrets",
    "n1?watch=true",
    "n1#frag",
    "gpu-node-001,metadata.name=x",
    "Gpu-Node-001",
    "-n1",
    "n1-",
    "a" * 254,
    "n1\n",
    "",
]
CLUSTER = """
cluster: {nodes: 2, domains: 1}
timing: {time_scale: 20}
"""


def _plant_secret(sim: SimCluster) -> None:
    sim.create(
        "secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}, "data": {"k": "dmFsdWU="}},
        namespace="default",
    )


def _secret_reads(sim: SimCluster) -> int:
    requests = sim.counters().requests
    return sum(n for label, n in requests.items() if "secrets" in label)


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=range(len(HOSTILE_NAMES)))
def test_hostile_names_are_refused_before_they_become_a_path(name: str) -> None:
    for build in (node_path, lambda n: pod_path("default", n), lambda n: pod_path(n, "p")):
        with pytest.raises(InvalidName, match="is not a valid"):
            build(name)
    if name:  # for `namespaced`, no namespace (None or "") means a cluster-wide path
        with pytest.raises(InvalidName):
            namespaced("/api/v1", "services", name, "svc")
    # Names of other kinds follow the path-segment rule: what could leave the segment is
    # refused, anything else is percent-encoded so it stays one segment.
    if any(bad in name for bad in ("/", "%")) or name in (".", ".."):
        with pytest.raises(InvalidName, match="is not a valid object name"):
            namespaced("/api/v1", "services", "default", name)
    elif name and name.isprintable():  # (no name: the collection's path)
        tail = namespaced("/api/v1", "services", "default", name).removeprefix(
            "/api/v1/namespaces/default/services/"
        )
        assert "/" not in tail and "?" not in tail and "#" not in tail


def test_the_message_names_the_rule() -> None:
    with pytest.raises(InvalidName) as err:
        node_path(TRAVERSAL)
    assert str(err.value).startswith(
        f"{TRAVERSAL!r} is not a valid node name: a node name is a DNS-1123 subdomain"
    )
    with pytest.raises(InvalidName, match="not a valid namespace: a namespace is a DNS-1123 label"):
        namespaced("/api/v1", "pods", "default.svc")
    with pytest.raises(InvalidName, match="not a valid apiVersion"):
        api_base("v1/../../api/v1/namespaces/default/secrets")


def test_valid_names_pass_and_other_kinds_names_are_encoded() -> None:
    assert node_path("gpu-node-001.zone-a") == "/api/v1/nodes/gpu-node-001.zone-a"
    assert check_name("system:node:n1", "object name", "segment") == "system:node:n1"
    assert namespaced("/apis/rbac.authorization.k8s.io/v1", "clusterroles", None, "system:node:n1 x") == (
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/system%3Anode%3An1%20x"
    )
    assert segment("a?b#c", "object name", "segment") == "a%3Fb%23c"
    assert api_base("kueue.x-k8s.io/v1beta1") == "/apis/kueue.x-k8s.io/v1beta1"


def test_the_unchecked_path_really_reads_the_secret(start_sim: StartSim) -> None:
    """Why the check matters: the same client, given the raw path, is served the Secret."""
    sim = start_sim(CLUSTER)
    _plant_secret(sim)
    sim.reset_counters()
    sim.register("rehearsal")  # the worker holds the cluster's kubeconfig; the inventory names it
    kube = Kube(api_client(ClusterConfig(name="rehearsal")))
    served = kube.get_or_none(f"/api/v1/nodes/{TRAVERSAL}")
    assert served is not None and served.get("kind") == "Secret"
    assert _secret_reads(sim) == 1


CALLS: list[tuple[Any, dict[str, Any], dict[str, Any]]] = [
    (cordon, {"node": TRAVERSAL}, {}),
    (cordon, {}, {"host_vars": {"node_name": TRAVERSAL}}),
    (cordon, {}, {"host": TRAVERSAL}),
    (observe, {}, {"host_vars": {"node_name": TRAVERSAL}}),
    (capacity_check, {}, {"host_vars": {"node_name": TRAVERSAL}}),
    (get, {"kind": "Node", "name": "../namespaces/default/secrets/x"}, {}),
    (get, {"kind": "Pod", "namespace": "default/secrets/x/..", "name": "p"}, {}),
    (get, {"api_version": "v1/namespaces/default/secrets/x/../../..", "kind": "Node"}, {}),
    (patch, {"kind": "Node", "name": "n1/../../namespaces/default/secrets/x", "patch": {}}, {}),
    (run_job, {"image": "busybox", "namespace": "default/secrets/x/.."}, {"host": "gpu-node-001"}),
]


@pytest.mark.parametrize("case", range(len(CALLS)))
def test_every_module_refuses_a_traversal_name_and_the_cluster_serves_nothing(
    start_sim: StartSim, module_runner: ModuleRunner, case: int
) -> None:
    sim = start_sim(CLUSTER)
    _plant_secret(sim)
    sim.reset_counters()
    activity_fn, args, call = CALLS[case]
    with pytest.raises(ApplicationError) as err:
        module_runner(activity_fn, sim, args, **call)
    assert err.value.type == "InvalidArgs" and err.value.non_retryable
    assert "is not a valid" in err.value.message
    assert _secret_reads(sim) == 0
    assert (
        sim.counters().requests.get("get nodes", 0) == 0
        and sim.counters().requests.get("patch nodes", 0) == 0
    )
    assert not (sim.get("nodes", "gpu-node-001") or {})["spec"].get("unschedulable")


def test_a_node_name_from_the_inventory_says_where_it_came_from(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    with pytest.raises(ApplicationError) as err:
        module_runner(cordon, sim, {}, host="n1", host_vars={"node_name": TRAVERSAL})
    assert err.value.message == (
        f"kube.cordon: {TRAVERSAL!r} is not a valid node name: a node name is a DNS-1123 subdomain "
        "(lowercase letters, digits, '-' and '.', at most 253 characters, each dot-separated part "
        "starting and ending with a letter or digit); it came from host n1's `node_name` var"
    )


def test_validate_refuses_a_literal_traversal_name_at_its_place(tmp_path: Path) -> None:
    runbook = tmp_path / "cordon.yaml"
    runbook.write_text(
        textwrap.dedent(
            f"""\
            name: cordon
            hosts: localhost
            tasks:
              - kube.cordon: {{node: "{TRAVERSAL}"}}
              - kube.get: {{kind: Secret, namespace: "default/../kube-system"}}
            """
        )
    )
    result = CliRunner().invoke(app, ["validate", str(runbook)])
    assert result.exit_code == 1
    assert f"{runbook}:4:" in result.output and "is not a valid node name" in result.output


async def test_a_run_whose_inventory_names_a_traversal_node_reads_no_secret(
    start_sim: StartSim, run: RunFn
) -> None:
    sim = start_sim(CLUSTER)
    sim.register("rehearsal")  # the worker holds the cluster's kubeconfig; the inventory names it
    _plant_secret(sim)
    sim.reset_counters()
    report = await run(
        """
        name: cordon
        hosts: nodes
        serial: 1
        tasks:
          - name: cordon
            kube.cordon: {reason: maintenance}
          - name: look
            kube.get: {kind: Node, name: "{{ node_name }}"}
        """,
        f"""
        cluster: {{name: rehearsal}}
        all:
          children:
            nodes:
              hosts:
                gpu-node-001: {{node_name: "{TRAVERSAL}"}}
        """,
    )
    host = report.stages[0].hosts[0]
    assert host.status == "failed" and host.failed_task == "cordon"
    assert "is not a valid node name" in host.msg
    assert _secret_reads(sim) == 0
    assert not (sim.get("nodes", "gpu-node-001") or {})["spec"].get("unschedulable")
