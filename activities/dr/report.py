"""`dr.report`: the DR readiness table a person reads at the end of the run.

One row per recovery item: `verified` with its evidence (object key and SHA-256, expiry date,
the revision deployed) or `unverified` with why (not configured, not checkable by pitstop yet, a
check that failed). The table is the task's `msg` (so `pitstop status`, the report and the
Temporal UI show it as it is); `data.verified` / `data.unverified` list the items by name.
"""

from __future__ import annotations

from activities.module_activity import module_activity
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail
from pitstop.module_args.dr import REPORT, ReportArgs, ReportItem

MAX_CELL = 240


def _cell(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_CELL else flat[: MAX_CELL - 1] + "…"


def render(title: str, items: list[ReportItem]) -> str:
    width = max(len("recovery item"), *(len(i.item) for i in items))
    lines = [title, f"{'recovery item'.ljust(width)}  {'status'.ljust(10)}  evidence / why"]
    lines.append("-" * len(lines[1]))
    for item in items:
        status = "verified" if item.verified else "unverified"
        detail = item.evidence if item.verified else (item.why or "no reason given")
        lines.append(f"{item.item.ljust(width)}  {status.ljust(10)}  {_cell(detail)}")
    done = sum(1 for i in items if i.verified)
    lines.append(f"{done} of {len(items)} recovery items verified")
    return "\n".join(lines)


@module_activity(REPORT)
def report(call: ModuleCall, args: ReportArgs) -> ModuleResult:
    table = render(args.title, args.items)
    # Kept small: a registered value over 4 KiB is left out of the run's report (the table,
    # the task's message, is what people read; these lists are for what runs after).
    unverified = [i.item for i in args.items if not i.verified]
    data = {"verified": [i.item for i in args.items if i.verified], "unverified": unverified}
    known = {i.item for i in args.items}
    unknown = [name for name in args.fail_on_unverified if name not in known]
    if unknown:
        fail(
            ErrorType.INVALID_ARGS,
            f"fail_on_unverified names items the report does not have: {', '.join(unknown)}",
        )
    missing = [name for name in args.fail_on_unverified if name in unverified]
    if missing:
        fail(
            ErrorType.PRECONDITION_FAILED,
            f"required recovery items unverified: {', '.join(missing)}\n{table}",
        )
    return ModuleResult(msg=table, data=data)
