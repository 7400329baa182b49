"""nccl-tests output (`all_reduce_perf -b 8 -e 8G -f 2 -g 8`): the per-size table and the
`# Avg bus bandwidth` line.

Data rows are `size count type redop [root] time algbw busbw #wrong time algbw busbw #wrong`
(out-of-place, then in-place); `root` exists since nccl-tests 2.10, so rows have 12 or 13
fields. `#wrong` is `N/A` when validation is off.
"""

from __future__ import annotations

import re

from pydantic import BaseModel


class NcclParseError(ValueError):
    """The text is not an nccl-tests result."""


class NcclRow(BaseModel):
    size_bytes: int
    count: int
    dtype: str
    redop: str
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None
    inplace_busbw_gbps: float
    inplace_wrong: int | None


class NcclResult(BaseModel):
    rows: list[NcclRow]
    avg_busbw_gbps: float
    peak_busbw_gbps: float
    wrong_total: int
    out_of_bounds: int | None = None
    devices: list[str] = []


_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.]+)", re.M)
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)", re.M)
_DEVICE = re.compile(r"^#\s*Rank\s+\d+.*?device\s+\d+\s+\[[^\]]*\]\s+(.+?)\s*$", re.M)


def _wrong(token: str) -> int | None:
    return None if token == "N/A" else int(token)


def parse_nccl(text: str) -> NcclResult:
    rows: list[NcclRow] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        parts = stripped.split()
        if len(parts) == 13:
            parts = parts[:4] + parts[5:]  # drop `root`
        if len(parts) != 12 or not parts[0].isdigit():
            continue
        try:
            rows.append(
                NcclRow(
                    size_bytes=int(parts[0]),
                    count=int(parts[1]),
                    dtype=parts[2],
                    redop=parts[3],
                    time_us=float(parts[4]),
                    algbw_gbps=float(parts[5]),
                    busbw_gbps=float(parts[6]),
                    wrong=_wrong(parts[7]),
                    inplace_busbw_gbps=float(parts[10]),
                    inplace_wrong=_wrong(parts[11]),
                )
            )
        except ValueError:
            continue
    avg = _AVG.search(text)
    if not rows or avg is None:
        raise NcclParseError(
            "no nccl-tests result table and '# Avg bus bandwidth' line in the output"
            + (" (the test may have crashed; look at the job log)" if "NCCL" in text else "")
        )
    oob = _OOB.search(text)
    return NcclResult(
        rows=rows,
        avg_busbw_gbps=float(avg.group(1)),
        peak_busbw_gbps=max(max(r.busbw_gbps, r.inplace_busbw_gbps) for r in rows),
        wrong_total=sum((r.wrong or 0) + (r.inplace_wrong or 0) for r in rows),
        out_of_bounds=int(oob.group(1)) if oob else None,
        devices=[m.group(1) for m in _DEVICE.finditer(text)],
    )
