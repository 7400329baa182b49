"""pitstop's alert pack (runbooks/monitoring/): the rules file, its PrometheusRule twin, and
the rehearsal copy with short `for:` durations.

The plain rules file is the source: Prometheus and `promtool` read it as it is. The
PrometheusRule manifest for prometheus-operator users is rendered from it (`python -m
pitstop.alert_pack prometheusrule > runbooks/monitoring/pitstop-alerts.prometheusrule.yaml`),
and a test checks that the committed manifest still says what the rules file says.

Rehearsals cannot wait the production `for:` durations (5 to 15 minutes) inside an observe
window of a few seconds, so the embedded stack's Prometheus loads a copy rendered by
`rehearsal_rules` with every `for:` replaced by a short one: the expressions, labels and
annotations stay exactly those of the pack, so a rehearsal exercises the alerts an operator
deploys, only sooner.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from ruamel.yaml import YAML

from pitstop.safe_yaml import safe_load_file

PACK_DIR = Path(__file__).resolve().parent.parent / "runbooks" / "monitoring"
RULES_FILE = PACK_DIR / "pitstop-alerts.rules.yaml"
PROMETHEUS_RULE_FILE = PACK_DIR / "pitstop-alerts.prometheusrule.yaml"
PROMETHEUS_RULE_NAME = "pitstop-alerts"


class Rule(BaseModel):
    """One alerting rule as Prometheus reads it (recording rules are not part of the pack)."""

    model_config = ConfigDict(extra="forbid")

    alert: str
    expr: str
    for_: str | None = Field(default=None, alias="for")
    keep_firing_for: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class RuleGroup(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    interval: str | None = None
    rules: list[Rule]


class RulesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    groups: list[RuleGroup]

    def alert_names(self) -> list[str]:
        return [rule.alert for group in self.groups for rule in group.rules]

    def as_data(self) -> dict[str, Any]:
        """The rules file's content as plain data (what YAML or a manifest's spec holds)."""
        data: dict[str, Any] = self.model_dump(by_alias=True, exclude_none=True)
        return data


def load_rules(path: Path = RULES_FILE) -> RulesFile:
    return RulesFile.model_validate(safe_load_file(path))


def prometheus_rule(rules: RulesFile, name: str = PROMETHEUS_RULE_NAME) -> dict[str, Any]:
    """The PrometheusRule (monitoring.coreos.com/v1) carrying the same groups.

    The `release` label is what kube-prometheus-stack's default ruleSelector matches;
    change it to your Prometheus's `ruleSelector` when it differs."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/part-of": "pitstop", "release": "kube-prometheus-stack"},
        },
        "spec": rules.as_data(),
    }


def rehearsal_rules(rules: RulesFile, for_duration: str = "1s") -> RulesFile:
    """The same alerts with every `for:` set to `for_duration` (rules without one keep none:
    they fire at once in production too)."""
    groups = [
        group.model_copy(
            update={
                "rules": [
                    rule.model_copy(update={"for_": for_duration}) if rule.for_ is not None else rule
                    for rule in group.rules
                ]
            }
        )
        for group in rules.groups
    ]
    return rules.model_copy(update={"groups": groups})


def dump_yaml(data: Any, header: str = "") -> str:
    yaml = YAML(typ="rt", pure=True)
    yaml.default_flow_style = False
    yaml.width = 4096  # keep each PromQL line as written
    out = io.StringIO()
    yaml.dump(_literal_blocks(data), out)
    return header + out.getvalue()


def _literal_blocks(data: Any) -> Any:
    """Multi-line strings (PromQL expressions) as `|` blocks, as a person writes them."""
    from ruamel.yaml.scalarstring import LiteralScalarString

    if isinstance(data, dict):
        return {k: _literal_blocks(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_literal_blocks(v) for v in data]
    if isinstance(data, str) and "\n" in data:
        return LiteralScalarString(data)
    return data


MANIFEST_HEADER = (
    "# Generated from pitstop-alerts.rules.yaml by `python -m pitstop.alert_pack prometheusrule`;\n"
    "# edit the rules file, then regenerate (a test fails when they differ).\n"
)


def main(argv: list[str]) -> int:
    if argv[1:] == ["prometheusrule"]:
        sys.stdout.write(dump_yaml(prometheus_rule(load_rules()), MANIFEST_HEADER))
        return 0
    if len(argv) in (2, 3) and argv[1] == "rehearsal":
        rules = rehearsal_rules(load_rules(), *(argv[2:] or []))
        sys.stdout.write(dump_yaml(rules.as_data()))
        return 0
    sys.stderr.write("usage: python -m pitstop.alert_pack prometheusrule | rehearsal [FOR]\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
