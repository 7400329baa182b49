"""Vendor matrices: loading (with errors a person can fix), version specs, and support_for."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pitstop.compat.matrix import (
    Matrix,
    MatrixError,
    compat_dir,
    load_matrices,
    load_skew_policy,
    parse_spec,
    support_for,
)

SHIPPED = Path(__file__).resolve().parents[2] / "runbooks" / "compat"

OPERATOR = """\
component: gpu-operator
title: NVIDIA GPU Operator platform support
source: https://example.invalid/platform-support
retrieved: "2026-11-29"
releases:
  - version: v24.9.x
    supports:
      kubernetes: ["1.29-1.31"]
      gpu-driver: ["550.*", "570.86.15"]
    installable: {kubernetes: [">=1.16"]}
    upgrade_from: [">=v24.6,<v24.10"]
  - version: v24.9.2
    source: https://example.invalid/release-notes#v24.9.2
    supports:
      kubernetes: ["1.29-1.31"]
      gpu-driver: ["570.*"]
"""


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def matrices(tmp_path: Path) -> dict[str, Matrix]:
    write(tmp_path, "gpu-operator.yaml", OPERATOR)
    return load_matrices(tmp_path)


def test_supported_combination_cites_the_release_source(matrices: dict[str, Matrix]) -> None:
    support = support_for(
        matrices, "gpu-operator", "v24.9.1", {"kubernetes": "v1.31.2", "gpu-driver": "550.127.05"}
    )
    assert support.supported is True
    assert support.source == "https://example.invalid/platform-support"
    assert support.reasons == []


def test_exact_release_entry_wins_over_its_line(matrices: dict[str, Matrix]) -> None:
    support = support_for(matrices, "gpu-operator", "v24.9.2", {"gpu-driver": "550.127.05"})
    assert support.supported is False
    assert support.source == "https://example.invalid/release-notes#v24.9.2"


def test_installable_only_combination_is_a_violation_saying_so(matrices: dict[str, Matrix]) -> None:
    support = support_for(matrices, "gpu-operator", "v24.9.0", {"kubernetes": "v1.32.0"})
    assert support.supported is False
    assert support.rule == "matrix/gpu-operator/kubernetes"
    [reason] = support.reasons
    assert "installs with kubernetes v1.32.0 but the vendor does not support that combination" in reason
    assert "https://example.invalid/platform-support" in reason


def test_unlisted_combination_is_unsupported_with_the_supported_range(matrices: dict[str, Matrix]) -> None:
    support = support_for(matrices, "gpu-operator", "v24.9.0", {"gpu-driver": "535.216.03"})
    assert support.supported is False
    assert "does not support gpu-driver 535.216.03 (supported: 550.*, 570.86.15)" in support.reasons[0]


def test_unknown_release_is_refused_listing_the_known_ones(matrices: dict[str, Matrix]) -> None:
    support = support_for(matrices, "gpu-operator", "v25.3.0", {})
    assert support.supported is False
    assert support.rule == "matrix/gpu-operator/release"
    assert "known: v24.9.x, v24.9.2" in support.reasons[0]


def test_upgrade_from_outside_the_path_is_refused(matrices: dict[str, Matrix]) -> None:
    support = support_for(matrices, "gpu-operator", "v24.9.0", {}, upgrade_from="v24.3.0")
    assert support.supported is False
    assert support.rule == "matrix/gpu-operator/upgrade-from"
    assert (
        "v24.3.0 → v24.9.0 is not a supported upgrade path (upgrade from >=v24.6,<v24.10 only"
        in (support.reasons[0])
    )
    assert support_for(matrices, "gpu-operator", "v24.9.0", {}, upgrade_from="v24.6.2").supported is True


def test_component_without_a_matrix_has_unknown_support(matrices: dict[str, Matrix]) -> None:
    support = support_for(matrices, "kuberay", "v1.3.0", {})
    assert support.supported is None
    assert support.source == "no vendor matrix"


def test_components_not_deployed_are_not_judged(matrices: dict[str, Matrix]) -> None:
    support = support_for(matrices, "gpu-operator", "v24.9.0", {"gpu-driver": "not deployed"})
    assert support.supported is True


@pytest.mark.parametrize(
    ("spec", "value", "matches"),
    [
        ("1.29-1.31", "v1.31.9", True),
        ("1.29-1.31", "v1.32.0", False),
        (">=1.27,<=1.30.4", "v1.30.6", False),
        (">=550", "550.90.07", True),
        ("550.*", "570.86.15", False),
        ("Ubuntu 22.04", "Ubuntu 22.04.4 LTS", True),
        ("containerd 1.6-1.7", "containerd://1.7.20", True),
        ("cri-o", "containerd://1.7.20", False),
    ],
)
def test_version_specs_match_as_written(spec: str, value: str, matches: bool) -> None:
    assert parse_spec(spec).matches(value) is matches


def test_bad_spec_names_the_file_and_the_key(tmp_path: Path) -> None:
    write(
        tmp_path, "gpu-operator.yaml", OPERATOR.replace('"1.29-1.31"]\n      gpu', '"1.29~1.31"]\n      gpu')
    )
    with pytest.raises(MatrixError) as caught:
        load_matrices(tmp_path)
    message = str(caught.value)
    assert str(tmp_path / "gpu-operator.yaml") in message
    assert "releases[0].supports.kubernetes" in message
    assert "cannot read version spec '1.29~1.31'" in message


def test_missing_source_is_refused_naming_the_key(tmp_path: Path) -> None:
    write(tmp_path, "kueue.yaml", "component: kueue\ntitle: Kueue\nretrieved: '2026-11-29'\nreleases: []\n")
    with pytest.raises(MatrixError, match=r"kueue\.yaml: source: Field required"):
        load_matrices(tmp_path)


def test_two_matrices_for_one_component_are_refused(tmp_path: Path) -> None:
    write(tmp_path, "gpu-operator.yaml", OPERATOR)
    write(tmp_path, "gpu-operator-copy.yaml", OPERATOR)
    with pytest.raises(MatrixError, match=r"already has a matrix in .*gpu-operator-copy\.yaml"):
        load_matrices(tmp_path)


def test_unreadable_yaml_is_refused_with_the_file_name(tmp_path: Path) -> None:
    write(tmp_path, "lws.yaml", "component: [unclosed\n")
    with pytest.raises(MatrixError, match=r"lws\.yaml: cannot read compat data"):
        load_matrices(tmp_path)


def test_missing_directory_says_which_setting_to_fix(tmp_path: Path) -> None:
    with pytest.raises(MatrixError, match="set PITSTOP_COMPAT_DIR or PITSTOP_RUNBOOK_DIR"):
        load_matrices(tmp_path / "nowhere")


def test_compat_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PITSTOP_COMPAT_DIR", raising=False)
    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(tmp_path))
    assert compat_dir() == tmp_path / "compat"
    monkeypatch.setenv("PITSTOP_COMPAT_DIR", str(tmp_path / "elsewhere"))
    assert compat_dir() == tmp_path / "elsewhere"


def test_shipped_data_loads_and_every_matrix_cites_a_source() -> None:
    matrices = load_matrices(SHIPPED)
    assert {"gpu-operator", "network-operator", "cuda", "kueue", "jobset", "lws", "kserve"} <= set(matrices)
    for matrix in matrices.values():
        assert matrix.source.startswith("https://")
        assert matrix.retrieved
    assert load_skew_policy(SHIPPED).source == "https://kubernetes.io/releases/version-skew-policy/"


def test_shipped_matrices_support_the_platform_upgrade_targets() -> None:
    matrices = load_matrices(SHIPPED)
    target = {
        "kubernetes": "v1.31.2",
        "gpu-operator": "v24.9.2",
        "gpu-driver": "570.86.15",
        "network-operator": "v25.1.0",
        "cuda": "12.8",
        "kueue": "v0.10.1",
        "jobset": "v0.8.1",
        "lws": "v0.5.1",
        "kserve": "v0.14.1",
    }
    starts = {"gpu-operator": "v24.6.2"}
    for component in matrices:
        support = support_for(
            matrices, component, target[component], target, upgrade_from=starts.get(component)
        )
        assert support.supported, support.reasons


@given(
    low=st.integers(min_value=20, max_value=35),
    width=st.integers(min_value=0, max_value=5),
    minor=st.integers(min_value=15, max_value=45),
    patch=st.integers(min_value=0, max_value=30),
)
def test_a_minor_range_holds_every_patch_of_its_minors_and_nothing_else(
    low: int, width: int, minor: int, patch: int
) -> None:
    spec = parse_spec(f"1.{low}-1.{low + width}")
    assert spec.matches(f"v1.{minor}.{patch}") is (low <= minor <= low + width)
