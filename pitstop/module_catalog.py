"""The catalogue of shipped modules: every family's `SPECS`, joined once, by name.

Importing it registers nothing anywhere: it is a list. `pitstop.modules` looks names up in
it; `tests/unit/test_module_catalogue.py` holds it against `activities.ACTIVITIES` (one
activity per spec that is not pure, one spec per module activity).
"""

from __future__ import annotations

from typing import Any

from pitstop import core_modules
from pitstop.module_args import (
    acceptance,
    baseline,
    compat,
    dr,
    etcd,
    fleet,
    gpu,
    gpu_driver,
    inventory,
    kube,
    kube_readiness,
    kube_removals,
    kube_upgrade,
    notify,
    observe,
    prom,
    records,
    runs,
    ssh,
    storage,
)
from pitstop.module_spec import ModuleSpec

# Pure modules (evaluated inside the workflow, no activity), declared in core_modules.
PURE: list[ModuleSpec[Any]] = list(core_modules.CORE_MODULES.values())

# One family per file of `pitstop/module_args/`.
FAMILIES: dict[str, list[ModuleSpec[Any]]] = {
    "core": PURE,
    "acceptance": acceptance.SPECS,
    "baseline": baseline.SPECS,
    "compat": compat.SPECS,
    "dr": dr.SPECS,
    "etcd": etcd.SPECS,
    "fleet": fleet.SPECS,
    "gpu": gpu.SPECS,
    "gpu_driver": gpu_driver.SPECS,
    "inventory": inventory.SPECS,
    "kube": kube.SPECS,
    "kube_upgrade": kube_upgrade.SPECS,
    "kube_removals": kube_removals.SPECS,
    "kube_readiness": kube_readiness.SPECS,
    "notify": notify.SPECS,
    "observe": observe.SPECS,
    "prom": prom.SPECS,
    "records": records.SPECS,
    "runs": runs.SPECS,
    "ssh": ssh.SPECS,
    "storage": storage.SPECS,
}


def _by_name(families: dict[str, list[ModuleSpec[Any]]]) -> dict[str, ModuleSpec[Any]]:
    out: dict[str, ModuleSpec[Any]] = {}
    for specs in families.values():
        for spec in specs:
            if spec.name in out:
                raise ValueError(f"module {spec.name!r} is in the catalogue twice")
            out[spec.name] = spec
    return out


CATALOGUE: dict[str, ModuleSpec[Any]] = _by_name(FAMILIES)
