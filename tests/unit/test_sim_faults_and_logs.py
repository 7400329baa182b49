"""Fault matching, validation logs, table cells and the unavailability report."""

from __future__ import annotations

from datetime import UTC, datetime

from pitstop_sim.clock import human_duration
from pitstop_sim.counters import unavailability
from pitstop_sim.faults import FaultInjector, RequestInfo
from pitstop_sim.models import ApiErrorFault, LatencyFault, NodeHealth, NodeProfile, TimelineEvent
from pitstop_sim.tables import _node_row
from pitstop_sim.validation_logs import produce


def profile(**health: object) -> NodeProfile:
    return NodeProfile(
        name="gpu-node-001",
        domain="zone-a",
        gpu_product="NVIDIA-H100-80GB-HBM3",
        gpus=8,
        driver_version="550.90.07",
        firmware_version="fw",
        kernel_version="k",
        os_image="os",
        kubelet_version="v1.32.4",
        container_runtime="containerd://1.7.20",
        health=NodeHealth.model_validate(health),
    )


def test_error_fault_counts_skips_and_matches_the_subresource() -> None:
    faults = FaultInjector()
    faults.add_error(
        ApiErrorFault(verb="create", resource="pods", subresource="eviction", status=500, count=2, after=1)
    )
    eviction = RequestInfo("create", "pods", "eviction", "ns", "p")
    outcomes = [faults.error_for(eviction) for _ in range(4)]
    assert [o.code if o else None for o in outcomes] == [None, 500, 500, None]
    assert faults.error_for(RequestInfo("create", "pods", None, "ns", None)) is None
    assert outcomes[1] is not None and outcomes[1].reason == "InternalError"


def test_rate_faults_are_reproducible_with_a_seed() -> None:
    def run() -> list[bool]:
        faults = FaultInjector(seed=7)
        faults.add_error(ApiErrorFault(status=503, rate=0.5))
        return [faults.error_for(RequestInfo("get", "nodes")) is not None for _ in range(40)]

    first = run()
    assert first == run()
    assert 5 < sum(first) < 35


def test_latency_adds_up_for_matching_requests() -> None:
    faults = FaultInjector()
    faults.add_latency(LatencyFault(verb="list", resource="pods", ms=150))
    faults.add_latency(LatencyFault(ms=50))
    assert faults.delay_seconds(RequestInfo("list", "pods")) == 0.2
    assert faults.delay_seconds(RequestInfo("get", "nodes")) == 0.05


EMBEDDED = {"spec": {"containers": [{"command": ["sh", "-c", "nv-hostengine && dcgmi diag -r 3 -j"]}]}}


def test_dcgm_log_fails_the_tests_in_the_health_profile() -> None:
    healthy = produce("dcgm", profile(), EMBEDDED)
    broken = produce("dcgm", profile(dcgm_failures=["Memory", "PCIe"]), EMBEDDED)
    assert healthy.succeeded and "Fail" not in healthy.log
    assert not broken.succeeded
    # `dcgmi diag -j` JSON, as the gpu.dcgm_diag module parses it.
    from pitstop.gpu.dcgm import parse_dcgm_diag

    report = parse_dcgm_diag(broken.log)
    assert {(f.test, f.reason) for f in report.failures} == {
        ("GPU Memory", "DCGM_FR_FAULTY_MEMORY"),
        ("PCIe", "DCGM_FR_PCIE_REPLAY_VIOLATION"),
    }
    assert parse_dcgm_diag(healthy.log).passed


def test_nccl_log_reports_the_profile_bandwidth() -> None:
    outcome = produce("nccl", profile(nccl_busbw_gbps=118.25), {})
    assert outcome.succeeded
    assert "# Avg bus bandwidth    : 118.25" in outcome.log
    assert not produce("nccl", profile(fails_validation=["nccl"]), {}).succeeded


def test_node_row_status_combines_readiness_and_cordon() -> None:
    node = {
        "metadata": {"name": "n", "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"unschedulable": True},
        "status": {
            "conditions": [{"type": "Ready", "status": "Unknown"}],
            "nodeInfo": {"kubeletVersion": "v1"},
        },
    }
    row = _node_row(node, datetime(2024, 1, 1, 0, 3, 5, tzinfo=UTC))
    assert row[:5] == ["n", "NotReady,SchedulingDisabled", "<none>", "3m5s", "v1"]
    assert [human_duration(s) for s in (5, 119, 600, 7200, 90000, 864000)] == [
        "5s",
        "119s",
        "10m",
        "120m",
        "25h",
        "10d",
    ]


def test_unavailability_counts_nodes_down_at_the_same_time_per_domain() -> None:
    def event(
        t: float, node: str, domain: str, kind: str, cordoned: bool, ready: bool = True
    ) -> TimelineEvent:
        return TimelineEvent(
            t=t,
            at=datetime.now(UTC),
            node=node,
            domain=domain,
            event=kind,  # type: ignore[arg-type]
            unschedulable=cordoned,
            ready=ready,
        )

    timeline = [
        event(0, "a1", "a", "registered", False),
        event(0, "a2", "a", "registered", True),
        event(0, "b1", "b", "registered", False),
        event(1, "a1", "a", "cordoned", True),
        event(2, "a2", "a", "uncordoned", False),
        event(3, "b1", "b", "not_ready", False, ready=False),
    ]
    report = {d.domain: d for d in unavailability(timeline)}
    assert (report["a"].max_unavailable, report["a"].at, report["a"].unavailable_at_start) == (2, 1, 1)
    assert (report["b"].max_unavailable, report["b"].at) == (1, 3)


def test_dcgmi_without_a_hostengine_fails_as_dcgmi_does() -> None:
    # dcgmi is a client: a bare `dcgmi diag` in a Job has no nv-hostengine on localhost.
    bare = produce(
        "dcgm", profile(), {"spec": {"containers": [{"command": ["dcgmi", "diag", "-r", "3", "-j"]}]}}
    )
    assert not bare.succeeded
    assert bare.log == (
        "Error: unable to establish a connection to the specified host: localhost\n"
        "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"
    )
    remote = {
        "spec": {
            "containers": [{"command": ["dcgmi", "diag", "--host", "nvidia-dcgm.gpu-operator.svc:5555"]}]
        }
    }
    assert "specified host: nvidia-dcgm.gpu-operator.svc:5555" in produce("dcgm", profile(), remote).log
    reachable = {**remote, "metadata": {"annotations": {"sim.pitstop.dev/hostengine-reachable": "true"}}}
    assert produce("dcgm", profile(), reachable).succeeded
