"""The catalogue and the worker's activities agree: every module that is not pure has exactly
one activity, every module activity has exactly one spec, and pure modules have none."""

from __future__ import annotations

import ast
import importlib
import os
import pkgutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from temporalio import activity

import activities
import pitstop.module_args
from activities.module_activity import SPEC_ATTRIBUTE
from pitstop import core_modules
from pitstop.module_catalog import CATALOGUE, FAMILIES
from pitstop.module_spec import ModuleSpec
from pitstop.modules import all_modules, get_module

MODULE_PREFIX = "module."


def _name(fn: Callable[..., Any]) -> str:
    definition = activity._Definition.from_callable(fn)
    assert definition is not None and definition.name is not None, f"{fn!r} is not an activity"
    return definition.name


def _module_activities() -> dict[str, Callable[..., Any]]:
    named = [(_name(fn), fn) for fn in activities.ACTIVITIES]
    counts = Counter(name for name, _ in named)
    assert not [name for name, n in counts.items() if n > 1], "an activity is registered twice"
    return {name: fn for name, fn in named if name.startswith(MODULE_PREFIX)}


def test_every_module_that_is_not_pure_has_exactly_one_activity() -> None:
    served = _module_activities()
    missing = [s.name for s in CATALOGUE.values() if not s.pure and s.activity_name not in served]
    assert missing == []


def test_every_module_activity_has_exactly_one_spec_and_is_bound_to_it() -> None:
    for name, fn in _module_activities().items():
        spec = CATALOGUE.get(name.removeprefix(MODULE_PREFIX))
        assert spec is not None, f"activity {name} has no spec in the catalogue"
        assert not spec.pure, f"{spec.name} is pure but has an activity"
        # Bound by `@module_activity(SPEC)`, so the name came from this very spec.
        assert getattr(fn, SPEC_ATTRIBUTE) is spec, name


def test_pure_modules_are_the_core_modules_and_have_no_activity() -> None:
    served = _module_activities()
    pure = {s.name for s in CATALOGUE.values() if s.pure}
    assert pure == set(core_modules.CORE_MODULES) == {"debug", "assert", "set_fact", "fail", "pause"}
    assert not [name for name in pure if MODULE_PREFIX + name in served]


def test_every_spec_of_every_family_file_is_listed_in_the_catalogue_once() -> None:
    listed = [id(spec) for specs in FAMILIES.values() for spec in specs]
    assert len(listed) == len(set(listed)) == len(CATALOGUE)
    for info in pkgutil.iter_modules(pitstop.module_args.__path__):
        family = importlib.import_module(f"pitstop.module_args.{info.name}")
        declared = {id(v) for v in vars(family).values() if isinstance(v, ModuleSpec)}
        specs = getattr(family, "SPECS", [])
        assert declared == {id(s) for s in specs}, f"{info.name}: a spec is missing from SPECS"
        if specs:
            assert any(specs is joined for joined in FAMILIES.values()), f"{info.name} is not catalogued"


def test_lookups_by_name_come_from_the_catalogue() -> None:
    for name, spec in CATALOGUE.items():
        assert get_module(name) is spec
    assert {s.name for s in all_modules()} >= set(CATALOGUE)
    assert get_module("no.such_module") is None


def test_the_specs_never_import_the_lookups() -> None:
    # One way: module_spec <- family files <- catalogue <- modules. A family file importing
    # `pitstop.modules` (to register itself, say) would close the circle again.
    root = Path(pitstop.module_args.__file__).parent
    files = [
        *root.glob("*.py"),
        *(root.parent / f for f in ("core_modules.py", "module_catalog.py", "module_spec.py")),
    ]
    offenders = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            if "pitstop.modules" in names:
                offenders.append(path.name)
    assert offenders == []


def site_module(root: Path) -> dict[str, str]:
    """A site's module file `site_mods` declaring `site.hello`, and the environment naming it."""
    (root / "site_mods.py").write_text(
        "from pitstop.module_spec import ModuleArgs, ModuleSpec\n"
        "class NoArgs(ModuleArgs):\n"
        "    pass\n"
        "SPECS = [ModuleSpec(name='site.hello', args_model=NoArgs, summary='a site module')]\n"
    )
    return {**os.environ, "PITSTOP_MODULES": "site_mods", "PYTHONPATH": str(root)}


def test_a_site_module_lists_its_specs_and_cannot_take_a_shipped_name(tmp_path: Path) -> None:
    code = (
        "from pitstop.modules import get_module, module_names, register\n"
        "from pitstop.module_spec import ModuleSpec\n"
        "spec = get_module('site.hello')\n"
        "assert spec is not None and 'site.hello' in module_names()\n"
        "register(spec)  # the same spec again is no error\n"
        "try:\n"
        "    register(ModuleSpec(name='kube.drain', args_model=spec.args_model, summary='x'))\n"
        "except ValueError as exc:\n"
        "    print(exc)\n"
    )
    env = site_module(tmp_path)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "module 'kube.drain' registered twice"


def test_a_lookup_by_name_finds_the_catalogues_spec_loading_only_its_family() -> None:
    from pitstop import modules
    from pitstop.module_catalog import CATALOGUE

    for name, spec in CATALOGUE.items():
        assert modules.get_module(name) is spec, name
    # Names a runbook may write: unknown families, paths, the package itself, private helpers.
    for hostile in ("no_such.module", "../x", "__init__.x", "_common.x", "module_args.x", "os.system"):
        assert modules.get_module(hostile) is None, hostile
    # In a fresh interpreter, looking up an SSH module loads the SSH family, not the others.
    code = (
        "import sys; from pitstop.modules import get_module; assert get_module('ssh.command');"
        "print(sorted(m for m in sys.modules if m.startswith('pitstop.module_args.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "['pitstop.module_args.ssh']"


def test_a_site_modules_lookup_and_registration_load_no_shipped_family(tmp_path: Path) -> None:
    code = (
        "import sys; from pitstop.modules import get_module; assert get_module('site.hello');"
        "print(sorted(m for m in sys.modules"
        " if m.startswith('pitstop.module_args.') or m.endswith('_catalog')))"
    )
    env = site_module(tmp_path)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
