from __future__ import annotations

from tests.integration.engine.conftest import RunFn, hosts_inventory
from tests.testmodules import CALLS


async def test_serial_ramp_runs_batches_of_1_3_2(run: RunFn) -> None:
    report = await run(
        """
        name: ramp
        hosts: gpu
        serial: [1, "50%"]
        tasks:
          - name: step
            test.step: {value: "{{ inventory_hostname }}"}
          - debug: {msg: "done {{ inventory_hostname }}"}
        """,
        hosts_inventory(6),
    )
    assert report.status == "succeeded", report.msg
    assert [c[2]["value"] for c in CALLS][:1] == ["h00"]
    hosts = report.stages[0].hosts
    assert sorted(h.host for h in hosts) == [f"h{i:02d}" for i in range(6)]
