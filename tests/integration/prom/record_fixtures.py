"""Record real Prometheus and Alertmanager answers as fixtures for the unit tests:
`python -m tests.integration.prom.record_fixtures tests/fixtures/real/prometheus`.

Starts the same lab as the integration tests (Debian's prometheus and prometheus-alertmanager,
the exporter, the rule file), waits until the alerts fire, then saves each answer byte for
byte, with the server's version, in `<dir>/<name>.json` and an index in `<dir>/SOURCES.md`.
"""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge

from tests.integration.prom.conftest import RULES
from tests.integration.prom.promlab import (
    ALERTMANAGER,
    PROMETHEUS,
    alert_state,
    alertmanager,
    exporter,
    get_json,
    prometheus,
    series_present,
    wait_for,
)


def _raw(url: str, params: dict[str, str] | None = None) -> tuple[int, bytes]:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    try:
        with urllib.request.urlopen(url + query, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    registry = CollectorRegistry()
    temp = Gauge("lab_gpu_temp_celsius", "GPU temperature", ["node", "gpu"], registry=registry)
    temp.labels("gpu-node-001", "0").set(60)
    temp.labels("gpu-node-002", "0").set(91)
    ratio = Gauge("lab_ratio", "A ratio that is not a number", ["node"], registry=registry)
    ratio.labels("gpu-node-001").set(math.nan)
    ratio.labels("gpu-node-002").set(math.inf)
    Gauge("lab_low", "Minus infinity", ["node"], registry=registry).labels("gpu-node-001").set(-math.inf)
    xid = Gauge("lab_xid", "Last Xid", ["node", "gpu"], registry=registry)
    xid.labels("gpu-node-001", "0").set(0)
    xid.labels("gpu-node-002", "0").set(79)
    versions = {
        "prometheus": subprocess.run([PROMETHEUS, "--version"], capture_output=True, text=True).stdout.split(
            "\n"
        )[0],
        "alertmanager": subprocess.run(
            [ALERTMANAGER, "--version"], capture_output=True, text=True
        ).stdout.split("\n")[0],
    }
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        with (
            exporter(registry) as target,
            alertmanager(directory / "am") as am,
            prometheus(directory / "prom", [target], RULES, alertmanager_url=am) as url,
        ):
            wait_for(lambda: series_present(url, "lab_xid"), "series")
            wait_for(lambda: "firing" in alert_state(url, "LabGpuXid"), "LabGpuXid firing")
            wait_for(lambda: get_json(f"{am}/api/v2/alerts"), "Alertmanager alerts", timeout=90)
            end = time.time()
            cases = {
                "query_vector": (f"{url}/api/v1/query", {"query": "lab_gpu_temp_celsius"}),
                "query_nan_inf": (f"{url}/api/v1/query", {"query": '{__name__=~"lab_ratio|lab_low"}'}),
                "query_scalar": (f"{url}/api/v1/query", {"query": "scalar(sum(lab_xid))"}),
                "query_string": (f"{url}/api/v1/query", {"query": '"pitstop"'}),
                "query_empty": (f"{url}/api/v1/query", {"query": "lab_xid > 100"}),
                "query_bad_data": (f"{url}/api/v1/query", {"query": "sum(lab_xid"}),
                "query_execution_error": (
                    f"{url}/api/v1/query",
                    {"query": "lab_xid * on() lab_gpu_temp_celsius"},
                ),
                "query_range_matrix": (
                    f"{url}/api/v1/query_range",
                    {
                        "query": "lab_gpu_temp_celsius",
                        "start": f"{end - 3:.3f}",
                        "end": f"{end:.3f}",
                        "step": "1s",
                    },
                ),
                "alerts_prometheus": (f"{url}/api/v1/alerts", None),
                "alerts_alertmanager": (
                    f"{am}/api/v2/alerts",
                    {"active": "true", "silenced": "false", "inhibited": "false"},
                ),
                "alertmanager_bad_filter": (f"{am}/api/v2/alerts", {"filter": "node=~("}),
            }
            index = [
                "# Real Prometheus and Alertmanager answers",
                "",
                "Recorded by `python -m tests.integration.prom.record_fixtures` from Debian's packages",
                f"({versions['prometheus']}; {versions['alertmanager']}) serving the lab of",
                "tests/integration/prom (exporter values and rules in conftest.py). Bytes as the server sent",
                "them; `<name>.status` holds the HTTP status.",
                "",
                "| file | request |",
                "|---|---|",
            ]
            for name, (endpoint, params) in cases.items():
                status, body = _raw(endpoint, params)
                (out / f"{name}.json").write_bytes(body)
                (out / f"{name}.status").write_text(f"{status}\n")
                shown = endpoint.split("/", 3)[3] + (f"?{urllib.parse.urlencode(params)}" if params else "")
                index.append(f"| {name}.json | `{status}` GET /{shown} |")
    (out / "SOURCES.md").write_text("\n".join(index) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
