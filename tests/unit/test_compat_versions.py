"""Versions as components print them: parsed, ordered, and refused with a clear message."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pitstop.compat.versions import VersionError, kube_minor, parse_version, try_parse_version


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("v1.30.6", (1, 30, 6)),
        ("550.90.07", (550, 90, 7)),
        ("v24.6.2", (24, 6, 2)),
        ("containerd://1.7.20", (1, 7, 20)),
        ("Kubernetes v1.30.6", (1, 30, 6)),
        ("MLNX_OFED_LINUX-24.07-0.6.1.0:", (24, 7)),
        ("3.3.7-3.5.0-ubuntu22.04", (3, 3, 7)),
        ("1.30.6-1.1", (1, 30, 6)),
    ],
)
def test_parse_version_reads_the_numbers_each_component_prints(text: str, parts: tuple[int, ...]) -> None:
    version = parse_version(text)
    assert version.parts == parts
    assert version.raw == text


def test_version_keeps_major_minor_patch_and_the_raw_text() -> None:
    version = parse_version("v1.31.2")
    assert (version.major, version.minor, version.patch) == (1, 31, 2)
    assert version.minor_key() == (1, 31)
    assert version.minor_text == "1.31"
    assert str(version) == "v1.31.2"


def test_versions_compare_numerically_not_as_text() -> None:
    assert parse_version("v1.9.0") < parse_version("v1.10.0")
    assert parse_version("550.90.07") < parse_version("550.127.05")
    assert parse_version("v1.30") == parse_version("1.30.0")


def test_a_prerelease_sorts_before_its_release() -> None:
    assert parse_version("v1.31.0-rc.1") < parse_version("v1.31.0")
    assert parse_version("v1.31.0-alpha.2") < parse_version("v1.31.0-beta.0")


def test_kube_minor_is_the_minor_the_skew_policy_counts_in() -> None:
    assert kube_minor("v1.30.6") == (1, 30)


def test_text_without_a_version_is_refused_with_the_text_quoted() -> None:
    with pytest.raises(VersionError, match="cannot read a version from 'not deployed'"):
        parse_version("not deployed")
    assert try_parse_version("not deployed") is None


@given(st.lists(st.integers(min_value=0, max_value=999), min_size=1, max_size=4), st.booleans())
def test_order_matches_the_numbers_whatever_the_prefix(numbers: list[int], prefixed: bool) -> None:
    text = ".".join(map(str, numbers))
    bumped = [*numbers[:-1], numbers[-1] + 1]
    version = parse_version(("v" if prefixed else "") + text)
    assert version == parse_version(text)
    assert version < parse_version(".".join(map(str, bumped)))
