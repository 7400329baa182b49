"""Browser tests of the Temporal UI path: Playwright for Python driving Debian's `chromium`.

Never a browser Playwright downloads: chromium is Debian's package at /usr/bin/chromium, which
`make test` installs with apt-get when it is missing and it runs as root (as it installs
openssh-server). Without the `playwright` package or a chromium that launches, every test here
is skipped with the reason.

Screenshots of each step are kept under the session's pytest temporary directory
(`<basetemp>/ui-screenshots/<test>/`), or under `$PITSTOP_UI_SCREENSHOTS/<test>/` when that is
set; their paths are listed at the end of the test output.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from temporalio.client import Client

from activities import ACTIVITIES
from pitstop.worker_app import build_worker
from tests import testmodules
from workflows import WORKFLOWS

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS_ENV = "PITSTOP_UI_SCREENSHOTS"
HERE = Path(__file__).resolve().parent
# The runbook directory of the tests' workers (PITSTOP_RUNBOOK_DIR): a test-only runbook with a
# gate that takes the UI's unverified vote.
TEST_RUNBOOK_DIR = HERE / "runbooks"
REPO_RUNBOOK_DIR = HERE.parents[2] / "runbooks"
# The machine has 2 cores and other tests run beside these: generous, never a sleep.
TIMEOUT_MS = 45_000

_SHOTS_KEY = pytest.StashKey[list[Path]]()


class Screenshots:
    """Numbered screenshots of one test's steps."""

    def __init__(self, directory: Path, taken: list[Path]) -> None:
        self.directory = directory
        self._taken = taken
        self._count = 0

    async def take(self, page: Page, step: str) -> Path:
        self._count += 1
        path = self.directory / f"{self._count:02d}-{step}.png"
        await page.screenshot(path=str(path), full_page=True)
        self._taken.append(path)
        return path


@pytest.fixture
def screenshots(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Screenshots:
    base = os.environ.get(SCREENSHOTS_ENV)
    root = Path(base) if base else tmp_path_factory.getbasetemp() / "ui-screenshots"
    directory = root / re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name)[:80]
    directory.mkdir(parents=True, exist_ok=True)
    taken = request.config.stash.setdefault(_SHOTS_KEY, [])
    return Screenshots(directory, taken)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    taken = config.stash.get(_SHOTS_KEY, [])
    if taken:
        terminalreporter.section("Temporal UI screenshots")
        for path in taken:
            terminalreporter.write_line(str(path))


def chromium_installed() -> bool:
    return CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)


def launch_failure(exc: Exception) -> str:
    """Playwright's launch error in one line: its message, chromium's own stderr lines and how
    it exited (the call log's long command lines left out)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    said = [line.removeprefix("- ") for line in lines if "[err]" in line or "process did exit" in line]
    return "; ".join([lines[0], *dict.fromkeys(said)][:5])


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    """Debian's headless chromium under Playwright; skipped with the reason when there is none."""
    try:
        from playwright.async_api import Error as PlaywrightError
        from playwright.async_api import async_playwright
    except ImportError:
        pytest.skip("the Python package `playwright` is not installed (`make venv` installs the dev extra)")
    if not chromium_installed():
        pytest.skip(
            f"Debian's chromium is not installed at {CHROMIUM}: `make test` installs it when run as "
            "root, or `apt-get install chromium`"
        )
    async with async_playwright() as playwright:
        try:
            launched = await playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        except PlaywrightError as exc:
            pytest.skip(f"Debian's chromium at {CHROMIUM} could not be launched: {launch_failure(exc)}")
        try:
            yield launched
        finally:
            await launched.close()


_CALL_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[_CALL_FAILED] = report.failed
    return report


@pytest.fixture
async def page(
    browser: Browser, screenshots: Screenshots, request: pytest.FixtureRequest
) -> AsyncIterator[Page]:
    """A fresh browser context's page; when the test fails, a screenshot of where it stood."""
    from playwright.async_api import expect

    expect.set_options(timeout=TIMEOUT_MS)
    context = await browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(TIMEOUT_MS)
    try:
        opened = await context.new_page()
        yield opened
        if request.node.stash.get(_CALL_FAILED, False):
            await screenshots.take(opened, "at-failure")
    finally:
        await context.close()


@contextlib.asynccontextmanager
async def serving(client: Client, task_queue: str) -> AsyncIterator[str]:
    """A worker on `task_queue` for as long as the block runs, as the engine tests run theirs."""
    worker = build_worker(
        client,
        task_queue,
        workflows=WORKFLOWS,
        activities=[*ACTIVITIES, *testmodules.TEST_ACTIVITIES],
    )
    async with worker:
        yield task_queue


@pytest.fixture
def runbook_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The tests' workers read runbooks from tests/integration/ui/runbooks (PITSTOP_RUNBOOK_DIR)."""
    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(TEST_RUNBOOK_DIR))
    yield TEST_RUNBOOK_DIR
