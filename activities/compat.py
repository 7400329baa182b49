"""`compat.check`: refuse an upgrade that the skew policy or a vendor matrix does not support.

The activity only reads the data files under `compat_dir()` (PITSTOP_COMPAT_DIR, default
`$PITSTOP_RUNBOOK_DIR/compat`) and formats the verdict; the rules are `pitstop.compat`'s.
It changes nothing, so check mode runs it as is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError
from temporalio import activity

from activities.module_activity import module_activity
from pitstop.compat.check import SkewFacts, evaluate, summary
from pitstop.compat.matrix import MatrixError, compat_dir, load_matrices, load_skew_policy
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail, make_error
from pitstop.module_args.compat import COMPAT_CHECK, CompatCheckArgs
from pitstop.runbook.errors import suggest


def _texts(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(key): str(text) for key, text in value.items() if text is not None}


def _inputs(
    call: ModuleCall, args: CompatCheckArgs
) -> tuple[dict[str, str], dict[str, str], SkewFacts | None]:
    current, target, skew = dict(args.current), dict(args.target), args.skew
    if args.inventory is not None:
        inventory = (
            args.inventory.get("data", args.inventory) if "current" not in args.inventory else args.inventory
        )
        if not isinstance(inventory.get("current"), Mapping):
            fail(
                ErrorType.INVALID_ARGS,
                f"{call.module}: inventory: expected the registered result of inventory.versions (with "
                f"current, target and skew), got keys {', '.join(sorted(map(str, inventory))) or 'none'}",
            )
        current = {**_texts(inventory["current"]), **current}
        target = {**_texts(inventory.get("target")), **target}
        if skew is None and isinstance(inventory.get("skew"), Mapping):
            skew = dict(inventory["skew"])
    if not current:
        fail(
            ErrorType.INVALID_ARGS,
            f"{call.module}: give the versions now as `current` "
            "(or the inventory.versions result as `inventory`)",
        )
    try:
        facts = SkewFacts.model_validate(skew) if skew is not None else None
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise make_error(ErrorType.INVALID_ARGS, f"{call.module}: skew: {problems}") from None
    return current, target, facts


@module_activity(COMPAT_CHECK)
def compat_check(call: ModuleCall, args: CompatCheckArgs) -> ModuleResult:
    current, target, skew = _inputs(call, args)
    root = compat_dir()
    try:
        policy = load_skew_policy(root)
        matrices = load_matrices(root)
    except MatrixError as exc:
        raise make_error(ErrorType.PRECONDITION_FAILED, f"{call.module}: {exc}") from None
    for name in args.matrices:
        if name not in matrices:
            near = suggest(name, matrices)
            hint = f" (did you mean '{near}'?)" if near else ""
            fail(
                ErrorType.INVALID_ARGS,
                f"{call.module}: matrices: no vendor matrix for '{name}'{hint}; "
                f"available: {', '.join(sorted(matrices))}",
            )
    verdict = evaluate(
        current=current,
        target=target,
        kubelets=args.kubelets,
        skew=skew,
        policy=policy,
        matrices=matrices,
        only=(args.matrices or None) if args.vendor_matrices else [],
        phases=args.phases or None,
        in_between=args.in_between,
    )
    activity.logger.info(
        "compat.check: supported=%s violations=%d", verdict.supported, len(verdict.violations)
    )
    return ModuleResult(
        changed=False,
        failed=not verdict.supported,
        msg=summary(verdict, current, target),
        data=verdict.model_dump(mode="json"),
    )


COMPAT_ACTIVITIES: list[Callable[..., Any]] = [compat_check]
