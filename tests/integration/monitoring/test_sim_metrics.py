"""The rehearsal cluster's exporters: dcgm-exporter, kube-state-metrics and etcd, in the text
format Prometheus scrapes (parsed with prometheus_client's parser), with the real exporters'
names and label sets, and figures that follow the scenario and what is injected at run time."""

from __future__ import annotations

import csv
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from pitstop.alert_pack import PACK_DIR
from pitstop_sim import SimCluster
from pitstop_sim.metrics import dcgm
from tests.integration.monitoring.conftest import StartSim

DCGM_LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]
POD_LABELS = ["container", "namespace", "pod"]

SCENARIO = """
    name: metrics
    cluster: {nodes: 3, domains: 1, gpus_per_node: 4}
    timing: {time_scale: 60, pod_start_seconds: 1}
    workloads:
      training_jobs:
        - {name: llm, namespace: training, pods: 2, gpus_per_pod: 4, checkpoint_protocol: true}
    health:
      nodes:
        gpu-node-003: {nccl_busbw_gbps: 118}
"""


def scrape(sim: SimCluster, path: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    response = httpx.get(sim.url + path, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            # prometheus_client's parser names every counter sample `<family>_total`; Prometheus
            # keeps the name as written, which is the family's name for dcgm-exporter's counters.
            name = family.name if family.type == "counter" else sample.name
            out.setdefault(name, []).append((dict(sample.labels), sample.value))
    return out


def raw_label_order(sim: SimCluster, path: str, metric: str) -> list[list[str]]:
    """Label names in the order the exporter wrote them (the parser gives a dict)."""
    lines = [line for line in httpx.get(sim.url + path).text.splitlines() if line.startswith(metric + "{")]
    return [
        [pair.split("=", 1)[0] for pair in line[line.index("{") + 1 : line.index("}")].split('",')]
        for line in lines
    ]


def value(samples: list[tuple[dict[str, str], float]], **labels: str) -> float:
    matching = [v for ls, v in samples if all(ls.get(k) == want for k, want in labels.items())]
    assert len(matching) == 1, f"{len(matching)} samples match {labels}"
    return matching[0]


def test_counters_file_is_what_the_simulated_exporter_exports() -> None:
    rows = [
        [cell.strip() for cell in row]
        for row in csv.reader((PACK_DIR / "dcgm-exporter-counters.csv").read_text().splitlines())
        if row and not row[0].startswith("#")
    ]
    fields = [(r[0], r[1], ",".join(r[2:]).strip()) for r in rows if r[1] != "label"]
    labels = [(r[0], ",".join(r[2:]).strip()) for r in rows if r[1] == "label"]
    assert fields == list(dcgm.COUNTERS)
    assert labels == list(dcgm.LABEL_FIELDS)


def test_dcgm_exporter_format_per_gpu_and_an_injected_xid(start_sim: StartSim) -> None:
    sim = start_sim(SCENARIO)
    sim.wait_for(
        lambda s: (
            len([p for p in s.list("pods", namespace="training") if p["status"].get("phase") == "Running"])
            == 2
        ),
        what="the training pods to run",
    )
    metrics = scrape(sim, "/metrics/dcgm")
    xids = metrics["DCGM_FI_DEV_XID_ERRORS"]
    assert len(xids) == 3 * 4
    assert {v for _, v in xids} == {0}
    first = next(ls for ls, _ in xids if ls["Hostname"] == "gpu-node-001" and ls["gpu"] == "0")
    assert first["device"] == "nvidia0"
    assert first["modelName"] == "NVIDIA H100 80GB HBM3"
    assert first["UUID"].startswith("GPU-")
    assert first["pci_bus_id"] == "00000000:18:00.0"
    # dcgm-exporter's order: its fixed labels, the label fields, then the pod attributes.
    orders = raw_label_order(sim, "/metrics/dcgm", "DCGM_FI_DEV_GPU_UTIL")
    assert {tuple(o) for o in orders} <= {tuple(DCGM_LABELS), tuple(DCGM_LABELS + POD_LABELS)}
    busy = [ls for ls, v in metrics["DCGM_FI_DEV_GPU_UTIL"] if v > 50]
    assert len(busy) == 8 and all(ls["namespace"] == "training" for ls in busy)

    # An Xid on gpu-node-002's GPU 1, through the admin API, shows on that GPU only.
    response = httpx.post(sim.url + "/_sim/nodes/gpu-node-002/xid", json={"xid": 79, "gpu": 0})
    assert response.status_code == 201, response.text
    response = httpx.post(sim.url + "/_sim/nodes/gpu-node-002/xid", json={"xid": 48, "gpu": 1})
    assert response.json()["xid_errors"] == [79, 48]
    xids = scrape(sim, "/metrics/dcgm")["DCGM_FI_DEV_XID_ERRORS"]
    assert value(xids, Hostname="gpu-node-002", gpu="1") == 48
    assert value(xids, Hostname="gpu-node-002", gpu="0") == 79
    assert {v for ls, v in xids if ls["Hostname"] != "gpu-node-002"} == {0}
    assert sim.node_health("gpu-node-002").xid_errors == [79, 48]  # dmesg and dcgmi see it too
    # One node's exporter, as its DaemonSet pod answers.
    own = scrape(sim, "/metrics/dcgm/gpu-node-002")["DCGM_FI_DEV_XID_ERRORS"]
    assert {ls["Hostname"] for ls, _ in own} == {"gpu-node-002"}
    # A GPU reset clears them.
    assert httpx.delete(sim.url + "/_sim/nodes/gpu-node-002/xid").status_code == 200
    assert {v for _, v in scrape(sim, "/metrics/dcgm")["DCGM_FI_DEV_XID_ERRORS"]} == {0}
    # Refusals name the problem.
    bad = httpx.post(sim.url + "/_sim/nodes/gpu-node-002/xid", json={"xid": 79, "gpu": 9})
    assert bad.status_code == 400 and "4 GPUs" in bad.json()["error"]
    assert httpx.post(sim.url + "/_sim/nodes/nope/xid", json={"xid": 79}).status_code == 404


def test_dcgm_figures_follow_health_and_telemetry(start_sim: StartSim) -> None:
    sim = start_sim(
        SCENARIO
        + """
        gpu-node-001:
          ecc: [{gpu: 2, volatile_uncorrectable: 3, aggregate_uncorrectable: 5}]
    """
    )
    metrics = scrape(sim, "/metrics/dcgm")
    assert value(metrics["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"], Hostname="gpu-node-001", gpu="2") == 3
    assert value(metrics["DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"], Hostname="gpu-node-001", gpu="2") == 5
    assert value(metrics["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"], Hostname="gpu-node-001", gpu="1") == 0

    update = {"gpus": [{"gpu": 3, "temperature_c": 91, "clocks_event_reasons": 0x40}, {"utilization_pct": 5}]}
    response = httpx.post(sim.url + "/_sim/nodes/gpu-node-002/telemetry", json=update)
    assert response.status_code == 200, response.text
    metrics = scrape(sim, "/metrics/dcgm")
    assert value(metrics["DCGM_FI_DEV_GPU_TEMP"], Hostname="gpu-node-002", gpu="3") == 91
    assert value(metrics["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"], Hostname="gpu-node-002", gpu="3") == 0x40
    assert {v for ls, v in metrics["DCGM_FI_DEV_GPU_UTIL"] if ls["Hostname"] == "gpu-node-002"} == {5}

    # The degraded node (NCCL bus bandwidth 118 of 390 GB/s) moves fewer NVLink bytes than a
    # healthy one at the same utilization.
    for node in ("gpu-node-001", "gpu-node-003"):
        httpx.post(sim.url + f"/_sim/nodes/{node}/telemetry", json={"gpus": [{"utilization_pct": 100}]})

    def nvlink(s: SimCluster, node: str) -> float:
        return value(scrape(s, "/metrics/dcgm")["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"], Hostname=node, gpu="0")

    start = {node: nvlink(sim, node) for node in ("gpu-node-001", "gpu-node-003")}
    sim.wait_for(lambda s: nvlink(s, "gpu-node-001") > start["gpu-node-001"] + 1e11, what="NVLink traffic")
    counters = scrape(sim, "/metrics/dcgm")["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"]
    healthy = value(counters, Hostname="gpu-node-001", gpu="0") - start["gpu-node-001"]
    degraded = value(counters, Hostname="gpu-node-003", gpu="0") - start["gpu-node-003"]
    assert 0 < degraded < healthy * 0.35


def test_not_ready_node_exports_no_gpu_metrics(start_sim: StartSim) -> None:
    sim = start_sim(SCENARIO)
    sim.reboot("gpu-node-001")
    hosts = {ls["Hostname"] for ls, _ in scrape(sim, "/metrics/dcgm")["DCGM_FI_DEV_GPU_TEMP"]}
    assert hosts == {"gpu-node-002", "gpu-node-003"}
    # Its own exporter's target is down, as a DaemonSet pod on a rebooting node is.
    assert httpx.get(sim.url + "/metrics/dcgm/gpu-node-001").status_code == 503


def test_kube_state_metrics_nodes_and_pods(start_sim: StartSim) -> None:
    sim = start_sim(SCENARIO)
    sim.patch("nodes", "gpu-node-003", {"spec": {"unschedulable": True}})
    metrics = scrape(sim, "/metrics/kube-state")
    ready = metrics["kube_node_status_condition"]
    assert value(ready, node="gpu-node-001", condition="Ready", status="true") == 1
    assert value(ready, node="gpu-node-001", condition="Ready", status="unknown") == 0
    unschedulable = metrics["kube_node_spec_unschedulable"]
    assert value(unschedulable, node="gpu-node-003") == 1
    assert value(unschedulable, node="gpu-node-001") == 0
    phases = metrics["kube_pod_status_phase"]
    assert {tuple(sorted(ls)) for ls, _ in phases} == {("namespace", "phase", "pod", "uid")}
    info = metrics["kube_pod_info"]
    assert {tuple(sorted(ls)) for ls, _ in info} == {
        (
            "created_by_kind",
            "created_by_name",
            "host_ip",
            "host_network",
            "namespace",
            "node",
            "pod",
            "pod_ip",
            "priority_class",
            "uid",
        )
    }
    for pod in sim.list("pods"):
        meta = pod["metadata"]
        current = [
            ls["phase"]
            for ls, v in phases
            if ls["pod"] == meta["name"] and ls["namespace"] == meta["namespace"] and v == 1
        ]
        assert current == [pod["status"].get("phase", "Pending")]

    sim.reboot("gpu-node-002")
    ready = scrape(sim, "/metrics/kube-state")["kube_node_status_condition"]
    assert value(ready, node="gpu-node-002", condition="Ready", status="true") == 0


def test_etcd_members_fsync_histogram(start_sim: StartSim, tmp_path: Path) -> None:
    sim = start_sim(
        """
        name: etcd-metrics
        cluster: {nodes: 2, domains: 1, gpus_per_node: 1}
        timing: {time_scale: 600}
        platform:
          kubernetes_version: v1.30.6
          control_plane: {nodes: 1, name_prefix: cp-}
        """
    )
    assert httpx.get(sim.url + "/metrics/etcd/gpu-node-001").status_code == 404

    def buckets(s: SimCluster) -> dict[str, float]:
        samples = scrape(s, "/metrics/etcd/cp-001")["etcd_disk_wal_fsync_duration_seconds_bucket"]
        return {ls["le"]: v for ls, v in samples}

    sim.wait_for(lambda s: buckets(s)["+Inf"] > 100, what="fsyncs")
    healthy = buckets(sim)
    assert list(healthy)[:3] == ["0.001", "0.002", "0.004"] and list(healthy)[-2:] == ["8.192", "+Inf"]
    assert healthy["0.001"] == 0 and healthy["0.002"] > 0
    slow = httpx.post(sim.url + "/_sim/nodes/cp-001/telemetry", json={"etcd_wal_fsync_seconds": 0.025})
    assert slow.status_code == 200, slow.text
    sim.wait_for(lambda s: buckets(s)["+Inf"] > healthy["+Inf"] + 100, what="more fsyncs")
    after = buckets(sim)
    assert after["0.016"] == healthy["0.016"]  # nothing new under 16 ms
    assert after["0.032"] > healthy["0.032"]
    refused = httpx.post(
        sim.url + "/_sim/nodes/gpu-node-001/telemetry", json={"etcd_wal_fsync_seconds": 0.05}
    )
    assert refused.status_code == 400


def test_inject_xid_from_python(start_sim: StartSim) -> None:
    sim = start_sim(SCENARIO)
    assert sim.inject_xid("gpu-node-001", 94).xid_errors == [94]
    assert (
        value(scrape(sim, "/metrics/dcgm")["DCGM_FI_DEV_XID_ERRORS"], Hostname="gpu-node-001", gpu="0") == 94
    )
    assert sim.clear_xids("gpu-node-001").xid_errors == []
