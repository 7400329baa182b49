"""The firmware state machine's decisions, from the node's state alone."""

from __future__ import annotations

import pytest

from pitstop.ssh.firmware import FirmwareProbe, Step, next_step

BOOT = "b1"


def _probe(**kw: object) -> FirmwareProbe:
    base: dict[str, object] = {"current": "1.0", "pending": None, "boot_id": BOOT}
    base.update(kw)
    return FirmwareProbe(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("probe", "step"),
    [
        (_probe(current="2.0"), "at_target"),
        (_probe(current="2.0", marker={"boot": "old"}, apply_rc=0), "at_target"),
        (_probe(pending="2.0"), "staged"),
        (_probe(), "flash"),
        (_probe(pending="1.5"), "flash"),
        (_probe(marker={"pid": "9", "boot": BOOT}, updater_running=True), "in_progress"),
        (_probe(marker={"pid": "9", "boot": BOOT}, updater_running=False), "interrupted"),
        # Rebooted while flashing: whatever the pid is now, that flash is over.
        (_probe(marker={"pid": "9", "boot": "earlier"}, updater_running=True), "interrupted"),
        (_probe(marker={"pid": "9", "boot": BOOT}, apply_rc=3), "apply_failed"),
        (_probe(marker={"pid": "9", "boot": BOOT}, apply_rc=0), "not_staged"),
    ],
)
def test_next_step(probe: FirmwareProbe, step: Step) -> None:
    assert next_step(probe, "2.0") == step


def test_a_marker_never_leads_to_a_second_flash() -> None:
    for rc in (None, 0, 1):
        for running in (True, False):
            probe = _probe(marker={"pid": "1", "boot": BOOT}, apply_rc=rc, updater_running=running)
            assert next_step(probe, "2.0") != "flash"
