"""The Job-based probes of `acceptance.check`: NCCL, DCGM diag, Xid in the kernel log, the
multi-node NCCL job, and the representative training and inference benchmarks.

Each Job is pinned to a node and labelled `pitstop.dev/validation=<kind>` (as the `gpu.*`
modules do); its name is deterministic (kind, run id, task, node), so a retried attempt waits
for the Job its predecessor started instead of starting another. Logs are parsed with the
real tools' formats (`pitstop.gpu`), the benchmarks' in theirs (`pitstop.acceptance.bench`: vLLM's
serving benchmark table and server log, METRIC lines).
They wait as kube.job does (`activities.kube.job_wait`): a probe whose pod cannot run (a missing
image, a missing Secret) fails its check at the next poll with the kubelet's reason and events,
not after `job_timeout_seconds`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from activities.kube.client import Kube, job_path, jobs_path
from activities.kube.job import job_body
from activities.kube.job_wait import delete_job, wait_for_job
from pitstop.acceptance.bench import SOURCES, read_bench
from pitstop.acceptance.judge import Measurement, not_measured
from pitstop.contracts import ModuleCall
from pitstop.gpu.dcgm import DiagParseError, dcgmi_diag_command, parse_dcgm_diag
from pitstop.gpu.nccl import NcclParseError, nccl_tests_command, parse_nccl
from pitstop.kube.names import job_name
from pitstop.module_args.acceptance import AcceptanceArgs, JobSpec
from pitstop.module_args.kube import ConfigMapMount, JobArgs

VALIDATION_LABEL = "pitstop.dev/validation"
XID_LINE = re.compile(r"NVRM: Xid \([^)]*\): (\d+)")

# Of the log of a probe that did not finish, this much goes into its check's reason (every
# node's reason is carried in each heartbeat and in the result).
MESSAGE_LOG_BYTES = 1024


@dataclass
class JobRun:
    node: str
    succeeded: bool
    log: str
    msg: str
    # The Job ran to its end (succeeded or failed), so `log` is the tool's output; False when it
    # did not run (no free GPU) or pitstop stopped waiting (its pod cannot run, or the timeout).
    finished: bool = True


@dataclass
class Jobs:
    """Runs the probe Jobs of one acceptance call, one at a time."""

    kube: Kube
    call: ModuleCall
    args: AcceptanceArgs
    # node -> (free GPUs, allocatable GPUs, pods holding the others)
    gpus: dict[str, tuple[int, int, list[str]]]
    bench_runs: dict[str, JobRun | str] = field(default_factory=dict)
    # node -> DCGM's fields read once per call (`activities.acceptance_gpu_health.dcgm_fields`),
    # shared by the Xid and ECC checks; a string says why they could not be read.
    dcgm_fields: dict[str, Any] = field(default_factory=dict)
    # What the call measured so far: every heartbeat carries it, so a retried attempt resumes.
    done: dict[str, Any] = field(default_factory=dict)

    def run(
        self,
        kind: str,
        node: str,
        image: str,
        command: list[str] | None,
        *,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
        config_maps: list[ConfigMapMount] | None = None,
        gpus: int | None = None,
        name: str | None = None,
        privileged: bool = False,
    ) -> JobRun:
        """Run one Job of validation `kind` on the node; `name` tells apart Jobs of one kind. By
        default it asks for every free GPU of the node; with none free it does not run."""
        if gpus is None:
            free, allocatable, holders = self.gpus.get(node, (0, 0, []))
            if allocatable and not free:
                return JobRun(
                    node,
                    False,
                    "",
                    f"no free GPU on {node} for the {kind} probe: all {allocatable} are held by "
                    f"{', '.join(holders)} (drain the node first)",
                    finished=False,
                )
            gpus = free
        spec = JobArgs(
            image=image,
            command=command,
            args=args,
            env=env or {},
            config_maps=config_maps or [],
            name=f"pitstop-accept-{name or kind}",
            namespace=self.args.namespace,
            labels={VALIDATION_LABEL: kind},
            gpus=gpus,
            privileged=privileged,
            timeout_seconds=self.args.job_timeout_seconds,
            poll_interval_seconds=self.args.poll_interval_seconds,
        )
        ns = spec.namespace
        job_id = job_name(spec.name, self.call.run_id, self.call.task_path, node)
        job = self.kube.get_or_none(job_path(ns, job_id))
        if job is None:
            job = self.kube.post(jobs_path(ns), job_body(job_id, node, spec, self.call))
        end = wait_for_job(
            self.kube,
            ns,
            job_id,
            job,
            timeout_seconds=spec.timeout_seconds,
            poll_interval_seconds=spec.poll_interval_seconds,
            unschedulable_seconds=spec.unschedulable_seconds,
            log_lines=spec.log_lines,
            heartbeat={"acceptance": dict(self.done), "job": job_id},
        )
        delete_job(self.kube, ns, job_id)
        if not end.finished:  # the partial log is no result; a little of it goes into the reason
            return JobRun(node, False, "", end.describe(node, log_bytes=MESSAGE_LOG_BYTES), finished=False)
        return JobRun(node, end.succeeded, end.log, end.describe(node))


def _no_nodes(what: str) -> Measurement:
    return not_measured(f"no nodes given for {what} (nodes)")


def nccl(jobs: Jobs) -> Measurement:
    if not jobs.args.nodes:
        return _no_nodes("the NCCL test")
    cfg = jobs.args.nccl
    per_node: dict[str, float] = {}
    problems: list[str] = []
    for node in jobs.args.nodes:
        gpus = jobs.gpus.get(node, (0, 0, []))[0]
        command = nccl_tests_command(cfg.binary, cfg.min_bytes, cfg.max_bytes, gpus)
        run = jobs.run("nccl", node, cfg.image, command)
        if not run.finished:
            problems.append(f"{node}: {run.msg}")
            continue
        try:
            result = parse_nccl(run.log)
        except NcclParseError as exc:
            problems.append(f"{node}: {exc} ({run.msg})")
            continue
        per_node[node] = result.avg_busbw_gbps
        if not run.succeeded:
            problems.append(f"{node}: {run.msg}")
        if result.wrong_total:
            problems.append(f"{node}: {result.wrong_total} wrong results (data corruption)")
    return _lowest(per_node, problems, "GB/s avg bus bandwidth")


def _lowest(per_node: dict[str, float], problems: list[str], what: str) -> Measurement:
    if not per_node:
        return Measurement(ok=False, detail="; ".join(problems) or "no figure")
    worst = min(per_node, key=lambda n: per_node[n])
    detail = f"{per_node[worst]:g} {what}, lowest on {worst}"
    if len(per_node) > 1:
        detail += " (" + ", ".join(f"{n} {v:g}" for n, v in sorted(per_node.items())) + ")"
    if problems:
        detail = "; ".join(problems) + "; " + detail
    return Measurement(ok=not problems, value=per_node[worst], detail=detail, nodes=per_node)


def cross_node(jobs: Jobs) -> Measurement:
    spec = jobs.args.cross_node
    if spec is None:
        return not_measured("no multi-node NCCL job configured (cross_node: image, command)")
    node = spec.node or (jobs.args.nodes[0] if jobs.args.nodes else None)
    if node is None:
        return _no_nodes("the multi-node NCCL job")
    run = jobs.run(
        "nccl",
        node,
        spec.image,
        spec.command,
        args=spec.args,
        env=spec.env,
        config_maps=spec.config_maps,
        gpus=spec.gpus,
        name="nccl-multinode",
    )
    if not run.finished:
        return Measurement(ok=False, detail=run.msg)
    try:
        result = parse_nccl(run.log)
    except NcclParseError as exc:
        return Measurement(ok=False, detail=f"{exc} ({run.msg})")
    return Measurement(
        ok=run.succeeded and not result.wrong_total,
        value=result.avg_busbw_gbps,
        detail=f"{result.avg_busbw_gbps:g} GB/s avg bus bandwidth"
        + ("" if run.succeeded else f"; {run.msg}"),
    )


def dcgm_diag(jobs: Jobs) -> list[str]:
    """Problems found by dcgmi diag on each node ([] when it is not asked for)."""
    level = jobs.args.dcgm_diag_level
    if level is None:
        return []
    problems: list[str] = []
    for node in jobs.args.nodes:
        command = dcgmi_diag_command(level, jobs.args.dcgm_hostengine)
        run = jobs.run("dcgm", node, jobs.args.dcgm_image, command)
        if not run.finished:
            problems.append(f"dcgmi diag on {node}: {run.msg}")
            continue
        try:
            report = parse_dcgm_diag(run.log)
        except DiagParseError as exc:
            problems.append(f"dcgmi diag on {node}: {exc} ({run.msg})")
            continue
        if not report.passed:
            problems.append(f"dcgmi diag on {node}: {report.summary()}")
        elif not run.succeeded:
            problems.append(f"dcgmi diag on {node}: {run.msg}")
    return problems


def xid_in_kernel_logs(jobs: Jobs) -> tuple[dict[str, int], list[str]]:
    """Xid lines per node from `dmesg`. Reading the kernel ring buffer needs privileges where
    `kernel.dmesg_restrict=1`: a dmesg that fails fails the probe (the log says why), instead of
    an empty grep counting 0 Xids."""
    counts: dict[str, int] = {}
    problems: list[str] = []
    script = "dmesg > /tmp/kernel.log || exit 3; grep 'NVRM: Xid' /tmp/kernel.log || true"
    for node in jobs.args.nodes:
        run = jobs.run(
            "xid",
            node,
            jobs.args.xid_image,
            ["sh", "-c", script],
            gpus=0,
            privileged=jobs.args.xid_privileged,
        )
        if not run.succeeded:
            said = run.log.strip().splitlines()[-1] if run.log.strip() else ""
            problems.append(
                f"the kernel log of {node} could not be read ({run.msg}{': ' + said if said else ''})"
            )
            continue
        counts[node] = len(XID_LINE.findall(run.log))
    return counts, problems


# --- representative benchmarks ----------------------------------------------------------------


def bench(jobs: Jobs, kind: str) -> JobRun | str:
    """The `training` or `inference` benchmark's run (once per call), or why it did not run."""
    if kind in jobs.bench_runs:
        return jobs.bench_runs[kind]
    spec: JobSpec | None = getattr(jobs.args.bench, kind)
    node = (spec.node if spec else None) or (jobs.args.nodes[0] if jobs.args.nodes else None)
    outcome: JobRun | str
    if spec is None:
        outcome = f"no {kind} benchmark configured (bench.{kind}: image, command)"
    elif node is None:
        outcome = f"no node for the {kind} benchmark (bench.{kind}.node or nodes)"
    else:
        env = {**spec.env, "PITSTOP_BENCH": kind}
        outcome = jobs.run(
            "bench",
            node,
            spec.image,
            spec.command,
            args=spec.args,
            env=env,
            config_maps=spec.config_maps,
            gpus=spec.gpus,
            name=f"bench-{kind}",
        )
    jobs.bench_runs[kind] = outcome
    return outcome


def _failed(kind: str, run: JobRun) -> str:
    """Why the benchmark failed: the Job's end and, when it ran, the last line its command wrote
    (python's or sh's word on a missing script, the engine's error)."""
    said = run.log.strip().splitlines()[-1] if run.finished and run.log.strip() else ""
    return f"the {kind} benchmark failed: {run.msg}" + (f"; its log ends: {said}" if said else "")


def _reported(names: tuple[str, ...]) -> str:
    said = [
        f"{name} ({SOURCES[name]} or a METRIC line)" if name in SOURCES else f"{name} (METRIC lines)"
        for name in names
    ]
    return " or ".join(said)


def bench_metric(jobs: Jobs, kind: str, *names: str, note: str = "") -> Measurement:
    """The first of `names` the benchmark reported. A figure of vLLM's benchmark table fails the
    check when the table says its requests failed (`BenchReport.problems`)."""
    run = bench(jobs, kind)
    if isinstance(run, str):
        return not_measured(run)
    if not run.succeeded:
        return Measurement(ok=False, detail=_failed(kind, run))
    report = read_bench(run.log)
    metrics = report.metrics
    for name in names:
        if name in metrics:
            suffix = f" ({note})" if note and name != names[0] else ""
            # The engine the figure is of (the probe's ENGINE line): a baseline and a later
            # figure of different engines are then told apart in the result and the record.
            detail = f"{name}={metrics[name]:g} on {run.node}{report.measured_with()}{suffix}"
            if report.problems and name in report.from_table:
                problems = "; ".join(report.problems)
                return Measurement(ok=False, value=metrics[name], detail=f"{problems}; {detail}")
            return Measurement(ok=True, value=metrics[name], detail=detail)
    why = f"; {'; '.join(report.problems)}" if report.problems else ""
    return not_measured(f"the {kind} benchmark reported no {_reported(names)}{why}")


def training_start(jobs: Jobs) -> Measurement:
    run = bench(jobs, "training")
    if isinstance(run, str):
        return not_measured(run)
    return Measurement(ok=run.succeeded, detail=run.msg if run.succeeded else _failed("training", run))


def convergence(jobs: Jobs) -> Measurement:
    run = bench(jobs, "training")
    if isinstance(run, str):
        return not_measured(run)
    if not run.succeeded:
        return Measurement(ok=False, detail=_failed("training", run))
    metrics = read_bench(run.log).metrics
    first, last = metrics.get("loss_first"), metrics.get("loss_last")
    if first is None or last is None:
        return not_measured("the training benchmark reported no loss_first and loss_last (METRIC lines)")
    falling = last < first
    detail = f"loss {first:g} -> {last:g}" + ("" if falling else " (did not fall over the slice)")
    return Measurement(ok=falling, value=last, detail=detail)
