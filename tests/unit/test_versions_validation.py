"""The validation state of each inventory row, from the acceptance checks that exercise its
component (the "validation state" column of docs/upgrade-process.md "Version inventory", judged as
docs/upgrade-process.md "Acceptance by layer" says)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from pitstop.versions.components import ComponentTableError, load_components, parse_components
from pitstop.versions.validation import check_outcomes, validation_states

TABLE = load_components(Path(__file__).resolve().parents[2] / "runbooks" / "compat")


def acceptance(statuses: dict[str, str]) -> dict[str, Any]:
    layers: dict[str, Any] = {}
    for key, status in statuses.items():
        layer, name = key.split("/")
        layers.setdefault(layer, {"status": "passed", "checks": []})["checks"].append(
            {"name": name, "status": status}
        )
    return {"layers": layers, "passed": all(s in ("passed", "n/a") for s in statuses.values())}


def test_every_component_but_kubectl_names_the_checks_that_validate_it() -> None:
    unvalidated = [c.key for c in TABLE.components if not c.validated_by]
    assert unvalidated == ["kubectl"]


def test_a_component_passes_when_every_check_that_ran_passed_and_fails_on_any_deviation() -> None:
    result = acceptance(
        {"gpu/dcgm": "passed", "gpu/xid": "passed", "network/nccl": "deviation", "gpu/discovery": "passed"}
    )
    states = validation_states(TABLE, result, "canary")
    assert states["gpu-driver"] == "FAILED in canary: network/nccl"
    assert states["dcgm"] == "passed in canary: gpu/dcgm"
    assert states["device-plugin"] == "passed in canary: gpu/discovery"
    # Nothing measured the queues: no state, so the row keeps "not validated".
    assert "kueue" not in states


def test_checks_that_could_not_be_measured_validate_nothing() -> None:
    states = validation_states(
        TABLE, acceptance({"storage/pvc": "n/a", "kubernetes/csi": "n/a"}), "acceptance"
    )
    assert "csi" not in states


def test_registered_results_are_read_flat_or_under_data() -> None:
    flat = acceptance({"gpu/dcgm": "failed"})
    assert check_outcomes(flat) == check_outcomes({"data": flat}) == {"gpu/dcgm": "failed"}


def test_a_table_naming_an_unknown_check_is_refused_with_the_nearest_name() -> None:
    path = Path(__file__).resolve().parents[2] / "runbooks" / "compat" / "components.yaml"
    data = YAML(typ="safe").load(path.read_text())
    data["components"][0]["validated_by"] = ["gpu/dcmg"]
    with pytest.raises(ComponentTableError, match="did you mean 'gpu/dcgm'"):
        parse_components(data)
