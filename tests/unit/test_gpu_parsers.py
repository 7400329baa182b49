"""Parsers for DCGM diag JSON, nccl-tests tables and CUDA sample output, on samples in the
real formats (tests/unit/samples)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pitstop.gpu.cuda import CudaParseError, parse_device_query, parse_p2p
from pitstop.gpu.dcgm import DCGM_FR_CODES, DiagParseError, parse_dcgm_diag
from pitstop.gpu.nccl import NcclParseError, nccl_check_problems, parse_nccl

SAMPLES = Path(__file__).parent / "samples"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def test_dcgm_failure_names_the_test_gpu_and_dcgm_fr_reason() -> None:
    report = parse_dcgm_diag(sample("dcgm_diag_r3_fail.json"))
    assert not report.passed
    assert report.version == "3.3.7"
    assert [(f.test, f.gpu, f.reason) for f in report.failures] == [
        ("GPU Memory", "1", "DCGM_FR_FAULTY_MEMORY")
    ]
    assert [(f.test, f.reason) for f in report.warnings] == [("PCIe", "DCGM_FR_PCIE_H_REPLAY_VIOLATION")]
    assert report.summary().startswith(
        "DCGM diag failed: GPU Memory on GPU 1: DCGM_FR_FAULTY_MEMORY: A memory mismatch"
    )


def test_dcgm_pass_when_no_result_failed() -> None:
    text = sample("dcgm_diag_r3_fail.json").replace('"status" : "Fail"', '"status" : "Pass"')
    report = parse_dcgm_diag(text)
    assert report.passed and report.tests_run == 11
    assert report.summary() == "DCGM diag passed (11 test results)"


def test_dcgm_code_table_matches_the_header_enum() -> None:
    # Spot checks against dcgm_errors.h: values are part of DCGM's ABI.
    assert DCGM_FR_CODES["DCGM_FR_OK"] == 0
    assert DCGM_FR_CODES["DCGM_FR_NVLINK_DOWN"] == 14
    assert DCGM_FR_CODES["DCGM_FR_FAULTY_MEMORY"] == 52
    assert DCGM_FR_CODES["DCGM_FR_XID_ERROR"] == 101
    assert DCGM_FR_CODES["DCGM_FR_SXID_ERROR"] == 109


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("dcgmi: command not found", "no JSON object"),
        ('{"DCGM GPU Diagnostic": {"test_categories": []}}', "lists no test results"),
        ('{"other": 1}', "no 'DCGM GPU Diagnostic'"),
        ("{not json}", "not valid JSON"),
    ],
)
def test_dcgm_garbage_is_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(DiagParseError, match=message):
        parse_dcgm_diag(text)


def test_nccl_table_with_root_column_and_average() -> None:
    result = parse_nccl(sample("nccl_all_reduce_8gpu.txt"))
    assert result.avg_busbw_gbps == pytest.approx(204.1012)
    assert result.peak_busbw_gbps == pytest.approx(396.75)
    assert len(result.rows) == 7
    assert result.rows[-1].size_bytes == 8589934592 and result.rows[-1].busbw_gbps == pytest.approx(396.61)
    assert result.wrong_total == 0 and result.out_of_bounds == 0
    assert result.devices == ["NVIDIA H100 80GB HBM3"] * 8


def test_nccl_old_format_without_root_column() -> None:
    result = parse_nccl(sample("nccl_all_reduce_old.txt").replace("0e+00", "0"))
    assert [r.busbw_gbps for r in result.rows] == [88.08, 90.95, 92.59]
    assert result.avg_busbw_gbps == pytest.approx(90.6142)


def test_nccl_crash_output_is_a_clear_error() -> None:
    with pytest.raises(NcclParseError, match="the test may have crashed"):
        parse_nccl("gpu-node-07: Test NCCL failure common.cu:1005 'unhandled cuda error'\n")


def test_device_query_pass_and_devices() -> None:
    result = parse_device_query(sample("device_query_pass.txt"))
    assert result.passed and result.device_count == 2
    assert result.devices == ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"]
    assert (result.driver_version, result.runtime_version) == ("12.4", "12.4")
    assert not parse_device_query(
        "cudaGetDeviceCount returned 100\n-> no CUDA-capable device is detected\n"
    ).passed
    with pytest.raises(CudaParseError):
        parse_device_query("segfault")


def test_p2p_matrices_expose_the_slowest_pair() -> None:
    matrices = parse_p2p(sample("p2p_bandwidth.txt"))
    titles = [m.title.split(" Matrix")[0] for m in matrices]
    assert titles == [
        "Unidirectional P2P=Disabled Bandwidth",
        "Unidirectional P2P=Enabled Bandwidth (P2P Writes)",
        "Bidirectional P2P=Enabled Bandwidth",
    ]
    enabled = matrices[1]
    assert enabled.gpus == 3
    assert enabled.min_peer() == pytest.approx(121.40)  # GPU1 -> GPU2 link is degraded


def test_emitted_outputs_parse_back_to_their_figures() -> None:
    from pitstop.gpu import emit

    diag = parse_dcgm_diag(emit.dcgm_diag_json(3, 8, ["Memory"]))
    assert [(f.test, f.gpu, f.reason) for f in diag.failures] == [
        ("GPU Memory", "0", "DCGM_FR_FAULTY_MEMORY")
    ]
    assert parse_dcgm_diag(emit.dcgm_diag_json(1, 8, [])).tests_run == 9  # level 1: deployment checks only
    nccl = parse_nccl(emit.nccl_all_reduce("gpu-node-004", "NVIDIA-H100", 8, 118.0))
    assert nccl.avg_busbw_gbps == pytest.approx(118.0)
    assert nccl.peak_busbw_gbps > 118.0
    assert parse_device_query(emit.device_query("NVIDIA-H100", 8)).device_count == 8
    assert parse_p2p(emit.p2p_bandwidth(4, 390.0, slow_pair=(1, 2), slow_gbps=120.0))[1].min_peer() == 120.0


def printf(form: str, *values: object) -> str:
    """C's printf, for lines laid out by the tool's own format strings."""
    return form % values


def test_nccl_per_iteration_columns_are_found_by_name() -> None:
    # nccl-tests 2.19 with per-iteration timing: the header and a row as src/util.cu's
    # writeResultHeader/writeBenchmarkLineBody/writePerIterReport printf them (no real output
    # of this mode was found; see docs/tool-outputs.md).
    names = ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
             "i_min", "i_max", "i_p99", "i_cv%", "time", "algbw", "busbw", "#wrong",
             "i_min", "i_max", "i_p99", "i_cv%")  # fmt: skip
    header = printf("# %10s  %12s  %8s  %6s  %6s" + "  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s" * 2, *names)
    row = printf("%12li  %12li  %8s  %6s  %6i", 1048576, 262144, "float", "sum", -1)
    for busbw, wrong in (("44.54", 0), ("44.87", 3)):
        row += printf("  %7s  %6s  %6s  %6g", "41.20", "25.45", busbw, wrong)
        row += printf("  %7s  %7s  %7s  %7s", "40.1", "43.9", "43.9", "2.1")
    text = f"{header}\n{row}\n# Out of bounds values : 1 FAILED\n# Avg bus bandwidth    : 44.705 \n"
    [parsed] = parse_nccl(text).rows
    assert (parsed.busbw_gbps, parsed.wrong, parsed.inplace_busbw_gbps, parsed.inplace_wrong) == (
        44.54,
        0,
        44.87,
        3,
    )


@pytest.mark.parametrize("version", ["2.4.6", "3.3.7-1-ubuntu22.04", "4.2.3-1-ubuntu22.04"])
def test_dcgm_layouts_of_every_major_version_read_back(version: str) -> None:
    # The simulator writes each major version's layout from NVIDIA/DCGM dcgmi/Diag.cpp.
    from pitstop.gpu import emit

    report = parse_dcgm_diag(emit.dcgm_diag_json(2, 4, ["Memory", "Persistence Mode"], version=version))
    assert not report.passed
    assert [(f.test, f.message.split(" on GPU")[0]) for f in report.failures] == [
        ("Persistence Mode", "Internal error"),
        ("GPU Memory", "Found 3 faulty memory elements"),
    ]
    assert report.version == (None if version.startswith("2.") else version.split("-")[0])


def test_dcgm_runtime_error_and_newer_codes_are_reported() -> None:
    # What dcgmi writes when the diagnostic cannot run (Diag.cpp HelperDisplayFailureMessage).
    text = '{"DCGM Diagnostic": {"version": "4.2.3", "runtime_error": "Unable to connect to host engine"}}'
    report = parse_dcgm_diag(text)
    assert (report.passed, report.version, report.summary()) == (
        False,
        "4.2.3",
        "DCGM diag could not run: Unable to connect to host engine",
    )
    from pitstop.gpu.dcgm import reason_name

    assert reason_name(120) == "DCGM_FR_FALLEN_OFF_BUS"
    assert reason_name(140) == "DCGM_FR_140 (an error code newer than DCGM 4.6)"


def test_a_nan_average_is_a_failed_measurement_not_a_pass() -> None:
    # glibc prints 0/0 as "-nan"; a NaN compares false with every minimum.
    real = (
        Path(__file__).parents[1]
        / "fixtures"
        / "real"
        / "nccl"
        / "all_reduce_unknownver_16xH100_2node_a3mega.txt"
    )
    text = real.read_text().replace("# Avg bus bandwidth    : 70.742", "# Avg bus bandwidth    : -nan")
    result = parse_nccl(text)
    assert nccl_check_problems(result) == ["the average bus bandwidth is nan (no valid measurement)"]


def test_a_dcgm_run_where_every_test_was_skipped_does_not_pass() -> None:
    from pitstop.gpu import emit

    text = emit.dcgm_diag_json(2, 2, [], version="3.3.7").replace('"Pass"', '"Skip"')
    report = parse_dcgm_diag(text)
    assert not report.passed
    assert report.summary() == (
        "DCGM diag could not run: every one of the 13 test results was skipped: nothing was checked"
    )


def test_dcgm_null_warnings_are_skipped_and_a_bad_error_id_is_refused() -> None:
    doc = {
        "DCGM GPU Diagnostic": {
            "test_categories": [
                {"category": "Hardware", "tests": [{"name": "GPU Memory", "results": [
                    {"gpu_id": "0", "status": "Fail", "warnings": [None, {"error_id": 52, "warning": "bad"}]}
                ]}]}
            ]
        }
    }  # fmt: skip
    [failure] = parse_dcgm_diag(json.dumps(doc)).failures
    assert (failure.reason, failure.message) == ("DCGM_FR_FAULTY_MEMORY", "bad")
    doc["DCGM GPU Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]["warnings"] = [
        {"error_id": "x"}
    ]
    with pytest.raises(DiagParseError, match="an error_id is 'x', not a DCGM error code"):
        parse_dcgm_diag(json.dumps(doc))
