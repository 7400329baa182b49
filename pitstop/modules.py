"""Modules by name: the shipped catalogue, plus the modules a site (or a test) adds.

The loader validates task arguments against each module's Args model, `pitstop schema`
exports them, and the engine reads the execution defaults (timeouts, retry policy) from the
spec. `pure` modules (debug, set_fact, assert, fail, pause) are evaluated inside the workflow
itself and never become activities: they have no side effects, and an activity round trip
would cost ~40 ms each for nothing.

What a spec is lives in `pitstop.module_spec` (re-exported here for modules written outside
pitstop); which specs ship lives in `pitstop.module_catalog`.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Iterable
from typing import Any

from pitstop.module_spec import ModuleArgs, ModuleSpec, RetryDefaults, SecretRef

__all__ = [
    "ModuleArgs",
    "ModuleSpec",
    "RetryDefaults",
    "SecretRef",
    "all_modules",
    "get_module",
    "module_names",
    "register",
]

# Modules that are not shipped: a site's own (named in PITSTOP_MODULES), a test's, the
# benchmark's. Each is added by an explicit `register()` call.
_ADDED: dict[str, ModuleSpec[Any]] = {}
_site_loaded = False


@functools.cache
def _catalogue() -> dict[str, ModuleSpec[Any]]:
    # Read on first lookup, not when this file is imported: the Args models use the runbook
    # language's durations and selectors, and the runbook language looks modules up here.
    from pitstop.module_catalog import CATALOGUE

    return CATALOGUE


def register(spec: ModuleSpec[Any]) -> ModuleSpec[Any]:
    """Add a module that is not in the catalogue; a name already taken is an error."""
    known = _shipped(spec.name) or _ADDED.get(spec.name)
    if known is not None and known is not spec:
        raise ValueError(f"module {spec.name!r} registered twice")
    _ADDED[spec.name] = spec
    return spec


def _load_site_modules() -> None:
    # Site-specific modules (like Ansible's library path) are Python modules named in
    # PITSTOP_MODULES, comma-separated: each lists its specs in `SPECS` (or registers them
    # itself when imported).
    global _site_loaded
    if _site_loaded:
        return
    _site_loaded = True
    for name in os.environ.get("PITSTOP_MODULES", "").split(","):
        if name.strip():
            module = importlib.import_module(name.strip())
            for spec in getattr(module, "SPECS", ()):
                register(spec)


# Where a shipped module's spec lives, by the part of its name before the dot: one file of
# `pitstop/module_args/` of that name, except these. A lookup loads only those files, so
# validating a runbook of SSH tasks, or of a site's own modules, does not build the argument
# models of every family (~0.15 s of each CLI command). Every catalogued name is found this way
# (tests/unit/test_module_catalogue.py holds it), so a name its family does not hold is not
# shipped.
_FAMILIES_OF_PREFIX = {
    "kube": ("kube", "kube_upgrade", "kube_removals", "kube_readiness", "observe"),
    "gpu": ("gpu", "gpu_driver"),
}


@functools.cache
def _family(family: str) -> dict[str, ModuleSpec[Any]]:
    if family == "core":
        from pitstop.core_modules import CORE_MODULES

        return dict(CORE_MODULES)
    # `family` comes from a runbook's module name: only a plain public name of a family file.
    if not family.isidentifier() or family.startswith("_"):
        return {}
    try:
        module = importlib.import_module(f"pitstop.module_args.{family}")
    except ModuleNotFoundError:
        return {}
    specs: list[ModuleSpec[Any]] = getattr(module, "SPECS", [])
    return {spec.name: spec for spec in specs}


def _shipped(name: str) -> ModuleSpec[Any] | None:
    prefix, dot, _ = name.partition(".")
    families = _FAMILIES_OF_PREFIX.get(prefix, (prefix,)) if dot else ("core",)
    for family in families:
        if (spec := _family(family).get(name)) is not None:
            return spec
    return None


def get_module(name: str) -> ModuleSpec[Any] | None:
    spec = _shipped(name)
    if spec is not None:
        return spec
    _load_site_modules()
    return _ADDED.get(name)


def all_modules() -> Iterable[ModuleSpec[Any]]:
    _load_site_modules()
    return sorted([*_catalogue().values(), *_ADDED.values()], key=lambda s: s.name)


def module_names() -> list[str]:
    return [s.name for s in all_modules()]
