"""`baseline.record` / `baseline.compare`: a JSON file per (product, pool) in a directory.

The directory is local to the worker by default; point PITSTOP_BASELINE_DIR at shared
storage (or sync it to S3) when several workers serve one cluster. That directory is the
worker's own; a `store` a runbook names instead is a path under the worker policy's files
rule (relative to the runbook directory; `baseline.record` must be allowed to write it).
"""

from __future__ import annotations

import os
import re
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from activities.module_activity import module_activity
from pitstop.baseline import Baseline, compare, merge
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, make_error
from pitstop.module_args.baseline import (
    COMPARE,
    RECORD,
    CompareArgs,
    RecordArgs,
)
from pitstop.policy.files import Access, check_path

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def store_dir(store: str | None, call: ModuleCall | None = None, access: Access = "read") -> str | None:
    """The store a runbook named, once the files rule allows `access` there (None: the default)."""
    if store is None or call is None:
        return store
    what = f"{call.module}: store"
    return str(check_path(store, run_id=call.run_id, what=what, access=access, relative_to="runbook").path)


def _path(store: str | None, product: str, pool: str) -> Path:
    root = Path(store or os.environ.get("PITSTOP_BASELINE_DIR", ".pitstop/baselines"))
    return root / f"{_SAFE.sub('_', product)}__{_SAFE.sub('_', pool)}.json"


def load(store: str | None, product: str, pool: str) -> Baseline:
    path = _path(store, product, pool)
    if not path.exists():
        return Baseline(product=product, pool=pool)
    return Baseline.model_validate_json(path.read_text())


def for_run(store: str | None, product: str, pool: str, run_id: str) -> Baseline:
    """The baseline as it was when this run first read it, frozen for the rest of the run.

    A run judges every node against the state before its change: figures it records on the way
    (the canary's, after its firmware) become the next run's baseline, never the yardstick of
    the fleet it is still rolling out to. The first read of a (product, pool) in a run writes a
    snapshot beside the store (`.runs/<run>/...`, created exclusively, so two nodes reading at
    once keep the same one); later reads in that run return it."""
    live = _path(store, product, pool)
    frozen = live.parent / ".runs" / _SAFE.sub("_", run_id) / live.name
    if not frozen.exists():
        frozen.parent.mkdir(parents=True, exist_ok=True)
        body = load(store, product, pool).model_dump_json(indent=2)
        with tempfile.NamedTemporaryFile("w", dir=frozen.parent, delete=False, suffix=".tmp") as tmp:
            tmp.write(body)
        try:
            os.link(tmp.name, frozen)  # fails if another attempt froze it first: that one stands
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp.name)
    return Baseline.model_validate_json(frozen.read_text())


def save(store: str | None, baseline: Baseline) -> Path:
    path = _path(store, baseline.product, baseline.pool)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Atomic replace: a crash mid-write never leaves a half-written baseline.
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as tmp:
        tmp.write(baseline.model_dump_json(indent=2))
    os.replace(tmp.name, path)
    return path


@module_activity(RECORD)
def baseline_record(call: ModuleCall, args: RecordArgs) -> ModuleResult:
    store = store_dir(args.store, call, "write")
    current = load(store, args.product, args.pool)
    updated = merge(current, args.metrics, datetime.now(UTC), call.run_id, args.units)
    figures = {k: round(v.value, 3) for k, v in updated.metrics.items() if k in args.metrics}
    if call.check_mode:
        return ModuleResult(changed=True, msg=f"would record {figures}", data={"baseline": figures})
    path = save(store, updated)
    return ModuleResult(changed=True, msg=f"recorded {figures} in {path}", data={"baseline": figures})


@module_activity(COMPARE)
def baseline_compare(call: ModuleCall, args: CompareArgs) -> ModuleResult:
    baseline = for_run(store_dir(args.store, call), args.product, args.pool, call.run_id)
    try:
        deviations = compare(baseline, args.metrics, args.thresholds)
    except KeyError as exc:
        raise make_error(ErrorType.PRECONDITION_FAILED, str(exc.args[0])) from None
    data = {"deviations": [d.model_dump() for d in deviations]}
    bad = [d for d in deviations if not d.ok]
    if bad:
        return ModuleResult(failed=True, msg="; ".join(d.describe() for d in bad), data=data)
    summary = ", ".join(f"{d.metric} {d.deviation_pct:+.1f}%" for d in deviations)
    return ModuleResult(msg=f"within baseline: {summary}", data=data)


BASELINE_ACTIVITIES = [baseline_record, baseline_compare]
