"""The change record (docs/upgrade-process.md "Change record") built from a run's registered
results, and its Markdown."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from activities.records import records_change_record
from pitstop.acceptance.judge import Measurement, Policy, judge
from pitstop.acceptance.probes import select
from pitstop.contracts import ModuleCall, RunVars
from pitstop.records.change_record import (
    SECTIONS,
    RecordInputs,
    build_change_record,
    render_markdown,
    sanitize,
)
from tests.policy_site import PolicyLayer

SKEW_SOURCE = "https://kubernetes.io/releases/version-skew-policy/"


def inventory() -> dict[str, Any]:
    rows = [
        {
            "row": "Kubernetes and containerd/CRI-O",
            "component": "kubernetes",
            "current": "v1.30.6",
            "target": "v1.31.2",
        },
        {
            "row": "Kubernetes and containerd/CRI-O",
            "component": "kubelet",
            "current": "v1.30.6",
            "target": "v1.31.2",
        },
        {
            "row": "GPU driver and CUDA level",
            "component": "gpu-driver",
            "current": "550.90.07",
            "target": "570.86.15",
        },
        {"row": "CNI and CSI", "component": "cni", "current": "v3.28.1", "target": "v3.28.1"},
    ]
    return {"changed": False, "msg": "inventory", "data": {"rows": rows, "diff": []}}


def compat(supported: bool = True) -> dict[str, Any]:
    violations = (
        []
        if supported
        else [
            {
                "rule": "kube-apiserver-one-minor",
                "source": SKEW_SOURCE,
                "component": "kubernetes",
                "message": "v1.30.6 -> v1.32.0 skips a minor version",
            }
        ]
    )
    return {
        "supported": supported,
        "violations": violations,
        "checked": [],
        "sources": [
            {
                "component": "kubernetes",
                "title": "Version Skew Policy",
                "source": SKEW_SOURCE,
                "retrieved": "2026-11-29",
            },
            {
                "component": "gpu-operator",
                "title": "NVIDIA GPU Operator platform support",
                "source": "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/platform-support.html",
                "retrieved": "2026-11-29",
            },
        ],
    }


def acceptance(nccl: float, baseline: dict[str, float], on_deviation: str = "fail") -> dict[str, Any]:
    """acceptance.check data as the module returns it (through the real judgement)."""
    specs = select(["network/nccl", "kubernetes/dns"])
    measurements = {
        "network/nccl": Measurement(
            ok=True,
            value=nccl,
            detail="lowest on gpu-node-001",
            nodes={"gpu-node-001": nccl, "gpu-node-002": 392.0},
        ),
        "kubernetes/dns": Measurement(ok=True, detail="kube-system/coredns 2/2 ready"),
    }
    verdict = judge(specs, measurements, baseline, Policy(on_deviation=on_deviation))  # type: ignore[arg-type]
    data = verdict.model_dump(mode="json", include={"layers", "deviations", "passed", "measured"})
    return {**data, "failures": verdict.failures, "counts": verdict.counts, "on_deviation": on_deviation}


def stage(
    name: str,
    status: str,
    done: list[str] | None = None,
    failed: list[str] | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    return {
        "name": name,
        "status": status,
        "rollback_reason": reason,
        "done_hosts": done or [],
        "failed_hosts": failed or [],
        "failures": [],
    }


STAGES = ["preflight", "control-plane", "canary-gpu-nodes", "widen"]


def run_var(
    statuses: list[str], reason: str | None = None, canary_failed: list[str] | None = None
) -> dict[str, Any]:
    stages = [
        stage(
            name,
            status,
            done=["localhost"],
            failed=canary_failed if name == "canary-gpu-nodes" else None,
            reason=reason if status == "rolled_back" else None,
        )
        for name, status in zip(STAGES, statuses, strict=True)
    ]
    gates = [
        {
            "id": "control-plane:before",
            "status": "approved",
            "closed_reason": None,
            "votes": [
                {
                    "approver": "alice",
                    "approve": True,
                    "comment": "backup verified",
                    "source": "cli",
                    "at": "2026-11-29T10:00:00+00:00",
                }
            ],
        }
    ]
    return {
        "id": "platform-upgrade/2026-11-29 10:00",
        "runbook": "platform-upgrade",
        "requested_by": "alice",
        "started_at": "2026-11-29T09:58:00+00:00",
        "rollback_reason": reason,
        "stages": stages,
        "gates": gates,
    }


def complete_inputs() -> RecordInputs:
    before = acceptance(392, {})
    return RecordInputs(
        cluster="gpu-prod",
        goal="Kubernetes 1.30 -> 1.31 and driver 570 for the new CUDA level",
        risk="GPU nodes restart; training jobs checkpoint and resume",
        inventory=inventory(),
        compat=compat(),
        deprecations={"findings": []},
        crd_webhooks={
            "findings": [
                {
                    "check": "conversion",
                    "object": "clusterpolicies.nvidia.com",
                    "severity": "warn",
                    "message": "stored versions v1",
                }
            ]
        },
        canary={"hosts": ["gpu-node-001"], "scope": "1 of 3 GPU nodes, no serving traffic"},
        acceptance={
            "canary-gpu-nodes": acceptance(390, before["measured"]),
            "control-plane": acceptance(392, before["measured"]),
        },
        observation={
            "window": "30m",
            "result": {"changed": False, "failed": False, "msg": "no alerts fired in 30m"},
        },
        rollback_triggers=[
            "NCCL bus bandwidth more than 10% below baseline",
            "any Xid error on a canary node",
        ],
        run=run_var(["ok", "ok", "ok", "ok"]),
    )


def test_every_section_13_item_is_a_json_field_and_a_markdown_section() -> None:
    record = build_change_record(complete_inputs())
    document = json.loads(record.model_dump_json())
    markdown = render_markdown(record)
    headings = re.findall(r"^## (.+)$", markdown, flags=re.MULTILINE)
    for field, heading in SECTIONS:
        assert document[field] not in (None, {}, []), field
        assert heading in headings, heading
    assert [h for h in headings if h in dict(SECTIONS).values()] == [h for _, h in SECTIONS]
    assert record.outcome == "succeeded"
    assert "not reached" not in markdown
    assert "| network/nccl | passed | 390 GB/s | 392 GB/s | -0.5% |" in markdown
    # The reviewer sees the actual figures, not just that sections exist.
    assert "| gpu-driver | GPU driver and CUDA level | 550.90.07 | 570.86.15 |" in markdown
    assert "cni" not in [c.component for c in record.version_diff.changes]
    assert SKEW_SOURCE in markdown
    assert "- Hosts: gpu-node-001" in markdown
    assert "### After control-plane: passed" in markdown and "### After canary-gpu-nodes: passed" in markdown
    assert "no alerts fired in 30m" in markdown
    assert "- NCCL bus bandwidth more than 10% below baseline" in markdown
    assert "| control-plane:before | approved | alice | approve | backup verified |" in markdown


def test_inputs_the_run_never_produced_are_shown_as_not_reached() -> None:
    inputs = RecordInputs(
        cluster="gpu-prod",
        inventory=inventory(),
        compat=compat(),
        canary={"hosts": ["gpu-node-001"]},
        acceptance={"control-plane": acceptance(392, {}), "widen": {}},
        observation={"window": "30m", "result": None},
        run=run_var(["ok", "failed", "pending", "pending"]),
    )
    record = build_change_record(inputs)
    markdown = render_markdown(record)
    assert record.goal_and_risk.state == "not reached"
    assert record.observation_window.state == "not reached" and record.observation_window.result is None
    assert record.compatibility_sources.deprecations_state == "not reached"
    assert [v.state for v in record.validation_results] == ["recorded", "not reached"]
    assert "### After widen: not reached" in markdown
    assert "_not reached (30m): the observation window did not run._" in markdown
    assert "- Goal: not reached" in markdown
    assert "- Deprecated APIs: not reached" in markdown
    assert record.outcome == "failed" and record.status == "stage control-plane failed"
    assert "| canary-gpu-nodes | not reached |" in markdown


def test_a_canary_regression_rollback_says_why_and_follows_up_on_the_slow_node() -> None:
    before = acceptance(392, {})
    reason = (
        "acceptance after canary-gpu-nodes failed: network/nccl: 205 GB/s vs baseline 392 (-47.7%, limit 10%)"
    )
    inputs = complete_inputs().model_copy(
        update={
            "acceptance": {"canary-gpu-nodes": acceptance(205, before["measured"])},
            "observation": {"window": "30m", "result": None},
            # model_copy does not validate: the typed `run` is built here.
            "run": RunVars.model_validate(
                run_var(["ok", "ok", "rolled_back", "pending"], reason=reason, canary_failed=["gpu-node-001"])
            ),
        }
    )
    record = build_change_record(inputs)
    markdown = render_markdown(record)
    assert record.outcome == "rolled back"
    assert record.status == f"rolled back (stage canary-gpu-nodes): {reason}"
    failures = record.failures_and_follow_ups.failures
    assert failures[0] == f"the run rolled back: {reason}"
    assert "stage canary-gpu-nodes rolled back (failed hosts: gpu-node-001)" in failures
    assert any("deviation network/nccl: 205 GB/s vs baseline 392 (-47.7%, limit 10%)" in f for f in failures)
    follow = record.failures_and_follow_ups.follow_ups
    assert any(
        f.startswith("explain or fix the network/nccl regression on gpu-node-001 before retrying")
        for f in follow
    )
    assert "### After canary-gpu-nodes: FAILED" in markdown
    assert "- [ ] explain or fix the network/nccl regression on gpu-node-001" in markdown


def test_a_preflight_refusal_cites_the_skew_rule_and_its_source() -> None:
    inputs = RecordInputs(
        cluster="gpu-prod",
        compat=compat(supported=False),
        run=run_var(["failed", "skipped", "skipped", "pending"]),
    )
    record = build_change_record(inputs)
    assert record.outcome == "refused in preflight"
    assert record.status == "refused in preflight: kube-apiserver-one-minor"
    assert any(
        SKEW_SOURCE in f and "kube-apiserver-one-minor" in f for f in record.failures_and_follow_ups.failures
    )
    assert "violation `kube-apiserver-one-minor` (kubernetes)" in render_markdown(record)


def test_people_s_follow_ups_are_kept_after_the_generated_ones() -> None:
    inputs = complete_inputs().model_copy(
        update={"follow_ups": ["retire the v1beta1 ClusterQueue manifests"]}
    )
    record = build_change_record(inputs)
    assert record.failures_and_follow_ups.follow_ups[-1] == "retire the v1beta1 ClusterQueue manifests"


def test_run_ids_become_one_key_segment() -> None:
    assert sanitize("platform-upgrade/2026-11-29 10:00") == "platform-upgrade-2026-11-29-10-00"
    assert sanitize("///") == "run"


def test_malformed_arguments_are_refused_naming_the_field() -> None:

    bad = ModuleCall(
        module="records.change_record",
        host="localhost",
        args={"bucket": "records", "cluster": "gpu-prod", "canary": {"hosts": "gpu-node-001"}},
        check_mode=True,
        run_id="r",
        task_path="t",
    )
    with pytest.raises(ApplicationError) as raised:
        records_change_record(bad)
    assert raised.value.type == "InvalidArgs"
    assert "records.change_record: canary.hosts: Input should be a valid list" in str(raised.value)


def test_check_mode_returns_the_record_it_would_write(worker_policy: PolicyLayer) -> None:
    args = {"bucket": "records", "cluster": "gpu-prod", "run": run_var(["ok", "ok", "ok", "ok"])}
    call = ModuleCall(
        module="records.change_record",
        host="localhost",
        args=args,
        check_mode=True,
        run_id="r",
        task_path="t",
    )
    # Check mode answers as the real run would: refused until the worker may use the bucket.
    with pytest.raises(ApplicationError) as refused:
        records_change_record(call)
    assert refused.value.type == "PolicyViolation"
    assert "records.change_record: S3 endpoint AWS (no endpoint_url) is not one this worker may use" in str(
        refused.value
    )
    worker_policy.allow_s3("aws", ["records"])
    result = records_change_record(call)
    key = "change-records/gpu-prod/platform-upgrade-2026-11-29-10-00"
    assert (
        result.msg
        == f"would write s3://records/{key}.json and s3://records/{key}.md; change every stage passed"
    )
    assert result.data["record"]["version_diff"]["state"] == "not reached"


def test_a_failure_rescued_in_preflight_is_a_refusal_that_quotes_it() -> None:
    failure = "Check compatibility: kube-apiserver-one-minor: v1.30.6 -> v1.32.0 skips a minor version"
    inputs = RecordInputs(
        cluster="gpu-prod", failure=failure, run=run_var(["running", "pending", "pending", "pending"])
    )
    record = build_change_record(inputs)
    assert record.outcome == "refused in preflight"
    assert record.status == f"refused in preflight: {failure}"
    assert record.failures_and_follow_ups.failures[0] == failure
    assert record.compatibility_sources.state == "not reached"
    markdown = render_markdown(record)
    assert "_not reached: no acceptance check ran._\n\n## Observation window" in markdown
    assert f"- {failure}\n" in markdown


def test_the_observation_result_is_the_outcome_of_the_observed_stage() -> None:
    def observed(status: str, reason: str | None = None) -> Any:
        statuses = ["ok", "ok", "ok", status]
        run = run_var(statuses)
        run["stages"][3]["rollback_reason"] = reason
        run["stages"][3]["failures"] = [{"host": "gpu-node-003", "task": "observe", "msg": "2 Xid events"}]
        inputs = RecordInputs(cluster="c", observation={"window": "20s", "stage": "widen"}, run=run)
        return build_change_record(inputs).observation_window

    ok = observed("ok")
    assert ok.state == "recorded" and ok.result == {
        "failed": False,
        "msg": "stage widen was observed without a failing check",
    }
    rolled = observed("rolled_back", reason="observe check failed on gpu-node-003")
    assert rolled.result == {
        "failed": True,
        "msg": "stage widen rolled back: observe check failed on gpu-node-003",
    }
    failed = observed("failed")
    assert failed.result == {"failed": True, "msg": "stage widen failed: gpu-node-003: 2 Xid events"}
    for status in ("pending", "observing"):
        assert observed(status).state == "not reached"
    markdown = render_markdown(
        build_change_record(
            RecordInputs(
                cluster="c", observation={"window": "20s", "stage": "widen"}, run=run_var(["ok"] * 4)
            )
        )
    )
    assert "- Window: 20s (stage widen)\n- ok: stage widen was observed without a failing check" in markdown


def test_an_explained_deviation_is_listed_but_the_upgrade_still_succeeds() -> None:
    before = acceptance(392, {})
    inputs = complete_inputs().model_copy(
        update={
            "acceptance": {"canary-gpu-nodes": acceptance(340, before["measured"], on_deviation="report")}
        }
    )
    record = build_change_record(inputs)
    markdown = render_markdown(record)
    assert record.outcome == "succeeded"
    assert record.failures_and_follow_ups.failures == [
        "acceptance after canary-gpu-nodes: deviation reported for explanation "
        "network/nccl: 340 GB/s vs baseline 392 (-13.3%, limit 10%)"
    ]
    assert "### After canary-gpu-nodes: deviations to explain" in markdown
    assert "| network/nccl | deviation | 340 GB/s | 392 GB/s | -13.3% |" in markdown


def test_the_inventory_after_the_change_shows_what_runs_and_how_it_was_validated() -> None:
    after = inventory()
    for row in after["data"]["rows"]:
        row["current"] = row["target"]
        row["validation"] = "passed in acceptance: gpu/dcgm" if row["component"] == "gpu-driver" else ""
    after["data"]["rows"][1]["current"] = "v1.30.6"  # one kubelet never moved
    record = build_change_record(complete_inputs().model_copy(update={"inventory_after": after}))
    by_component = {c.component: c for c in record.version_diff.changes}
    assert (by_component["gpu-driver"].after, by_component["gpu-driver"].validation) == (
        "570.86.15",
        "passed in acceptance: gpu/dcgm",
    )
    assert by_component["kubelet"].after == "v1.30.6"
    markdown = render_markdown(record)
    assert "| component | version inventory row | current | target | after | validation |" in markdown
    assert (
        "| kubelet | Kubernetes and containerd/CRI-O | v1.30.6 | v1.31.2 | v1.30.6 | not reached |"
        in markdown
    )


def test_unsupported_windows_on_the_way_are_listed_as_accepted_risk() -> None:
    with_windows = compat()
    with_windows["warnings"] = [
        {
            "rule": "matrix/gpu-operator/kubernetes",
            "source": "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/platform-support.html",
            "component": "gpu-operator",
            "message": "after phase 1 (kubernetes): gpu-operator v24.6.2 does not support kubernetes v1.31.2",
        }
    ]
    record = build_change_record(complete_inputs().model_copy(update={"compat": with_windows}))
    assert [f.subject for f in record.compatibility_sources.in_between] == ["gpu-operator"]
    markdown = render_markdown(record)
    assert "Unsupported on the way (accepted for the length of the upgrade):" in markdown
    assert "gpu-operator v24.6.2 does not support kubernetes v1.31.2" in markdown
