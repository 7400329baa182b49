"""The embedded stack's Prometheus (`pitstop dev up --with prometheus`): its configuration,
its rules and the scrape targets of rehearsal clusters, all under `<home>/prometheus/`.

    prometheus.yml           scrape and evaluate every second; the rule file below; one job
                             per exporter (dcgm-exporter, kube-state-metrics, etcd) reading its
                             targets from targets/<job>/*.json, and the worker's /metrics
    rules/pitstop-alerts.rules.yaml
                             the alert pack (runbooks/monitoring/) with short `for:` durations
    targets/<job>/<cluster>.json
                             file_sd target groups of a rehearsal cluster, written when it is
                             registered with the worker (`SimCluster.register`: `pitstop sim
                             serve`, the demo) and removed when it stops; Prometheus picks up
                             new files without a restart
    data/                    the TSDB

Why a rehearsal copy of the rules: the pack's `for:` durations (5 to 15 minutes) are what
production wants, and an observe window in a rehearsal lasts seconds. The copy keeps every
expression, label and annotation of the pack and only shortens `for:` (`PITSTOP_PROMETHEUS_FOR`,
default 2s), so a rehearsal exercises the alerts an operator deploys (see pitstop.alert_pack).

The targets look as a real cluster's service discovery would make them: one dcgm-exporter
target per GPU node (path /metrics/dcgm/<node>) and one etcd target per control-plane node,
each with the `node` label a Kubernetes SD relabelling (`__meta_kubernetes_pod_node_name`)
adds, and one kube-state-metrics target per cluster; every target carries `cluster`.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from pitstop.alert_pack import dump_yaml, load_rules, rehearsal_rules

PROMETHEUS_BINARY = Path("/usr/bin/prometheus")
WORKER_METRICS_ENV = "PITSTOP_WORKER_METRICS"
# The address a worker serves /metrics on (`pitstop worker --metrics-address`).
WORKER_LISTEN_ENV = "PITSTOP_METRICS_ADDRESS"
DEFAULT_WORKER_METRICS = "127.0.0.1:9464"
FOR_ENV = "PITSTOP_PROMETHEUS_FOR"
DEFAULT_FOR = "2s"
JOBS = ("dcgm-exporter", "kube-state-metrics", "etcd")


class PrometheusLayout(BaseModel):
    """Where the stack's Prometheus keeps its files, and how it scrapes."""

    model_config = ConfigDict(frozen=True)

    home: Path
    worker_metrics: str = Field(
        default=DEFAULT_WORKER_METRICS, description="host:port of the worker's /metrics."
    )
    interval: str = "1s"
    rules_for: str = DEFAULT_FOR

    @classmethod
    def for_home(cls, home: Path) -> PrometheusLayout:
        return cls(
            home=home,
            worker_metrics=worker_metrics_target(),
            rules_for=os.environ.get(FOR_ENV) or DEFAULT_FOR,
        )

    @property
    def root(self) -> Path:
        return self.home / "prometheus"

    @property
    def config_file(self) -> Path:
        return self.root / "prometheus.yml"

    @property
    def rules_file(self) -> Path:
        return self.root / "rules" / "pitstop-alerts.rules.yaml"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    def targets_dir(self, job: str) -> Path:
        return self.root / "targets" / job

    def config(self) -> dict[str, object]:
        def file_sd(job: str) -> dict[str, object]:
            return {
                "job_name": job,
                "file_sd_configs": [
                    {"files": [str(self.targets_dir(job) / "*.json")], "refresh_interval": "5s"}
                ],
            }

        return {
            "global": {"scrape_interval": self.interval, "evaluation_interval": self.interval},
            "rule_files": [str(self.rules_file)],
            "scrape_configs": [
                *(file_sd(job) for job in JOBS),
                {"job_name": "pitstop-worker", "static_configs": [{"targets": [self.worker_metrics]}]},
            ],
        }

    def write(self) -> None:
        """Write the configuration and the rehearsal rules (every start: the pack may have changed)."""
        for job in JOBS:
            self.targets_dir(job).mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.rules_file.parent.mkdir(parents=True, exist_ok=True)
        _replace(self.rules_file, dump_yaml(rehearsal_rules(load_rules(), self.rules_for).as_data()))
        _replace(
            self.config_file, "# Written by `pitstop dev up --with prometheus`.\n" + dump_yaml(self.config())
        )

    def argv(self, listen: str) -> list[str]:
        return [
            str(PROMETHEUS_BINARY),
            f"--config.file={self.config_file}",
            f"--storage.tsdb.path={self.data_dir}",
            "--storage.tsdb.retention.time=2d",
            f"--web.listen-address={listen}",
            "--web.enable-lifecycle",
            "--log.level=warn",
        ]


def stack_home(environ: Mapping[str, str] = os.environ) -> Path:
    """The embedded stack's home of this environment: $PITSTOP_HOME, else ./.pitstop."""
    return Path(environ.get("PITSTOP_HOME") or ".pitstop")


def worker_metrics_target(environ: Mapping[str, str] = os.environ) -> str:
    """Where the worker's /metrics is: PITSTOP_WORKER_METRICS, else the address a worker of
    this shell listens on (PITSTOP_METRICS_ADDRESS; a wildcard host is reached on loopback),
    else 127.0.0.1:9464."""
    explicit = environ.get(WORKER_METRICS_ENV)
    if explicit:
        return explicit
    listen = environ.get(WORKER_LISTEN_ENV)
    if listen:
        host, _, port = listen.strip().rpartition(":")
        host = host.strip("[]")
        return f"{'127.0.0.1' if host in ('', '0.0.0.0', '::') else host}:{port}"
    return DEFAULT_WORKER_METRICS


def write_sim_targets(
    home: Path,
    cluster: str,
    url: str,
    gpu_nodes: Sequence[str],
    control_plane_nodes: Sequence[str] = (),
) -> list[Path]:
    """Make the stack's Prometheus scrape a rehearsal cluster served at `url`; returns the files."""
    layout = PrometheusLayout(home=home)
    address = urlsplit(url).netloc
    groups: dict[str, list[dict[str, object]]] = {
        "dcgm-exporter": [
            {
                "targets": [address],
                "labels": {"cluster": cluster, "node": node, "__metrics_path__": f"/metrics/dcgm/{node}"},
            }
            for node in gpu_nodes
        ],
        "kube-state-metrics": [
            {"targets": [address], "labels": {"cluster": cluster, "__metrics_path__": "/metrics/kube-state"}}
        ],
        "etcd": [
            {
                "targets": [address],
                "labels": {"cluster": cluster, "node": node, "__metrics_path__": f"/metrics/etcd/{node}"},
            }
            for node in control_plane_nodes
        ],
    }
    written: list[Path] = []
    for job, content in groups.items():
        path = layout.targets_dir(job) / f"{cluster}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        _replace(path, json.dumps(content, indent=2) + "\n")
        written.append(path)
    return written


def remove_sim_targets(home: Path, cluster: str) -> None:
    """Stop scraping a rehearsal cluster (it stopped)."""
    layout = PrometheusLayout(home=home)
    for job in JOBS:
        with contextlib.suppress(FileNotFoundError):
            (layout.targets_dir(job) / f"{cluster}.json").unlink()


def _replace(path: Path, text: str) -> None:
    # Prometheus reads these files while we write them: rename a complete file into place.
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
