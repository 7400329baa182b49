"""`gpu.*`: node self-checks run as Kubernetes Jobs on the node, judged from their output.

Each module builds a `kube.job` call (pinned to the node, tolerating the cordon and the
maintenance taint, labelled `pitstop.dev/validation=<kind>`), runs it through the same code
as `kube.job` — deterministic Job name, resumable after a worker crash — and parses the
tool's real output format with `pitstop.gpu`.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from activities.baseline import for_run as baseline_for_run
from activities.baseline import store_dir
from activities.kube.job import run_job
from activities.module_activity import module_activity
from pitstop.baseline import Threshold, compare
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.gpu.cuda import CudaParseError, p2p_devices, parse_device_query, parse_p2p
from pitstop.gpu.dcgm import DiagParseError, dcgmi_diag_command, parse_dcgm_diag
from pitstop.gpu.nccl import NcclParseError, nccl_check_problems, nccl_tests_command, parse_nccl
from pitstop.gpu.thresholds import p2p_floor
from pitstop.module_args.gpu import (
    CUDA_CHECK,
    DCGM_DIAG,
    NCCL_TEST,
    P2P_CHECK,
    BaselineCheck,
    CudaCheckArgs,
    DcgmDiagArgs,
    NcclTestArgs,
    P2PCheckArgs,
    ValidationJob,
)

GPU_COUNT_LABEL = "nvidia.com/gpu.count"


def _node_gpus(call: ModuleCall) -> int:
    labels = call.host_vars.get("labels") or {}
    try:
        return int(labels.get(GPU_COUNT_LABEL) or call.host_vars.get("gpu_count") or 0)
    except (TypeError, ValueError):
        return 0


def _job(call: ModuleCall, args: ValidationJob, kind: str, image: str, command: list[str]) -> ModuleResult:
    job_args: dict[str, Any] = {
        "image": image,
        "command": command,
        "name": f"pitstop-{kind}",
        "namespace": args.namespace,
        "labels": {"pitstop.dev/validation": kind},
        "gpus": args.gpus if args.gpus is not None else _node_gpus(call),
        "timeout_seconds": args.timeout_seconds,
        "poll_interval_seconds": args.poll_interval_seconds,
    }
    if args.node:
        job_args["node"] = args.node
    result: ModuleResult = run_job(call.model_copy(update={"module": "kube.job", "args": job_args}))
    return result


def _checked(call: ModuleCall, what: str) -> ModuleResult | None:
    if call.check_mode:
        return ModuleResult(changed=False, msg=f"would run {what} as a Job on {call.host}")
    return None


def _against_baseline(
    store: str | None,
    run_id: str,
    args: BaselineCheck,
    metric: str,
    value: float,
    data: dict[str, Any],
    problems: list[str],
) -> bool:
    """Compare `value` with the pool's recorded `metric` when the task names a baseline; the
    deviation goes to `data["baseline"]` (None when the baseline lacks the metric), a drop past
    the allowed one to `problems`. Whether the figure was judged against a baseline. The baseline
    is the one this run started from (frozen at its first read), whatever the run records since."""
    if not (args.baseline_product and args.baseline_pool):
        return False
    baseline = baseline_for_run(store, args.baseline_product, args.baseline_pool, run_id)
    if metric not in baseline.metrics:
        data["baseline"] = None
        return False
    [dev] = compare(baseline, {metric: value}, {metric: Threshold(max_deviation_pct=args.max_deviation_pct)})
    data["baseline"] = dev.model_dump()
    if not dev.ok:
        problems.append(dev.describe())
    return True


@module_activity(DCGM_DIAG)
def dcgm_diag(call: ModuleCall, args: DcgmDiagArgs) -> ModuleResult:
    if (skipped := _checked(call, f"dcgmi diag -r {args.level}")) is not None:
        return skipped
    job = _job(call, args, "dcgm", args.image, dcgmi_diag_command(args.level, args.hostengine))
    try:
        report = parse_dcgm_diag(job.stdout or "")
    except DiagParseError as exc:
        said = next((line for line in (job.stdout or "").splitlines() if line.startswith("Error:")), "")
        return ModuleResult(
            failed=True,
            msg=f"DCGM diag: {said or exc} ({job.msg})",
            stdout=job.stdout,
            data=job.data,
        )
    data = {**job.data, "level": args.level, **report.model_dump(mode="json")}
    if not report.passed or job.failed:
        msg = report.summary() if not report.passed else f"DCGM diag Job failed: {job.msg}"
        return ModuleResult(failed=True, msg=msg, data=data)
    return ModuleResult(msg=f"level {args.level}: {report.summary()}", data=data)


@module_activity(NCCL_TEST)
def nccl_test(call: ModuleCall, args: NcclTestArgs) -> ModuleResult:
    store = store_dir(args.baseline_store, call)  # the worker policy first, before any Job
    if (skipped := _checked(call, args.binary)) is not None:
        return skipped
    gpus = args.gpus if args.gpus is not None else _node_gpus(call)
    command = nccl_tests_command(args.binary, args.min_bytes, args.max_bytes, gpus)
    # The tool by its name in what people read; the image may need the full path to run it.
    tool = PurePosixPath(args.binary).name or args.binary
    job = _job(call, args, "nccl", args.image, command)
    try:
        result = parse_nccl(job.stdout or "")
    except NcclParseError as exc:
        return ModuleResult(failed=True, msg=f"{tool}: {exc} ({job.msg})", stdout=job.stdout, data=job.data)
    busbw = result.avg_busbw_gbps
    data: dict[str, Any] = {
        **job.data,
        "avg_busbw_gbps": busbw,
        "peak_busbw_gbps": result.peak_busbw_gbps,
        "wrong": result.wrong_total,
        "max_error": result.max_error,
        "out_of_bounds": result.out_of_bounds,
        "check_column": result.check_column,
        "tests_version": result.tests_version,
    }
    problems: list[str] = []
    if job.failed:
        problems.append(f"the Job failed ({job.msg})")
    problems += nccl_check_problems(result)
    if args.min_busbw_gbps is not None and busbw < args.min_busbw_gbps:
        problems.append(f"avg bus bandwidth {busbw:g} GB/s is below the minimum {args.min_busbw_gbps:g} GB/s")
    _against_baseline(store, call.run_id, args, "nccl_busbw_gbps", busbw, data, problems)
    if problems:
        return ModuleResult(failed=True, msg=f"{tool} on {call.host}: " + "; ".join(problems), data=data)
    return ModuleResult(msg=f"{tool}: avg bus bandwidth {busbw:g} GB/s", data=data)


@module_activity(CUDA_CHECK)
def cuda_check(call: ModuleCall, args: CudaCheckArgs) -> ModuleResult:
    if (skipped := _checked(call, "deviceQuery")) is not None:
        return skipped
    job = _job(call, args, "cuda", args.image, ["/cuda-samples/deviceQuery"])
    try:
        query = parse_device_query(job.stdout or "")
    except CudaParseError as exc:
        return ModuleResult(
            failed=True, msg=f"deviceQuery: {exc} ({job.msg})", stdout=job.stdout, data=job.data
        )
    expected = args.expected_devices if args.expected_devices is not None else _node_gpus(call)
    data = {**job.data, **query.model_dump()}
    if not query.passed or (expected and query.device_count != expected):
        return ModuleResult(
            failed=True,
            msg=(
                f"deviceQuery: {query.device_count} of {expected} GPUs visible, "
                f"result {'PASS' if query.passed else 'FAIL'}" + (f" ({query.error})" if query.error else "")
            ),
            data=data,
        )
    return ModuleResult(msg=f"deviceQuery: {query.device_count} GPUs, Result = PASS", data=data)


@module_activity(P2P_CHECK)
def p2p_check(call: ModuleCall, args: P2PCheckArgs) -> ModuleResult:
    store = store_dir(args.baseline_store, call)  # the worker policy first, before any Job
    if (skipped := _checked(call, "p2pBandwidthLatencyTest")) is not None:
        return skipped
    job = _job(call, args, "p2p", args.image, ["/cuda-samples/p2pBandwidthLatencyTest"])
    try:
        matrices = parse_p2p(job.stdout or "")
    except CudaParseError as exc:
        return ModuleResult(failed=True, msg=f"p2p: {exc} ({job.msg})", stdout=job.stdout, data=job.data)
    writes = next(
        (m for m in matrices if "P2P=Enabled" in m.title and "Unidirectional" in m.title), matrices[0]
    )
    slowest = writes.min_peer()
    devices = p2p_devices(job.stdout or "")
    product = p2p_floor(devices)
    floor, judged_by = args.min_peer_gbps, "the task's min_peer_gbps"
    if floor is None and product is not None:
        floor = product.min_unidirectional_gbps
        judged_by = f"the floor measured for {product.product}, {product.topology} ({product.source})"
    data: dict[str, Any] = {
        **job.data,
        "min_peer_gbps": slowest,
        "gpus": writes.gpus,
        "devices": sorted(set(devices)),
        "floor_gbps": floor,
        "floor_from": judged_by if floor is not None else None,
    }
    problems: list[str] = []
    if job.failed:
        problems.append(f"the Job failed ({job.msg})")
    if floor is not None and slowest < floor:
        problems.append(f"slowest GPU pair {slowest:g} GB/s is below {floor:g} GB/s, {judged_by}")
    by_baseline = _against_baseline(store, call.run_id, args, "p2p_min_peer_gbps", slowest, data, problems)
    judged = floor is not None or by_baseline
    if problems:
        return ModuleResult(failed=True, msg="p2p: " + "; ".join(problems), data=data)
    if not judged:
        hardware = ", ".join(sorted(set(devices))) or "GPUs the output does not name"
        return ModuleResult(
            msg=(
                f"p2p: slowest GPU pair {slowest:g} GB/s, not judged: no floor is known for {len(devices)} x "
                f"{hardware}; give min_peer_gbps or a baseline (baseline_product/baseline_pool with a "
                "p2p_min_peer_gbps metric)"
            ),
            data=data,
        )
    return ModuleResult(
        msg=f"p2p: slowest GPU pair {slowest:g} GB/s (floor {floor:g})"
        if floor is not None
        else f"p2p: slowest GPU pair {slowest:g} GB/s, within its baseline",
        data=data,
    )


GPU_ACTIVITIES = [dcgm_diag, nccl_test, cuda_check, p2p_check]
