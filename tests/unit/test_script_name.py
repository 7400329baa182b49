"""ssh.script uploads into a fresh 0700 directory pitstop makes on the node; the file name
taken from `src` must never make the upload land anywhere else."""

from __future__ import annotations

import pytest

from activities.ssh import script_name


@pytest.mark.parametrize(
    ("src", "expected"),
    [
        ("files/drain-check.sh", "drain-check.sh"),
        ("flash_v2.py", "flash_v2.py"),
        (None, "script"),
        ("", "script"),
        ("scripts/", "script"),
        ("..", "script"),
        ("a/..", "script"),
        (".", "script"),
        ("x/$(reboot).sh", "script"),
        ("x/name with space.sh", "script"),
        ("x/" + "a" * 200, "script"),
    ],
)
def test_a_scripts_name_on_the_node_is_a_plain_file_name_or_script(src: str | None, expected: str) -> None:
    assert script_name(src) == expected
