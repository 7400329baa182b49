"""Run a piece of pitstop in a child process with a memory limit and a deadline.

An expression or YAML probe that got past its limit would freeze or exhaust the process that
evaluates it; in a child with RLIMIT_AS and a deadline that shows as a kill or a timeout, which
the tests count as failures: each probe must end on its own, refused with a message.
"""

from __future__ import annotations

import json
import resource
import selectors
import subprocess
import sys
from pathlib import Path
from typing import Any

# Far more than pitstop needs (a validate run peaks near 150 MiB), far less than a hung probe
# would take.
MEMORY_LIMIT = 768 * 1024 * 1024
# Generous for a loaded CI machine; a probe ends in well under a second of CPU.
DEADLINE_S = 120.0
PITSTOP = Path(sys.executable).parent / "pitstop"

# Renders templates read from stdin (one JSON string a line) the way HostWorkflow renders
# module arguments (`render(task.args, context)`), with a 10,000-host fleet in its variables;
# writes each outcome as one JSON line.
_RENDER_CHILD = """
import json, sys
from pitstop.runbook.templating import TemplateError, render
hosts = [f"gpu-{i:05d}" for i in range(10000)]
context = {
    "inventory_hostname": "gpu-00000",
    "d": {"a": 1, "b": 2},
    "groups": {"all": hosts, "gpu_fleet": hosts},
    "hostvars": {h: {"failure_domain": f"zone-{i % 10}"} for i, h in enumerate(hosts)},
}
for line in sys.stdin:
    try:
        outcome = {"value": render({"msg": json.loads(line)}, context)["msg"]}
    except TemplateError as exc:
        outcome = {"error": str(exc), "type": type(exc).__name__}
    print(json.dumps(outcome), flush=True)
"""


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_bounded(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """`argv` in a child with the memory limit; raises if it outlives the deadline."""
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        preexec_fn=_limit_memory,
        check=False,
    )


class RenderChild:
    """A render process with the memory limit, reused across probes (importing pitstop is the
    slow part); each probe has its own deadline. A probe that kills the process or outlives
    its deadline fails, and the next probe gets a fresh process."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _RENDER_CHILD],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                preexec_fn=_limit_memory,
            )
        return self._proc

    def render(self, template: str) -> dict[str, Any]:
        """{'error': message, 'type': ...} or {'value': rendered}."""
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(template) + "\n")
        proc.stdin.flush()
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            ready = selector.select(timeout=DEADLINE_S)
        if not ready:
            self.close()
            raise AssertionError(f"the probe did not end within {DEADLINE_S}s: {template[:200]}")
        line = proc.stdout.readline()
        if not line:
            proc.wait(timeout=DEADLINE_S)
            errors = proc.stderr.read() if proc.stderr else ""
            self._proc = None
            raise AssertionError(f"the render process died ({proc.returncode}): {errors[-2000:]}")
        result: dict[str, Any] = json.loads(line)
        return result

    def close(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(timeout=DEADLINE_S)
            self._proc = None


def validate_in_child(path: Path) -> subprocess.CompletedProcess[str]:
    """`pitstop validate PATH` as an operator runs it, bounded; it must have exited on its own
    (0 or 1), not been killed."""
    done = run_bounded([str(PITSTOP), "validate", str(path)])
    assert done.returncode in (0, 1), f"validate died ({done.returncode}): {done.stderr[-2000:]}"
    return done
