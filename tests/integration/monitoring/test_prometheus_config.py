"""The embedded stack's Prometheus configuration: valid for promtool, scraping what it says."""

from __future__ import annotations

import json
from pathlib import Path

from pitstop.prometheus_stack import (
    PrometheusLayout,
    remove_sim_targets,
    worker_metrics_target,
    write_sim_targets,
)
from pitstop.safe_yaml import safe_load_file
from tests.integration.monitoring.promtool import promtool


def test_config_and_rehearsal_rules_pass_promtool(tmp_path: Path) -> None:
    layout = PrometheusLayout(home=tmp_path, rules_for="3s")
    layout.write()
    result = promtool("check", "config", str(layout.config_file))
    assert "SUCCESS" in result.stdout
    config = safe_load_file(layout.config_file)
    assert config["global"] == {"scrape_interval": "1s", "evaluation_interval": "1s"}
    assert [job["job_name"] for job in config["scrape_configs"]] == [
        "dcgm-exporter",
        "kube-state-metrics",
        "etcd",
        "pitstop-worker",
    ]
    rules = safe_load_file(layout.rules_file)
    durations = {r["alert"]: r.get("for") for g in rules["groups"] for r in g["rules"]}
    assert durations["KubeNodeNotReady"] == "3s" and durations["GpuXidError"] is None


def test_sim_targets_look_like_kubernetes_service_discovery(tmp_path: Path) -> None:
    write_sim_targets(
        tmp_path, "rehearsal", "http://127.0.0.1:4321", ["gpu-node-001", "gpu-node-002"], ["cp-001"]
    )
    layout = PrometheusLayout(home=tmp_path)
    dcgm = json.loads((layout.targets_dir("dcgm-exporter") / "rehearsal.json").read_text())
    assert dcgm[1] == {
        "targets": ["127.0.0.1:4321"],
        "labels": {
            "cluster": "rehearsal",
            "node": "gpu-node-002",
            "__metrics_path__": "/metrics/dcgm/gpu-node-002",
        },
    }
    etcd = json.loads((layout.targets_dir("etcd") / "rehearsal.json").read_text())
    assert [g["labels"]["node"] for g in etcd] == ["cp-001"]
    remove_sim_targets(tmp_path, "rehearsal")
    assert list((tmp_path / "prometheus" / "targets").rglob("*.json")) == []


def test_worker_metrics_target_follows_the_workers_address() -> None:
    assert worker_metrics_target({}) == "127.0.0.1:9464"
    assert worker_metrics_target({"PITSTOP_METRICS_ADDRESS": "0.0.0.0:9500"}) == "127.0.0.1:9500"
    assert worker_metrics_target({"PITSTOP_METRICS_ADDRESS": "10.1.2.3:9500"}) == "10.1.2.3:9500"
    assert (
        worker_metrics_target(
            {"PITSTOP_WORKER_METRICS": "worker:9600", "PITSTOP_METRICS_ADDRESS": "0.0.0.0:1"}
        )
        == "worker:9600"
    )
