"""The GPU health probes of `acceptance.check` that need no privilege: Xid from DCGM's fields
and ECC from `nvidia-smi -q` (docs/tool-outputs.md).

- Xid (`xid_source: dcgm`): `dcgmi dmon -e 230,310,311 -c 1` through the node's running
  nv-hostengine (`dcgm_hostengine: host:port`, the GPU Operator's `nvidia-dcgm` Service, whose
  `internalTrafficPolicy: Local` routes a probe pinned to the node to that node's hostengine). The
  Job asks for no GPU and runs unprivileged; field 230 is the last Xid each GPU raised since the
  hostengine started. A hostengine that cannot be reached fails the check in dcgmi's words.
- ECC: `nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT` in a Job given the node's GPUs
  (`ecc_gpus`: a request for the free ones, or `NVIDIA_VISIBLE_DEVICES=all` without one),
  unprivileged. A GPU with uncorrectable errors since the driver loaded, a pending or failed row
  remap or page retirement fails its node, named by its PCI bus id and the counter. Where DCGM's
  fields were read for the Xid check, a non-zero `DCGM_FI_DEV_ECC_DBE_VOL_TOTAL` fails it too.
"""

from __future__ import annotations

from activities.acceptance_jobs import Jobs
from pitstop.acceptance.judge import Measurement, not_measured
from pitstop.gpu.dcgm import dcgmi_dmon_command
from pitstop.gpu.dmon import (
    ECC_DBE_VOL_TOTAL,
    FIELD_NAMES,
    XID_ERRORS,
    XID_FIELDS,
    DmonParseError,
    DmonReading,
    parse_dmon,
)
from pitstop.gpu.smi import SmiParseError, nvidia_smi_ecc_command, parse_nvidia_smi_q

MAX_LISTED = 5


def _listed(items: list[str]) -> str:
    shown = "; ".join(items[:MAX_LISTED])
    return shown + (f" (+{len(items) - MAX_LISTED} more)" if len(items) > MAX_LISTED else "")


def dcgm_fields(jobs: Jobs, node: str) -> DmonReading | str:
    """DCGM's Xid and volatile ECC fields of the node's GPUs, read once per call, or why they
    could not be read (dcgmi's own words when it cannot reach the hostengine)."""
    if node in jobs.dcgm_fields:
        found: DmonReading | str = jobs.dcgm_fields[node]
        return found
    hostengine = jobs.args.dcgm_hostengine
    run = jobs.run(
        "xid",
        node,
        jobs.args.dcgm_image,
        dcgmi_dmon_command(XID_FIELDS, hostengine),
        # The node's hostengine has the GPUs; one started in the Job needs them given to it.
        gpus=None if hostengine == "embedded" else 0,
        name="xid-dcgm",
    )
    outcome: DmonReading | str
    if not run.finished or not run.log.strip():
        outcome = f"DCGM's fields of {node} were not read: {run.msg}"
    else:
        try:
            outcome = parse_dmon(run.log)
        except DmonParseError as exc:
            outcome = f"DCGM's fields of {node} could not be read ({run.msg}): {exc}"
    jobs.dcgm_fields[node] = outcome
    return outcome


def xid_from_dcgm(jobs: Jobs) -> tuple[dict[str, int], list[str], list[str]]:
    """Per node, how many GPUs report a last Xid (field 230); the problems; which Xid each
    such GPU raised (`<node> GPU <id>: Xid <code>`)."""
    counts: dict[str, int] = {}
    problems: list[str] = []
    found: list[str] = []
    for node in jobs.args.nodes:
        reading = dcgm_fields(jobs, node)
        if isinstance(reading, str):
            problems.append(reading)
            continue
        try:
            xids = reading.gpu_values(XID_ERRORS)
        except DmonParseError as exc:
            problems.append(f"DCGM's fields of {node}: {exc}")
            continue
        raised = {gpu: code for gpu, code in sorted(xids.items()) if code}
        counts[node] = len(raised)
        found += [f"{node} GPU {gpu}: Xid {code}" for gpu, code in raised.items()]
    return counts, problems, found


def ecc(jobs: Jobs) -> Measurement:
    """GPUs whose memory fails them, per node (`nvidia-smi -q`, and DCGM's volatile double bit
    count when the Xid check read DCGM's fields)."""
    if not jobs.args.nodes:
        return not_measured("no nodes given for the ECC check (nodes)")
    per_node: dict[str, float] = {}
    problems: list[str] = []
    notes: list[str] = []
    visible = jobs.args.ecc_gpus == "visible_devices"
    for node in jobs.args.nodes:
        run = jobs.run(
            "ecc",
            node,
            jobs.args.dcgm_image,
            nvidia_smi_ecc_command(),
            env={"NVIDIA_VISIBLE_DEVICES": "all"} if visible else None,
            gpus=0 if visible else None,
        )
        if not run.finished or not run.log.strip():
            problems.append(f"{node}: nvidia-smi was not read: {run.msg}")
            continue
        try:
            report = parse_nvidia_smi_q(run.log)
        except SmiParseError as exc:
            problems.append(f"{node}: {exc} ({run.msg})")
            continue
        failing = {gpu.name: gpu.problems() for gpu in report.gpus if gpu.problems()}
        problems += [f"{node}: {gpu}: {', '.join(said)}" for gpu, said in failing.items()]
        dcgm_bad = _dcgm_double_bit(jobs, node, problems)
        per_node[node] = float(max(len(failing), dcgm_bad))
        _free, allocatable, holders = jobs.gpus.get(node, (0, 0, []))
        read = f"{node}: {len(report.gpus)} GPUs read"
        if not visible and allocatable and len(report.gpus) < allocatable:
            read += f" of {allocatable} (the others are held by {', '.join(holders) or 'running pods'})"
        notes.append(read)
        notes += [f"{node}: ECC is off on {gpu} (its errors are not counted)" for gpu in report.ecc_off()]
        notes += [f"{node}: {gpu.name}: {', '.join(gpu.history())}" for gpu in report.gpus if gpu.history()]
    total = sum(per_node.values())
    detail = f"{total:g} GPUs with uncorrectable ECC errors or a pending/failed remap"
    if notes:
        detail += " (" + _listed(notes) + ")"
    if problems:
        value = total if per_node else None
        return Measurement(ok=False, value=value, detail=f"{_listed(problems)}; {detail}", nodes=per_node)
    return Measurement(ok=True, value=total, detail=detail, nodes=per_node)


def _dcgm_double_bit(jobs: Jobs, node: str, problems: list[str]) -> int:
    """GPUs of the node with volatile double bit errors in DCGM's field 311, when the Xid
    source reads DCGM (the reading is shared); adds each to `problems`."""
    if jobs.args.xid_from != "dcgm":
        return 0
    reading = dcgm_fields(jobs, node)
    if isinstance(reading, str):
        return 0  # the Xid check reports why
    try:
        counts = reading.gpu_values(ECC_DBE_VOL_TOTAL)
    except DmonParseError:
        return 0
    bad = {gpu: n for gpu, n in sorted(counts.items()) if n}
    problems += [f"{node}: GPU {gpu} (DCGM): {FIELD_NAMES[ECC_DBE_VOL_TOTAL]} {n}" for gpu, n in bad.items()]
    return len(bad)
