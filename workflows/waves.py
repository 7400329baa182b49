"""A stage's waves as the workflow walks them: gate names, prompts, status, and the canary check.

Pure: no Temporal calls, no I/O. The waves themselves (each host's wave, their order, what the
canaries cover) were decided when the run was planned (`activities/plan_waves.py`).
"""

from __future__ import annotations

from pitstop.contracts import PlannedStage, StageReport, WaveReport


def gate_template(stage: str) -> str:
    """The plan's rule for every wave gate of a stage."""
    return f"{stage}:wave"


def gate_id(stage: str, wave: str) -> str:
    """The gate before one wave, as approvers name it (`pitstop approve RUN widen:wave-zone-b`;
    not `:wave:`, which a terminal's emoji shortcodes would turn into a picture)."""
    return f"{stage}:wave-{wave}"


def label(planned: PlannedStage, index: int) -> str:
    """ "2/3 zone-b": the wave in progress, for the stage's status."""
    return f"{index + 1}/{len(planned.waves)} {planned.waves[index]}"


def gate_prompt(prompt: str, planned: PlannedStage, index: int, report: StageReport) -> str:
    """The wave gate's question, with what the waves before it did."""
    wave = planned.waves[index]
    before = "; ".join(_said(w) for w in report.waves[:index]) or "none"
    ask = prompt or "Continue with the next wave?"
    return (
        f"{ask}\nNext: wave {index + 1}/{len(planned.waves)} {wave!r} "
        f"({len(planned.wave_hosts(wave))} hosts). Done: {before}."
    )


def _said(wave: WaveReport) -> str:
    observed = " and observed" if wave.observed_until is not None else ""
    return f"{wave.wave!r} ({wave.hosts} hosts{observed})"


def uncovered(planned: PlannedStage, passed: set[str]) -> list[str]:
    """Each value the canaries must cover none of whose canaries passed, said for a person."""
    out: list[str] = []
    for cover in planned.coverage:
        if not any(c in passed for c in cover.canaries):
            plural = "s" if cover.hosts != 1 else ""
            out.append(
                f"{cover.cover} = {cover.value!r} ({cover.hosts} host{plural}, e.g. {cover.example}): "
                f"its canaries ({', '.join(cover.canaries)}) did not pass"
            )
    return out


def wave_record(report: StageReport, planned: PlannedStage, index: int) -> WaveReport:
    """The report's entry for wave `index`, created when the wave is first reached."""
    while len(report.waves) <= index:
        n = len(report.waves)
        wave = planned.waves[n]
        report.waves.append(WaveReport(wave=wave, number=n + 1, hosts=len(planned.wave_hosts(wave))))
    return report.waves[index]


def wave_lost(planned: PlannedStage, wave: str, done: list[str], failed: list[str]) -> bool:
    """Every host of the wave that ran failed (and at least one ran)."""
    hosts = set(planned.wave_hosts(wave))
    return bool(hosts & set(failed)) and not hosts & set(done)
