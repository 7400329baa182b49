"""The alert pack in runbooks/monitoring/: valid for Prometheus, its unit tests pass (a case per
alert that fires and one that does not), and the PrometheusRule manifest says the same."""

from __future__ import annotations

from pathlib import Path

from pitstop.alert_pack import (
    PACK_DIR,
    PROMETHEUS_RULE_FILE,
    RULES_FILE,
    RulesFile,
    dump_yaml,
    load_rules,
    prometheus_rule,
    rehearsal_rules,
)
from pitstop.safe_yaml import safe_load_file
from tests.integration.monitoring.promtool import promtool

ALERTS = {
    "GpuXidError",
    "GpuEccUncorrectableVolatile",
    "GpuEccUncorrectableAggregateIncrease",
    "GpuTemperatureHigh",
    "GpuClocksThrottled",
    "GpuUtilizationCollapse",
    "KubePodPendingTooLong",
    "KubeNodeNotReady",
    "EtcdWalFsyncSlow",
}


def test_promtool_check_rules() -> None:
    result = promtool("check", "rules", str(RULES_FILE))
    assert f"SUCCESS: {len(ALERTS)} rules found" in result.stdout


def test_promtool_unit_tests_pass() -> None:
    tests = sorted(p.name for p in (PACK_DIR / "tests").glob("*.yaml"))
    assert tests, "no promtool unit tests in runbooks/monitoring/tests"
    result = promtool("test", "rules", *tests, cwd=PACK_DIR / "tests")
    assert result.stdout.count("SUCCESS") == len(tests)


def test_every_alert_has_a_case_that_fires_and_one_that_does_not() -> None:
    fires: set[str] = set()
    silent: set[str] = set()
    for path in (PACK_DIR / "tests").glob("*.yaml"):
        for case in safe_load_file(path)["tests"]:
            for check in case.get("alert_rule_test", []):
                (fires if check.get("exp_alerts") else silent).add(check["alertname"])
    assert fires == ALERTS
    assert silent == ALERTS


def test_every_alert_has_severity_and_node() -> None:
    rules = load_rules()
    assert set(rules.alert_names()) == ALERTS
    for group in rules.groups:
        for rule in group.rules:
            assert rule.labels.get("severity") in ("critical", "warning"), rule.alert
            assert "node" in rule.expr, f"{rule.alert} does not give its alerts a node label"


def test_prometheusrule_manifest_agrees_with_the_rules_file(tmp_path: Path) -> None:
    manifest = safe_load_file(PROMETHEUS_RULE_FILE)
    assert manifest == prometheus_rule(load_rules()), (
        "runbooks/monitoring/pitstop-alerts.prometheusrule.yaml is stale: regenerate it with "
        "`python -m pitstop.alert_pack prometheusrule > "
        "runbooks/monitoring/pitstop-alerts.prometheusrule.yaml`"
    )
    assert manifest["kind"] == "PrometheusRule"
    # The manifest's spec is itself a rules file Prometheus accepts.
    spec = tmp_path / "spec.rules.yaml"
    spec.write_text(dump_yaml(manifest["spec"]))
    promtool("check", "rules", str(spec))


def test_rehearsal_copy_only_shortens_for(tmp_path: Path) -> None:
    rules = load_rules()
    short = rehearsal_rules(rules, "1s")
    path = tmp_path / "rehearsal.rules.yaml"
    path.write_text(dump_yaml(short.as_data()))
    promtool("check", "rules", str(path))
    again = RulesFile.model_validate(safe_load_file(path))
    for original, copy in zip(
        (r for g in rules.groups for r in g.rules), (r for g in again.groups for r in g.rules), strict=True
    ):
        assert copy.for_ == ("1s" if original.for_ is not None else None)
        assert copy.model_dump(exclude={"for_"}) == original.model_dump(exclude={"for_"})
