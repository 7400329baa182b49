"""Run a piece of pitstop in a child process with a memory limit and a deadline.

An expression or YAML probe that got past its limit would freeze or exhaust the process that
evaluates it; in a child with RLIMIT_AS and a deadline that shows as a kill or a timeout, which
the tests count as failures: each probe must end on its own, refused with a message.
"""

from __future__ import annotations

import json
import resource
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

# Renders one template the way HostWorkflow renders module arguments (`render(task.args,
# context)`), with a 10,000-host fleet in its variables; prints the outcome as JSON.
_RENDER_CHILD = """
import json, sys
from pitstop.runbook.templating import TemplateError, render
template = sys.argv[1]
hosts = [f"gpu-{i:05d}" for i in range(10000)]
context = {
    "inventory_hostname": "gpu-00000",
    "d": {"a": 1, "b": 2},
    "groups": {"all": hosts, "gpu_fleet": hosts},
    "hostvars": {h: {"failure_domain": f"zone-{i % 10}"} for i, h in enumerate(hosts)},
}
try:
    value = render({"msg": template}, context)["msg"]
except TemplateError as exc:
    print(json.dumps({"error": str(exc), "type": type(exc).__name__}))
else:
    print(json.dumps({"value": value}))
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


def render_in_child(template: str) -> dict[str, Any]:
    """{'error': message, 'type': ...} or {'value': rendered}; fails the test if the child was
    killed, ran out of memory or crashed."""
    done = run_bounded([sys.executable, "-c", _RENDER_CHILD, template])
    assert done.returncode == 0, f"the render process died ({done.returncode}): {done.stderr[-2000:]}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def validate_in_child(path: Path) -> subprocess.CompletedProcess[str]:
    """`pitstop validate PATH` as an operator runs it, bounded; it must have exited on its own
    (0 or 1), not been killed."""
    done = run_bounded([str(PITSTOP), "validate", str(path)])
    assert done.returncode in (0, 1), f"validate died ({done.returncode}): {done.stderr[-2000:]}"
    return done
