"""A component's validation state from an `acceptance.check` result
(docs/upgrade-process.md "Version inventory" asks for a validation state per row;
docs/upgrade-process.md "Acceptance by layer" says what validates what).

Each component names the acceptance checks that exercise it (`validated_by` in
runbooks/compat/components.yaml). Its state is the worst of theirs: "FAILED" if one failed or
deviated beyond its threshold, "passed" if all that ran passed, "not validated" if none could
be measured (all n/a) or none is named. The checks are named, so a reviewer sees why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pitstop.versions.components import ComponentTable

FAILING = ("failed", "deviation", "deviated")


def check_outcomes(acceptance: Mapping[str, Any]) -> dict[str, str]:
    """`layer/check` -> status, from an acceptance.check result (flat or under `data`)."""
    data = acceptance.get("data") if isinstance(acceptance.get("data"), Mapping) else acceptance
    layers = data.get("layers") if isinstance(data, Mapping) else None
    outcomes: dict[str, str] = {}
    for layer, body in (layers or {}).items():
        for check in (body or {}).get("checks") or []:
            name = str(check.get("name") or "")
            if name:
                outcomes[name if "/" in name else f"{layer}/{name}"] = str(check.get("status") or "")
    return outcomes


def validation_states(table: ComponentTable, acceptance: Mapping[str, Any], label: str) -> dict[str, str]:
    """Component key -> validation state, for the components some measured check exercises."""
    outcomes = check_outcomes(acceptance)
    states: dict[str, str] = {}
    for component in table.components:
        ran = {c: outcomes[c] for c in component.validated_by if outcomes.get(c) not in (None, "", "n/a")}
        if not ran:
            continue
        bad = sorted(c for c, status in ran.items() if status in FAILING)
        if bad:
            states[component.key] = f"FAILED in {label}: {', '.join(bad)}"
        else:
            states[component.key] = f"passed in {label}: {', '.join(sorted(ran))}"
    return states
