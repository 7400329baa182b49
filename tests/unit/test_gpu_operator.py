"""pitstop's and the simulator's copies of the GPU Operator's names are the same, and the
version in a driver image tag is read the same way on both sides."""

from __future__ import annotations

import pytest

from pitstop.gpu import operator as pitstop_side
from pitstop_sim import gpu_operator as sim_side

SHARED = ("GPU_OPERATOR_NAMESPACE", "DRIVER_DAEMONSET", "UPGRADE_STATE_LABEL", "UPGRADE_SKIP_LABEL")


@pytest.mark.parametrize("name", SHARED)
def test_both_sides_name_the_operators_objects_alike(name: str) -> None:
    assert getattr(pitstop_side, name) == getattr(sim_side, name)


def test_the_simulators_driver_pods_are_what_pitstop_recognises() -> None:
    pod = {"metadata": {"labels": dict(sim_side.DRIVER_POD_LABELS)}}
    assert pitstop_side.is_driver_pod(pod)
    assert not pitstop_side.is_driver_pod({"metadata": {"labels": {"app": "nvidia-device-plugin-daemonset"}}})


def test_every_state_the_simulator_passes_through_is_in_progress_for_pitstop() -> None:
    from pitstop_sim.controllers.gpu_driver import IN_PROGRESS

    assert set(IN_PROGRESS) <= set(pitstop_side.UPGRADE_IN_PROGRESS)


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("nvcr.io/nvidia/driver:570.86.15-ubuntu22.04", "570.86.15"),
        ("registry.local:5000/nvidia/driver:550.90.07-rhel9.4", "550.90.07"),
        ("nvcr.io/nvidia/driver:550-5.15.0-105-generic-ubuntu22.04", "550"),  # precompiled: the branch
        ("registry.local:5000/driver", None),
        ("nvcr.io/nvidia/driver:latest", None),
    ],
)
def test_the_driver_version_is_the_image_tags_first_part(image: str, version: str | None) -> None:
    assert pitstop_side.image_driver_version(image) == version
    if version is not None:
        assert sim_side.image_driver_version(image) == version
