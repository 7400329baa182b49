"""`dcgmi dmon -e <field ids> -c 1`: one row of DCGM field values per entity (NVIDIA/DCGM
`dcgmi/DeviceMonitor.cpp`; no real output was found, see docs/tool-outputs.md).

The table is a header of short names after `#Entity`, a line of units after `ID`, then one
row per entity (`GPU 0`, `GPU-I 1` in 3.x, `GPU_I 1` in 4.x). Columns are left-aligned and
padded (3.x: the entity column 10 wide; 4.0-4.4: 11; 4.5 and later: 14 plus 2; every field its
format width plus 6, plus 2 of padding); DCGM 2.x right-aligned them after `# Entity` / `Id`.
A value DCGM has not got (no sample, not supported) is `N/A`.

The fields pitstop reads (NVIDIA/DCGM `dcgmlib/dcgm_fields.h`):

- 230 `DCGM_FI_DEV_XID_ERRORS` (4.6: `DCGM_FI_DEV_XID_ERROR`), short name `XIDER`: the value of
  the last Xid the hostengine saw on the GPU. The hostengine records Xids from NVML events, which
  arrive only while it runs: `N/A` means none since it started, and a hostengine started in the
  probe (embedded) has seen none of the node's past Xids.
- 310 `DCGM_FI_DEV_ECC_SBE_VOL_TOTAL` (`ESVTL`) and 311 `DCGM_FI_DEV_ECC_DBE_VOL_TOTAL` (`EDVTL`):
  single and double bit (correctable, uncorrectable) ECC errors since the driver loaded, read from
  NVML whenever asked.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

XID_ERRORS = 230
ECC_SBE_VOL_TOTAL = 310
ECC_DBE_VOL_TOTAL = 311
SHORT_NAMES = {XID_ERRORS: "XIDER", ECC_SBE_VOL_TOTAL: "ESVTL", ECC_DBE_VOL_TOTAL: "EDVTL"}
FIELD_NAMES = {
    XID_ERRORS: "DCGM_FI_DEV_XID_ERRORS",
    ECC_SBE_VOL_TOTAL: "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    ECC_DBE_VOL_TOTAL: "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
}
XID_FIELDS = (XID_ERRORS, ECC_SBE_VOL_TOTAL, ECC_DBE_VOL_TOTAL)

_HEADER = re.compile(r"^#\s*Entity\b")
_ROW = re.compile(
    r"^\s*(GPU|GPU-I|GPU_I|GPU-CI|GPU_CI|vGPU|Switch|LINK|CPU|CPU_CORE|CPU Core|ConnectX)\s+(\d+)\b"
)


class DmonParseError(ValueError):
    """The text is not a `dcgmi dmon` table (or dcgmi said why it could not print one)."""


class DmonRow(BaseModel):
    group: str
    entity_id: int
    values: dict[str, str | None]  # short name -> value as printed; None for N/A or blank


class DmonReading(BaseModel):
    columns: list[str]
    rows: list[DmonRow]

    def gpu_values(self, field_id: int) -> dict[int, int | None]:
        """GPU id -> the field's integer value (None when DCGM has none: `N/A`)."""
        short = SHORT_NAMES.get(field_id, str(field_id))
        if short not in self.columns:
            raise DmonParseError(
                f"dcgmi dmon printed no {short} column (field {field_id}); its columns: "
                + (", ".join(self.columns) or "none")
            )
        out: dict[int, int | None] = {}
        for row in self.rows:
            if row.group != "GPU":
                continue
            value = row.values.get(short)
            if value is None:
                out[row.entity_id] = None
            elif re.fullmatch(r"-?\d+", value):
                out[row.entity_id] = int(value)
            else:
                raise DmonParseError(f"GPU {row.entity_id} {short} is {value!r}, not a number or N/A")
        return out


def _errors(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("Error")]


def _cells(line: str, header: str, columns: list[str]) -> list[str | None]:
    """A row's values: by whitespace when every cell is filled, else by the header's column
    positions (a blank cell: the entity has no such field)."""
    found = _ROW.match(line)
    assert found is not None
    rest = line[found.end() :].split()
    if len(rest) == len(columns):
        return [None if v == "N/A" else v for v in rest]
    aligned = header.replace("# Entity", "#Entity ")
    starts = [m.start() for m in re.finditer(r"\S+", aligned)][1 : len(columns) + 1]
    cells: list[str | None] = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(line)
        value = line[start:end].strip()
        cells.append(None if value in ("", "N/A") else value)
    return cells


def parse_dmon(text: str) -> DmonReading:
    """Parse `dcgmi dmon` output (the first sample of each entity)."""
    lines = text.splitlines()
    at = next((i for i, line in enumerate(lines) if _HEADER.match(line)), None)
    if at is None:
        said = _errors(text)
        if said:
            raise DmonParseError("dcgmi dmon: " + " ".join(said))
        start = " ".join(line.strip() for line in lines if line.strip())[:200] or "nothing"
        raise DmonParseError(f"no '#Entity' header in the dcgmi dmon output; it starts with: {start!r}")
    header = lines[at]
    columns = header.replace("# Entity", "#Entity").split()[1:]
    rows: list[DmonRow] = []
    seen: set[tuple[str, int]] = set()
    for line in lines[at + 1 :]:
        found = _ROW.match(line)
        if found is None:
            continue
        key = (found[1].replace("-", "_"), int(found[2]))
        if key in seen:  # a later sample (-c more than 1): keep the first
            continue
        seen.add(key)
        cells = _cells(line, header, columns)
        rows.append(DmonRow(group=found[1], entity_id=key[1], values=dict(zip(columns, cells, strict=False))))
    if not rows:
        said = _errors(text)
        raise DmonParseError(
            "dcgmi dmon printed its header but no entity" + (": " + " ".join(said) if said else "")
        )
    return DmonReading(columns=columns, rows=rows)
