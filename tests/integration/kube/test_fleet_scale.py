"""A fleet-sized run through the engine: 200 nodes from `from_nodes`, 100 in flight, 25 per
failure domain (issue 15: 200 nodes with 100 in flight failed at once with
GrpcMessageTooLarge, because every child's input carried every host's variables).

It checks what a user would see (the run succeeds, every node is annotated with the run's id,
the limits held) and what Temporal would refuse at a larger size: no payload in the run's
histories grows with the fleet."""

from __future__ import annotations

import textwrap

from temporalio.client import Client

from pitstop.contracts import HostResult
from pitstop_sim import SimCluster
from tests.integration.engine.conftest import StartFn
from tests.integration.kube.conftest import StartSim
from tests.payload_sizes import largest_payload, run_histories

NODES = 200
DOMAINS = 8
# A child's input is its own variables and tasks: a few KB at any fleet size (it was ~120 KB per
# child at 200 nodes, 615 KB at 1,000). Anything run-wide and large (the plan with every node's
# labels, the report) goes to the payload store; no payload may reach 256 KB (issue 15).
CHILD_INPUT_LIMIT = 16 * 1024
PAYLOAD_LIMIT = 256 * 1024

RUNBOOK = """
name: fleet-annotate
stages:
  - name: annotate
    hosts: gpu
    rolling: {max_in_flight: 100, max_unavailable_per_domain: 25}
    tasks:
      - name: mark
        kube.annotate:
          annotations:
            pitstop.dev/fleet-run: "{{ run.id }}"
            pitstop.dev/fleet-domain: "{{ failure_domain }}"
      - debug: {msg: "{{ inventory_hostname }} done in {{ stage.name }}"}
"""


def peak(hosts: list[HostResult]) -> int:
    """The most hosts whose runs overlapped at any moment."""
    edges = sorted([(h.started_at, 1) for h in hosts] + [(h.ended_at, -1) for h in hosts])
    running = most = 0
    for _, step in edges:  # at equal times an end (-1) sorts before a start (+1)
        running += step
        most = max(most, running)
    return most


def inventory(sim: SimCluster) -> str:
    sim.register("rehearsal")
    return textwrap.dedent(
        """
        cluster: {name: rehearsal}
        all:
          children:
            gpu:
              from_nodes:
                selector: nvidia.com/gpu.present=true
                domain_label: topology.kubernetes.io/zone
        """
    )


async def test_two_hundred_nodes_with_a_hundred_in_flight(
    start_sim: StartSim, start_run: StartFn, temporal_client: Client
) -> None:
    sim = start_sim(f"cluster: {{nodes: {NODES}, domains: {DOMAINS}, gpus_per_node: 8}}\n")
    handle = await start_run(RUNBOOK, inventory(sim))
    report = await handle.result()
    assert report.status == "succeeded", report.msg
    [stage] = report.stages
    assert len(stage.hosts) == NODES and {h.status for h in stage.hosts} == {"ok"}
    nodes = [n for n in sim.list("nodes") if n["metadata"]["labels"].get("nvidia.com/gpu.present") == "true"]
    assert len(nodes) == NODES
    for node in nodes:
        notes = node["metadata"].get("annotations") or {}
        assert notes.get("pitstop.dev/fleet-run") == report.run_id
        assert (
            notes.get("pitstop.dev/fleet-domain") == node["metadata"]["labels"]["topology.kubernetes.io/zone"]
        )

    # Annotated exactly once: the simulator counts each change of the annotation's value.
    writes = sim.writes("nodes", annotation="pitstop.dev/fleet-run").objects
    assert len(writes) == NODES
    assert {w.annotation_changes.get("pitstop.dev/fleet-run") for w in writes.values()} == {1}

    # The limits held: at no moment more than 100 hosts ran, nor 25 of one domain.
    zone = {n["metadata"]["name"]: n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in nodes}
    assert peak(stage.hosts) <= 100
    for domain in set(zone.values()):
        assert peak([h for h in stage.hosts if zone[h.host] == domain]) <= 25, domain

    # What Temporal stored: each child's input (in the run's histories, every execution) is
    # the child's own, and nothing in any history of the run comes near Temporal's limits.
    child_inputs = [
        p
        for history in await run_histories(temporal_client, handle.id)
        for e in history.events
        if e.HasField("start_child_workflow_execution_initiated_event_attributes")
        for p in e.start_child_workflow_execution_initiated_event_attributes.input.payloads
    ]
    assert len(child_inputs) == NODES
    largest_child_input = max(p.ByteSize() for p in child_inputs)
    assert largest_child_input < CHILD_INPUT_LIMIT, largest_child_input
    # Every execution of the run, and a sample of host workflows (all 300 are alike).
    histories = await run_histories(temporal_client, handle.id)
    for node in nodes[:: NODES // 12]:
        child = temporal_client.get_workflow_handle(f"{handle.id}/annotate/{node['metadata']['name']}")
        histories.append(await child.fetch_history())
    largest = max(p for h in histories if (p := largest_payload(h)) is not None)
    assert largest.size < PAYLOAD_LIMIT, str(largest)
