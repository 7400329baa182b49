"""A workflow and an activity that pass megabytes each way, as a fleet-sized plan or status
would: the argument goes to the activity, its result back, and a query answers with it."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow


@activity.defn(name="big_echo_activity")
async def big_echo_activity(blob: str) -> str:
    return blob.upper()


@workflow.defn(name="BigEchoWorkflow")
class BigEchoWorkflow:
    def __init__(self) -> None:
        self._last = ""

    @workflow.run
    async def run(self, blob: str) -> str:
        self._last = await workflow.execute_activity(
            big_echo_activity, blob, start_to_close_timeout=timedelta(seconds=60)
        )
        return self._last

    @workflow.query
    def last(self) -> str:
        return self._last
