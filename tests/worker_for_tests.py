"""A real worker process for tests that kill their worker: `python -m tests.worker_for_tests`.

It serves the engine's workflows and activities plus the test modules (`tests.testmodules`),
built by `pitstop.worker_app.build_worker` exactly as `python worker.py` builds its worker, on the task
queue named by $PITSTOP_TASK_QUEUE against $TEMPORAL_ADDRESS. It prints `worker ready` once
it polls, and runs until SIGTERM/SIGINT (or until a test SIGKILLs it, which is the point).
"""

from __future__ import annotations

import asyncio
import signal

from activities import ACTIVITIES
from pitstop.client import connect
from pitstop.logs import configure_logging
from pitstop.policy import load_policy
from pitstop.settings import Settings
from pitstop.worker_app import build_worker
from tests import testmodules
from workflows import WORKFLOWS

READY_LINE = "worker ready"


async def serve(settings: Settings) -> None:
    client = await connect(settings)
    worker = build_worker(
        client,
        settings.task_queue,
        workflows=WORKFLOWS,
        activities=[*ACTIVITIES, *testmodules.TEST_ACTIVITIES],
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        print(READY_LINE, flush=True)
        await stop.wait()


def main() -> None:
    configure_logging("WARNING")
    load_policy()  # as `python worker.py`: an invalid worker policy stops it before it serves
    asyncio.run(serve(Settings.from_env()))


if __name__ == "__main__":
    main()
