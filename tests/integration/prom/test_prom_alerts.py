"""`prom.alerts` against a real Prometheus and Alertmanager: firing alerts filtered by labels
fail the task naming each alert with its labels and since when; pending alerts and Alertmanager's
silenced ones only when asked; and the bearer token reaches the server, never the result."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from activities.prom import alerts, query
from pitstop.secrets import DIR_ENV
from tests.integration.prom.conftest import Lab, allow
from tests.integration.prom.promlab import get_json, wait_for
from tests.policy_site import PolicyLayer

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real" / "prometheus"


def test_a_firing_alert_on_the_node_fails_naming_it_with_labels_and_since_when(lab: Lab) -> None:
    args = {"url": lab.prometheus, "match": {"node": "gpu-node-002"}}
    result = lab.run(alerts, "prom.alerts", args)
    assert result.failed and result.data["count"] == 1
    found = result.data["alerts"][0]
    assert found["name"] == "LabGpuXid" and found["state"] == "firing"
    instance = found["labels"]["instance"]
    assert result.msg == (
        f'1 alert(s) matching {{node="gpu-node-002"}}: LabGpuXid{{gpu="0", instance="{instance}", '
        f'job="lab", node="gpu-node-002", severity="critical"}} firing since {found["active_at"]} '
        "(value 7.9e+01): Xid 79 on node gpu-node-002"
    )


def test_a_quiet_node_passes_and_report_mode_only_lists(lab: Lab) -> None:
    quiet = lab.run(alerts, "prom.alerts", {"url": lab.prometheus, "match": {"node": "gpu-node-001"}})
    assert not quiet.failed and quiet.msg == 'no alert matching {node="gpu-node-001"} (1 seen)'
    report = lab.run(
        alerts,
        "prom.alerts",
        {"url": lab.prometheus, "match_re": {"alertname": "Lab.*"}, "on_match": "report"},
    )
    assert not report.failed and report.data["count"] == 1


def test_pending_alerts_count_only_when_asked(lab: Lab) -> None:
    args: dict[str, Any] = {"url": lab.prometheus, "match": {"severity": "warning"}}
    assert not lab.run(alerts, "prom.alerts", args).failed
    pending = lab.run(alerts, "prom.alerts", {**args, "include_pending": True})
    assert pending.failed and "LabGpuHot{" in pending.msg and " pending since " in pending.msg


def _silence(am: str, node: str) -> str:
    now = datetime.now(UTC)
    body = {
        "matchers": [{"name": "node", "value": node, "isRegex": False, "isEqual": True}],
        "startsAt": now.isoformat(),
        "endsAt": (now + timedelta(hours=1)).isoformat(),
        "createdBy": "pitstop-test",
        "comment": "maintenance",
    }
    request = urllib.request.Request(
        f"{am}/api/v2/silences",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return str(json.loads(response.read())["silenceID"])


def _expire(am: str, silence: str) -> None:
    request = urllib.request.Request(f"{am}/api/v2/silence/{silence}", method="DELETE")
    with urllib.request.urlopen(request, timeout=5):
        pass


def test_alertmanager_active_and_silenced_filters(lab: Lab) -> None:
    args: dict[str, Any] = {"url": lab.alertmanager, "api": "alertmanager", "match": {"node": "gpu-node-002"}}
    active = lab.run(alerts, "prom.alerts", args)
    assert active.failed and active.data["alerts"][0]["state"] == "active"
    assert active.msg.startswith('1 alert(s) matching {node="gpu-node-002"}: LabGpuXid{')
    silence = _silence(lab.alertmanager, "gpu-node-002")
    try:
        wait_for(
            lambda: get_json(f"{lab.alertmanager}/api/v2/alerts", {"silenced": "true", "active": "false"}),
            "Alertmanager to mark the alert silenced",
        )
        assert not lab.run(alerts, "prom.alerts", args).failed
        silenced = lab.run(alerts, "prom.alerts", {**args, "silenced": True})
        assert silenced.failed and silenced.data["alerts"][0]["state"] == "suppressed"
        assert silenced.data["alerts"][0]["silenced_by"] == [silence]
    finally:
        _expire(lab.alertmanager, silence)


@pytest.fixture
def token_checking_server() -> Iterator[tuple[str, list[str]]]:
    """A server that answers Prometheus's recorded answer only with the right bearer token, and
    records what it was sent."""
    seen: list[str] = []
    body = (REAL / "query_vector.json").read_bytes()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            auth = self.headers.get("Authorization") or ""
            seen.append(auth)
            ok = auth == "Bearer s3cret-prom-token"
            payload = body if ok else b"Unauthorized\n"
            self.send_response(200 if ok else 401)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_the_token_goes_in_the_header_only_when_granted_for_that_endpoint(
    lab: Lab,
    worker_policy: PolicyLayer,
    token_checking_server: tuple[str, list[str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, seen = token_checking_server
    allow(worker_policy, url)
    (tmp_path / "prom-token").write_text("s3cret-prom-token\n")
    monkeypatch.setenv(DIR_ENV, str(tmp_path))
    args = {"url": url, "query": "lab_gpu_temp_celsius", "max": 100, "token": {"secret": "prom-token"}}
    # Granted, but only towards the lab's Prometheus: not sent to this one.
    worker_policy.grant("prom-token", "prometheus_token", endpoints=[lab.prometheus])
    with pytest.raises(ApplicationError) as refused:
        lab.run(query, "prom.query", args)
    assert refused.value.type == "PolicyViolation" and seen == []
    assert f"secret 'prom-token' may be sent to {lab.prometheus} only, not to {url}" in refused.value.message
    worker_policy.grant("prom-token", "prometheus_token")
    result = lab.run(query, "prom.query", args)
    assert not result.failed and seen == ["Bearer s3cret-prom-token"]
    assert "s3cret" not in json.dumps(result.model_dump())
    with pytest.raises(ApplicationError) as unauthorized:
        lab.run(query, "prom.query", {k: v for k, v in args.items() if k != "token"})
    assert unauthorized.value.type == "Unauthorized" and "answered 401" in unauthorized.value.message
