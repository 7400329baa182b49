"""`dcgmi diag -r <level> -j` output: which tests ran, which failed, and why (DCGM_FR_*).

DCGM 3.x prints `{"DCGM GPU Diagnostic": {"test_categories": [...]}}`; 4.x renames the
top key to "DCGM Diagnostic". Each test has `results`, one per GPU (`gpu_id`/`gpu_ids`),
with a `status` (Pass, Fail, Warn, Skip, Not Run) and `warnings`, each carrying the
`error_id` of DCGM's dcgmError_t enum and a human message.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

# dcgmError_t from dcgm_errors.h (DCGM 3.x/4.x; "new error codes must be added to the end").
DCGM_FR_NAMES: dict[int, str] = {
    i: f"DCGM_FR_{name}"
    for i, name in enumerate(
        """OK UNKNOWN UNRECOGNIZED PCI_REPLAY_RATE VOLATILE_DBE_DETECTED VOLATILE_SBE_DETECTED
        PENDING_PAGE_RETIREMENTS RETIRED_PAGES_LIMIT RETIRED_PAGES_DBE_LIMIT CORRUPT_INFOROM
        CLOCK_THROTTLE_THERMAL POWER_UNREADABLE CLOCK_THROTTLE_POWER NVLINK_ERROR_THRESHOLD
        NVLINK_DOWN NVSWITCH_FATAL_ERROR NVSWITCH_NON_FATAL_ERROR NVSWITCH_DOWN NO_ACCESS_TO_FILE
        NVML_API DEVICE_COUNT_MISMATCH BAD_PARAMETER CANNOT_OPEN_LIB DENYLISTED_DRIVER NVML_LIB_BAD
        GRAPHICS_PROCESSES HOSTENGINE_CONN FIELD_QUERY BAD_CUDA_ENV PERSISTENCE_MODE LOW_BANDWIDTH
        HIGH_LATENCY CANNOT_GET_FIELD_TAG FIELD_VIOLATION FIELD_THRESHOLD FIELD_VIOLATION_DBL
        FIELD_THRESHOLD_DBL UNSUPPORTED_FIELD_TYPE FIELD_THRESHOLD_TS FIELD_THRESHOLD_TS_DBL
        THERMAL_VIOLATIONS THERMAL_VIOLATIONS_TS TEMP_VIOLATION THROTTLING_VIOLATION INTERNAL
        PCIE_GENERATION PCIE_WIDTH ABORTED TEST_DISABLED CANNOT_GET_STAT STRESS_LEVEL CUDA_API
        FAULTY_MEMORY CANNOT_SET_WATCHES CUDA_UNBOUND ECC_DISABLED MEMORY_ALLOC CUDA_DBE
        MEMORY_MISMATCH CUDA_DEVICE ECC_UNSUPPORTED ECC_PENDING MEMORY_BANDWIDTH TARGET_POWER
        API_FAIL API_FAIL_GPU CUDA_CONTEXT DCGM_API CONCURRENT_GPUS TOO_MANY_ERRORS
        NVLINK_CRC_ERROR_THRESHOLD NVLINK_ERROR_CRITICAL ENFORCED_POWER_LIMIT MEMORY_ALLOC_HOST
        GPU_OP_MODE NO_MEMORY_CLOCKS NO_GRAPHICS_CLOCKS HAD_TO_RESTORE_STATE L1TAG_UNSUPPORTED
        L1TAG_MISCOMPARE ROW_REMAP_FAILURE UNCONTAINED_ERROR EMPTY_GPU_LIST
        DBE_PENDING_PAGE_RETIREMENTS UNCORRECTABLE_ROW_REMAP PENDING_ROW_REMAP
        BROKEN_P2P_MEMORY_DEVICE BROKEN_P2P_WRITER_DEVICE NVSWITCH_NVLINK_DOWN
        EUD_BINARY_PERMISSIONS EUD_NON_ROOT_USER EUD_SPAWN_FAILURE EUD_TIMEOUT EUD_ZOMBIE
        EUD_NON_ZERO_EXIT_CODE EUD_TEST_FAILED FILE_CREATE_PERMISSIONS PAUSE_RESUME_FAILED
        PCIE_H_REPLAY_VIOLATION GPU_EXPECTED_NVLINKS_UP NVSWITCH_EXPECTED_NVLINKS_UP XID_ERROR
        SBE_VIOLATION DBE_VIOLATION PCIE_REPLAY_VIOLATION SBE_THRESHOLD_VIOLATION
        DBE_THRESHOLD_VIOLATION PCIE_REPLAY_THRESHOLD_VIOLATION CUDA_FM_NOT_INITIALIZED
        SXID_ERROR""".split()  # noqa: SIM905 - one name per enum value, in order, reads like the header
    )
}
DCGM_FR_CODES = {name: code for code, name in DCGM_FR_NAMES.items()}

FAILING = {"fail"}


class DiagParseError(ValueError):
    """The text is not DCGM diagnostic JSON."""


class DiagFinding(BaseModel):
    category: str
    test: str
    gpu: str | None = None
    status: str
    reason: str | None = Field(default=None, description="DCGM_FR_* name of the error_id.")
    error_id: int | None = None
    message: str = ""


class DiagReport(BaseModel):
    passed: bool
    version: str | None = None
    tests_run: int
    failures: list[DiagFinding]
    warnings: list[DiagFinding]

    def summary(self) -> str:
        if self.passed:
            return f"DCGM diag passed ({self.tests_run} test results)"
        first = self.failures[0]
        where = f" on GPU {first.gpu}" if first.gpu is not None else ""
        return (
            f"DCGM diag failed: {first.test}{where}: {first.reason or 'no reason code'}: {first.message}"
            + (f" (+{len(self.failures) - 1} more)" if len(self.failures) > 1 else "")
        )


def _root(doc: dict[str, Any]) -> dict[str, Any]:
    for key in ("DCGM GPU Diagnostic", "DCGM Diagnostic"):
        if isinstance(doc.get(key), dict):
            return dict(doc[key])
    raise DiagParseError("no 'DCGM GPU Diagnostic' or 'DCGM Diagnostic' object in the output")


def _warnings(result: dict[str, Any]) -> list[tuple[int | None, str]]:
    out: list[tuple[int | None, str]] = []
    for warning in result.get("warnings") or []:
        if isinstance(warning, dict):
            code = warning.get("error_id")
            out.append((int(code) if code is not None else None, str(warning.get("warning", ""))))
        else:  # DCGM 2.x: plain strings
            out.append((None, str(warning)))
    return out


def parse_dcgm_diag(text: str) -> DiagReport:
    """Parse `dcgmi diag -j` output (leading log lines before the JSON are ignored)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise DiagParseError("no JSON object in the DCGM output")
    try:
        doc = json.loads(text[start : end + 1])
    except json.JSONDecodeError as exc:
        raise DiagParseError(f"DCGM output is not valid JSON: {exc}") from None
    root = _root(doc)
    failures: list[DiagFinding] = []
    warnings: list[DiagFinding] = []
    runs = 0
    for category in root.get("test_categories") or []:
        cat_name = str(category.get("category", "?"))
        for test in category.get("tests") or []:
            for result in test.get("results") or []:
                runs += 1
                status = str(result.get("status", "")).strip()
                gpu = result.get("gpu_id", result.get("gpu_ids"))
                found = _warnings(result) or [(None, str(result.get("info", "") or ""))]
                for code, message in found:
                    finding = DiagFinding(
                        category=cat_name,
                        test=str(test.get("name", "?")),
                        gpu=str(gpu) if gpu is not None else None,
                        status=status,
                        reason=DCGM_FR_NAMES.get(code, f"DCGM_FR_{code}") if code is not None else None,
                        error_id=code,
                        message=" ".join(message.split()),
                    )
                    if status.lower() in FAILING:
                        failures.append(finding)
                    elif status.lower() == "warn":
                        warnings.append(finding)
    if runs == 0:
        raise DiagParseError("DCGM output lists no test results")
    return DiagReport(
        passed=not failures,
        version=str(root["version"]) if "version" in root else None,
        tests_run=runs,
        failures=failures,
        warnings=warnings,
    )
