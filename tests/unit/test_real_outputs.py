"""The GPU readers on real outputs nobody here wrote (tests/fixtures/real/, sources in its
README and in each file's `.expected.yaml`). The expected values below were read from the
files by a person (they are the `.expected.yaml` figures), never taken from the parsers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from pitstop.gpu.cuda import parse_p2p
from pitstop.gpu.dcgm import DiagParseError, parse_dcgm_diag
from pitstop.gpu.nccl import NcclParseError, nccl_check_problems, parse_nccl

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"


def real(tool: str, name: str) -> str:
    return (REAL / tool / name).read_text()


@dataclass(frozen=True)
class Nccl:
    file: str
    rows: int
    avg: float
    check: str  # the check column: "#wrong" (2.13+) or "error" (older)
    out_of_bounds: int
    wrong_total: int = 0
    version: str | None = None
    devices: int = 0
    device: str = ""
    passes: bool = True


NCCL = [
    Nccl("all_reduce_unknownver_16xH100_2node_a3mega.txt", 31, 70.742, "#wrong", 0, devices=16,
         device="NVIDIA H100 80GB HBM3"),
    Nccl("all_reduce_2.18.3_nccl2.30.3_16gpu_2node_p2pdisabled.txt", 24, 19.1617, "#wrong", 0,
         version="2.18.3", devices=16, device="NVIDIA Graphics Device"),
    # Every line behind SkyPilot's and mpirun --tag-output's prefixes.
    Nccl("all_gather_tagoutput_skypilot_16xH200_2node_gke_rdma.txt", 24, 122.073, "#wrong", 0, devices=16,
         device="NVIDIA H200"),
    Nccl("all_gather_nccl2.26.6_16xH200_2node_gcp_gib.txt", 24, 121.902, "#wrong", 0, devices=16,
         device="NVIDIA H200"),
    # 96 wrong out-of-place and 32 in-place at 1 MiB; nccl-tests says "4 FAILED".
    Nccl("all_reduce_2.17.8_2xGH200_2node_wrong96_issue369.txt", 25, 4.79995, "#wrong", 4, wrong_total=128,
         version="2.17.8", devices=2, device="NVIDIA GH200 120GB", passes=False),
    # #wrong printed with %g from 1 MiB up (1.04858e+06 ...): the sum of the printed values.
    Nccl("all_reduce_2xRTX3090_2node_INC_wrong_gformat.txt", 27, 3.02663, "#wrong", 108,
         wrong_total=2 * (1048572 + 1048580 + 2097150 + 4194300 + 8388610 + 16777200 + 33554400 + 67108900
                          + 134218000 + 268435000),
         devices=2, device="NVIDIA GeForce RTX 3090", passes=False),
    # In-place #wrong is N/A (alltoall has no in-place check); the average is a bare "0".
    Nccl("alltoall_1xRTX5090_single_row_NA_wrong_issue287.txt", 1, 0.0, "#wrong", 0, devices=1,
         device="NVIDIA GeForce RTX 5090"),
    # Before 2.13: an `error` column (0e+00 / 1e+00), no redop/root for all_gather, "4 FAILED".
    Nccl("all_gather_oldfmt_error_col_12xV100_dgx2_failed.txt", 31, 30.2993, "error", 4, devices=12,
         device="Tesla V100-SXM3-32GB", passes=False),
    # Non-zero `error` (2e-07) within nccl-tests' tolerance: "0 OK", a pass.
    Nccl("all_reduce_oldfmt_error_col_12xV100_dgx2_ok.txt", 31, 42.5578, "error", 0, devices=12,
         device="Tesla V100-SXM3-32GB"),
]  # fmt: skip


@pytest.mark.parametrize("case", NCCL, ids=lambda c: c.file)
def test_nccl_tests_outputs_of_every_format_are_read_as_printed(case: Nccl) -> None:
    result = parse_nccl(real("nccl", case.file))
    assert len(result.rows) == case.rows
    assert result.avg_busbw_gbps == pytest.approx(case.avg)
    assert (result.check_column, result.out_of_bounds, result.wrong_total) == (
        case.check,
        case.out_of_bounds,
        case.wrong_total,
    )
    assert result.tests_version == case.version
    assert (len(result.devices), set(result.devices)) == (case.devices, {case.device})
    assert (nccl_check_problems(result) == []) is case.passes


def test_nccl_failures_name_what_failed_and_where() -> None:
    wrong = parse_nccl(real("nccl", "all_reduce_2.17.8_2xGH200_2node_wrong96_issue369.txt"))
    assert [r.size_bytes for r in wrong.rows if r.wrong or r.inplace_wrong] == [1048576]
    assert nccl_check_problems(wrong) == [
        "128 wrong elements (data corruption) at 1048576 B",
        "4 out-of-bounds results (nccl-tests' own check failed)",
    ]
    old = parse_nccl(real("nccl", "all_gather_oldfmt_error_col_12xV100_dgx2_failed.txt"))
    assert old.max_error == 1.0
    assert nccl_check_problems(old) == [
        "4 out-of-bounds results (nccl-tests' own check failed); "
        "largest error 1 at 4294967280 B, 8589934560 B"
    ]


def test_a_cut_nccl_output_is_refused_saying_what_it_starts_with() -> None:
    # The tail of an NCCL 2.6.4 run pasted in an issue: rows without their header.
    with pytest.raises(NcclParseError) as refused:
        parse_nccl(real("nccl", "unnamed_collective_nccl2.6.4_2gpu_error_col_issue340_CUT.txt"))
    assert str(refused.value).startswith(
        "no nccl-tests result table (a '# size count type ... busbw' header) in the output; "
        "it starts with '65536          8192   float    16.57"
    )


def test_dcgm_4_document_reads_version_entity_and_failure() -> None:
    report = parse_dcgm_diag(real("dcgm", "dcgmi_diag_r1_4.2.3_GB10_fail_persistence_mode.json"))
    assert (report.passed, report.version, report.tests_run, report.runtime_error) == (False, "4.2.3", 1, "")
    [failure] = report.failures
    assert (failure.test, failure.gpu, failure.error_id, failure.reason) == (
        "software",
        "0",
        29,
        "DCGM_FR_PERSISTENCE_MODE",
    )
    assert failure.message.startswith("Persistence Mode: Persistence mode for GPU 0 is disabled.")


def test_nvvs_3_document_with_nulls_and_capital_pass_is_a_pass_with_its_version() -> None:
    report = parse_dcgm_diag(real("dcgm", "nvvs_json_3.1.0_pass_8gpu_dcgm_JsonResultTests_real_output.txt"))
    assert (report.passed, report.version, report.failures, report.warnings) == (True, "3.1.0", [], [])


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("dcgmi_diag_r3_3.3.1_T400_all_skip_issue139_CUT.json.txt", "DCGM output is not valid JSON"),
        (
            "dcgmi_diag_r4_4.x_8gpu_fragment_issue215_CUT.json.txt",
            "no 'DCGM GPU Diagnostic' or 'DCGM Diagnostic' object in the output; its keys: 'name', 'results'",
        ),
    ],
)
def test_cut_dcgm_outputs_are_refused_naming_what_was_seen(name: str, said: str) -> None:
    with pytest.raises(DiagParseError, match="^" + said.replace("(", r"\(").replace(")", r"\)")):
        parse_dcgm_diag(real("dcgm", name))


def test_p2p_matrices_of_an_8_gpu_a100_node() -> None:
    matrices = {m.title.split(" Matrix")[0]: m for m in parse_p2p(
        real("cuda_samples", "p2pBandwidthLatencyTest_8xA100-SXM4-80GB_distserve_issue3.txt")
    )}  # fmt: skip
    writes = matrices["Unidirectional P2P=Enabled Bandwidth (P2P Writes)"]
    assert (writes.gpus, writes.min_peer()) == (8, 265.05)
    assert matrices["Bidirectional P2P=Enabled Bandwidth"].min_peer() == 416.29


def _header(text: str) -> list[str]:
    """The three lines that lay out an nccl-tests table (out-of-place/in-place, names, units),
    without trailing blanks (outputs pasted into issues often lost them)."""
    lines = text.splitlines()
    at = next(
        i for i, line in enumerate(lines) if line.startswith("#") and " size " in line and "count" in line
    )
    return [line.rstrip() for line in lines[at - 1 : at + 2]]


@pytest.mark.parametrize(
    ("version", "real_file"),
    [
        # `Rank N Pid` without `Group`, a 6-wide type column: before 2.10.
        ("2.9.0", "all_reduce_oldfmt_error_col_12xV100_dgx2_ok.txt"),
        ("2.13.10", "all_reduce_unknownver_16xH100_2node_a3mega.txt"),
        ("2.18.3", "all_reduce_2.18.3_nccl2.30.3_16gpu_2node_p2pdisabled.txt"),
    ],
)
def test_the_simulators_nccl_table_is_laid_out_as_the_real_tool_of_that_version(
    version: str, real_file: str
) -> None:
    from pitstop.gpu import emit

    emitted = emit.nccl_all_reduce("gpu-node-001", "NVIDIA H100 80GB HBM3", 8, 118.0, version=version)
    assert _header(emitted) == _header(real("nccl", real_file))


def _shape(value: object) -> object:
    """Keys and nesting of a JSON document, without its values."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        shapes = [_shape(v) for v in value]
        return shapes[:1]
    return type(value).__name__


def test_the_simulators_dcgm_4_document_has_the_real_documents_shape() -> None:
    import json

    from pitstop.gpu import emit

    real_doc = json.loads(real("dcgm", "dcgmi_diag_r1_4.2.3_GB10_fail_persistence_mode.json"))
    text = emit.dcgm_diag_json(1, 1, ["Persistence Mode"], version="4.2.3-1-ubuntu22.04")
    emitted = json.loads(text[text.index("{") :])
    assert set(emitted) == set(real_doc) == {"DCGM Diagnostic", "entity_groups", "metadata"}
    real_test = real_doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]
    ours = next(
        t
        for c in emitted["DCGM Diagnostic"]["test_categories"]
        for t in c["tests"]
        if t["name"] == "Persistence Mode"
    )
    assert _shape(ours["results"]) == _shape(real_test["results"])
    assert set(ours["test_summary"]) <= set(real_test["test_summary"])
    assert _shape(emitted["entity_groups"]) == _shape(real_doc["entity_groups"])
    assert set(emitted["metadata"]) == set(real_doc["metadata"])


@pytest.mark.parametrize(
    ("name", "release", "namespace", "revision", "chart", "api_versions"),
    [
        ("pluto_e2e_secret_demo2_basic-demo.json", "demo2", "demo2", 1, ("basic-demo", "0.3.3"),
         {"policy/v1beta1", "v1", "apps/v1", "autoscaling/v2beta1"}),
        # The Secret's name, labels and namespace disagree with the record inside: Helm reads
        # the record, and so does pitstop.
        ("pluto_e2e_secret_test_v1_helm3chart.json", "test", "demo2", 2, ("helm3chart", "0.1.0"),
         {"extensions/v1beta1", "apps/v1"}),
        ("pluto_e2e_secret_duplicate_name_test_v2.json", "test", "default", 1, ("helm3chart", "0.1.0"),
         {"extensions/v1beta1", "apps/v1"}),
    ],
)  # fmt: skip
def test_real_helm_release_secrets_decode_to_their_records(
    name: str, release: str, namespace: str, revision: int, chart: tuple[str, str], api_versions: set[str]
) -> None:
    import base64
    import json

    from pitstop.helm import decode_release

    secret = json.loads(real("helm", name))
    decoded = decode_release(secret)
    assert (decoded.name, decoded.namespace, decoded.version) == (release, namespace, revision)
    assert (decoded.chart_name, decoded.chart_version) == chart
    found = {
        line.split(":", 1)[1].strip()
        for line in decoded.manifest.splitlines()
        if line.startswith("apiVersion:")
    }
    assert found == api_versions
    # The same record after a hand repair (`... | gzip | base64`, wrapped at 76 columns): Helm
    # reads it (Go's base64 skips CR/LF), so pitstop must too.
    inner = base64.b64decode(secret["data"]["release"]).decode()
    wrapped = "\r\n".join(inner[i : i + 76] for i in range(0, len(inner), 76))
    secret["data"]["release"] = base64.b64encode(wrapped.encode()).decode()
    assert decode_release(secret) == decoded


@pytest.mark.parametrize(
    ("name", "passed", "count", "device", "driver", "runtime", "error"),
    [
        ("deviceQuery_cuda12.4_drv12.5_4xA100-SXM4-80GB_pass_thamada.txt", True, 4, "NVIDIA A100-SXM4-80GB",
         "12.5", "12.4", ""),
        ("deviceQuery_cuda12.4_drv12.7_8xH100-80GB-HBM3_pass_thamada.txt", True, 8, "NVIDIA H100 80GB HBM3",
         "12.7", "12.4", ""),
        ("deviceQuery_cuda12.4_drv12.4_8xRTX4090_peer_no_pass_thamada.txt", True, 8, "NVIDIA GeForce RTX 4090",  # noqa: E501
         "12.4", "12.4", ""),
        ("deviceQuery_cuda12.4_drv12.4_8xRTX6000Ada_peer_yes_pass_thamada.txt", True, 8,
         "NVIDIA RTX 6000 Ada Generation", "12.4", "12.4", ""),
        # CUDA 8: no "NVIDIA " in the name, the summary line names the device.
        ("deviceQuery_cuda8.0_1xGTX1050_pass_old_summary_blog2016_idx25122222939.txt", True, 1, "GeForce GTX 1050",  # noqa: E501
         "8.0", "8.0", ""),
        ("deviceQuery_cuda8.0_fail_returned38_no_device_permissions_blog2016_idx25122222939.txt", False, 0, None,  # noqa: E501
         None, None, "cudaGetDeviceCount returned 38: no CUDA-capable device is detected"),
        ("deviceQuery_cuda10.2_fail_returned35_driver_insufficient_o3r_vpu_docker_idx26255850808.txt", False, 0,  # noqa: E501
         None, None, None,
         "cudaGetDeviceCount returned 35: CUDA driver version is insufficient for CUDA runtime version"),
    ],
)  # fmt: skip
def test_device_query_outputs_across_cuda_versions(
    name: str,
    passed: bool,
    count: int,
    device: str | None,
    driver: str | None,
    runtime: str | None,
    error: str,
) -> None:
    from pitstop.gpu.cuda import parse_device_query

    query = parse_device_query(real("cuda_samples", name))
    assert (query.passed, query.device_count, query.driver_version, query.runtime_version) == (
        passed,
        count,
        driver,
        runtime,
    )
    assert query.devices == ([device] * count if device else [])
    assert query.error == error


@pytest.mark.parametrize(
    ("name", "gpus", "slowest", "floor"),
    [
        ("p2pBandwidthLatencyTest_8xA100-SXM4-80GB_distserve_issue3.txt", 8, 265.05, 238.5),
        ("p2pBandwidthLatencyTest_8xH100-80GB-HBM3_benchmark_sheet_idx62193952648.txt", 8, 365.30, 328.8),
        # NVLink bridges pair GPUs 0-1 and 2-3; other pairs go over PCIe: no floor for this box.
        ("p2pBandwidthLatencyTest_4xA100-80GB-PCIe_nvlink_pairs_sushruta_blog.txt", 4, 21.46, None),
        ("p2pBandwidthLatencyTest_2xRTX4090_no_p2p_iharabukhouski_diffusion.txt", 2, 20.91, None),
        ("p2pBandwidthLatencyTest_2xRTX2080Ti_no_p2p_autodl_anthony-hoo.txt", 2, 5.72, None),
        ("p2pBandwidthLatencyTest_9gpu_RTX-PRO-6000-Blackwell+8xRTX5090_p2p_patched_aikitoria_README_CUT.txt", 9,  # noqa: E501
         55.59, None),
    ],
)  # fmt: skip
def test_p2p_outputs_their_slowest_pair_and_the_floor_measured_for_that_hardware(
    name: str, gpus: int, slowest: float, floor: float | None
) -> None:
    from pitstop.gpu.cuda import p2p_devices
    from pitstop.gpu.thresholds import p2p_floor

    text = real("cuda_samples", name)
    writes = next(m for m in parse_p2p(text) if m.title.startswith("Unidirectional P2P=Enabled"))
    assert (writes.gpus, writes.min_peer()) == (gpus, slowest)
    product = p2p_floor(p2p_devices(text))
    assert (product.min_unidirectional_gbps if product else None) == floor
    # A floor sits below every healthy node it was measured on.
    if product is not None:
        assert product.min_unidirectional_gbps < product.measured.slowest_pair_gbps == slowest


def test_dcgm_3_document_without_version_passes_with_a_skipped_test() -> None:
    report = parse_dcgm_diag(real("dcgm", "dcgmi_diag_r3_3.x_T4_pass_eud_skip_virtualclient.json"))
    assert (report.passed, report.version, report.tests_run, report.failures) == (True, None, 16, [])


def test_a_malformed_dcgm_document_is_refused_saying_what_is_wrong() -> None:
    name = "dcgmi_diag_3.x_T4_malformed_cuda_lib_fail_string_warning_virtualclient_fixture.json"
    with pytest.raises(
        DiagParseError, match=r"^'DCGM GPU Diagnostic' is a JSON list, not the object dcgmi writes$"
    ):
        parse_dcgm_diag(real("dcgm", name))
