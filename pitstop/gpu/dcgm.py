"""`dcgmi diag -r <level> -j` output: which tests ran, which failed, and why (DCGM_FR_*), in the
JSON of every DCGM major version (NVIDIA/DCGM `dcgmi/Diag.cpp`, `nvvs/include/NvvsJsonStrings.h`):

- 2.x: `{"DCGM GPU Diagnostic": {"test_categories": [...]}}`; a result names its GPU in
  `gpu_ids` (a string) and its failure in `warnings`, a plain string; no version.
- 3.x: the same top key; `gpu_id`; `warnings` is a list of objects with `warning` (the text),
  `error_id` (dcgmError_t), category and severity, except the software tests' entries, whose
  text dcgmi writes under `warnings` again; the DCGM version and driver are at the document's
  root (`version`, `Driver Version Detected`).
- 4.x: `{"DCGM Diagnostic": {...}, "entity_groups": [...], "metadata": {"version": ...}}`; a
  result names its entity (`entity_group` "GPU", `entity_id`), each test has a `test_summary`
  whose status and errors stand even when no entity's result failed.
- Any version that could not run writes `{<top key>: {"version": ..., "runtime_error": ...}}`.

dcgmi prints Pass, Skip or Fail in JSON: a warning-level result is "Fail" there (only the
text view can show Warn), so Fail is a failure whatever its severity; a "Warn" is still read as
a warning, should some build print it.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from pitstop.gpu.dcgm_errors import DCGM_ERRORS

DCGM_FR_NAMES: dict[int, str] = {code: name for code, (name, _) in DCGM_ERRORS.items()}
DCGM_FR_CODES = {name: code for code, name in DCGM_FR_NAMES.items()}

FAILING = {"fail"}


class DiagParseError(ValueError):
    """The text is not DCGM diagnostic JSON."""


class DiagFinding(BaseModel):
    category: str
    test: str
    gpu: str | None = None  # the GPU index, or "<group> <id>" for another entity (4.x)
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
    # Why the diagnostic could not run at all (dcgmi's `runtime_error`), empty when it ran.
    runtime_error: str = ""

    def summary(self) -> str:
        if self.runtime_error:
            return f"DCGM diag could not run: {self.runtime_error}"
        if self.passed:
            return f"DCGM diag passed ({self.tests_run} test results)"
        first = self.failures[0]
        where = f" on GPU {first.gpu}" if first.gpu is not None else ""
        return (
            f"DCGM diag failed: {first.test}{where}: {first.reason or 'no reason code'}: {first.message}"
            + (f" (+{len(self.failures) - 1} more)" if len(self.failures) > 1 else "")
        )


def reason_name(code: int) -> str:
    """The DCGM_FR_* name of an error code; a code newer than this table by number."""
    known = DCGM_ERRORS.get(code)
    return known[0] if known else f"DCGM_FR_{code} (an error code newer than DCGM 4.6)"


def _root(doc: dict[str, Any]) -> dict[str, Any]:
    for key in ("DCGM GPU Diagnostic", "DCGM Diagnostic"):
        if isinstance(doc.get(key), dict):
            return dict(doc[key])
        if key in doc:
            raise DiagParseError(f"{key!r} is a JSON {type(doc[key]).__name__}, not the object dcgmi writes")
    raise DiagParseError(
        "no 'DCGM GPU Diagnostic' or 'DCGM Diagnostic' object in the output; its keys: "
        + (", ".join(repr(k) for k in list(doc)[:5]) or "none")
    )


def _version(doc: dict[str, Any], root: dict[str, Any]) -> str | None:
    metadata = doc.get("metadata")
    for where in (metadata if isinstance(metadata, dict) else {}, doc, root):
        value = where.get("version")
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _text(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(_text(v) for v in value)
    return " ".join(str(value or "").split())


def _warnings(result: dict[str, Any]) -> list[tuple[int | None, str]]:
    found = result.get("warnings")
    if isinstance(found, str):  # DCGM 2.x: the message itself
        return [(None, _text(found))] if found.strip() else []
    out: list[tuple[int | None, str]] = []
    for warning in found or []:
        if warning is None:  # dcgmi 3.x indexes its warnings array with gaps, leaving nulls
            continue
        if isinstance(warning, dict):
            code = warning.get("error_id")
            # 3.x writes the software tests' text under "warnings" instead of "warning".
            text = warning.get("warning", warning.get("warnings", ""))
            if code is not None and not (isinstance(code, int) or str(code).isdigit()):
                raise DiagParseError(f"an error_id is {code!r}, not a DCGM error code")
            out.append((int(code) if code is not None else None, _text(text)))
        else:
            out.append((None, _text(warning)))
    return out


def _entity(result: dict[str, Any]) -> str | None:
    for key in ("gpu_id", "gpu_ids"):
        if result.get(key) is not None:
            return str(result[key])
    if result.get("entity_id") is None:
        return None
    group = str(result.get("entity_group", "GPU"))
    return str(result["entity_id"]) if group == "GPU" else f"{group} {result['entity_id']}"


def _objects(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _findings(category: str, test: str, result: dict[str, Any]) -> list[DiagFinding]:
    status = str(result.get("status", "")).strip()
    gpu = _entity(result)
    found = _warnings(result) or [(None, _text(result.get("info", "")))]
    return [
        DiagFinding(
            category=category,
            test=test,
            gpu=gpu,
            status=status,
            reason=reason_name(code) if code is not None else None,
            error_id=code,
            message=message,
        )
        for code, message in found
    ]


def parse_dcgm_diag(text: str) -> DiagReport:
    """Parse `dcgmi diag -j` output (leading log lines before the JSON are ignored)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise DiagParseError("no JSON object in the DCGM output")
    try:
        doc = json.loads(text[start : end + 1])
    except json.JSONDecodeError as exc:
        raise DiagParseError(f"DCGM output is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise DiagParseError(f"DCGM output is a JSON {type(doc).__name__}, not an object")
    root = _root(doc)
    version = _version(doc, root)
    runtime_error = _text(root.get("runtime_error", ""))
    failures: list[DiagFinding] = []
    warnings: list[DiagFinding] = []
    runs = skipped = 0
    # nvvs itself writes `null` between tests; skip anything that is not an object.
    for category in _objects(root.get("test_categories")):
        cat_name = str(category.get("category", "?"))
        for test in _objects(category.get("tests")):
            name = str(test.get("name", "?"))
            failed_before = len(failures)
            for result in _objects(test.get("results")):
                runs += 1
                status = str(result.get("status", "")).strip().lower()
                skipped += status == "skip"
                if status in FAILING:
                    failures += _findings(cat_name, name, result)
                elif status == "warn":
                    warnings += _findings(cat_name, name, result)
            # 4.x: a test can fail as a whole (its summary) with no entity's result failing.
            summary = next(iter(_objects([test.get("test_summary")])), {})
            summary_failed = str(summary.get("status", "")).strip().lower() in FAILING
            if summary_failed and len(failures) == failed_before:
                failures += _findings(cat_name, name, summary)
    if runtime_error:
        return DiagReport(
            passed=False, version=version, tests_run=runs, failures=failures, warnings=warnings,
            runtime_error=runtime_error,
        )  # fmt: skip
    if runs == 0:
        raise DiagParseError("DCGM output lists no test results")
    if not failures and runs == skipped:
        # Nothing was checked (an unsupported GPU, a missing plugin): that does not pass a node.
        return DiagReport(
            passed=False, version=version, tests_run=runs, failures=[], warnings=warnings,
            runtime_error=f"every one of the {runs} test results was skipped: nothing was checked",
        )  # fmt: skip
    return DiagReport(
        passed=not failures,
        version=version,
        tests_run=runs,
        failures=failures,
        warnings=warnings,
    )


DEFAULT_HOSTENGINE = "nvidia-dcgm.gpu-operator.svc:5555"


def dcgmi_diag_command(level: int, hostengine: str = "embedded") -> list[str]:
    """How a probe Job runs `dcgmi diag`: dcgmi is a client of nv-hostengine, which a bare Job
    does not have. `embedded` starts one in the Job's own container first (the DCGM image ships
    it; it daemonizes); anything else is the `host:port` of a running one, such as the GPU
    Operator's `nvidia-dcgm` Service, reached with `--host`."""
    return _with_hostengine(["dcgmi", "diag", "-r", str(int(level)), "-j"], hostengine)


def dcgmi_dmon_command(field_ids: list[int] | tuple[int, ...], hostengine: str = "embedded") -> list[str]:
    """How a probe Job reads DCGM fields once (`dcgmi dmon -e <ids> -c 1`), through the same
    hostengine choice as `dcgmi diag`. A hostengine started in the Job knows only what happens
    while it runs (no past Xid); one that has run on the node since boot (`host:port`) has
    recorded the node's Xids."""
    fields = ",".join(str(int(f)) for f in field_ids)
    return _with_hostengine(["dcgmi", "dmon", "-e", fields, "-c", "1"], hostengine)


def _with_hostengine(dcgmi: list[str], hostengine: str) -> list[str]:
    """`embedded`: start nv-hostengine in the container first (it daemonizes); otherwise reach
    the one at `host:port` with `--host`."""
    if hostengine == "embedded":
        return ["sh", "-c", "nv-hostengine && " + " ".join(dcgmi)]
    return [dcgmi[0], dcgmi[1], "--host", hostengine, *dcgmi[2:]]
