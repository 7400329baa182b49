"""deploy/grafana/pitstop.json: valid JSON Grafana can import, every panel's PromQL parsed by
Prometheus's own parser (promtool, each expression as a recording rule), and every metric a
panel names emitted by the worker (a real scrape, tests/fixtures/real/worker-metrics) or by the
exporters the alert pack is written against (the rehearsal cluster's dcgm-exporter,
kube-state-metrics and etcd endpoints, scraped here)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO_ROOT
from tests.integration.monitoring.conftest import StartSim, start_sim

__all__ = ["start_sim"]

DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "pitstop.json"
WORKER_SCRAPE = REPO_ROOT / "tests" / "fixtures" / "real" / "worker-metrics" / "worker-metrics.txt"
# Series Prometheus itself writes (alerting rules' state), not an exporter.
PROMETHEUS_OWN = {"ALERTS", "ALERTS_FOR_STATE"}
# What Grafana substitutes before sending a query.
GRAFANA_VARS = {"$__rate_interval": "1m", "$__range": "1h", "$__interval": "30s", "$cluster": ".*"}
KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
    "offset", "inf", "nan", "atan2",
}  # fmt: skip
SCENARIO = """
    name: dashboard
    cluster: {nodes: 1, domains: 1, gpus_per_node: 1}
    platform:
      kubernetes_version: v1.30.6
      control_plane: {nodes: 1, name_prefix: cp-}
"""


def panels() -> list[dict[str, Any]]:
    doc = json.loads(DASHBOARD.read_text())
    return [p for p in doc["panels"] if p["type"] != "row"]


def exprs() -> list[str]:
    return [t["expr"] for p in panels() for t in p["targets"]]


def grafana_expanded(expr: str) -> str:
    for var, value in GRAFANA_VARS.items():
        expr = expr.replace(var, value)
    return expr


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not functions, keywords, label
    names (inside braces or by/on lists), durations or strings."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', grafana_expanded(expr))
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for found in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        rest = text[found.end() :].lstrip()
        if rest.startswith("(") or found.group(0).lower() in KEYWORDS:
            continue
        names.add(found.group(0))
    return names


def exposed_names(text: str) -> set[str]:
    """Metric names as an exposition writes them (counters keep the name the exporter wrote)."""
    return {re.split(r"[{\s]", line, maxsplit=1)[0] for line in text.splitlines() if line and line[0] != "#"}


def test_the_dashboard_is_importable_grafana_json() -> None:
    doc = json.loads(DASHBOARD.read_text())
    assert doc["uid"] == "pitstop-overview" and doc["title"] == "pitstop"
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels():
        assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}"
        assert panel["gridPos"]["x"] >= 0 and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
    names = {v["name"] for v in doc["templating"]["list"]}
    assert names == {"datasource", "cluster"}


def test_every_panel_expression_parses_as_promql(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool (Debian's prometheus package) is not installed")
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:panel_{i}", "expr": grafana_expanded(e)}
                    for i, e in enumerate(exprs())
                ],
            }
        ]
    }
    path = tmp_path / "dashboard.rules.json"  # YAML is a superset of JSON: promtool reads it
    path.write_text(json.dumps(rules))
    done = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(exprs())} rules found" in done.stdout


def test_every_metric_a_panel_names_is_emitted_by_the_worker_or_the_packs_exporters(
    start_sim: StartSim,
) -> None:
    sim = start_sim(SCENARIO)
    known = exposed_names(WORKER_SCRAPE.read_text()) | PROMETHEUS_OWN
    for path in ("/metrics/dcgm", "/metrics/kube-state", "/metrics/etcd/cp-001"):
        response = httpx.get(sim.url + path, timeout=10)
        assert response.status_code == 200, path
        known |= exposed_names(response.text)
    named = {
        name: [e for e in exprs() if name in metric_names(e)] for e in exprs() for name in metric_names(e)
    }
    unknown = {name: where for name, where in named.items() if name not in known}
    assert not unknown, f"panels name metrics nothing emits: {unknown}"
    # The panels cover each source.
    assert {"pitstop_nodes_cordoned", "temporal_workflow_task_schedule_to_start_latency_bucket"} <= set(named)
    assert {
        "DCGM_FI_DEV_XID_ERRORS",
        "kube_node_status_condition",
        "etcd_disk_wal_fsync_duration_seconds_bucket",
    } <= (set(named))


def test_the_metric_name_finder_skips_functions_labels_and_durations() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (le, cluster) (rate(x_bucket{cluster=~"a|b"}[$__rate_interval]))) '
        "> on() y"
    )
    assert metric_names(expr) == {"x_bucket", "y"}
