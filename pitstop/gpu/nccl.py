"""nccl-tests output (`all_reduce_perf -b 8 -e 8G -f 2 -g 8`): the per-size table, its checks
and the `# Avg bus bandwidth` line, in every format nccl-tests has printed.

The table is read by its own column header, not by counting fields, because the columns
changed over the years (NVIDIA/nccl-tests `src/common.cu`, later `src/util.cu`):
- before 2.13 each test printed its own header: `size count type redop` (all_reduce),
  `size count type root` (broadcast), `size count type` (all_gather) ... and the check column
  was `error`, the largest difference from the expected value as `%5.0le` (`0e+00`, `2e-03`);
  a difference is only a failure past a tolerance of the data type, which nccl-tests counts
  in `# Out of bounds values`;
- from 2.13 one header for all tests, `size count type redop root`, and the check column is
  `#wrong`, a count of wrong elements printed with `%g` (`0`, `1024`, `2.14748e+09`);
- from 2.19 optional per-iteration columns (`i_min i_max i_p99 i_cv%`) and a timestamp; from
  2.17 a `# nccl-tests version` line.
The check column is `N/A` when validation is off (`-c 0`). Launched by `mpirun --tag-output`
(MPIJob launchers), every line starts with `[job,rank]<stdout>:`. Only rank 0 prints.

A row that starts like a result but cannot be read is an error naming the line, never skipped:
a skipped row could be the one with the wrong results.
"""

from __future__ import annotations

import math
import re

from pydantic import BaseModel


class NcclParseError(ValueError):
    """The text is not an nccl-tests result."""


class NcclRow(BaseModel):
    size_bytes: int
    count: int
    dtype: str
    redop: str = ""  # tests without a reduction (broadcast, all_gather) have none
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    # `#wrong` (2.13 and later): wrong elements; None when validation was off or the output is older.
    wrong: int | None = None
    # `error` (before 2.13): the largest difference from the expected value.
    max_error: float | None = None
    inplace_busbw_gbps: float
    inplace_wrong: int | None = None
    inplace_max_error: float | None = None


class NcclResult(BaseModel):
    rows: list[NcclRow]
    avg_busbw_gbps: float
    peak_busbw_gbps: float
    wrong_total: int
    # The largest `error` of an output before 2.13 (None for later ones).
    max_error: float | None = None
    # nccl-tests' own count of rows that failed their check; None when the line is missing.
    out_of_bounds: int | None = None
    # "#wrong", "error", or "" when validation was off.
    check_column: str = ""
    tests_version: str | None = None
    devices: list[str] = []


# mpirun --tag-output's `[job,rank]<stdout>:`, with whatever a launcher put before it (SkyPilot
# writes `(head, rank=0, pid=3808) ` first).
_TAG = re.compile(r"^.*?\[\d+,\d+\]<std(?:out|err)>:")
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
# glibc prints a 0/0 average as `-nan`.
_AVG = re.compile(rf"^#\s*Avg bus bandwidth\s*:\s*({_NUMBER}|[-+]?nan|[-+]?inf)", re.M | re.I)
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)", re.M)
_VERSION = re.compile(r"^#\s*nccl-tests version\s+(\S+)", re.M)
_DEVICE = re.compile(r"^#\s*Rank\s+\d+.*?device\s+\d+\s+\[[^\]]*\]\s+(.+?)\s*$", re.M)
_CHECKS = ("#wrong", "error")


def _untagged(text: str) -> str:
    return "\n".join(_TAG.sub("", line) for line in text.splitlines())


def _header(lines: list[str]) -> tuple[int, list[str]]:
    """The column header's line index and names (without the leading `#`)."""
    for i, line in enumerate(lines):
        names = line.lstrip("#").split()
        if line.startswith("#") and names[:2] == ["size", "count"] and "busbw" in names:
            return i, names
    first = next((line.strip() for line in lines if line.strip()), "")
    raise NcclParseError(
        "no nccl-tests result table (a '# size count type ... busbw' header) in the output"
        + (" (the test may have crashed; look at the job log)" if "NCCL" in "\n".join(lines) else "")
        + (f"; it starts with {first[:120]!r}" if first else "; the output is empty")
    )


def _columns(names: list[str]) -> dict[str, int]:
    """Where each value is: the first time/algbw/busbw/check is out-of-place, the second in-place."""
    where: dict[str, int] = {}
    for i, name in enumerate(names):
        key = "check" if name in _CHECKS else name
        if key in ("time", "cputime"):
            key = "time"
        where.setdefault(key if key not in where else f"inplace_{key}", i)
    missing = [k for k in ("type", "time", "algbw", "busbw", "inplace_busbw") if k not in where]
    if missing:
        raise NcclParseError(f"the nccl-tests header {' '.join(names)!r} has no {', '.join(missing)} column")
    return where


def _check(token: str, column: str, line: str) -> tuple[int | None, float | None]:
    if token == "N/A":
        return None, None
    try:
        value = float(token)
    except ValueError:
        raise NcclParseError(
            f"the {column} value {token!r} is not a number in the row {line.strip()!r}"
        ) from None
    if column == "#wrong":
        return int(value), None
    return None, value


def _row(parts: list[str], where: dict[str, int], check: str, line: str) -> NcclRow:
    def at(key: str) -> str:
        return parts[where[key]] if key in where else ""

    try:
        unchecked: tuple[int | None, float | None] = (None, None)
        wrong, error = _check(at("check"), check, line) if "check" in where else unchecked
        in_wrong, in_error = (
            _check(at("inplace_check"), check, line) if "inplace_check" in where else unchecked
        )
        return NcclRow(
            size_bytes=int(at("size")),
            count=int(at("count")),
            dtype=at("type"),
            redop=at("redop"),
            time_us=float(at("time")),
            algbw_gbps=float(at("algbw")),
            busbw_gbps=float(at("busbw")),
            wrong=wrong,
            max_error=error,
            inplace_busbw_gbps=float(at("inplace_busbw")),
            inplace_wrong=in_wrong,
            inplace_max_error=in_error,
        )
    except ValueError as exc:
        if isinstance(exc, NcclParseError):
            raise
        raise NcclParseError(f"cannot read the nccl-tests row {line.strip()!r}: {exc}") from None


def parse_nccl(text: str) -> NcclResult:
    text = _untagged(text)
    lines = text.splitlines()
    at, names = _header(lines)
    where = _columns(names)
    check = next((n for n in names if n in _CHECKS), "")
    rows: list[NcclRow] = []
    for line in lines[at + 1 :]:
        parts = line.split()
        if not parts or line.lstrip().startswith("#") or not parts[0].isdigit():
            continue
        if len(parts) < len(names):
            raise NcclParseError(
                f"the nccl-tests row {line.strip()!r} has {len(parts)} values, the header {len(names)}"
            )
        rows.append(_row(parts, where, check, line))
    avg = _AVG.search(text)
    if not rows or avg is None:
        raise NcclParseError(
            "no nccl-tests result rows and '# Avg bus bandwidth' line in the output"
            + (" (the test may have crashed; look at the job log)" if "NCCL" in text else "")
        )
    oob = _OOB.search(text)
    version = _VERSION.search(text)
    errors = [e for r in rows for e in (r.max_error, r.inplace_max_error) if e is not None]
    validated = any(v is not None for r in rows for v in (r.wrong, r.inplace_wrong, r.max_error))
    return NcclResult(
        rows=rows,
        avg_busbw_gbps=float(avg.group(1)),
        peak_busbw_gbps=max(max(r.busbw_gbps, r.inplace_busbw_gbps) for r in rows),
        wrong_total=sum((r.wrong or 0) + (r.inplace_wrong or 0) for r in rows),
        max_error=max(errors) if errors else None,
        out_of_bounds=int(oob.group(1)) if oob else None,
        check_column=check if validated else "",
        tests_version=version.group(1) if version else None,
        devices=[m.group(1) for m in _DEVICE.finditer(text)],
    )


def _sizes(rows: list[NcclRow]) -> str:
    shown = ", ".join(f"{r.size_bytes} B" for r in rows[:4])
    return shown + (f" and {len(rows) - 4} more" if len(rows) > 4 else "")


def nccl_check_problems(result: NcclResult) -> list[str]:
    """What nccl-tests' own checks say is wrong, each in words naming the message sizes;
    empty when they all passed. Validation off (`-c 0`) is a problem too: a bandwidth figure
    without a data check cannot pass a node."""
    problems = []
    if not math.isfinite(result.avg_busbw_gbps):
        problems.append(f"the average bus bandwidth is {result.avg_busbw_gbps} (no valid measurement)")
    wrong = [r for r in result.rows if (r.wrong or 0) + (r.inplace_wrong or 0)]
    if wrong:
        problems.append(f"{result.wrong_total:,} wrong elements (data corruption) at {_sizes(wrong)}")
    if result.out_of_bounds:
        off = [r for r in result.rows if max(r.max_error or 0, r.inplace_max_error or 0) == result.max_error]
        detail = f"; largest error {result.max_error:g} at {_sizes(off)}" if result.max_error and off else ""
        failed = f"{result.out_of_bounds} out-of-bounds results (nccl-tests' own check failed)"
        problems.append(failed + detail)
    elif result.out_of_bounds is None:
        problems.append("no '# Out of bounds values' line: the output is incomplete")
    if not result.check_column:
        problems.append("the results were not checked (validation off, `-c 0`)")
    return problems


def nccl_tests_command(binary: str, min_bytes: str, max_bytes: str, gpus: int) -> list[str]:
    """The nccl-tests argv every probe runs: sizes min..max by a factor of 4, on `gpus` GPUs
    (at least one) of the node."""
    return [binary, "-b", min_bytes, "-e", max_bytes, "-f", "4", "-g", str(max(1, gpus))]
