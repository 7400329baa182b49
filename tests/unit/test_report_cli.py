"""`pitstop report` on the recorded demo run (tests/fixtures/reports/demo-maintenance.json):
the files it writes, what drove its pictures, and that the pictures are PNGs of their size."""

from __future__ import annotations

import base64
import re
import struct
from datetime import UTC, datetime, timedelta
from pathlib import Path

from typer.testing import CliRunner

from pitstop.cli.app import build_app
from pitstop.contracts import HostResult, RunReport, StageReport, TaskOutcome
from pitstop.report import plots
from pitstop.report.data import derive
from pitstop.report.layout import RunLayout
from pitstop.report.source import RunSource
from pitstop.report.write import ReportDataFile, write_report

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "reports" / "demo-maintenance.json"
# The file names start with the recorded run's id.
RUN = RunSource.model_validate_json(FIXTURE.read_text()).report.run_id
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == PNG_MAGIC and png[12:16] == b"IHDR", "not a PNG"
    width, height = struct.unpack(">II", png[16:24])
    return width, height


def test_pitstop_report_writes_html_markdown_pngs_and_the_data_behind_them(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        build_app(["report"]), ["report", "--from", str(FIXTURE), "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    printed = [Path(line.strip()) for line in result.output.splitlines()[1:]]
    assert {p.name for p in printed} == {
        f"{RUN}.html",
        f"{RUN}.md",
        f"{RUN}.data.json",
        f"{RUN}-timeline.png",
        f"{RUN}-availability.png",
        f"{RUN}-validation.png",
    }
    assert all(p.is_file() and p.parent == tmp_path for p in printed)

    saved = ReportDataFile.model_validate_json((tmp_path / f"{RUN}.data.json").read_text())
    data = saved.derived
    # The timeline's data: the canary, its gate, the fleet's three waves, the degraded node red.
    assert [s.name for s in data.stages] == ["canary", "fleet"]
    assert [(g.gate, g.status, [v.approver for v in g.votes]) for g in data.gates] == [
        ("canary:after", "approved", ["alice"])
    ]
    assert [w.wave for w in data.waves] == ["zone-a", "zone-b", "zone-c"]
    [failed] = data.failed_rows
    assert failed.host == "gpu-node-008" and "NCCL" in failed.reason
    assert any(s.outcome == "failed" for s in failed.phases)
    assert plots.OUTCOME_COLOUR["failed"] == "#de2d26"

    sizes = {
        "timeline": plots.timeline_size(len(data.rows)),
        "availability": plots.availability_size(len(data.availability)),
        "validation": plots.validation_size(len(plots.metrics(data))),
    }
    for name, size in sizes.items():
        assert _png_size((tmp_path / f"{RUN}-{name}.png").read_bytes()) == size, name
    assert sizes["timeline"] == (1300, int((2.2 + 0.38 * 12) * 100))

    # One HTML file with the same pictures embedded, and the tables.
    html = (tmp_path / f"{RUN}.html").read_text()
    embedded = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert [base64.b64decode(e) for e in embedded] == [
        (tmp_path / f"{RUN}-{name}.png").read_bytes() for name in ("timeline", "availability", "validation")
    ]
    assert "gpu-node-008" in html and "canary:after" in html and "cli:alice" in html
    markdown = (tmp_path / f"{RUN}.md").read_text()
    assert f"![Timeline]({RUN}-timeline.png)" in markdown


def test_text_from_the_run_is_escaped_in_the_html(tmp_path: Path) -> None:
    source = RunSource.model_validate_json(FIXTURE.read_text())
    host = source.report.stages[1].hosts[0]
    host.status, host.failed_task, host.msg = "failed", "t", "<script>alert(1)</script> | broke"
    files = write_report(source, tmp_path)
    html = files.html.read_text()
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "\\| broke" in files.markdown.read_text()


def test_pitstop_report_says_what_is_wrong_with_a_file_that_is_no_report(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"nope": 1}')
    result = CliRunner().invoke(build_app(["report"]), ["report", "--from", str(bad)])
    assert result.exit_code == 1
    assert "not a saved report" in result.output


def test_a_run_that_never_reached_a_host_gets_a_report_without_pictures(tmp_path: Path) -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    report = RunReport(
        run_id="refused/run",
        runbook="rb",
        requested_by="me",
        check_mode=False,
        status="failed",
        started_at=at,
        ended_at=at,
        msg="plan failed: runbook.yaml:3:1: unknown module",
    )
    files = write_report(RunSource(report=report, layout=RunLayout(), finished=True), tmp_path)
    assert files.pictures == [] and files.html.name == "refused_run.html"
    assert "plan failed: runbook.yaml:3:1: unknown module" in files.html.read_text()
    # A partial run's timeline on a one-second axis draws without matplotlib's singular-limit warning.
    data = derive(report.model_copy(update={"stages": []}), RunLayout())
    assert _png_size(plots.availability_png(data))[0] == plots.availability_size(0)[0]


def test_a_fleet_of_thousands_draws_the_nodes_that_need_a_look(tmp_path: Path) -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    hosts = []
    for i in range(2000):
        start, end = at + timedelta(seconds=i), at + timedelta(seconds=i + 30)
        bad = i in (7, 1500, 1999)
        nccl = {"avg_busbw_gbps": 100.0 if bad else 390.0, "baseline": None}
        tasks = [
            TaskOutcome(
                task_id="c",
                name="Cordon",
                module="kube.cordon",
                status="changed",
                started_at=start,
                ended_at=start,
            ),
            TaskOutcome(
                task_id="n",
                name="NCCL",
                module="gpu.nccl_test",
                status="failed" if bad else "ok",
                msg="too slow" if bad else "",
                started_at=start,
                ended_at=end,
                data=nccl,
            ),
        ]
        hosts.append(
            HostResult(
                host=f"n{i:04d}",
                stage="fleet",
                status="failed" if bad else "ok",
                tasks=tasks,
                started_at=start,
                ended_at=end,
            )
        )
    report = RunReport(
        run_id="big",
        runbook="rb",
        requested_by="me",
        check_mode=False,
        status="completed_with_failures",
        started_at=at,
        ended_at=at + timedelta(hours=1),
        stages=[StageReport(name="fleet", status="failed", hosts=hosts)],
    )
    files = write_report(RunSource(report=report, layout=RunLayout(), finished=True), tmp_path)
    data = ReportDataFile.model_validate_json(files.data.read_text()).derived
    shown = plots.timeline_rows(data)
    assert len(data.rows) == 2000 and len(shown) == plots.MAX_ROWS
    assert {"n0007", "n1500", "n1999"} <= {r.host for r in shown}
    assert _png_size(files.pictures[0].read_bytes()) == plots.timeline_size(plots.MAX_ROWS)
    # The tables list every failed figure and the first that passed, then say how many more.
    html = files.html.read_text()
    assert "n1999" in html and "n0500" not in html and "1977 more that passed" in html
